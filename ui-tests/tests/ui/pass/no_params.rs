//! A tool without parameters.

use agent_airlock::{CallContext, airlock_tool, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

/// The answer.
#[airlock_tool]
fn answer() -> u32 {
    42
}

/// Do nothing, successfully.
#[airlock_tool]
fn nothing() {}

fn main() {
    assert_eq!(tool!(answer).spec().params().len(), 0);
    assert_eq!(call(tool!(answer), json!({}), &CallContext::new()).content, "42");
    assert_eq!(call(tool!(nothing), json!({}), &CallContext::new()).content, "null");
}
