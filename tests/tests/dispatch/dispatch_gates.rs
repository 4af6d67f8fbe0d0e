//! Every gate of the dispatcher, and their order, driven through real `#[airlock_tool]` functions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use agent_airlock::{
    CallContext, Dispatcher, HostCommand, ManualClock, Outcome, Policy, RefusalKind, State, Status, ToolCall,
    ToolCallId, ToolError, ToolMessage, airlock_tool,
    approval::{ApprovalRequest, Decision},
    tool,
};
use agent_airlock_tests::block_on;
use serde_json::{Value, json};

/// Counts how often tools really ran.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Counter {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Greets someone.
#[airlock_tool]
fn greet(
    /// Who to greet.
    name: String,
    /// How many exclamation marks.
    excitement: Option<u8>,
    #[inject] runs: State<Counter>,
) -> String {
    runs.bump();
    format!("hello {name}{}", "!".repeat(usize::from(excitement.unwrap_or(0))))
}

/// Transfers money between accounts.
#[airlock_tool(escalate = "moves money", rate = "2/minute")]
async fn transfer(
    /// Source account.
    from: String,
    /// Destination account.
    to: String,
    /// Amount in cents.
    amount: u64,
    #[inject] runs: State<Counter>,
) -> Result<String, ToolError> {
    runs.bump();
    if amount == 0 {
        return Err(ToolError::not_executed("amount must be positive"));
    }
    Ok(format!("moved {amount} from {from} to {to}"))
}

/// Looks up a record; strict about unknown arguments.
#[airlock_tool(ghost = "block")]
fn lookup(
    /// Record id.
    id: u32,
) -> u32 {
    id
}

/// Drops the database.
#[airlock_tool(name = "admin_drop")]
fn drop_database(#[inject] runs: State<Counter>) -> &'static str {
    runs.bump();
    "dropped"
}

/// Routes the graph elsewhere.
#[airlock_tool]
fn handoff(
    /// Next agent.
    agent: String,
    #[inject] call_id: ToolCallId,
) -> HostCommand {
    HostCommand { update: json!({"handoff_from_call": call_id.0, "agent": agent}), goto: vec![agent] }
}

/// Always panics.
#[airlock_tool]
fn explode() -> u8 {
    panic!("boom")
}

/// Fails with an ordinary error type.
#[airlock_tool]
fn read_config(
    /// Path to read.
    path: String,
) -> Result<String, std::io::Error> {
    std::fs::read_to_string(path)
}

struct Fixture {
    dispatcher: Dispatcher,
    context: CallContext,
    runs: Arc<Counter>,
    clock: Arc<ManualClock>,
    approvals: Arc<AtomicUsize>,
    /// What the approver (if any) answers.
    answer: Arc<AtomicBool>,
}

fn fixture(policy: Policy, approve: Option<bool>) -> Fixture {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
    let approvals = Arc::new(AtomicUsize::new(0));
    let answer = Arc::new(AtomicBool::new(approve.unwrap_or(false)));
    let mut builder = Dispatcher::builder()
        .tool(tool!(greet))
        .tool(tool!(transfer))
        .tool(tool!(lookup))
        .tool(tool!(drop_database))
        .tool(tool!(handoff))
        .tool(tool!(explode))
        .tool(tool!(read_config))
        .policy(policy)
        .clock(Arc::clone(&clock));
    if approve.is_some() {
        let asked = Arc::clone(&approvals);
        let answer = Arc::clone(&answer);
        builder = builder.approver(move |request: ApprovalRequest| {
            asked.fetch_add(1, Ordering::SeqCst);
            let yes = answer.load(Ordering::SeqCst);
            async move {
                assert!(request.reasons[0].reason.starts_with("moves money"), "{:?}", request.reasons);
                if yes { Decision::Approve } else { Decision::Deny { reason: Some("not today".into()) } }
            }
        });
    }
    let runs = Arc::new(Counter::default());
    // The counter is shared through `State<Counter>`; the fixture keeps a handle to read it.
    let context = CallContext::new().with_thread("thread-1").with_state_arc(Arc::clone(&runs));
    Fixture { dispatcher: builder.build().unwrap(), context, runs, clock, approvals, answer }
}

impl Fixture {
    fn call(&self, name: &str, arguments: Value) -> Outcome {
        block_on(self.dispatcher.dispatch(ToolCall::new("call-1", name, arguments), &self.context))
    }

