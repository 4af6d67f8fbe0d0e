//! A policy file driving the real dispatcher: argument conditions (fail closed on missing and mistyped
//! arguments, deny before escalation), ghost blocking and effect templates from the policy, observe mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_airlock::approval::{ApprovalRequest, Decision};
use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome};
use agent_airlock::effect::MemoryEffectStore;
use agent_airlock::{
    BuildError, CallContext, Dispatcher, DispatcherBuilder, Policy, RefusalKind, State, Status, ToolCall, ToolMessage,
    airlock_tool, tool,
};
use agent_airlock_tests::block_on;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Counts how often tools really ran.
#[derive(Default)]
struct Runs(AtomicUsize);

impl Runs {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Writes content to a path. The path is any JSON value, so conditions meet every type.
#[airlock_tool]
fn write_file(
    /// Where to write.
    path: Option<Value>,
    /// What to write.
    content: String,
    #[inject] runs: State<Runs>,
) -> String {
    runs.bump();
    format!("wrote {} bytes to {}", content.len(), path.unwrap_or_default())
}

/// Refunds a payment.
#[airlock_tool]
fn refund(
    /// The payment.
    payment_id: String,
    /// Amount in cents.
    amount: Value,
    #[inject] runs: State<Runs>,
) -> String {
    runs.bump();
    format!("refunded {amount} of {payment_id}")
}

/// Closes an account; its author requires a human.
#[airlock_tool(escalate = "closes an account")]
fn close_account(
    /// The account.
    id: String,
    #[inject] runs: State<Runs>,
) -> String {
    runs.bump();
    format!("closed {id}")
}

const POLICY: &str = r#"
version = 1
default = "allow"

[[tools.write_file.when]]
if = 'path matches "**/.ssh/**"'
deny = "never write ssh keys"

[[tools.refund.when]]
if = "amount > 10000"
escalate = "large refund"

[[tools.refund.when]]
if = 'payment_id starts_with "test_"'
deny = "test payments are not refunded"
"#;

struct Host {
    dispatcher: Dispatcher,
    context: CallContext,
    runs: Arc<Runs>,
    asked: Arc<AtomicUsize>,
    audit: Arc<AuditLog>,
}

/// A host with `policy`; `approve` is the approver's answer, `None` for no approver.
fn host(policy: &str, approve: Option<bool>) -> Host {
    host_with(policy, approve, |builder| builder)
}

fn host_with(policy: &str, approve: Option<bool>, extra: impl FnOnce(DispatcherBuilder) -> DispatcherBuilder) -> Host {
    let asked = Arc::new(AtomicUsize::new(0));
    let audit = Arc::new(AuditLog::in_memory(AuditConfig::default()));
    let mut builder = Dispatcher::builder()
        .tool(tool!(write_file))
        .tool(tool!(refund))
        .tool(tool!(close_account))
        .policy(Policy::from_toml(policy).unwrap())
        .audit(Arc::clone(&audit));
    if let Some(yes) = approve {
        let asked = Arc::clone(&asked);
        builder = builder.approver(move |request: ApprovalRequest| {
            asked.fetch_add(1, Ordering::SeqCst);
            let reasons: Vec<String> = request.reasons.iter().map(|r| format!("{}: {}", r.rule, r.reason)).collect();
            async move {
                assert!(!reasons.is_empty());
                if yes { Decision::Approve } else { Decision::Deny { reason: Some(reasons.join(" | ")) } }
            }
        });
    }
    let runs = Arc::new(Runs::default());
    let context = CallContext::new().with_thread("t").with_state_arc(Arc::clone(&runs));
    Host { dispatcher: extra(builder).build().unwrap(), context, runs, asked, audit }
}

impl Host {
    fn call(&self, name: &str, arguments: Value) -> ToolMessage {
        block_on(self.dispatcher.dispatch(ToolCall::new("call-1", name, arguments), &self.context)).expect_message()
    }

