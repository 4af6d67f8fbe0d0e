//! A call whose arguments are JSON text ([`ToolCallText`]) is the call [`ToolCall::from_json_text`] makes of
//! it, word for word and record for record, except that the text is parsed only once a gate reads the
//! arguments: an unknown tool, a tool the policy denies by name and one denied to its caller are refused
//! without the text being read, however large it is (counted by this binary's allocator); and
//! [`Dispatcher::refuses_before_arguments`] says which calls those are.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use agent_airlock::audit::{AuditConfig, AuditLog, AuditRecord};
use agent_airlock::identity::{Caller, Identity};
use agent_airlock::{
    CallContext, Dispatcher, Outcome, Policy, RefusalKind, Status, ToolCall, ToolCallText, ToolMessage, airlock_tool,
    tool,
};
use agent_airlock_tests::block_on;
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// A nested argument.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Field name.
    pub field: String,
    /// Allowed values.
    pub values: Vec<i64>,
}

/// Look something up.
#[airlock_tool]
fn lookup(
    /// Query.
    query: String,
    /// Limit.
    limit: Option<u8>,
    /// Filter.
    filter: Option<Filter>,
) -> String {
    format!("{query} {limit:?} {filter:?}")
}

/// Purge a target: denied by name.
#[airlock_tool]
fn admin_purge(
    /// Target.
    target: String,
) -> String {
    target
}

/// Move money: denied to callers outside payments, and above 100 to everyone.
#[airlock_tool]
fn transfer(
    /// Amount in cents.
    amount: u64,
) -> String {
    amount.to_string()
}

fn dispatcher(audit: Arc<AuditLog>) -> Dispatcher {
    let policy = Policy::builder()
        .deny("admin_*")
        .deny_when("transfer", "not (identity.groups contains \"payments\")", "payments team only")
        .deny_when("transfer", "amount > 100", "too large")
        .build()
        .unwrap();
    Dispatcher::builder()
        .tool(tool!(lookup))
        .tool(tool!(admin_purge))
        .tool(tool!(transfer))
        .policy(policy)
        .audit(audit)
        .build()
        .unwrap()
}

fn audit_log() -> Arc<AuditLog> {
    Arc::new(AuditLog::in_memory(AuditConfig { store_raw: true, ..AuditConfig::default() }))
}

fn context(member: bool) -> CallContext {
    let groups = if member { json!(["payments"]) } else { json!(["support"]) };
    let identity = Identity::new("https://issuer.test", "someone").with_claim("groups", groups);
    CallContext::new().with_thread("t").with_authenticated(&Caller::identified(identity))
}

fn message(outcome: Outcome) -> ToolMessage {
    outcome.expect_message()
}

/// What a record says of the call, without where and when it was written (its sequence number, time, MAC).
fn said(record: &AuditRecord) -> Value {
    json!({
        "tool": record.tool, "tool_call_id": record.tool_call_id, "thread_id": record.thread_id,
        "caller": record.caller, "outcome": format!("{:?}", record.outcome), "rule": record.rule,
        "detail": record.detail, "raw_arguments": record.raw_arguments, "raw_result": record.raw_result,
        "arguments": record.arguments.is_some(), "result": record.result.is_some(),
    })
}

/// What the one record `log` holds from `from` on says.
fn only_record_from(log: &AuditLog, from: u64) -> Value {
    let records = log.records(from, usize::MAX).unwrap();
    assert_eq!(records.len(), 1, "one record per call: {records:?}");
    said(&records[0])
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..300).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,10}".prop_map(Value::String),
    ]
}

