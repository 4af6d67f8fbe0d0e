//! The attribute in a nested module and in a function body: the tool type lives next to the function and
//! `tool!` finds it by the function's path.

use agent_airlock::{CallContext, airlock_tool, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

mod tools {
    pub(crate) mod billing {
        use agent_airlock::{ToolError, airlock_tool};

        /// Refund a payment.
        #[airlock_tool(escalate = "moves money", name = "refund_payment")]
        pub(crate) fn refund(
            /// The payment to refund.
            payment_id: String,
        ) -> Result<String, ToolError> {
            Ok(format!("refunded {payment_id}"))
        }
    }
}

fn main() {
    let refund = tool!(tools::billing::refund);
    let spec = refund.spec();
    assert_eq!(spec.name(), "refund_payment");
    assert_eq!(spec.escalate(), Some("moves money"));
    assert_eq!(spec.params()[0].name(), "payment_id");

    /// Shout a text.
    #[airlock_tool]
    fn shout(text: String) -> String {
        text.to_uppercase()
    }

    let shout = tool!(shout);
    assert_eq!(shout.spec().name(), "shout");
    let message = call(shout, json!({"text": "quiet"}), &CallContext::new());
    assert_eq!(message.content, "QUIET", "{message:?}");
}