    fn audited(&self) -> Vec<(AuditOutcome, Option<String>, Option<String>)> {
        self.audit.records(1, 1_000).unwrap().into_iter().map(|r| (r.outcome, r.rule, r.detail)).collect()
    }
}

fn kind(message: &ToolMessage) -> Option<RefusalKind> {
    message.refusal.as_ref().map(|r| r.kind)
}

const SSH_RULE: &str = "write_file when path matches \"**/.ssh/**\"";

#[test]
fn a_deny_condition_refuses_naming_the_rule_and_lets_other_calls_run() {
    let h = host(POLICY, None);
    let refused = h.call("write_file", json!({"path": "/home/me/.ssh/authorized_keys", "content": "key"}));
    assert_eq!(kind(&refused), Some(RefusalKind::Denied));
    assert_eq!(refused.refusal.as_ref().unwrap().rule.as_deref(), Some(SSH_RULE));
    assert!(
        refused.content.contains(SSH_RULE) && refused.content.contains("never write ssh keys"),
        "{}",
        refused.content
    );
    assert_eq!(h.runs.get(), 0);

    let ran = h.call("write_file", json!({"path": "/home/me/notes.txt", "content": "hi"}));
    assert_eq!(ran.status, Status::Success, "{}", ran.content);
    assert_eq!(h.runs.get(), 1);
}

#[test]
fn a_condition_on_a_missing_or_mistyped_argument_fails_closed() {
    let h = host(POLICY, None);
    for (arguments, why) in [
        (json!({"content": "x"}), "argument `path` is missing"),
        (json!({"path": null, "content": "x"}), "argument `path` is missing"),
        (json!({"path": 5, "content": "x"}), "argument `path` is a number, not a string"),
        (json!({"path": ["/home/me/.ssh/id"], "content": "x"}), "argument `path` is a list, not a string"),
        (json!({"path": {"p": "/x"}, "content": "x"}), "argument `path` is an object, not a string"),
    ] {
        let refused = h.call("write_file", arguments.clone());
        assert_eq!(kind(&refused), Some(RefusalKind::Denied), "{arguments}");
        assert!(refused.content.contains(why), "{arguments}: {}", refused.content);
    }
    assert_eq!(h.runs.get(), 0);

    // An escalation condition on a mistyped amount escalates (no approver: refused, never run).
    let refused = h.call("refund", json!({"payment_id": "p1", "amount": "20000"}));
    assert_eq!(kind(&refused), Some(RefusalKind::ApprovalUnavailable), "{}", refused.content);
    assert_eq!(refused.refusal.unwrap().rule.as_deref(), Some("refund when amount > 10000"));
    assert_eq!(h.runs.get(), 0);
}

#[test]
fn an_escalation_condition_asks_a_human_only_when_met() {
    let yes = host(POLICY, Some(true));
    assert_eq!(yes.call("refund", json!({"payment_id": "p1", "amount": 500})).status, Status::Success);
    assert_eq!(yes.asked.load(Ordering::SeqCst), 0);
    assert_eq!(yes.call("refund", json!({"payment_id": "p1", "amount": 20000})).status, Status::Success);
    assert_eq!((yes.asked.load(Ordering::SeqCst), yes.runs.get()), (1, 2));

    let no = host(POLICY, Some(false));
    let refused = no.call("refund", json!({"payment_id": "p1", "amount": 20000}));
    assert_eq!(kind(&refused), Some(RefusalKind::HumanDenied));
    // The human was shown the rule and its reason.
    assert!(refused.content.contains("refund when amount > 10000: large refund"), "{}", refused.content);
    assert_eq!(no.runs.get(), 0);

    let nobody = host(POLICY, None);
    assert_eq!(
        kind(&nobody.call("refund", json!({"payment_id": "p1", "amount": 20000}))),
        Some(RefusalKind::ApprovalUnavailable)
    );
    assert_eq!(nobody.call("refund", json!({"payment_id": "p1", "amount": 10000})).status, Status::Success);
}

#[test]
fn deny_beats_escalation_and_no_human_is_asked() {
    let h = host(POLICY, Some(true));
    let refused = h.call("refund", json!({"payment_id": "test_1", "amount": 20000}));
    assert_eq!(kind(&refused), Some(RefusalKind::Denied));
    assert_eq!(refused.refusal.unwrap().rule.as_deref(), Some("refund when payment_id starts_with \"test_\""));
    assert_eq!((h.asked.load(Ordering::SeqCst), h.runs.get()), (0, 0));
}

#[test]
fn policy_ghost_block_and_effect_templates_apply() {
    let policy = r#"
version = 1
default = "allow"
[tools.write_file]
ghost = "block"
[tools.refund]
effect = "refund:{payment_id}"
"#;
    let h = host_with(policy, None, |b| b.effects(MemoryEffectStore::new()));
    let refused = h.call("write_file", json!({"path": "/tmp/a", "content": "x", "mode": "0777"}));
    assert_eq!(kind(&refused), Some(RefusalKind::MalformedArguments), "{}", refused.content);
    assert_eq!(h.runs.get(), 0);

    assert_eq!(h.call("refund", json!({"payment_id": "p1", "amount": 1})).status, Status::Success);
    let again = h.call("refund", json!({"payment_id": "p1", "amount": 2}));
    assert_eq!(kind(&again), Some(RefusalKind::Duplicate), "{}", again.content);
    assert_eq!(h.call("refund", json!({"payment_id": "p2", "amount": 1})).status, Status::Success);
    assert_eq!(h.runs.get(), 2);
}

#[test]
fn a_policy_effect_needs_a_store_and_declared_placeholders() {
    let build = |policy: &str, store: bool| {
        let mut builder = Dispatcher::builder().tool(tool!(refund)).policy(Policy::from_toml(policy).unwrap());
        if store {
            builder = builder.effects(MemoryEffectStore::new());
        }
        builder.build().err()
    };
    let good = "version = 1\ndefault = \"allow\"\n[tools.refund]\neffect = \"refund:{payment_id}\"\n";
    assert_eq!(build(good, false), Some(BuildError::NoEffectStore("refund".to_owned())));
    assert_eq!(build(good, true), None);
    let typo = "version = 1\ndefault = \"allow\"\n[tools.refund]\neffect = \"refund:{payment}\"\n";
    let err = build(typo, true).unwrap();
    assert_eq!(
        err.to_string(),
        "policy effect template `refund:{payment}` for tool `refund` names `payment`, which the tool does not declare"
    );
}

#[test]
fn observe_mode_refuses_nothing_the_policy_decides_and_audits_each_would_refuse() {
    let policy = r#"
version = 1
default = "deny"
mode = "observe"
allow = ["refund", "close_account"]

[tools.refund]
escalate = "policy wants a human"
rate = "1/hour"

[[tools.refund.when]]
if = 'payment_id starts_with "test_"'
deny = "test payments are not refunded"

[tools.write_file]
ghost = "block"
"#;
    let h = host(policy, None);
    // Denied by default, yet offered and run.
    let offered: Vec<String> = h.dispatcher.offered_tools().into_iter().map(|d| d.name).collect();
    assert!(offered.contains(&"write_file".to_owned()), "{offered:?}");
    let ran = h.call("write_file", json!({"path": "/tmp/a", "content": "x", "mode": "0777"}));
    assert_eq!(ran.status, Status::Success, "{}", ran.content);
    assert_eq!(ran.stripped_arguments, vec!["mode".to_owned()]);
    for _ in 0..2 {
        let ran = h.call("refund", json!({"payment_id": "test_1", "amount": 5}));
        assert_eq!(ran.status, Status::Success, "{}", ran.content);
    }
    assert_eq!(h.runs.get(), 3);

    let records = h.audited();
    let would = |outcome: AuditOutcome, rule: &str| {
        records.iter().any(|(o, r, d)| {
            *o == outcome
                && r.as_deref() == Some(rule)
                && d.as_deref().is_some_and(|d| d.starts_with("observe mode: would refuse"))
        })
    };
    assert!(would(AuditOutcome::Refused { refusal: RefusalKind::Denied }, "not in allow list"), "{records:?}");
    assert!(would(AuditOutcome::Refused { refusal: RefusalKind::MalformedArguments }, "write_file: ghost = block"));
    assert!(would(
        AuditOutcome::Refused { refusal: RefusalKind::Denied },
        "refund when payment_id starts_with \"test_\""
    ));
    assert!(would(AuditOutcome::Refused { refusal: RefusalKind::ApprovalUnavailable }, "refund"));
    // The second refund exceeds `1/hour`: observed, not enforced.
    assert!(would(AuditOutcome::Refused { refusal: RefusalKind::RateLimited }, "refund"), "{records:?}");
    assert_eq!(records.iter().filter(|(o, ..)| *o == AuditOutcome::Executed).count(), 3);

    // What the tool's author declared is still enforced: no human, no call.
    let refused = h.call("close_account", json!({"id": "a1"}));
    assert_eq!(kind(&refused), Some(RefusalKind::ApprovalUnavailable));
    assert_eq!(h.runs.get(), 3);
}

/// Any JSON value an argument could carry, nested a little.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "[a-z./~]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..3).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(256)))]

