//! Model input never panics the dispatcher: arbitrary JSON (any shape, any depth up to the parser's limit,
//! any types) and arbitrary argument text get a message, never a crash.

use agent_airlock::{CallContext, Dispatcher, Status, ToolCall, airlock_tool, tool};
use agent_airlock_tests::block_on;
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value};

/// A nested argument.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Filter {
    /// Field name.
    pub field: String,
    /// Allowed values.
    pub values: Vec<i64>,
}

/// A mode.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Fast.
    Fast,
    /// Thorough, with a budget.
    Thorough {
        /// Budget.
        budget: u32,
    },
}

/// Search with many parameter types.
#[airlock_tool]
fn search(
    /// Query.
    query: String,
    /// Limit.
    limit: Option<u8>,
    /// Filters.
    filters: Option<Vec<Filter>>,
    /// Mode.
    mode: Option<Mode>,
    /// Score threshold.
    threshold: Option<f64>,
) -> String {
    format!("{query} {limit:?} {} {mode:?} {threshold:?}", filters.map_or(0, |f| f.len()))
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![Just("fast"), Just("thorough"), Just("field"), Just("values")].prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("query".to_owned()),
                        Just("limit".to_owned()),
                        Just("filters".to_owned()),
                        Just("mode".to_owned()),
                        Just("threshold".to_owned()),
                        Just("field".to_owned()),
                        Just("values".to_owned()),
                        Just("thorough".to_owned()),
                        Just("budget".to_owned()),
                        ".{0,6}"
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder().tool(tool!(search)).build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(512)))]

    #[test]
    fn arbitrary_arguments_get_a_message(arguments in json_value()) {
        let message = block_on(dispatcher().dispatch(ToolCall::new("c", "search", arguments), &CallContext::new()))
            .expect_message();
        // Either it ran, or it was refused with text for the model; never a panic.
        prop_assert!(message.status == Status::Success || message.refusal.is_some(), "{message:?}");
    }

    #[test]
    fn arbitrary_argument_text_gets_a_message(text in ".{0,64}", name in prop_oneof![Just("search".to_owned()), ".{0,8}"]) {
        let call = ToolCall::from_json_text("c", name, &text);
        let message = block_on(dispatcher().dispatch(call, &CallContext::new())).expect_message();
        prop_assert!(message.status == Status::Success || message.refusal.is_some(), "{message:?}");
    }
}

#[test]
fn nesting_at_the_parsers_limit_is_refused_cleanly() {
    let text = format!("{{\"query\": {}1{}}}", "[".repeat(127), "]".repeat(127));
    let message = block_on(dispatcher().dispatch(ToolCall::from_json_text("c", "search", &text), &CallContext::new()))
        .expect_message();
    assert!(message.refusal.is_some());
    let too_deep = format!("{{\"query\": {}1{}}}", "[".repeat(5_000), "]".repeat(5_000));
    let message =
        block_on(dispatcher().dispatch(ToolCall::from_json_text("c", "search", &too_deep), &CallContext::new()))
            .expect_message();
    assert!(message.refusal.is_some());
}

/// An argument value nested `levels` deep, built without recursion.
fn nested(levels: usize) -> Value {
    let mut deep = Value::from(1);
    for i in 0..levels {
        deep =
            if i % 2 == 0 { Value::Array(vec![deep]) } else { Value::Object(Map::from_iter([("a".to_owned(), deep)])) };
    }
    deep
}

#[test]
fn a_million_levels_are_refused_on_a_two_mebibyte_stack() {
    // A tokio worker's stack: the refused value must be torn down without recursion on every path that
    // drops it (too deep for a known tool, an unknown tool, a denied tool, not an object at all).
    let worker = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
        let dispatcher = Dispatcher::builder()
            .tool(tool!(search))
            .policy(agent_airlock::Policy::builder().deny("search").build().unwrap())
            .build()
            .unwrap();
        let open = self::dispatcher();
        let calls = [
            (
                &open,
                ToolCall::new("c", "search", Value::Object(Map::from_iter([("query".to_owned(), nested(1_000_000))]))),
            ),
            (&open, ToolCall::new("c", "no_such_tool", nested(1_000_000))),
            (&open, ToolCall::new("c", "search", nested(1_000_000))),
            (
                &dispatcher,
                ToolCall::new("c", "search", Value::Object(Map::from_iter([("query".to_owned(), nested(1_000_000))]))),
            ),
        ];
        calls
            .into_iter()
            .map(|(d, call)| block_on(d.dispatch(call, &CallContext::new())).expect_message().refusal.map(|r| r.kind))
            .collect::<Vec<_>>()
    });
    let kinds = worker.expect("a thread starts").join().expect("no stack overflow");
    use agent_airlock::RefusalKind::*;
    assert_eq!(kinds, [Some(MalformedArguments), Some(UnknownTool), Some(MalformedArguments), Some(Denied)]);
}