    fn message(&self, name: &str, arguments: Value) -> ToolMessage {
        self.call(name, arguments).expect_message()
    }
}

fn refusal_kind(message: &ToolMessage) -> Option<RefusalKind> {
    message.refusal.as_ref().map(|r| r.kind)
}

#[test]
fn allowed_call_runs_with_injected_state() {
    let f = fixture(Policy::new(), None);
    let message = f.message("greet", json!({"name": "Ada", "excitement": 2}));
    assert_eq!(message.status, Status::Success);
    assert_eq!(message.content, "hello Ada!!");
    assert_eq!(message.tool_call_id, "call-1");
    assert!(message.hints.is_empty() && message.refusal.is_none());
    assert_eq!(f.runs.get(), 1);
}

#[test]
fn unknown_tool_is_refused_without_listing_tools() {
    let f = fixture(Policy::builder().deny("admin_*").build().unwrap(), None);
    let message = f.message("shell", json!({}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::UnknownTool));
    assert_eq!(message.status, Status::Error);
    for hidden in ["admin_drop", "greet", "transfer"] {
        assert!(!message.content.contains(hidden), "{}", message.content);
        assert!(!message.hints.iter().any(|h| h.contains(hidden)));
    }
}

#[test]
fn policy_matches_the_registered_name_not_the_fn_name() {
    let f = fixture(Policy::builder().deny("admin_*").deny("drop_database").build().unwrap(), None);
    let message = f.message("admin_drop", json!({}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::Denied));
    assert_eq!(message.refusal.unwrap().rule.as_deref(), Some("admin_*"));
    // The fn name is not a tool name at all.
    assert_eq!(refusal_kind(&f.message("drop_database", json!({}))), Some(RefusalKind::UnknownTool));
    assert_eq!(f.runs.get(), 0);
}

#[test]
fn allow_list_closes_everything_else() {
    let f = fixture(Policy::builder().allow("greet").build().unwrap(), None);
    assert_eq!(f.message("greet", json!({"name": "x"})).status, Status::Success);
    let message = f.message("lookup", json!({"id": 1}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::Denied));
}

#[test]
fn denied_tool_with_ghost_args_reports_the_denial() {
    let f = fixture(Policy::builder().deny("greet").build().unwrap(), None);
    let message = f.message("greet", json!({"name": "x", "sudo": true}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::Denied));
    assert!(message.stripped_arguments.is_empty(), "denial comes before ghost handling");
}

/// A tool hidden from a caller by a rule on who calls says nothing of its arguments to that caller: the rule
/// refuses at the denial gate, before ghost screening and validation, as `tools/list` hides it.
#[test]
fn a_caller_a_tool_is_hidden_from_learns_nothing_of_its_arguments() {
    use agent_airlock::identity::{Caller, Identity};

    let policy = Policy::builder()
        .deny_when("transfer", "not (identity.groups contains \"payments\")", "payments team only")
        .build()
        .unwrap();
    let f = fixture(policy, Some(true));
    let as_member = |groups: Value| {
        let identity = Identity::new("https://issuer.test", "someone").with_claim("groups", groups);
        f.context.clone().with_authenticated(&Caller::identified(identity))
    };
    let call = |context: &CallContext, arguments: Value| {
        block_on(f.dispatcher.dispatch(ToolCall::new("call-1", "transfer", arguments), context)).expect_message()
    };
    for carol in [as_member(json!(["support"])), f.context.clone()] {
        assert!(f.dispatcher.denies_caller("transfer", &carol), "hidden from tools/list");
        let message = call(&carol, json!({"sudo": true, "amount": "x"}));
        assert_eq!(refusal_kind(&message), Some(RefusalKind::Denied), "{message:?}");
        assert!(message.content.contains("payments team only"), "{}", message.content);
        for field in ["`from`", "`to`", "`amount`", "`sudo`", "cents"] {
            assert!(!message.content.contains(field), "{field} in {}", message.content);
            assert!(!message.hints.iter().any(|hint| hint.contains(field)), "{:?}", message.hints);
        }
        assert!(message.stripped_arguments.is_empty(), "nothing screened before the refusal");
    }
    // A member is told what is wrong with the arguments, and a good call runs.
    let alice = as_member(json!(["payments"]));
    assert!(!f.dispatcher.denies_caller("transfer", &alice));
    assert_eq!(refusal_kind(&call(&alice, json!({"amount": "x"}))), Some(RefusalKind::InvalidArguments));
    assert_eq!(call(&alice, json!({"from": "a", "to": "b", "amount": 5})).status, Status::Success);
    assert_eq!(f.runs.get(), 1);
}

