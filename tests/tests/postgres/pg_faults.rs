//! Faults of the PostgreSQL store against a real server (issue 12 §2, §3), each on its own throwaway
//! server so that restarting or killing it disturbs no other test:
//!
//! - the server restarted mid-run: clear refusals while it is gone, automatic reconnection after;
//! - a connection lost during `COMMIT` (cut by a proxy at exactly that statement, after or before the
//!   server got it): the outcome is unknown to the host, so the effect is left ambiguous, never retried;
//! - a statement timeout, at admission and at settlement;
//! - eight OS processes, each with its own pool, racing one grant and one effect key: exactly one runs;
//! - a process SIGKILLed between admit and settle: the effect is ambiguous after its lease, never rerun;
//! - the server killed and restarted during 1,000 concurrent dispatches: every call ran at most once, and
//!   either ran and is recorded or was refused with a clear reason; the audit chain verifies.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome, verify};
use agent_airlock::effect::{EffectStatus, EffectStore};
use agent_airlock::keys::AuditKey;
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger};
use agent_airlock::store::PostgresOptions;
use agent_airlock::{
    CallContext, Clock as _, Dispatcher, ManualClock, Outcome, RefusalKind, State, Status, ToolCall, ToolError,
    ToolMessage, airlock_tool, approval::InterruptApprovals, tool,
};
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use agent_airlock_tests::payments::{ExecutionLog, pay_call, pay_invoice};
use agent_airlock_tests::pg_proxy::{CommitCutter, Cut};
use agent_airlock_tests::pg_server::PgServer;
use serde_json::{Value, json};

/// The dispatcher's default effect lease, and a moment after it lapsed.
const LEASE: Duration = agent_airlock::effect::DEFAULT_EFFECT_LEASE;

/// Charge an order, once per order (no approval needed).
#[airlock_tool(effect = "charge:{order}")]
fn charge_order(
    /// The order.
    order: String,
    #[inject] log: State<ExecutionLog>,
    #[inject] hook: State<RunHook>,
) -> Result<String, ToolError> {
    log.record(&format!("charge {order}"))?;
    hook.run();
    Ok(format!("charged {order}"))
}

