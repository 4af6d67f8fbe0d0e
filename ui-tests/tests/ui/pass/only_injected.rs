//! A tool whose parameters are all supplied by the host: its schema has no properties, and the model's
//! arguments cannot reach them.

use std::sync::atomic::{AtomicU64, Ordering};

use agent_airlock::{CallContext, State, ToolCallId, airlock_tool, input_schema, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

struct Counter {
    calls: AtomicU64,
}

/// Count the calls so far.
#[airlock_tool]
fn count(#[inject] counter: State<Counter>, #[inject] id: ToolCallId) -> String {
    let seen = counter.calls.fetch_add(1, Ordering::SeqCst) + 1;
    format!("{} is call {seen}", &*id)
}

fn main() {
    let spec = tool!(count).spec();
    assert!(spec.params().is_empty());
    assert_eq!(input_schema(spec)["properties"], json!({}));

    let context = CallContext::new().with_state(Counter { calls: AtomicU64::new(41) });
    // A key named like an injected parameter is a ghost argument: stripped, never injected.
    let message = call(tool!(count), json!({"counter": 7}), &context);
    assert_eq!(message.content, "call_1 is call 42", "{message:?}");
    assert_eq!(message.stripped_arguments, ["counter"]);
}