#[test]
fn ghost_arguments_are_stripped_and_reported() {
    let f = fixture(Policy::new(), None);
    let message = f.message("greet", json!({"name": "Ada", "role": "admin", "debug": true}));
    assert_eq!(message.status, Status::Success);
    assert_eq!(message.content, "hello Ada");
    let mut stripped = message.stripped_arguments.clone();
    stripped.sort();
    assert_eq!(stripped, ["debug", "role"]);
}

/// What the model spells into a key or a tool name reaches people (a host's list of stripped keys, logs, the
/// audit record's detail) with its bidirectional and invisible characters escaped, as an approver's display
/// escapes them: a key cannot reorder the line it is shown on.
#[test]
fn stripped_keys_and_echoed_names_show_bidi_and_invisible_characters_escaped() {
    let f = fixture(Policy::new(), None);
    let message = f.message("greet", json!({"name": "Ada", "role\u{202E}nimda": true, "x\u{200B}": 1}));
    assert_eq!(message.status, Status::Success);
    let mut stripped = message.stripped_arguments.clone();
    stripped.sort();
    assert_eq!(stripped, ["role\\u{202e}nimda", "x\\u{200b}"]);
    let message = f.message("greet\u{2066}", json!({"name": "Ada"}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::UnknownTool));
    assert!(
        message.content.contains("`greet\\u{2066}`") && !message.content.contains('\u{2066}'),
        "{}",
        message.content
    );
}

#[test]
fn ghost_block_refuses_and_names_the_parameters() {
    let f = fixture(Policy::new(), None);
    let message = f.message("lookup", json!({"id": 1, "all": true}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::MalformedArguments));
    assert!(message.content.contains("`all`") && message.content.contains("`id`"), "{}", message.content);
    assert_eq!(f.message("lookup", json!({"id": 1})).content, "1");
}

#[test]
fn null_counts_as_absent_for_optional_parameters() {
    let f = fixture(Policy::new(), None);
    let message = f.message("greet", json!({"name": "Ada", "excitement": null}));
    assert_eq!(message.content, "hello Ada");
    // `null` for a required parameter is a missing argument.
    let message = f.message("greet", json!({"name": null}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::InvalidArguments));
    assert!(message.content.contains("`name` is required"), "{}", message.content);
}

#[test]
fn validation_is_strict_and_names_every_bad_field() {
    let f = fixture(Policy::new(), Some(true));
    let message = f.message("transfer", json!({"from": 7, "amount": "500"}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::InvalidArguments));
    let text = &message.content;
    assert!(text.contains("`from`: invalid type: integer `7`, expected a string"), "{text}");
    assert!(text.contains("`to` is required"), "{text}");
    assert!(text.contains("`amount`: invalid type: string \"500\""), "{text}");
    assert!(message.hints.iter().any(|h| h.contains("`amount`") && h.contains("no quotes")), "{:?}", message.hints);
    assert!(message.hints.iter().any(|h| h.contains("include `to`")), "{:?}", message.hints);
    // Floats are not integers, negative numbers are not u64.
    for bad in [json!(5.0), json!(-5), json!(true), json!([5])] {
        let message = f.message("transfer", json!({"from": "a", "to": "b", "amount": bad}));
        assert_eq!(refusal_kind(&message), Some(RefusalKind::InvalidArguments), "{bad}");
    }
    assert_eq!(f.approvals.load(Ordering::SeqCst), 0, "invalid calls never reach a human");
    assert_eq!(f.runs.get(), 0);
}

#[test]
fn malformed_arguments_are_refused_not_panicked_on() {
    let f = fixture(Policy::new(), None);
    let outcome =
        block_on(f.dispatcher.dispatch(ToolCall::from_json_text("c", "greet", "{\"name\": \"Ada\""), &f.context));
    let message = outcome.expect_message();
    assert_eq!(refusal_kind(&message), Some(RefusalKind::MalformedArguments));
    for arguments in [json!([1, 2]), json!("text"), json!(3), json!(true)] {
        assert_eq!(refusal_kind(&f.message("greet", arguments)), Some(RefusalKind::MalformedArguments));
    }
    let mut deep = json!("leaf");
    for _ in 0..200 {
        deep = json!({ "a": deep });
    }
    let message = f.message("greet", json!({"name": deep}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::MalformedArguments));
    let huge = "x".repeat(4 << 20);
    assert_eq!(f.message("greet", json!({ "name": huge })).content.len(), 6 + (4 << 20));
    // No arguments at all for a tool without parameters.
    assert_eq!(f.message("explode", Value::Null).status, Status::Error);
}