    /// A path under `.ssh` never gets through, however it is spelled around the `.ssh` component.
    #[test]
    fn a_matching_path_never_runs(prefix in "(/|~/|)([a-z]{1,6}/){0,3}", suffix in "[a-z_.]{1,10}(/[a-z]{1,5}){0,2}") {
        let h = host(POLICY, None);
        let path = format!("{prefix}.ssh/{suffix}");
        let message = h.call("write_file", json!({"path": path, "content": "k"}));
        prop_assert_eq!(kind(&message), Some(RefusalKind::Denied), "{} ran: {}", path, message.content);
        prop_assert_eq!(h.runs.get(), 0);
    }

    /// Whatever value (or none) the model sends for `path`: the call runs only if it is a string that does
    /// not name a `.ssh` component. Nothing that is not a plain string gets through a deny condition.
    #[test]
    fn only_a_non_matching_string_runs(path in proptest::option::of(any_json())) {
        let h = host(POLICY, None);
        let mut arguments = json!({"content": "x"});
        if let Some(path) = &path {
            arguments["path"] = path.clone();
        }
        let message = h.call("write_file", arguments);
        let harmless = matches!(&path, Some(Value::String(p)) if !p.split('/').any(|c| c == ".ssh"));
        if harmless {
            prop_assert_eq!(message.status, Status::Success, "{:?}: {}", path, message.content);
            prop_assert_eq!(h.runs.get(), 1);
        } else {
            prop_assert_eq!(kind(&message), Some(RefusalKind::Denied), "{:?}: {}", path, message.content);
            prop_assert_eq!(h.runs.get(), 0);
        }
    }

