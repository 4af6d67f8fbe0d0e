//! `tool!` reaches the tool by whatever path reaches the function: a `use` of the function alone, a
//! renamed import, a glob import, and the full path all name the same tool.

use agent_airlock::{tool, tool::Tool};

mod tools {
    pub(crate) mod billing {
        use agent_airlock::airlock_tool;

        /// Pay out to a vendor.
        #[airlock_tool(escalate = "moves money")]
        pub(crate) fn payout(
            /// The vendor.
            vendor: String,
        ) -> String {
            format!("paid {vendor}")
        }

        /// Look a vendor up.
        #[airlock_tool]
        pub(crate) fn lookup(
            /// The vendor.
            vendor: String,
        ) -> String {
            vendor
        }
    }
}

mod by_use {
    use crate::tools::billing::payout;

    pub(crate) fn spec_name() -> &'static str {
        agent_airlock::tool::Tool::spec(&agent_airlock::tool!(payout)).name()
    }
}

mod by_rename {
    use crate::tools::billing::payout as send_money;

    pub(crate) fn spec_name() -> &'static str {
        agent_airlock::tool::Tool::spec(&agent_airlock::tool!(send_money)).name()
    }
}

mod by_glob {
    use crate::tools::billing::*;

    pub(crate) fn spec_name() -> &'static str {
        agent_airlock::tool::Tool::spec(&agent_airlock::tool!(lookup)).name()
    }
}

fn main() {
    assert_eq!(by_use::spec_name(), "payout");
    assert_eq!(by_rename::spec_name(), "payout");
    assert_eq!(by_glob::spec_name(), "lookup");
    assert_eq!(tool!(tools::billing::payout).spec().escalate(), Some("moves money"));
    // The function is still an ordinary function.
    assert_eq!(tools::billing::payout("acme".to_owned()), "paid acme");
}