#[test]
fn escalation_without_an_approver_is_refused() {
    let f = fixture(Policy::new(), None);
    let message = f.message("transfer", json!({"from": "a", "to": "b", "amount": 5}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::ApprovalUnavailable));
    assert_eq!(message.refusal.unwrap().rule.as_deref(), Some("attribute"));
    assert_eq!(f.runs.get(), 0);
}

#[test]
fn an_approvers_yes_runs_and_no_refuses() {
    let yes = fixture(Policy::new(), Some(true));
    let message = yes.message("transfer", json!({"from": "a", "to": "b", "amount": 5, "memo": "x"}));
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(message.content, "moved 5 from a to b");
    assert_eq!(yes.approvals.load(Ordering::SeqCst), 1);

    let no = fixture(Policy::new(), Some(false));
    let message = no.message("transfer", json!({"from": "a", "to": "b", "amount": 5}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::HumanDenied));
    assert!(message.content.contains("not today"));
    assert_eq!(no.runs.get(), 0);
}

#[test]
fn policy_escalation_adds_to_the_attribute() {
    let f = fixture(Policy::builder().escalate("greet", "policy says so").build().unwrap(), None);
    let message = f.message("greet", json!({"name": "x"}));
    assert_eq!(refusal_kind(&message), Some(RefusalKind::ApprovalUnavailable));
    assert_eq!(message.refusal.unwrap().rule.as_deref(), Some("greet"));
}

#[test]
fn rate_limit_refuses_with_retry_after_and_refills() {
    let f = fixture(Policy::new(), Some(true));
    let args = json!({"from": "a", "to": "b", "amount": 5});
    assert_eq!(f.message("transfer", args.clone()).status, Status::Success);
    assert_eq!(f.message("transfer", args.clone()).status, Status::Success);
    let message = f.message("transfer", args.clone());
    assert_eq!(refusal_kind(&message), Some(RefusalKind::RateLimited));
    let refusal = message.refusal.clone().unwrap();
    assert_eq!(refusal.retry_after, Some(Duration::from_secs(30)));
    assert!(message.content.contains("retry in 30 s"), "{}", message.content);
    assert_eq!(f.runs.get(), 2);
    f.clock.advance(Duration::from_secs(30));
    assert_eq!(f.message("transfer", args).status, Status::Success);
}

#[test]
fn refused_calls_spend_no_rate_token() {
    let f = fixture(Policy::new(), Some(false));
    let good = json!({"from": "a", "to": "b", "amount": 5});
    for _ in 0..5 {
        let bad = f.message("transfer", json!({"from": "a", "to": "b", "amount": "5"}));
        assert_eq!(refusal_kind(&bad), Some(RefusalKind::InvalidArguments));
        let no = f.message("transfer", good.clone());
        assert_eq!(refusal_kind(&no), Some(RefusalKind::HumanDenied));
    }
    // The bucket (2/minute) is still full: two calls run, the third is limited.
    f.answer.store(true, Ordering::SeqCst);
    assert_eq!(f.message("transfer", good.clone()).status, Status::Success);
    assert_eq!(f.message("transfer", good.clone()).status, Status::Success);
    assert_eq!(refusal_kind(&f.message("transfer", good)), Some(RefusalKind::RateLimited));
    assert_eq!(f.runs.get(), 2);
}

#[test]
fn a_policy_can_tighten_a_rate_but_never_loosen_it() {
    let tighter = fixture(Policy::builder().rate_limit("transfer", "1/minute").build().unwrap(), Some(true));
    let args = json!({"from": "a", "to": "b", "amount": 5});
    assert_eq!(tighter.message("transfer", args.clone()).status, Status::Success);
    let message = tighter.message("transfer", args.clone());
    assert_eq!(message.refusal.unwrap().rule.as_deref(), Some("transfer"));

    let looser = fixture(Policy::builder().rate_limit("*", "1000/minute").build().unwrap(), Some(true));
    looser.message("transfer", args.clone());
    looser.message("transfer", args.clone());
    let message = looser.message("transfer", args);
    assert_eq!(refusal_kind(&message), Some(RefusalKind::RateLimited));
    assert_eq!(message.refusal.unwrap().rule.as_deref(), Some("attribute"));
}

