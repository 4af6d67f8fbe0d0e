//! Effects run once and every outcome is audited, driven through the real dispatcher with one redb file
//! shared by the approval ledger, the effect records and the audit log (and with the audit log in an
//! append-only file of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome, verify};
use agent_airlock::effect::{EffectStatus, EffectStore, RedbEffectStore, Resolution};
use agent_airlock::ledger::RedbLedger;
use agent_airlock::{
    BuildError, CallContext, Clock, Dispatcher, ManualClock, Outcome, Policy, RefusalKind, State, Status, ToolCall,
    ToolError, ToolMessage, airlock_tool, approval::InterruptApprovals, tool,
};
use agent_airlock_tests::audit_test_key;
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use serde_json::json;

/// How the fake payment provider behaves, and how often it was charged.
#[derive(Default)]
struct Provider {
    charges: AtomicUsize,
    /// 0: succeed, 1: fail before charging, 2: fail after maybe charging, 3: panic, 4: hang.
    mode: AtomicUsize,
}

/// Charge a card.
#[airlock_tool(effect = "charge:{order_id}")]
async fn charge(
    /// The order.
    order_id: String,
    /// Amount in cents.
    amount: u64,
    #[inject] provider: State<Provider>,
) -> Result<String, ToolError> {
    match provider.mode.load(Ordering::SeqCst) {
        1 => return Err(ToolError::not_executed("card declined before charging")),
        3 => panic!("provider client bug"),
        4 => std::future::pending::<()>().await,
        _ => {}
    }
    provider.charges.fetch_add(1, Ordering::SeqCst);
    if provider.mode.load(Ordering::SeqCst) == 2 {
        return Err(ToolError::new("connection reset after the request was sent"));
    }
    Ok(format!("charged {amount} for {order_id}"))
}

/// Refund a charge (escalated).
#[airlock_tool(escalate = "moves money")]
fn refund(
    /// The order.
    order_id: String,
) -> String {
    format!("refunded {order_id}")
}

struct Host {
    _dir: tempfile::TempDir,
    dispatcher: Dispatcher,
    effects: Arc<RedbEffectStore>,
    audit: Arc<AuditLog>,
    provider: Arc<Provider>,
    clock: Arc<ManualClock>,
    approvals: InterruptApprovals,
}

impl Host {
    fn new() -> Self {
        Host::with_audit(false)
    }

    /// `in_file`: the audit log in an append-only file beside the database, not in it.
    fn with_audit(in_file: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database = Arc::new(redb::Database::create(dir.path().join("airlock.redb")).unwrap());
        let clock = Arc::new(ManualClock::new(START));
        let ledger = Arc::new(RedbLedger::from_database(Arc::clone(&database)).unwrap());
        let effects = Arc::new(RedbEffectStore::new(Arc::clone(&database)).unwrap());
        let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
        let audit = match in_file {
            true => AuditLog::open_append_only(dir.path().join("audit.log"), config),
            false => AuditLog::with_database(database, config),
        };
        let audit = Arc::new(audit.unwrap().with_clock(Arc::clone(&clock)));
        let approvals = InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(Arc::clone(&clock));
        let dispatcher = Dispatcher::builder()
            .tool(tool!(charge))
            .tool(tool!(refund))
            .policy(Policy::builder().deny("admin_*").build().unwrap())
            .effects(Arc::clone(&effects))
            .effect_lease(Duration::from_secs(60))
            .audit(Arc::clone(&audit))
            .interrupt_approvals(approvals.clone())
            .clock(Arc::clone(&clock))
            .build()
            .unwrap();
        Host { _dir: dir, dispatcher, effects, audit, provider: Arc::new(Provider::default()), clock, approvals }
    }

    fn context(&self) -> CallContext {
        CallContext::new().with_thread("t1").with_state_arc(Arc::clone(&self.provider))
    }

    fn charge(&self, order: &str) -> ToolMessage {
        let call = ToolCall::new("c1", "charge", json!({"order_id": order, "amount": 1200}));
        block_on(self.dispatcher.dispatch(call, &self.context())).expect_message()
    }

