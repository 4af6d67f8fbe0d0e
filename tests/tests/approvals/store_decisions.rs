//! One transaction per decision (issue 12 §1), on a real redb file shared by the ledger, the effect
//! records and the audit log:
//!
//! - a dispatch with everything on (escalated, effectful, audited) writes durably twice: admit (the
//!   grant spent, the effect reserved, "approved" recorded) and settle (the effect committed, "executed"
//!   recorded);
//! - concurrent dispatches on a current-thread runtime share commits (the dispatch future awaits the
//!   database's writer, it never blocks the one thread);
//! - the admission is atomic: if its audit record cannot be written, nothing is spent or reserved.
//!
//! The same dispatch runs on the memory ledger and on PostgreSQL (the audit log in the same database,
//! written in the same transactions): the same records, in the same order, the grant spent once and the
//! effect committed; an admission whose record cannot be written spends nothing there either.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome, HEAD_KEY, HEAD_TABLE, verify};
use agent_airlock::effect::{EffectStatus, EffectStore};
use agent_airlock::keys::AuditKey;
use agent_airlock::ledger::{ApprovalLedger, GrantState, MemoryLedger, PostgresLedger, RedbLedger};
use agent_airlock::store::{RedbOpenOptions, open_database};
use agent_airlock::{
    CallContext, Dispatcher, ManualClock, Outcome, RefusalKind, State, Status, ToolCall, airlock_tool,
    approval::InterruptApprovals, tool,
};
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use redb::Database;
use serde_json::{Value, json};

/// What the payment provider was asked to do.
#[derive(Default)]
struct Provider {
    paid: AtomicUsize,
}

/// Pay an invoice (escalated, once per invoice).
#[airlock_tool(escalate = "moves money", effect = "pay:{invoice}")]
async fn pay(
    /// The invoice.
    invoice: String,
    #[inject] provider: State<Provider>,
) -> String {
    provider.paid.fetch_add(1, Ordering::SeqCst);
    format!("paid {invoice}")
}

enum Backend {
    Memory,
    Redb,
    Postgres,
}

/// Charge an order (once per order, no approval needed).
#[airlock_tool(effect = "charge:{order}")]
async fn charge(
    /// The order.
    order: String,
    #[inject] provider: State<Provider>,
) -> String {
    provider.paid.fetch_add(1, Ordering::SeqCst);
    format!("charged {order}")
}

struct Host {
    _dir: tempfile::TempDir,
    database: Option<Arc<Database>>,
    redb: Option<Arc<RedbLedger>>,
    /// On PostgreSQL: the database's name on the shared test server.
    postgres: Option<String>,
    ledger: Arc<dyn ApprovalLedger>,
    audit: Arc<AuditLog>,
    approvals: InterruptApprovals,
    dispatcher: Arc<Dispatcher>,
    provider: Arc<Provider>,
}

impl Host {
    /// On redb: ledger, effect records and audit log in one file, as DESIGN §8 suggests.
    fn new() -> Host {
        Host::on(&Backend::Redb)
    }

    fn on(backend: &Backend) -> Host {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = AuditConfig { key: Some(AuditKey::new("audit", &[7; 32]).expect("a key")), ..Default::default() };
        let mut postgres = None;
        let (database, redb, ledger, audit): (_, _, Arc<dyn ApprovalLedger>, _) = match backend {
            Backend::Redb => {
                let database = Arc::new(
                    open_database(dir.path().join("airlock.redb"), &RedbOpenOptions::default())
                        .expect("the file opens"),
                );
                let ledger = Arc::new(RedbLedger::from_database(Arc::clone(&database)).expect("the ledger opens"));
                let audit = AuditLog::with_database(Arc::clone(&database), config).expect("the audit log opens");
                (Some(database), Some(Arc::clone(&ledger)), ledger, audit)
            }
            Backend::Memory => (None, None, Arc::new(MemoryLedger::new()), AuditLog::in_memory(config)),
            Backend::Postgres => {
                let url = agent_airlock_tests::pg_server::shared().fresh_database();
                let ledger = Arc::new(PostgresLedger::connect(&url).expect("a fresh PostgreSQL ledger"));
                let audit = AuditLog::with_postgres(&ledger, config);
                postgres = url.rsplit("dbname=").next().map(str::to_owned);
                (None, None, ledger, audit)
            }
        };
        let audit = Arc::new(audit);
        let clock = Arc::new(ManualClock::new(START));
        let approvals =
            InterruptApprovals::new(key_ring(), Arc::clone(&ledger), GRANT_TTL).with_clock(Arc::clone(&clock));
        let dispatcher = Dispatcher::builder()
            .tool(tool!(pay))
            .tool(tool!(charge))
            .interrupt_approvals(approvals.clone())
            .audit(Arc::clone(&audit))
            .clock(clock)
            .build()
            .expect("a valid dispatcher");
        Host {
            _dir: dir,
            database,
            redb,
            postgres,
            ledger,
            audit,
            approvals,
            dispatcher: Arc::new(dispatcher),
            provider: Arc::new(Provider::default()),
        }
    }