    /// An escalation condition over any amount value: a number above the bound, or anything that is not a
    /// number, is never run without a human.
    #[test]
    fn an_unapproved_large_or_mistyped_amount_never_runs(amount in any_json()) {
        let h = host(POLICY, None);
        let message = h.call("refund", json!({"payment_id": "p", "amount": amount.clone()}));
        let small = amount.as_f64().is_some_and(|a| a <= 10_000.0);
        if small {
            prop_assert_eq!(message.status, Status::Success, "{}: {}", amount, message.content);
        } else {
            prop_assert_ne!(message.status, Status::Success, "{} ran", amount);
            prop_assert_eq!(h.runs.get(), 0);
        }
    }
}

/// Every event's fields, as text.
#[derive(Default, Clone)]
struct Capture {
    events: Arc<std::sync::Mutex<Vec<std::collections::BTreeMap<String, String>>>>,
}

struct Fields(std::collections::BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(Default::default());
        event.record(&mut fields);
        self.events.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn observe_mode_traces_each_would_refuse() {
    let policy = "version = 1\ndefault = \"allow\"\nmode = \"observe\"\ndeny = [\"write_*\"]\n";
    let h = host(policy, None);
    let capture = Capture::default();
    let message = agent_airlock_tests::tracing_capture::with_default(capture.clone(), || {
        h.call("write_file", json!({"path": "/home/me/.ssh/id", "content": "x"}))
    });
    assert_eq!(message.status, Status::Success);
    let events = capture.events.lock().unwrap();
    let would = events
        .iter()
        .find(|fields| fields.get("outcome").map(String::as_str) == Some("would_refuse"))
        .expect("a would-refuse event");
    assert_eq!(would.get("rule").map(String::as_str), Some("write_*"));
    assert_eq!(would.get("kind").map(String::as_str), Some("Denied"));
    assert!(would["message"].starts_with("observe mode"), "{would:?}");
}