/// What a tool does after recording its run (before the dispatcher settles it).
#[derive(Default)]
struct RunHook(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl RunHook {
    fn run(&self) {
        let hook = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(hook) = hook {
            hook();
        }
    }
}

/// One host: a ledger and the audit log on the server (directly or through a proxy), approvals, a
/// dispatcher, and a file counting the tools' runs.
struct Host {
    _dir: tempfile::TempDir,
    executions: PathBuf,
    ledger: Arc<PostgresLedger>,
    clock: Arc<ManualClock>,
    approvals: InterruptApprovals,
    audit: Arc<AuditLog>,
    dispatcher: Arc<Dispatcher>,
    hook: Arc<RunHook>,
}

impl Host {
    fn connect(url: &str, options: &PostgresOptions) -> Host {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ledger = Arc::new(PostgresLedger::connect_with(url, options).expect("the ledger opens"));
        let clock = Arc::new(ManualClock::new(START));
        let approvals = InterruptApprovals::new(key_ring(), Arc::clone(&ledger) as Arc<dyn ApprovalLedger>, GRANT_TTL)
            .with_clock(Arc::clone(&clock));
        let config = AuditConfig { key: Some(AuditKey::new("audit", &[7; 32]).expect("a key")), ..Default::default() };
        let audit = Arc::new(AuditLog::with_postgres(&ledger, config));
        let dispatcher = Dispatcher::builder()
            .tool(tool!(pay_invoice))
            .tool(tool!(charge_order))
            .interrupt_approvals(approvals.clone())
            .audit(Arc::clone(&audit))
            .clock(Arc::clone(&clock))
            .build()
            .expect("a valid dispatcher");
        Host {
            executions: dir.path().join("executions"),
            _dir: dir,
            ledger,
            clock,
            approvals,
            audit,
            dispatcher: Arc::new(dispatcher),
            hook: Arc::default(),
        }
    }

    fn context(&self, resume: Option<Value>) -> CallContext {
        let log = ExecutionLog { path: self.executions.clone(), hang_after_start: false };
        let context = CallContext::new().with_thread("t1").with_state(log).with_state_arc(Arc::clone(&self.hook));
        match resume {
            Some(resume) => context.with_resume(resume),
            None => context,
        }
    }

    async fn dispatch(&self, call: ToolCall, resume: Option<Value>) -> ToolMessage {
        self.dispatcher.dispatch(call, &self.context(resume)).await.expect_message()
    }

    /// Interrupts `call` and approves it: the resume value.
    async fn approved(&self, call: &ToolCall) -> Value {
        let interrupt = match self.dispatcher.dispatch(call.clone(), &self.context(None)).await {
            Outcome::Interrupt { request, .. } => request.into_value(),
            other => panic!("expected an interrupt, got {other:?}"),
        };
        self.approvals.approve(&interrupt, "alice").await.expect("approved").into_value()
    }

    /// The tools' runs so far, one line each.
    fn runs(&self) -> Vec<String> {
        ExecutionLog { path: self.executions.clone(), hang_after_start: false }.lines()
    }

    fn effect_status(&self, key: &str) -> Option<EffectStatus> {
        let record = self.ledger.effects().get(key).expect("the effect records read");
        record.map(|record| record.status_at(self.clock.now()))
    }
}

fn charge(order: &str) -> ToolCall {
    ToolCall::new(format!("c-{order}"), "charge_order", json!({ "order": order }))
}

fn kind(message: &ToolMessage) -> Option<RefusalKind> {
    message.refusal.as_ref().map(|refusal| refusal.kind)
}

fn database_of(url: &str) -> String {
    url.rsplit("dbname=").next().and_then(|rest| rest.split_whitespace().next()).expect("a dbname").to_owned()
}

/// Options that give up quickly on an unreachable server.
fn quick() -> PostgresOptions {
    PostgresOptions { connect_timeout: Duration::from_secs(3), ..PostgresOptions::default() }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_restarted_mid_run_refuses_clearly_while_down_and_reconnects_after() {
    let server = PgServer::start_crash_safe();
    let url = server.fresh_database();
    let host = Host::connect(&url, &quick());
    agent_airlock_tests::block_on(async {
        assert_eq!(host.dispatch(charge("o-1"), None).await.status, Status::Success);

        server.kill();
        let started = Instant::now();
        let down = host.dispatch(charge("o-2"), None).await;
        assert_eq!(kind(&down), Some(RefusalKind::Unavailable), "{}", down.content);
        assert!(down.content.contains("cannot run right now"), "{}", down.content);
        assert!(started.elapsed() < Duration::from_secs(10), "refused in {:?}", started.elapsed());
        let call = pay_call("p-1", "inv-1");
        let first_pass = host.dispatcher.dispatch(call.clone(), &host.context(None)).await;
        let Outcome::Message(first_pass) = first_pass else {
            panic!("no interrupt without the ledger: {first_pass:?}")
        };
        assert_eq!(kind(&first_pass), Some(RefusalKind::ApprovalUnavailable), "{}", first_pass.content);
        assert!(first_pass.content.contains("could not be recorded"), "{}", first_pass.content);

        server.start_again();
        // The pool drops its dead connections and opens new ones: no restart of the host.
        let after = host.dispatch(charge("o-3"), None).await;
        assert_eq!(after.status, Status::Success, "{}", after.content);
        let retried = host.dispatch(charge("o-2"), None).await;
        assert_eq!(retried.status, Status::Success, "nothing was reserved while down: {}", retried.content);
        let resume = host.approved(&call).await;
        assert_eq!(host.dispatch(call, Some(resume)).await.status, Status::Success);
    });
    assert_eq!(
        host.runs(),
        ["charge o-1", "charge o-3", "charge o-2", &format!("pay inv-1 pid={}", std::process::id())]
    );
    for order in ["o-1", "o-2", "o-3"] {
        assert_eq!(host.effect_status(&format!("charge:{order}")), Some(EffectStatus::Committed));
    }
}

/// The admission's `COMMIT` reaches the server (the grant is spent, the key reserved) but the host never
/// hears back: the call is refused, the tool does not run, and the admission is not run again; the key is
/// in flight, then ambiguous once its lease lapses, for every later call.
#[test]
fn a_connection_lost_during_an_admissions_commit_leaves_the_effect_ambiguous_and_never_retries() {
    let server = PgServer::start_crash_safe();
    let database = database_of(&server.fresh_database());
    let proxy = CommitCutter::start(&server.socket_path());
    let host = Host::connect(&proxy.url(&database), &quick());
    agent_airlock_tests::block_on(async {
        let call = pay_call("p-1", "inv-1");
        let resume = host.approved(&call).await;

        let commits = proxy.commits();
        proxy.arm(0, Cut::AfterCommit, 1);
        let lost = host.dispatch(call.clone(), Some(resume.clone())).await;
        assert_eq!(proxy.cuts(), 1, "the admission's commit was cut");
        assert_eq!(proxy.commits() - commits, 2, "the admission, not sent again, and the refusal's record");
        assert_eq!(lost.status, Status::Error, "{}", lost.content);
        assert_eq!(kind(&lost), Some(RefusalKind::Unavailable), "{}", lost.content);
        assert!(lost.content.contains("cannot run right now"), "{}", lost.content);
        assert!(host.runs().is_empty(), "the tool did not run");

        // The server did commit: the key is held by a call that never ran.
        let effects = server.psql(&database, "SELECT count(*) FROM airlock_effects WHERE effect_key = 'pay:inv-1'");
        assert_eq!(effects.trim(), "1");
        assert_eq!(host.effect_status("pay:inv-1"), Some(EffectStatus::Reserved));
        let replay = host.dispatch(call.clone(), Some(resume)).await;
        assert_eq!(replay.status, Status::Error, "{}", replay.content);

        host.clock.advance(LEASE + Duration::from_secs(1));
        assert_eq!(host.effect_status("pay:inv-1"), Some(EffectStatus::Ambiguous));
        let again = pay_call("p-2", "inv-1");
        let first_pass = host.dispatch(again, None).await;
        assert_eq!(kind(&first_pass), Some(RefusalKind::EffectUnresolved), "{}", first_pass.content);
    });
    assert!(host.runs().is_empty(), "{:?}", host.runs());
    // The lost commit landed: its "approved" record is in the chain, once, before the refusal's.
    let outcomes: Vec<AuditOutcome> =
        host.audit.records(1, usize::MAX).expect("the log reads").into_iter().map(|record| record.outcome).collect();
    assert_eq!(outcomes.iter().filter(|outcome| **outcome == AuditOutcome::Approved).count(), 1, "{outcomes:?}");
    assert!(!outcomes.contains(&AuditOutcome::Executed), "{outcomes:?}");
    verify(&host.audit, None).expect("the audit chain verifies");
}

/// The settlement's `COMMIT` (the effect committed and the "executed" record, one transaction) is cut.
/// The dispatcher writes it again, the record only if the settlement had not landed, as long as the
/// store keeps failing for up to 10 s, then the settlement alone; the tool is never run again:
///
/// - cut before the server got it: the second write lands, the record is written once;
/// - cut after the server committed it: the second write finds the effect settled and appends nothing;
/// - the second write cut too, three times: it is tried again until it lands;
/// - every write cut: the key stays reserved and is ambiguous after its lease, so an operator decides.
#[test]
fn a_connection_lost_during_a_settlements_commit_never_reruns_or_records_twice() {
    let server = PgServer::start_crash_safe();
    let database = database_of(&server.fresh_database());
    let proxy = CommitCutter::start(&server.socket_path());
    let host = Host::connect(&proxy.url(&database), &quick());
    let executed = |order: &str| {
        let records = host.audit.records(1, usize::MAX).expect("the log reads");
        let id = format!("c-{order}");
        records.iter().filter(|r| r.outcome == AuditOutcome::Executed && r.tool_call_id == id).count()
    };
    // Dispatches `charge(order)` with the settlement's commits cut as `cut` says `times` times: how many
    // commits and cuts the proxy saw.
    let cut_settlement = |order: &str, cut: Cut, times: usize| {
        let (commits, cuts) = (proxy.commits(), proxy.cuts());
        // The admission (the reservation) commits.
        proxy.arm(1, cut, times);
        let ran = agent_airlock_tests::block_on(host.dispatch(charge(order), None));
        assert_eq!(ran.status, Status::Success, "the tool ran: {}", ran.content);
        proxy.arm(0, cut, 0);
        (proxy.commits() - commits, proxy.cuts() - cuts)
    };

    assert_eq!(cut_settlement("o-1", Cut::BeforeCommit, 1), (3, 1), "admission, settlement, its second write");
    assert_eq!(host.effect_status("charge:o-1"), Some(EffectStatus::Committed));
    assert_eq!(executed("o-1"), 1);

    assert_eq!(cut_settlement("o-2", Cut::AfterCommit, 1), (3, 1));
    assert_eq!(host.effect_status("charge:o-2"), Some(EffectStatus::Committed));
    assert_eq!(executed("o-2"), 1, "the record is not appended twice");

    assert_eq!(cut_settlement("o-3", Cut::BeforeCommit, 4), (6, 4));
    assert_eq!(host.effect_status("charge:o-3"), Some(EffectStatus::Committed));
    assert_eq!(executed("o-3"), 1);

    let started = Instant::now();
    let (_, cuts) = cut_settlement("o-4", Cut::BeforeCommit, usize::MAX);
    assert!(cuts > 3, "the second write was tried again {cuts} times");
    assert!(started.elapsed() < Duration::from_secs(20), "gave up after {:?}", started.elapsed());
    assert_eq!(host.effect_status("charge:o-4"), Some(EffectStatus::Reserved), "the settlement was lost");
    assert_eq!(executed("o-4"), 0);
    agent_airlock_tests::block_on(async {
        let repeat = host.dispatch(charge("o-4"), None).await;
        assert_eq!(kind(&repeat), Some(RefusalKind::EffectInFlight), "{}", repeat.content);
        host.clock.advance(LEASE + Duration::from_secs(1));
        let later = host.dispatch(charge("o-4"), None).await;
        assert_eq!(kind(&later), Some(RefusalKind::EffectUnresolved), "{}", later.content);
    });
    assert_eq!(host.runs(), ["charge o-1", "charge o-2", "charge o-3", "charge o-4"]);
    verify(&host.audit, None).expect("the audit chain verifies");
}

/// `statement_timeout` cancels a statement that waits on a lock: at admission the call is refused and
/// nothing is reserved (it runs once the lock is gone); at settlement the tool has run, so the
/// settlement is written again until the lock is gone, with its record, once; the tool never runs again.
#[test]
fn a_statement_timeout_refuses_the_admission_and_delays_a_settlement() {
    let server = Arc::new(PgServer::start_crash_safe());
    let url = server.fresh_database();
    let database = database_of(&url);
    let host = Host::connect(&format!("{url} options='-c statement_timeout=300'"), &quick());
    let locked = {
        let server = Arc::clone(&server);
        let database = database.clone();
        move || {
            let count = server.psql(
                &database,
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                 WHERE c.relname = 'airlock_effects' AND l.mode = 'AccessExclusiveLock' AND l.granted",
            );
            count.trim() == "1"
        }
    };
    let lock_table = {
        let server = Arc::clone(&server);
        let database = database.clone();
        let locked = locked.clone();
        move |seconds: u32| -> Child {
            let holder = server.psql_in_background(
                &database,
                &format!(
                    "BEGIN; LOCK TABLE airlock_effects IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({seconds}); COMMIT"
                ),
            );
            wait_until("the table is locked", &locked);
            holder
        }
    };
    agent_airlock_tests::block_on(async {
        let mut holder = lock_table(3);
        let started = Instant::now();
        let timed_out = host.dispatch(charge("o-1"), None).await;
        assert_eq!(kind(&timed_out), Some(RefusalKind::Unavailable), "{}", timed_out.content);
        assert!(started.elapsed() < Duration::from_secs(3), "refused in {:?}", started.elapsed());
        assert!(host.runs().is_empty());
        holder.wait().expect("the lock holder ends");
        assert_eq!(host.effect_status("charge:o-1"), None, "nothing was reserved");
        assert_eq!(host.dispatch(charge("o-1"), None).await.status, Status::Success);

        // The tool locks the table for 2 s as it finishes: its settlement times out, then lands.
        let holder: Arc<Mutex<Option<Child>>> = Arc::default();
        let held = Arc::clone(&holder);
        *host.hook.0.lock().unwrap() = Some(Box::new(move || *held.lock().unwrap() = Some(lock_table(2))));
        let ran = host.dispatch(charge("o-2"), None).await;
        assert_eq!(ran.status, Status::Success, "the tool ran: {}", ran.content);
        let mut holder = holder.lock().unwrap().take().expect("the tool locked the table");
        assert!(holder.try_wait().expect("the lock holder is there").is_some(), "settled only once the lock was gone");
        assert_eq!(host.effect_status("charge:o-2"), Some(EffectStatus::Committed));
        let repeat = host.dispatch(charge("o-2"), None).await;
        assert_eq!(kind(&repeat), Some(RefusalKind::Duplicate), "{}", repeat.content);
    });
    assert_eq!(host.runs(), ["charge o-1", "charge o-2"]);
    let records = host.audit.records(1, usize::MAX).expect("the log reads");
    let executed = records.iter().filter(|r| r.outcome == AuditOutcome::Executed && r.tool_call_id == "c-o-2");
    assert_eq!(executed.count(), 1);
}

fn worker(url: &str, call_id: &str, invoice: &str, resume: &Value, start: Duration, executions: &PathBuf) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worker"));
    command
        .arg("pg_dispatch_worker")
        .args([url, call_id, invoice, &resume.to_string(), &start.as_millis().to_string()])
        .arg(executions)
        .stdout(Stdio::piped());
    command
}

fn next_line(output: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    output.read_line(&mut line).expect("the worker's output reads");
    line.trim_end().to_owned()
}

/// A wall-clock instant `after` from now, for racers to start at together.
fn wall_in(after: Duration) -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after the epoch") + after
}