    fn mode(&self, mode: usize) {
        self.provider.mode.store(mode, Ordering::SeqCst);
    }

    fn charges(&self) -> usize {
        self.provider.charges.load(Ordering::SeqCst)
    }

    fn outcomes(&self) -> Vec<String> {
        self.audit.records(1, 1_000).unwrap().iter().map(|r| r.outcome.to_string()).collect()
    }
}

fn kind(message: &ToolMessage) -> Option<RefusalKind> {
    message.refusal.as_ref().map(|r| r.kind)
}

#[test]
fn success_commits_and_a_repeat_is_a_duplicate_that_says_when_it_ran() {
    let host = Host::new();
    assert_eq!(host.charge("o-1").status, Status::Success);
    host.clock.advance(Duration::from_secs(42));
    let again = host.charge("o-1");
    assert_eq!(kind(&again), Some(RefusalKind::Duplicate));
    assert!(again.content.contains("already ran 42 s ago"), "{}", again.content);
    assert_eq!(host.charges(), 1);
    // Another order is another key.
    assert_eq!(host.charge("o-2").status, Status::Success);
    let record = host.effects.get("charge:o-1").unwrap().unwrap();
    assert_eq!(record.status_at(host.clock.now()), EffectStatus::Committed);
}

#[test]
fn not_executed_allows_a_retry_and_other_errors_block_until_resolved() {
    let host = Host::new();
    host.mode(1);
    assert_eq!(host.charge("o-1").status, Status::Error);
    host.mode(0);
    assert_eq!(host.charge("o-1").status, Status::Success, "a failed effect may be retried");

    host.mode(2);
    assert_eq!(host.charge("o-2").status, Status::Error);
    host.mode(0);
    let blocked = host.charge("o-2");
    assert_eq!(kind(&blocked), Some(RefusalKind::EffectUnresolved));
    assert!(blocked.content.contains("operator"), "{}", blocked.content);
    // The operator finds the provider did not charge: resolved as failed, a retry runs.
    host.effects.resolve("charge:o-2", Resolution::Failed, "ops", host.clock.now()).unwrap();
    assert_eq!(host.charge("o-2").status, Status::Success);
    assert_eq!(host.charges(), 3);
}

#[test]
fn a_panic_or_a_cancelled_call_leaves_the_effect_ambiguous() {
    let host = Host::new();
    host.mode(3);
    assert_eq!(host.charge("o-1").status, Status::Error);
    host.mode(0);
    assert_eq!(kind(&host.charge("o-1")), Some(RefusalKind::EffectUnresolved));

    // Poll the dispatch once (the tool hangs inside), then drop it: a cancellation.
    host.mode(4);
    let context = host.context();
    let call = ToolCall::new("c9", "charge", json!({"order_id": "o-3", "amount": 1}));
    {
        let mut future = Box::pin(host.dispatcher.dispatch(call, &context));
        let waker = std::task::Waker::noop();
        let poll = future.as_mut().poll(&mut std::task::Context::from_waker(waker));
        assert!(poll.is_pending());
    }
    host.mode(0);
    assert_eq!(kind(&host.charge("o-3")), Some(RefusalKind::EffectUnresolved));
    assert_eq!(host.charges(), 0);
}

#[test]
fn concurrent_calls_with_one_key_run_once() {
    let host = Arc::new(Host::new());
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (host, barrier) = (Arc::clone(&host), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                host.charge("o-1")
            })
        })
        .collect();
    let messages: Vec<ToolMessage> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(messages.iter().filter(|m| m.status == Status::Success).count(), 1);
    for refused in messages.iter().filter(|m| m.status == Status::Error) {
        assert!(matches!(kind(refused), Some(RefusalKind::Duplicate | RefusalKind::EffectInFlight)), "{refused:?}");
    }
    assert_eq!(host.charges(), 1);
}

