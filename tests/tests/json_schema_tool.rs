//! Tools defined at run time by a JSON Schema (`agent_airlock::json_tool`): the dispatcher guards them
//! as it guards `#[airlock_tool]` tools. Nested ghosts are stripped with their paths, bad schemas are
//! refused when the tool is made, refusals stay bounded, what the published schema accepts is what the
//! runtime admits, and a call runs through escalation and effects on a real redb ledger.

use std::sync::{Arc, Mutex};

use agent_airlock::json_tool::{Closing, JsonCall, JsonTool, JsonToolError};
use agent_airlock::{CallContext, Dispatcher, GhostPolicy, Status, Tool, ToolCall, ToolError, ToolMessage};
use agent_airlock_tests::block_on;
use serde_json::{Value, json};

/// What an upstream received, call by call.
type Received = Arc<Mutex<Vec<JsonCall>>>;

/// A tool whose executor records each admitted call and answers `{"ok": true}`.
fn recording(name: &str, schema: Value) -> (JsonTool, Received) {
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let tool = JsonTool::builder(name, "A tool defined by a schema.", schema)
        .build(move |call: JsonCall| {
            log.lock().unwrap().push(call);
            async { Ok::<Value, ToolError>(json!({"ok": true})) }
        })
        .expect("a valid definition");
    (tool, received)
}

fn dispatch(dispatcher: &Dispatcher, name: &str, arguments: Value) -> ToolMessage {
    block_on(dispatcher.dispatch(ToolCall::new("call_1", name, arguments), &CallContext::new())).expect_message()
}

/// A schema as an MCP server written with the Python SDK publishes it: objects left open, `$defs`, an
/// optional field as `anyOf` with `null`.
fn pydantic_style() -> Value {
    json!({
        "type": "object",
        "title": "create_orderArguments",
        "properties": {
            "customer": {"$ref": "#/$defs/Customer"},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "title": "Lines"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Note"}
        },
        "required": ["customer", "lines"],
        "$defs": {
            "Customer": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "email": {"type": "string"}},
                "required": ["id"]
            },
            "Line": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
                "required": ["sku", "quantity"]
            }
        }
    })
}

#[test]
fn nested_ghosts_are_stripped_with_their_paths_and_never_reach_the_executor() {
    let (tool, received) = recording("create_order", pydantic_style());
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(
        &dispatcher,
        "create_order",
        json!({
            "customer": {"id": "c1", "admin": true},
            "lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2, "discount": 100}],
            "note": null,
            "sudo": "yes"
        }),
    );
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(message.stripped_arguments, ["sudo", "customer.admin", "lines[1].discount"]);
    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(
        Value::Object(received[0].arguments.clone()),
        json!({"customer": {"id": "c1"}, "lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2}]})
    );
    assert_eq!((received[0].tool.as_str(), received[0].tool_call_id.as_str()), ("create_order", "call_1"));
}

#[test]
fn invalid_arguments_are_refused_with_paths_and_hints() {
    let (tool, received) = recording("create_order", pydantic_style());
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(
        &dispatcher,
        "create_order",
        json!({"customer": {"idd": "c1"}, "lines": [{"sku": "a", "quantity": "2"}, {"sku": "b", "quantity": 0}]}),
    );
    assert_eq!(message.status, Status::Error);
    assert!(message.content.contains("`customer`: missing field `id`"), "{}", message.content);
    assert!(message.content.contains("`lines[0].quantity`"), "{}", message.content);
    assert!(message.content.contains("`lines[1].quantity`"), "{}", message.content);
    assert!(message.hints.iter().any(|h| h == "rename `customer.idd` to `customer.id`"), "{:?}", message.hints);
    assert_eq!(message.stripped_arguments, ["customer.idd"]);

    let missing = dispatch(&dispatcher, "create_order", json!({"lines": []}));
    assert!(missing.content.contains("`customer` is required"), "{}", missing.content);
    assert!(received.lock().unwrap().is_empty());
}

#[test]
fn a_schema_that_cannot_be_a_tool_is_refused_when_the_tool_is_made() {
    let make = |schema: Value| {
        JsonTool::builder("t", "A tool.", schema).build(|_: JsonCall| async { Ok::<Value, ToolError>(Value::Null) })
    };
    let err = |schema: Value| make(schema).unwrap_err();
    assert!(matches!(err(json!([])), JsonToolError::NotAnObject { found: "an array", .. }));
    assert!(matches!(err(json!(true)), JsonToolError::NotAnObject { found: "a boolean", .. }));
    assert!(matches!(err(json!({"type": "string"})), JsonToolError::RootNotObjectType { .. }));
    assert!(matches!(err(json!({"properties": {}})), JsonToolError::RootNotObjectType { .. }));
    let bad_keyword = err(json!({"type": "object", "properties": {"a": {"type": 5}}}));
    assert!(matches!(bad_keyword, JsonToolError::Invalid { .. }), "{bad_keyword:?}");
    assert!(bad_keyword.to_string().starts_with("the input schema of `t` is not a schema"), "{bad_keyword}");
    let remote = err(json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}));
    assert!(matches!(remote, JsonToolError::Invalid { .. }), "{remote:?}");
    let dangling = err(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Nope"}}}));
    assert!(matches!(dangling, JsonToolError::Invalid { .. }), "{dangling:?}");
    let bad_pattern = err(json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}));
    assert!(matches!(bad_pattern, JsonToolError::Invalid { .. }), "{bad_pattern:?}");
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "array", "items": deep});
    }
    let deep = err(json!({"type": "object", "properties": {"a": deep}}));
    assert!(matches!(deep, JsonToolError::TooDeep { .. }), "{deep:?}");
    // The rules of every tool hold too.
    let named = JsonTool::builder("has space", "A tool.", json!({"type": "object"}))
        .build(|_: JsonCall| async { Ok::<Value, ToolError>(Value::Null) })
        .unwrap_err();
    assert!(matches!(named, JsonToolError::Spec(_)), "{named:?}");
    let effect = JsonTool::builder("t", "A tool.", json!({"type": "object", "properties": {"a": {}}}))
        .effect("x:{b}")
        .build(|_: JsonCall| async { Ok::<Value, ToolError>(Value::Null) })
        .unwrap_err();
    assert_eq!(effect.to_string(), "unknown parameter `b` in effect template");
    // Errors are words, not panics, and every message is lower-case without a trailing period.
    for error in [bad_keyword, remote, dangling, bad_pattern] {
        let text = error.to_string();
        assert!(!text.ends_with('.'), "{text}");
    }
}

