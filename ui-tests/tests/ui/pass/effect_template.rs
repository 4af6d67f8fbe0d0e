//! An effect template over model-visible parameters (raw identifiers included) renders the key.

use agent_airlock::{airlock_tool, tool, tool::Tool};
use serde_json::json;

/// Refund a payment.
#[airlock_tool(effect = "refund:{payment_id}/{type}")]
fn refund(
    /// The payment.
    payment_id: String,
    /// Full or partial.
    r#type: String,
) -> String {
    format!("{payment_id} {type}", type = r#type)
}

fn main() {
    let template = tool!(refund).spec().effect().expect("an effect template");
    assert_eq!(template.template(), "refund:{payment_id}/{type}");
    let arguments = json!({"payment_id": "pi_1", "type": "full"});
    assert_eq!(template.render(arguments.as_object().unwrap()), "refund:pi_1/full");
    let values = [("payment_id", json!("pi_1")), ("type", json!("full"))];
    assert_eq!(template.render_values(&values).unwrap(), "refund:pi_1/full");
}