/// Argument objects near what the tools declare: their keys and a ghost, at the top and nested.
fn arguments() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("query".to_owned()),
        Just("limit".to_owned()),
        Just("filter".to_owned()),
        Just("field".to_owned()),
        Just("values".to_owned()),
        Just("target".to_owned()),
        Just("amount".to_owned()),
        ".{0,5}"
    ];
    leaf().prop_recursive(4, 32, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON text a model may send: objects serialized compact or pretty, the same cut anywhere (not JSON),
/// arbitrary text, and a few fixed shapes (empty, bare values, nesting past the parser's limit).
fn argument_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => arguments().prop_map(|value| value.to_string()),
        1 => arguments().prop_map(|value| serde_json::to_string_pretty(&value).unwrap()),
        2 => (arguments(), any::<prop::sample::Index>()).prop_map(|(value, at)| {
            let text = value.to_string();
            let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            text[..cuts[at.index(cuts.len())]].to_owned()
        }),
        1 => ".{0,40}",
        1 => prop_oneof![
            Just(String::new()),
            Just("null".to_owned()),
            Just("[]".to_owned()),
            Just("\"text\"".to_owned()),
            Just(" {\"query\": \"q\"} ".to_owned()),
            Just(format!("{{\"query\": {}1{}}}", "[".repeat(200), "]".repeat(200))),
            Just("{\"amount\": 50}".to_owned()),
            Just("{\"amount\": 500}".to_owned()),
            Just("{\"target\": \"db\"}".to_owned()),
        ],
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(512)))]

    /// Every gate answers a text call as it answers the call parsed first: the same message (content, hints,
    /// stripped keys, refusal) and the same audit record, for allowed, ghost-stripped, invalid, malformed,
    /// denied-by-name, denied-to-the-caller, denied-by-argument and unknown calls.
    #[test]
    fn a_text_call_is_answered_as_the_call_parsed_first(
        name in prop_oneof![Just("lookup"), Just("admin_purge"), Just("transfer"), Just("nope"), Just("Lookup")],
        text in argument_text(),
        member in any::<bool>(),
    ) {
        let log = audit_log();
        let dispatcher = dispatcher(Arc::clone(&log));
        let cx = context(member);
        let parsed = message(block_on(dispatcher.dispatch(ToolCall::from_json_text("c1", name, &text), &cx)));
        let parsed_record = only_record_from(&log, 1);
        let lazy = message(block_on(dispatcher.dispatch(ToolCallText::new("c1", name, text.clone()), &cx)));
        prop_assert_eq!(&lazy, &parsed, "{}", text);
        prop_assert_eq!(only_record_from(&log, 2), parsed_record.clone(), "{}", text);
        // What `refuses_before_arguments` answers yes for is refused alike whatever the arguments are.
        if dispatcher.refuses_before_arguments(name, &cx) {
            let unread = message(block_on(dispatcher.dispatch(ToolCallText::new("c1", name, ""), &cx)));
            prop_assert_eq!(&unread, &parsed, "{}", text);
            prop_assert_eq!(only_record_from(&log, 3), parsed_record, "{}", text);
        }
        // And `From` parses as `from_json_text` does.
        let converted = ToolCall::from(ToolCallText::new("c1", name, text.clone()));
        prop_assert_eq!(converted, ToolCall::from_json_text("c1", name, &text));
    }
}

