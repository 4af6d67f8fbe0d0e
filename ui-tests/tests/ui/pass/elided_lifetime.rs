//! A parameter type with an elided lifetime that still owns its data (`Cow<str>` deserializes to
//! `Cow::Owned`) is accepted: the generated code never needs to name its lifetime.

use std::borrow::Cow;

use agent_airlock::{CallContext, airlock_tool, input_schema, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

/// Shout a text.
#[airlock_tool]
fn shout(text: Cow<'_, str>, suffix: Option<Cow<'static, str>>) -> String {
    format!("{}{}", text.to_uppercase(), suffix.unwrap_or(Cow::Borrowed("!")))
}

fn main() {
    assert_eq!(input_schema(tool!(shout).spec())["properties"]["text"]["type"], "string");
    assert_eq!(call(tool!(shout), json!({"text": "hey"}), &CallContext::new()).content, "HEY!");
    assert_eq!(call(tool!(shout), json!({"text": "hey", "suffix": "?"}), &CallContext::new()).content, "HEY?");
}