    fn context(&self, resume: Option<Value>) -> CallContext {
        let context = CallContext::new().with_thread("t1").with_state_arc(Arc::clone(&self.provider));
        match resume {
            Some(resume) => context.with_resume(resume),
            None => context,
        }
    }

    /// Commits of the redb file's writer so far.
    fn commits(&self) -> u64 {
        self.redb.as_ref().expect("a redb host").writer_stats().commits
    }

    /// Interrupts `call` and approves it: the resume value and the grant id.
    async fn approved(&self, call: &ToolCall) -> (Value, String) {
        let interrupt = match self.dispatcher.dispatch(call.clone(), &self.context(None)).await {
            Outcome::Interrupt { request, .. } => request.into_value(),
            other => panic!("expected an interrupt, got {other:?}"),
        };
        let resume = self.approvals.approve(&interrupt, "alice").await.expect("approved").into_value();
        let grant_id = resume["airlock_grant"]["grant_id"].as_str().expect("a grant id").to_owned();
        (resume, grant_id)
    }

    /// Leaves the log no sequence number: the next record cannot be chained, so its write fails.
    fn fill_the_audit_log(&self) {
        let stored = self.audit.head().expect("the head reads");
        let full = json!({
            "format": "agent-airlock-audit-anchor/v1",
            "seq": u64::MAX,
            "hash": stored.hash,
            "key_id": stored.key_id,
            "mac": stored.mac,
        });
        if let Some(database) = &self.postgres {
            let sql = format!(
                "UPDATE airlock_audit_head SET head = convert_to('{}', 'UTF8') WHERE id = 1 RETURNING id",
                full.to_string().replace('\'', "''")
            );
            let updated = agent_airlock_tests::pg_server::shared().psql(database, &sql);
            assert!(updated.starts_with("1\n"), "the head is replaced: {updated}");
            return;
        }
        let txn = self.database.as_ref().expect("a redb host").begin_write().expect("a write transaction");
        txn.open_table(HEAD_TABLE)
            .expect("the head table")
            .insert(HEAD_KEY, full.to_string().as_bytes())
            .expect("the head is replaced");
        txn.commit().expect("committed");
    }

    fn grant_state(&self, grant_id: &str) -> GrantState {
        self.ledger.find_grant(grant_id).expect("the ledger reads").expect("the grant exists").state
    }

    fn outcomes(&self) -> Vec<AuditOutcome> {
        self.audit.records(1, usize::MAX).expect("the log reads").into_iter().map(|record| record.outcome).collect()
    }
}

fn pay_call(n: usize) -> ToolCall {
    ToolCall::new(format!("c{n}"), "pay", json!({ "invoice": format!("inv-{n}") }))
}