/// The outcomes the generated calls above must reach, so that their agreement is not vacuous: each is
/// reached by a fixed call here, as text.
#[test]
fn text_calls_reach_every_outcome() {
    let log = audit_log();
    let dispatcher = dispatcher(Arc::clone(&log));
    let call = |name: &str, text: &str, member: bool| {
        message(block_on(dispatcher.dispatch(ToolCallText::new("c", name, text), &context(member))))
    };
    let kind = |message: &ToolMessage| message.refusal.as_ref().map(|refusal| refusal.kind);
    let allowed = call("lookup", r#"{"query": "q", "limit": 3, "filter": {"field": "f", "values": [1]}}"#, false);
    assert_eq!(allowed.status, Status::Success, "{allowed:?}");
    assert_eq!(allowed.content, "q Some(3) Some(Filter { field: \"f\", values: [1] })");
    let ghosts =
        call("lookup", r#"{"query": "q", "sudo": true, "filter": {"field": "f", "values": [], "x": 1}}"#, false);
    assert_eq!(ghosts.status, Status::Success, "{ghosts:?}");
    assert_eq!(ghosts.stripped_arguments, ["sudo", "filter.x"]);
    assert_eq!(kind(&call("lookup", r#"{"query": 5}"#, false)), Some(RefusalKind::InvalidArguments));
    assert_eq!(kind(&call("lookup", r#"{"query": "q""#, false)), Some(RefusalKind::MalformedArguments));
    assert_eq!(kind(&call("lookup", "[1]", false)), Some(RefusalKind::MalformedArguments));
    assert_eq!(kind(&call("admin_purge", r#"{"target": "db"}"#, true)), Some(RefusalKind::Denied));
    let outsider = call("transfer", r#"{"amount": 50}"#, false);
    assert_eq!(kind(&outsider), Some(RefusalKind::Denied));
    assert!(outsider.content.contains("payments team only"), "{}", outsider.content);
    let large = call("transfer", r#"{"amount": 500}"#, true);
    assert_eq!(kind(&large), Some(RefusalKind::Denied));
    assert!(large.content.contains("too large"), "{}", large.content);
    assert_eq!(call("transfer", r#"{"amount": 50}"#, true).content, "50");
    assert_eq!(kind(&call("nope", "{}", true)), Some(RefusalKind::UnknownTool));
    // Which of them are refused before any gate reads the arguments.
    for (name, member, unread) in [
        ("nope", true, true),
        ("admin_purge", true, true),
        ("transfer", false, true),
        ("transfer", true, false),
        ("lookup", false, false),
    ] {
        assert_eq!(dispatcher.refuses_before_arguments(name, &context(member)), unread, "{name}, member {member}");
    }
    assert!(dispatcher.refuses_before_arguments("transfer", &CallContext::new()), "no identity: fails closed");
    // Each call was recorded, the allowed ones with the arguments as admitted.
    let records = log.records(1, usize::MAX).unwrap();
    assert_eq!(records.len(), 10);
    assert_eq!(
        records[1].raw_arguments.as_deref(),
        Some(r#"{"filter":{"field":"f","values":[]},"query":"q"}"#),
        "stripped before it is recorded"
    );
}

/// The text of a call refused before any gate reads its arguments is never parsed: a 200,000-member object
/// sent to an unknown tool, to a tool denied by name and to one denied to its caller costs a handful of
/// allocations, where parsing it (the contrast, so the count is not vacuous) costs one per member and more.
#[test]
fn a_call_refused_before_its_arguments_are_read_leaves_its_text_unparsed() {
    let members: Vec<String> = (0..200_000).map(|i| format!("\"k{i}\": [{i}]")).collect();
    let text = format!("{{\"amount\": 5, {}}}", members.join(", "));
    let log = audit_log();
    let dispatcher = dispatcher(Arc::clone(&log));
    let outsider = context(false);
    for (name, kind) in
        [("nope", RefusalKind::UnknownTool), ("admin_purge", RefusalKind::Denied), ("transfer", RefusalKind::Denied)]
    {
        let call = ToolCallText::new("c", name, text.clone());
        let (outcome, allocations) = counting_allocations(|| block_on(dispatcher.dispatch(call, &outsider)));
        let message = message(outcome);
        assert_eq!(message.refusal.map(|refusal| refusal.kind), Some(kind), "{name}");
        assert!(allocations < 100, "{name}: {allocations} allocations for a refusal before the arguments");
    }
    // The contrast: a member's call to the same tool reads them (its undeclared members stripped, the
    // argument condition checked), and the parse costs at least one allocation per member.
    let call = ToolCallText::new("c", "transfer", text);
    let (outcome, allocations) = counting_allocations(|| block_on(dispatcher.dispatch(call, &context(true))));
    let message = message(outcome);
    assert_eq!((message.status, message.content.as_str()), (Status::Success, "5"));
    assert!(allocations > 200_000, "{allocations} allocations for a call whose arguments were read");
}

// Allocations counted on the thread that asks for them, forwarded to `System` untouched.

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// `run`'s result and the allocations it made on this thread.
fn counting_allocations<T>(run: impl FnOnce() -> T) -> (T, usize) {
    ALLOCATIONS.with(|count| count.set(0));
    COUNTING.with(|on| on.set(true));
    let result = run();
    COUNTING.with(|on| on.set(false));
    (result, ALLOCATIONS.with(Cell::get))
}

struct CountingAllocator;

#[allow(unsafe_code)] // a counting global allocator needs `unsafe impl GlobalAlloc`; it only forwards to `System`
// SAFETY: every call forwards to `System` with the caller's layout and pointer; the count touches no memory of
// the allocation, and the thread-locals it reads have const initialisers and no destructor (`try_with` answers
// during a thread's teardown too).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;
