//! Raw identifiers: the argument key and the tool name drop the `r#`.

use agent_airlock::{CallContext, airlock_tool, input_schema, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

/// Describe a match.
#[airlock_tool]
fn r#match(
    /// The kind of match.
    r#type: String,
    r#in: u32,
) -> String {
    format!("{type} in {in}", type = r#type, in = r#in)
}

fn main() {
    let spec = tool!(r#match).spec();
    assert_eq!(spec.name(), "match");
    let keys: Vec<&str> = spec.params().iter().map(|p| p.name()).collect();
    assert_eq!(keys, ["type", "in"]);
    assert_eq!(input_schema(spec)["required"], json!(["type", "in"]));

    let message = call(tool!(r#match), json!({"type": "final", "in": 3}), &CallContext::new());
    assert_eq!(message.content, "final in 3", "{message:?}");
}