#[tokio::test(flavor = "current_thread")]
async fn an_everything_on_dispatch_is_two_durable_writes() {
    let host = Host::new();
    let call = pay_call(1);

    let before = host.commits();
    let (resume, grant) = host.approved(&call).await;
    // The first pass: the request recorded, then the interrupt recorded; the approval: the grant.
    assert_eq!(host.commits() - before, 3, "request, interrupted record, grant");

    let before = host.commits();
    let message = host.dispatcher.dispatch(call.clone(), &host.context(Some(resume))).await.expect_message();
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(
        host.commits() - before,
        2,
        "admit (spend + reserve + approved record) and settle (commit + executed record)"
    );

    assert!(matches!(host.grant_state(&grant), GrantState::Spent { .. }));
    let effect = host.ledger.effects().get("pay:inv-1").expect("reads").expect("recorded");
    assert_eq!(effect.status_at(START), EffectStatus::Committed);
    assert_eq!(host.outcomes(), [AuditOutcome::Interrupted, AuditOutcome::Approved, AuditOutcome::Executed]);
    let records = host.audit.records(2, 1).expect("the log reads");
    let detail = records[0].detail.as_deref().unwrap_or_default();
    assert_eq!(detail, format!("grant {grant} by alice"), "the approved record names the grant it spent");
    assert_eq!(verify(&host.audit, None).expect("the chain verifies").records, 3);
    assert_eq!(host.provider.paid.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_dispatches_on_one_thread_share_commits_and_each_runs_once() {
    const CALLS: usize = 32;
    let host = Arc::new(Host::new());
    let mut approved = Vec::new();
    for n in 0..CALLS {
        let call = pay_call(n);
        let (resume, grant) = host.approved(&call).await;
        approved.push((call, resume, grant));
    }

    let before = host.commits();
    let mut dispatches = tokio::task::JoinSet::new();
    // Each approval resumed twice at once: a replay races its original.
    for (call, resume, _) in approved.iter().chain(approved.iter()) {
        let (host, call, resume) = (Arc::clone(&host), call.clone(), resume.clone());
        dispatches.spawn(async move { host.dispatcher.dispatch(call, &host.context(Some(resume))).await });
    }
    let mut succeeded = 0;
    while let Some(outcome) = dispatches.join_next().await {
        let message = outcome.expect("the dispatch task ran").expect_message();
        match message.status {
            Status::Success => succeeded += 1,
            Status::Error => {
                let refusal = message.refusal.as_ref().unwrap_or_else(|| panic!("not a refusal: {}", message.content));
                assert!(
                    matches!(
                        refusal.kind,
                        RefusalKind::EffectInFlight | RefusalKind::Duplicate | RefusalKind::ApprovalInvalid
                    ),
                    "a replay is refused: {:?} {}",
                    refusal.kind,
                    message.content
                );
            }
        }
    }
    let commits = host.commits() - before;
    assert_eq!(succeeded, CALLS, "each approval ran exactly once");
    assert_eq!(host.provider.paid.load(Ordering::SeqCst), CALLS);
    assert!(
        commits < CALLS as u64,
        "{} concurrent dispatches took {commits} commits: their writes were not grouped",
        2 * CALLS
    );
    for (_, _, grant) in &approved {
        assert!(matches!(host.grant_state(grant), GrantState::Spent { .. }));
    }
    let executed = host.outcomes().into_iter().filter(|outcome| *outcome == AuditOutcome::Executed).count();
    assert_eq!(executed, CALLS);
    verify(&host.audit, None).expect("the chain verifies");
}

#[test]
fn an_admission_whose_audit_record_cannot_be_written_spends_and_reserves_nothing() {
    for backend in [Backend::Redb, Backend::Postgres] {
        let host = Host::on(&backend);
        agent_airlock_tests::block_on(async {
            let call = pay_call(1);
            let (resume, grant) = host.approved(&call).await;

            host.fill_the_audit_log();
            let message = host.dispatcher.dispatch(call.clone(), &host.context(Some(resume))).await.expect_message();
            assert_eq!(message.status, Status::Error, "{}", message.content);
            assert_eq!(host.provider.paid.load(Ordering::SeqCst), 0, "the tool did not run");
            assert_eq!(host.grant_state(&grant), GrantState::Live, "the spend was rolled back with the record");
            assert_eq!(host.ledger.effects().get("pay:inv-1").expect("reads"), None, "nothing was reserved");
        });
    }
}

#[test]
fn the_everything_on_dispatch_writes_the_same_facts_on_memory_and_postgres() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let host = Host::on(&backend);
        agent_airlock_tests::block_on(async {
            let call = pay_call(1);
            let (resume, grant) = host.approved(&call).await;
            let message = host.dispatcher.dispatch(call.clone(), &host.context(Some(resume.clone()))).await;
            assert_eq!(message.expect_message().status, Status::Success);
            let replay = host.dispatcher.dispatch(call, &host.context(Some(resume))).await.expect_message();
            assert_eq!(replay.refusal.map(|refusal| refusal.kind), Some(RefusalKind::Duplicate));

            assert!(matches!(host.grant_state(&grant), GrantState::Spent { .. }));
            let effect = host.ledger.effects().get("pay:inv-1").expect("reads").expect("recorded");
            assert_eq!(effect.status_at(START), EffectStatus::Committed);
            assert_eq!(
                host.outcomes(),
                [AuditOutcome::Interrupted, AuditOutcome::Approved, AuditOutcome::Executed, AuditOutcome::Duplicate]
            );
            let approved = host.audit.records(2, 1).expect("the log reads");
            assert_eq!(approved[0].detail.as_deref(), Some(format!("grant {grant} by alice").as_str()));
            assert_eq!(verify(&host.audit, None).expect("the chain verifies").records, 4);
            assert_eq!(host.provider.paid.load(Ordering::SeqCst), 1);
        });
    }
}

#[test]
fn a_dispatch_dropped_while_its_admission_is_written_leaves_the_effect_ambiguous() {
    for backend in [Backend::Redb, Backend::Postgres] {
        let host = Host::on(&backend);
        let call = pay_call(1);
        agent_airlock_tests::block_on(async {
            let (resume, _) = host.approved(&call).await;
            let context = host.context(Some(resume));
            // Poll the resumed dispatch once: it queues its admission and waits for it. Then drop it.
            let mut dispatch = Box::pin(host.dispatcher.dispatch(call.clone(), &context));
            let waker = std::task::Waker::noop();
            let poll = dispatch.as_mut().poll(&mut std::task::Context::from_waker(waker));
            assert!(poll.is_pending(), "the admission is being written");
        });
        // The admission lands, and the reservation it made is then marked ambiguous (not left in flight
        // for its whole lease), without anyone awaiting it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let record = host.ledger.effects().get("pay:inv-1").expect("reads");
            let status = record.as_ref().map(|record| record.status_at(START));
            if status == Some(EffectStatus::Ambiguous) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the effect stayed {status:?}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(host.provider.paid.load(Ordering::SeqCst), 0, "the tool never ran");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_settlement_whose_audit_record_cannot_be_written_still_settles_the_effect() {
    let host = Host::new();
    host.fill_the_audit_log();
    let call = ToolCall::new("c1", "charge", json!({ "order": "o-1" }));
    let message = host.dispatcher.dispatch(call, &host.context(None)).await.expect_message();
    assert_eq!(message.status, Status::Success, "{}", message.content);
    let effect = host.ledger.effects().get("charge:o-1").expect("reads").expect("recorded");
    assert_eq!(effect.status_at(START), EffectStatus::Committed, "the charge is not left in flight");
}