/// Eight processes race to resume one approval; then eight processes race eight approvals of calls with
/// one effect key. Each time exactly one tool runs, and the others are refused.
#[test]
fn eight_processes_race_one_grant_and_one_effect_key_and_exactly_one_runs() {
    let server = PgServer::start_crash_safe();
    let url = server.fresh_database();
    let host = Host::connect(&url, &quick());
    let race = |calls: Vec<(String, Value)>, invoice: &str| -> Vec<String> {
        let start = wall_in(Duration::from_secs(3));
        let mut children: Vec<Child> = calls
            .iter()
            .map(|(call_id, resume)| {
                worker(&url, call_id, invoice, resume, start, &host.executions).spawn().expect("the worker starts")
            })
            .collect();
        let results: Vec<String> = children
            .iter_mut()
            .map(|child| {
                let mut output = BufReader::new(child.stdout.take().expect("piped"));
                assert_eq!(next_line(&mut output), "ready");
                next_line(&mut output)
            })
            .collect();
        for child in &mut children {
            assert!(child.wait().expect("the worker ends").success());
        }
        results
    };

    let call = pay_call("p-1", "inv-1");
    let resume = agent_airlock_tests::block_on(host.approved(&call));
    let results = race(vec![("p-1".to_owned(), resume); 8], "inv-1");
    assert_eq!(results.iter().filter(|r| *r == "executed").count(), 1, "{results:#?}");
    assert!(
        results.iter().filter(|r| *r != "executed").all(|r| r.starts_with("refused Some(ApprovalInvalid)")
            || r.starts_with("refused Some(EffectInFlight)")
            || r.starts_with("refused Some(Duplicate)")),
        "{results:#?}"
    );

    let calls: Vec<(String, Value)> = (0..8)
        .map(|n| {
            let call_id = format!("q-{n}");
            let resume = agent_airlock_tests::block_on(host.approved(&pay_call(&call_id, "inv-2")));
            (call_id, resume)
        })
        .collect();
    let results = race(calls, "inv-2");
    assert_eq!(results.iter().filter(|r| *r == "executed").count(), 1, "{results:#?}");
    assert!(
        results
            .iter()
            .filter(|r| *r != "executed")
            .all(|r| r.starts_with("refused Some(EffectInFlight)") || r.starts_with("refused Some(Duplicate)")),
        "{results:#?}"
    );
    let runs = host.runs();
    assert_eq!(runs.iter().filter(|run| run.starts_with("pay inv-1 ")).count(), 1, "{runs:?}");
    assert_eq!(runs.iter().filter(|run| run.starts_with("pay inv-2 ")).count(), 1, "{runs:?}");
    assert_eq!(host.effect_status("pay:inv-1"), Some(EffectStatus::Committed));
    assert_eq!(host.effect_status("pay:inv-2"), Some(EffectStatus::Committed));
}

