//! The tool type has the function's visibility, so `tool!` works wherever the function can be named.

use agent_airlock::{CallContext, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

mod outer {
    pub(crate) mod inner {
        use agent_airlock::airlock_tool;

        /// Visible in the crate.
        #[airlock_tool]
        pub(crate) fn crate_wide(value: u8) -> u8 {
            value
        }

        /// Visible in `outer`.
        #[airlock_tool]
        pub(super) fn parent_only(value: u8) -> u8 {
            value
        }
    }

    pub(crate) fn parent_only_name() -> &'static str {
        agent_airlock::tool::Tool::spec(&agent_airlock::tool!(inner::parent_only)).name()
    }
}

fn main() {
    assert_eq!(tool!(outer::inner::crate_wide).spec().name(), "crate_wide");
    assert_eq!(call(tool!(outer::inner::crate_wide), json!({"value": 7}), &CallContext::new()).content, "7");
    assert_eq!(outer::parent_only_name(), "parent_only");
}