#[test]
fn a_tool_with_an_effect_needs_an_effect_store() {
    let err = Dispatcher::builder().tool(tool!(charge)).build().err().unwrap();
    assert_eq!(err, BuildError::NoEffectStore("charge".into()));
}

#[test]
fn every_outcome_is_audited_and_the_log_verifies() {
    every_outcome_is_audited(&Host::new());
}

#[test]
fn every_outcome_is_audited_in_an_append_only_file_and_it_verifies() {
    let host = Host::with_audit(true);
    let path = host._dir.path().join("audit.log");
    every_outcome_is_audited(&host);
    let reader =
        AuditLog::read_append_only(path, AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() });
    assert_eq!(verify(&reader.unwrap(), None).unwrap().records, 9, "the file holds every record");
}

fn every_outcome_is_audited(host: &Host) {
    let context = host.context();
    let dispatch = |call: ToolCall, context: &CallContext| block_on(host.dispatcher.dispatch(call, context));
    host.charge("o-1"); // executed
    host.charge("o-1"); // duplicate
    dispatch(ToolCall::new("c2", "admin_wipe", json!({})), &context); // unknown tool
    dispatch(ToolCall::new("c3", "charge", json!({"order_id": 5})), &context); // invalid arguments
    let interrupt = match dispatch(ToolCall::new("c4", "refund", json!({"order_id": "o-1"})), &context) {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("{other:?}"),
    };
    let resume = block_on(host.approvals.approve(&interrupt, "alice")).unwrap().into_value();
    let resumed = context.clone().with_resume(resume);
    let message = dispatch(ToolCall::new("c4", "refund", json!({"order_id": "o-1"})), &resumed).expect_message();
    assert_eq!(message.status, Status::Success);
    host.mode(2);
    host.charge("o-2"); // failed, outcome unknown
    host.mode(0);
    host.charge("o-2"); // ambiguous
    assert_eq!(
        host.outcomes(),
        [
            "executed",
            "duplicate",
            "refused (unknown_tool)",
            "refused (invalid_arguments)",
            "interrupted",
            "approved",
            "executed",
            "failed",
            "ambiguous",
        ]
    );
    let records = host.audit.records(1, 100).unwrap();
    assert!(records.iter().all(|r| r.thread_id.as_deref() == Some("t1")));
    assert!(records[0].arguments.is_some() && records[0].result.is_some());
    assert_eq!(records[1].rule.as_deref(), Some("effect"));
    // Commitments, not raw values, by default: no argument value is stored.
    assert!(records.iter().all(|r| r.raw_arguments.is_none() && r.raw_result.is_none()));
    let report = verify(&host.audit, Some(&host.audit.export_head().unwrap())).unwrap();
    assert_eq!(report.records, 9);
    assert!(records.iter().any(|r| r.outcome == AuditOutcome::Approved));
}

#[test]
fn a_resumed_task_that_re_runs_an_earlier_call_does_not_repeat_its_effect() {
    // One task, two calls: the charge runs, the refund needs approval. On resume the host re-runs the whole
    // task, so the charge is dispatched again: its effect key makes that a duplicate, not a second charge.
    let host = Host::new();
    let context = host.context();
    let task = |context: &CallContext| {
        let charge = ToolCall::new("c1", "charge", json!({"order_id": "o-1", "amount": 1200}));
        let refund = ToolCall::new("c2", "refund", json!({"order_id": "o-0"}));
        (block_on(host.dispatcher.dispatch(charge, context)), block_on(host.dispatcher.dispatch(refund, context)))
    };
    let (charged, interrupted) = task(&context);
    assert_eq!(charged.expect_message().status, Status::Success);
    let interrupt = match interrupted {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("{other:?}"),
    };
    let resume = block_on(host.approvals.approve(&interrupt, "alice")).unwrap().into_value();
    let (charged_again, refunded) = task(&context.clone().with_resume(resume));
    assert_eq!(kind(&charged_again.expect_message()), Some(RefusalKind::Duplicate));
    assert_eq!(refunded.expect_message().content, "refunded o-0");
    assert_eq!(host.charges(), 1);
}