/// A host killed (SIGKILL) while its tool runs, after the admission and before the settlement: the key
/// stays in flight for its lease, then is ambiguous; no host runs the call again.
#[test]
fn a_process_killed_between_admit_and_settle_leaves_the_effect_ambiguous_after_its_lease() {
    let server = PgServer::start_crash_safe();
    let url = server.fresh_database();
    let host = Host::connect(&url, &quick());
    let call = pay_call("p-1", "inv-1");
    let resume = agent_airlock_tests::block_on(host.approved(&call));
    let mut child = worker(&url, "p-1", "inv-1", &resume, wall_in(Duration::ZERO), &host.executions)
        .arg("hang")
        .spawn()
        .expect("the worker starts");
    wait_until("the tool runs", || !host.runs().is_empty());
    child.kill().expect("SIGKILL");
    child.wait().expect("the worker is reaped");

    host.clock.set(START + Duration::from_secs(3));
    assert_eq!(host.effect_status("pay:inv-1"), Some(EffectStatus::Reserved));
    agent_airlock_tests::block_on(async {
        let replay = host.dispatch(call.clone(), Some(resume.clone())).await;
        assert_eq!(replay.status, Status::Error, "{}", replay.content);
        host.clock.set(START + LEASE + Duration::from_secs(3));
        assert_eq!(host.effect_status("pay:inv-1"), Some(EffectStatus::Ambiguous));
        let again = host.dispatch(pay_call("p-2", "inv-1"), None).await;
        assert_eq!(kind(&again), Some(RefusalKind::EffectUnresolved), "{}", again.content);
        let replay = host.dispatch(call, Some(resume)).await;
        assert_eq!(replay.status, Status::Error, "{}", replay.content);
    });
    assert_eq!(host.runs().len(), 1, "{:?}", host.runs());
}