#[test]
fn the_published_schema_is_the_enforced_one() {
    let (tool, _) = recording("create_order", pydantic_style());
    let schema = tool.definition_schema().clone();
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["$defs"]["Customer"]["additionalProperties"], false);
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let offered = dispatcher.offered_tools();
    assert_eq!(offered[0].input_schema, schema);
    assert_eq!(offered[0].description, "A tool defined by a schema.");

    // As written, open objects keep what they are sent; only the closed ones strip.
    let mut as_written = pydantic_style();
    as_written["$defs"]["Line"]["additionalProperties"] = json!(false);
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let tool = JsonTool::builder("create_order", "As written.", as_written.clone())
        .closing(Closing::AsWritten)
        .build(move |call: JsonCall| {
            log.lock().unwrap().push(call);
            async { Ok::<Value, ToolError>(json!("done")) }
        })
        .unwrap();
    assert_eq!(tool.definition_schema(), &as_written);
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(
        &dispatcher,
        "create_order",
        json!({"customer": {"id": "c", "vip": true}, "lines": [{"sku": "a", "quantity": 1, "gift": true}], "x": 1}),
    );
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(message.stripped_arguments, ["lines[0].gift"]);
    assert_eq!(
        Value::Object(received.lock().unwrap()[0].arguments.clone()),
        json!({"customer": {"id": "c", "vip": true}, "lines": [{"sku": "a", "quantity": 1}], "x": 1})
    );
}

#[test]
fn ghost_block_refuses_a_nested_ghost() {
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let tool = JsonTool::builder("create_order", "Blocks ghosts.", pydantic_style())
        .ghost(GhostPolicy::Block)
        .build(move |call: JsonCall| {
            log.lock().unwrap().push(call);
            async { Ok::<Value, ToolError>(json!("done")) }
        })
        .unwrap();
    assert_eq!(tool.spec().ghost(), GhostPolicy::Block);
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(&dispatcher, "create_order", json!({"customer": {"id": "c", "idd": 1}, "lines": []}));
    assert_eq!(message.status, Status::Error);
    assert!(message.content.contains("`customer.idd`"), "{}", message.content);
    assert!(received.lock().unwrap().is_empty());
}