#[test]
fn per_thread_rate_limits_count_each_thread_apart() {
    let policy = Policy::builder().rate_limit_per_thread("greet", "1/hour").build().unwrap();
    let f = fixture(policy, None);
    let in_thread = |thread: &str| {
        let context = f.context.clone().with_thread(thread);
        block_on(f.dispatcher.dispatch(ToolCall::new("c", "greet", json!({"name": "x"})), &context)).expect_message()
    };
    assert_eq!(in_thread("alice").status, Status::Success);
    assert_eq!(in_thread("bob").status, Status::Success);
    let again = in_thread("alice");
    assert_eq!(refusal_kind(&again), Some(RefusalKind::RateLimited));
    assert_eq!(again.refusal.unwrap().retry_after, Some(Duration::from_secs(3_600)));
    f.clock.advance(Duration::from_secs(3_600));
    assert_eq!(in_thread("alice").status, Status::Success);
}

#[test]
fn tool_errors_become_error_messages() {
    let f = fixture(Policy::new(), Some(true));
    let message = f.message("transfer", json!({"from": "a", "to": "b", "amount": 0}));
    assert_eq!(message.status, Status::Error);
    assert!(message.refusal.is_none());
    assert_eq!(message.content, "amount must be positive");
    let message = f.message("read_config", json!({"path": "/definitely/not/here"}));
    assert_eq!(message.status, Status::Error);
    assert!(message.content.contains("No such file"), "{}", message.content);
}

#[test]
fn a_panicking_tool_is_an_error_message() {
    let f = fixture(Policy::new(), None);
    let message = f.message("explode", json!({}));
    assert_eq!(message.status, Status::Error);
    assert!(!message.content.contains("boom"), "panic payloads are not shown to the model");
}

#[test]
fn host_commands_pass_through_untouched() {
    let f = fixture(Policy::new(), None);
    match f.call("handoff", json!({"agent": "billing", "x": 1})) {
        Outcome::Command { command, tool_call_id, stripped_arguments } => {
            assert_eq!(command.update, json!({"handoff_from_call": "call-1", "agent": "billing"}));
            assert_eq!(command.goto, ["billing"]);
            assert_eq!(tool_call_id, "call-1");
            assert_eq!(stripped_arguments, ["x"]);
        }
        other => panic!("expected a command, got {other:?}"),
    }
}

#[test]
fn a_missing_injected_value_is_a_clear_error_not_a_panic() {
    let f = fixture(Policy::new(), None);
    let bare = CallContext::new();
    let outcome = block_on(f.dispatcher.dispatch(ToolCall::new("c", "greet", json!({"name": "x"})), &bare));
    let message = outcome.expect_message();
    assert_eq!(refusal_kind(&message), Some(RefusalKind::HostMisconfigured));
    assert!(message.content.contains("host is misconfigured"));
}

#[test]
fn offered_tools_drop_denied_and_keep_escalated() {
    let f = fixture(Policy::builder().deny("admin_*").build().unwrap(), None);
    let names: Vec<String> = f.dispatcher.offered_tools().into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["greet", "transfer", "lookup", "handoff", "explode", "read_config"]);
    // One way to list what may be offered: the dispatcher's own, under its policy.
    let dispatcher = Dispatcher::builder()
        .tool(tool!(drop_database))
        .tool(tool!(transfer))
        .policy(Policy::builder().deny("admin_*").build().unwrap())
        .build()
        .unwrap();
    let filtered = dispatcher.offered_tools();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].name, "transfer");
    let schema = &filtered[0].input_schema;
    assert_eq!(schema["required"], json!(["from", "to", "amount"]));
    assert!(schema["properties"].get("runs").is_none(), "injected parameters are not in the schema");
    assert_eq!(schema["properties"]["amount"]["description"], "Amount in cents.");
}

#[test]
fn duplicate_tool_names_are_a_build_error() {
    let err = Dispatcher::builder().tool(tool!(greet)).tool(tool!(greet)).build().err().unwrap();
    assert_eq!(err.to_string(), "two tools are registered as `greet`");
}