/// 1,000 dispatches at once; the server is killed while they run and started again a moment later.
/// Every call ran at most once. A call that succeeded ran once and its effect is committed, or still
/// reserved if its settlement was lost (ambiguous after its lease, never silently rerun); a refused call
/// was refused as unavailable and did not run. Running every refused call again after the restart runs
/// each that left no reservation exactly once. The audit chain (on the same server) verifies, and holds
/// at most one "executed" record per call, never one for a call that did not run.
#[test]
fn the_server_killed_and_restarted_during_a_thousand_concurrent_dispatches() {
    const CALLS: usize = 1_000;
    let server = Arc::new(PgServer::start_crash_safe());
    let url = server.fresh_database();
    // Calls queue for the pool's connections (and take turns on the chain's head): wait long enough.
    let options =
        PostgresOptions { pool_size: 32, connect_timeout: Duration::from_secs(60), ..PostgresOptions::default() };
    let host = Arc::new(Host::connect(&url, &options));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let killer = {
        let (server, host) = (Arc::clone(&server), Arc::clone(&host));
        std::thread::spawn(move || {
            wait_until("a tenth of the calls ran", || host.runs().len() >= CALLS / 10);
            server.kill();
            std::thread::sleep(Duration::from_millis(500));
            server.start_again();
        })
    };
    let outcomes: Vec<ToolMessage> = runtime.block_on(async {
        let dispatches: Vec<_> = (0..CALLS)
            .map(|n| {
                let host = Arc::clone(&host);
                tokio::spawn(async move { host.dispatch(charge(&format!("o-{n}")), None).await })
            })
            .collect();
        let mut outcomes = Vec::new();
        for dispatch in dispatches {
            outcomes.push(dispatch.await.expect("the dispatch task ran"));
        }
        outcomes
    });
    killer.join().expect("the server was restarted");

    let runs = host.runs();
    let ran = |n: usize| runs.iter().filter(|run| **run == format!("charge o-{n}")).count();
    let mut refused = Vec::new();
    for (n, message) in outcomes.iter().enumerate() {
        let status = host.effect_status(&format!("charge:o-{n}"));
        match message.status {
            Status::Success => {
                assert_eq!(ran(n), 1, "o-{n}");
                assert!(matches!(status, Some(EffectStatus::Committed | EffectStatus::Reserved)), "o-{n}: {status:?}");
            }
            Status::Error => {
                assert_eq!(kind(message), Some(RefusalKind::Unavailable), "o-{n}: {}", message.content);
                assert!(message.content.contains("cannot run right now"), "{}", message.content);
                assert_eq!(ran(n), 0, "o-{n}");
                assert!(matches!(status, None | Some(EffectStatus::Reserved)), "o-{n}: {status:?}");
                refused.push((n, status));
            }
        }
    }
    let succeeded = CALLS - refused.len();
    assert!(succeeded >= CALLS / 10, "only {succeeded} calls ran");
    assert!(!refused.is_empty(), "the server was killed while calls ran, yet none was refused");

    runtime.block_on(async {
        for (n, status) in &refused {
            let again = host.dispatch(charge(&format!("o-{n}")), None).await;
            match status {
                None => assert_eq!(again.status, Status::Success, "o-{n}: {}", again.content),
                Some(_) => assert_eq!(kind(&again), Some(RefusalKind::EffectInFlight), "o-{n}: {}", again.content),
            }
        }
    });
    let runs = host.runs();
    for n in 0..CALLS {
        let count = runs.iter().filter(|run| **run == format!("charge o-{n}")).count();
        assert!(count <= 1, "o-{n} ran {count} times");
    }
    // One chain, written by every dispatch in the transactions of its admission and settlement.
    let report = verify(&host.audit, None).expect("the audit chain verifies");
    let records = host.audit.records(1, usize::MAX).expect("the log reads");
    assert_eq!(report.records, records.len() as u64);
    let mut recorded = 0;
    for n in 0..CALLS {
        let id = format!("c-o-{n}");
        let executed = records.iter().filter(|r| r.outcome == AuditOutcome::Executed && r.tool_call_id == id).count();
        let ran = runs.iter().filter(|run| **run == format!("charge o-{n}")).count();
        assert!(executed <= ran, "o-{n}: {executed} records of {ran} runs");
        recorded += executed;
    }
    // A run without its record: the server went away before its settlement was written (the effect is
    // then left reserved, ambiguous after its lease), or its records could not be written with it.
    eprintln!(
        "{succeeded} ran, {} refused while the server was down; {recorded} of {} runs recorded",
        refused.len(),
        runs.len()
    );
    // A settlement whose store went away is written again once it is back: only the few whose first
    // write was cut after the server committed it, and whose record therefore went with it, or whose
    // retries all failed, may lack one (their effects stay reserved, ambiguous after the lease).
    assert!(runs.len() - recorded <= 64, "{recorded} of {} runs recorded", runs.len());
}
