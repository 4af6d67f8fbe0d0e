//! Rate limits shared by several dispatchers (issue 12 §2): a policy rule marked shared keeps one bucket
//! for every host, in PostgreSQL (or in memory, for the dispatchers of one process).
//!
//! The same rules run on both stores (`on_every_shared_store!`): two dispatchers share one bucket, per
//! thread too; several shared buckets are taken all or none; a call refused after the rate gate (a
//! duplicate effect) gets its shared token back; an empty shared bucket refuses before a human is asked;
//! observe mode reports shared limits and refuses nothing. On PostgreSQL only: OS processes racing one
//! `10/minute` rule run exactly ten calls; a stopped server refuses with a clear reason; the policy
//! file's `rate_shared = true`; and which dispatchers build with a shared rule.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_airlock::approval::Decision;
use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome};
use agent_airlock::effect::MemoryEffectStore;
use agent_airlock::ledger::{ApprovalLedger as _, PostgresLedger, RedbLedger};
use agent_airlock::policy::PolicyMode;
use agent_airlock::store::PostgresOptions;
use agent_airlock::store::SharedRateBuckets;
use agent_airlock::{
    BuildError, CallContext, Dispatcher, DispatcherBuilder, ManualClock, Policy, RateScope, RefusalKind, State, Status,
    ToolCall, ToolError, ToolMessage, airlock_tool, tool,
};
use agent_airlock_tests::block_on;
use agent_airlock_tests::pg_server::{self, PgServer};
use serde_json::json;

/// Counts how often tools really ran, across every dispatcher of a test.
#[derive(Default)]
struct Runs(AtomicUsize);

impl Runs {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Look something up.
#[airlock_tool]
fn lookup(
    /// What to look up.
    what: String,
    #[inject] runs: State<Runs>,
) -> String {
    runs.bump();
    what
}

/// Charge an order, once per order.
#[airlock_tool(effect = "charge:{order}")]
fn charge(
    /// The order.
    order: String,
    #[inject] runs: State<Runs>,
) -> Result<String, ToolError> {
    runs.bump();
    Ok(format!("charged {order}"))
}

/// Wire money (a human approves each transfer).
#[airlock_tool(escalate = "moves money")]
fn wire(
    /// Cents.
    amount: u64,
    #[inject] runs: State<Runs>,
) -> String {
    runs.bump();
    format!("wired {amount}")
}

/// Where the shared buckets of a test live.
enum Backend {
    /// One value, cloned into every dispatcher.
    Memory(SharedRateBuckets),
    /// A fresh database; every dispatcher opens its own ledger (its own pool) on it.
    Postgres(String),
}

impl Backend {
    fn memory() -> Backend {
        Backend::Memory(SharedRateBuckets::in_memory())
    }

    fn postgres() -> Backend {
        Backend::Postgres(pg_server::shared().fresh_database())
    }

    /// A dispatcher of this deployment: the shared buckets, effect records (in memory, or in the
    /// database: the buckets then come with the effect store, no `shared_rates` needed), a manual clock.
    fn host(&self, policy: Policy, configure: impl FnOnce(DispatcherBuilder) -> DispatcherBuilder) -> Host {
        let builder = Dispatcher::builder()
            .tool(tool!(lookup))
            .tool(tool!(charge))
            .tool(tool!(wire))
            .policy(policy)
            .clock(ManualClock::new(Duration::from_secs(1_700_000_000)));
        let builder = match self {
            Backend::Memory(buckets) => builder.shared_rates(buckets.clone()).effects(MemoryEffectStore::new()),
            Backend::Postgres(url) => {
                let ledger = PostgresLedger::connect(url).expect("the ledger opens");
                builder.effects(ledger.effect_store())
            }
        };
        Host { dispatcher: configure(builder).build().expect("the dispatcher builds") }
    }
}

struct Host {
    dispatcher: Dispatcher,
}

impl Host {
    fn call(&self, runs: &Arc<Runs>, thread: Option<&str>, tool: &str, arguments: serde_json::Value) -> ToolMessage {
        let mut context = CallContext::new().with_state_arc(Arc::clone(runs));
        if let Some(thread) = thread {
            context = context.with_thread(thread);
        }
        block_on(self.dispatcher.dispatch(ToolCall::new("call", tool, arguments), &context)).expect_message()
    }

    fn lookup(&self, runs: &Arc<Runs>, thread: Option<&str>) -> ToolMessage {
        self.call(runs, thread, "lookup", json!({"what": "x"}))
    }
}

fn kind(message: &ToolMessage) -> Option<RefusalKind> {
    message.refusal.as_ref().map(|refusal| refusal.kind)
}

fn assert_ran(message: &ToolMessage) {
    assert_eq!(message.status, Status::Success, "{}", message.content);
}

/// A `3/minute` bucket shared by two dispatchers: the fourth call across both is refused with the wait
/// until the bucket admits again; a rule without `shared` keeps one bucket per dispatcher.
fn two_dispatchers_share_one_bucket(backend: Backend) {
    let policy = || Policy::builder().shared_rate_limit("lookup", "3/minute", RateScope::PerTool).build().unwrap();
    let (one, two) = (backend.host(policy(), |b| b), backend.host(policy(), |b| b));
    let runs = Arc::new(Runs::default());
    assert_ran(&one.lookup(&runs, None));
    assert_ran(&two.lookup(&runs, Some("a")));
    assert_ran(&one.lookup(&runs, Some("b")));
    for host in [&one, &two] {
        let refused = host.lookup(&runs, None);
        assert_eq!(kind(&refused), Some(RefusalKind::RateLimited), "{}", refused.content);
        assert!(refused.content.contains("(3/minute); retry in 20 s"), "{}", refused.content);
        let refusal = refused.refusal.unwrap();
        assert_eq!(refusal.rule.as_deref(), Some("lookup"));
        let wait = refusal.retry_after.unwrap();
        assert!(wait > Duration::from_secs(19) && wait <= Duration::from_secs(20), "{wait:?}");
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);

    // Not shared: each dispatcher has its own `1/minute` bucket.
    let local = || Policy::builder().rate_limit("lookup", "1/minute").build().unwrap();
    let (one, two) = (backend.host(local(), |b| b), backend.host(local(), |b| b));
    assert_ran(&one.lookup(&runs, None));
    assert_ran(&two.lookup(&runs, None));
    assert_eq!(kind(&one.lookup(&runs, None)), Some(RefusalKind::RateLimited));
}

/// A shared per-thread rule: one bucket per thread, shared by the dispatchers; calls without a thread
/// share one.
fn per_thread_shared_buckets_count_each_thread_apart(backend: Backend) {
    let policy = || Policy::builder().shared_rate_limit("lookup", "1/minute", RateScope::PerThread).build().unwrap();
    let (one, two) = (backend.host(policy(), |b| b), backend.host(policy(), |b| b));
    let runs = Arc::new(Runs::default());
    assert_ran(&one.lookup(&runs, Some("a")));
    assert_eq!(kind(&two.lookup(&runs, Some("a"))), Some(RefusalKind::RateLimited));
    assert_ran(&two.lookup(&runs, Some("b")));
    assert_ran(&one.lookup(&runs, None));
    assert_eq!(kind(&two.lookup(&runs, None)), Some(RefusalKind::RateLimited));
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);
}

/// Two shared rules on one tool: a call refused by the tight one takes nothing from the roomy one.
fn several_shared_buckets_are_taken_all_or_none(backend: Backend) {
    let policy = || {
        Policy::builder()
            .shared_rate_limit("look*", "10/minute", RateScope::PerTool)
            .shared_rate_limit("lookup", "1/minute", RateScope::PerThread)
            .build()
            .unwrap()
    };
    let (one, two) = (backend.host(policy(), |b| b), backend.host(policy(), |b| b));
    let runs = Arc::new(Runs::default());
    assert_ran(&one.lookup(&runs, Some("t0")));
    for _ in 0..5 {
        let refused = two.lookup(&runs, Some("t0"));
        assert_eq!(refused.refusal.and_then(|r| r.rule).as_deref(), Some("lookup"));
    }
    // Nine more threads fill the roomy bucket: the refused calls above took none of its tokens.
    for thread in 1..10 {
        assert_ran(&[&one, &two][thread % 2].lookup(&runs, Some(&format!("t{thread}"))));
    }
    let refused = one.lookup(&runs, Some("t10"));
    assert_eq!(refused.refusal.and_then(|r| r.rule).as_deref(), Some("look*"));
    assert_eq!(runs.0.load(Ordering::SeqCst), 10);
}

/// A call the effect gate refuses (a duplicate) gives its shared token back.
fn a_refusal_after_the_rate_gate_gives_the_shared_token_back(backend: Backend) {
    let policy = Policy::builder().shared_rate_limit("charge", "2/minute", RateScope::PerTool).build().unwrap();
    let host = backend.host(policy, |b| b);
    let runs = Arc::new(Runs::default());
    assert_ran(&host.call(&runs, None, "charge", json!({"order": "A"})));
    let duplicate = host.call(&runs, None, "charge", json!({"order": "A"}));
    assert_eq!(kind(&duplicate), Some(RefusalKind::Duplicate), "{}", duplicate.content);
    // Two tokens a minute: the duplicate's was given back, so B runs, and C is the third.
    assert_ran(&host.call(&runs, None, "charge", json!({"order": "B"})));
    let third = host.call(&runs, None, "charge", json!({"order": "C"}));
    assert_eq!(kind(&third), Some(RefusalKind::RateLimited), "{}", third.content);
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
}

/// An empty shared bucket is a refusal no human can change: it is made before the approver is asked.
fn an_empty_shared_bucket_refuses_before_a_human_is_asked(backend: Backend) {
    let asked = Arc::new(AtomicUsize::new(0));
    let approver = |asked: Arc<AtomicUsize>| {
        move |_request| {
            asked.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Decision::Approve)
        }
    };
    let policy = || Policy::builder().shared_rate_limit("wire", "1/hour", RateScope::PerTool).build().unwrap();
    let one = backend.host(policy(), |b| b.approver(approver(Arc::clone(&asked))));
    let two = backend.host(policy(), |b| b.approver(approver(Arc::clone(&asked))));
    let runs = Arc::new(Runs::default());
    assert_ran(&one.call(&runs, None, "wire", json!({"amount": 5})));
    let refused = two.call(&runs, None, "wire", json!({"amount": 5}));
    assert_eq!(kind(&refused), Some(RefusalKind::RateLimited), "{}", refused.content);
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the second call was refused before its human was asked");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
}

/// Observe mode: a shared limit the policy would enforce is reported ("would refuse") and the call runs.
fn observe_mode_reports_shared_limits_and_refuses_nothing(backend: Backend) {
    let policy = || {
        Policy::builder()
            .mode(PolicyMode::Observe)
            .shared_rate_limit("lookup", "1/minute", RateScope::PerTool)
            .build()
            .unwrap()
    };
    let audit = Arc::new(AuditLog::in_memory(AuditConfig::default()));
    let one = backend.host(policy(), |b| b.audit(Arc::clone(&audit)));
    let two = backend.host(policy(), |b| b);
    let runs = Arc::new(Runs::default());
    assert_ran(&two.lookup(&runs, None));
    assert_ran(&one.lookup(&runs, None));
    assert_ran(&one.lookup(&runs, None));
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);
    let records = audit.records(1, 100).unwrap();
    let would: Vec<_> = records
        .iter()
        .filter(|r| r.outcome == AuditOutcome::Refused { refusal: RefusalKind::RateLimited })
        .filter(|r| r.detail.as_deref().is_some_and(|d| d.starts_with("observe mode: would refuse")))
        .collect();
    assert_eq!(would.len(), 2, "{records:#?}");
    assert_eq!(would[0].rule.as_deref(), Some("lookup"));
}

macro_rules! on_every_shared_store {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $test() { super::$test(super::Backend::memory()) } )*
        }
        mod postgres {
            $( #[test] fn $test() { super::$test(super::Backend::postgres()) } )*
        }
    };
}

on_every_shared_store!(
    two_dispatchers_share_one_bucket,
    per_thread_shared_buckets_count_each_thread_apart,
    several_shared_buckets_are_taken_all_or_none,
    a_refusal_after_the_rate_gate_gives_the_shared_token_back,
    an_empty_shared_bucket_refuses_before_a_human_is_asked,
    observe_mode_reports_shared_limits_and_refuses_nothing,
);

/// Four OS processes, each with its own pool, dispatch five calls each against one shared `10/minute`
/// rule (from a policy file): exactly ten run in total.
#[test]
fn processes_racing_one_shared_rule_run_exactly_its_limit() {
    let url = pg_server::shared().fresh_database();
    let start_ms = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap()
        + Duration::from_millis(1_500))
    .as_millis()
    .to_string();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_worker"))
                .arg("pg_rate_worker")
                .args([url.as_str(), "5", start_ms.as_str()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("the worker starts")
        })
        .collect();
    let (mut executed, mut refused) = (0, 0);
    for worker in workers {
        let output = worker.wait_with_output().expect("the worker finishes");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let counts = text.lines().find_map(|line| line.strip_prefix("done ")).unwrap_or_else(|| panic!("{text}"));
        let [ran, limited]: [usize; 2] = counts
            .split(' ')
            .map(|n| n.parse().unwrap())
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_else(|_| panic!("{text}"));
        executed += ran;
        refused += limited;
    }
    assert_eq!((executed, refused), (10, 10));
}

/// Rows of full buckets are swept as calls go on: a per-thread rule over many threads leaves a table the
/// size of its active buckets, not of every thread ever seen.
#[test]
fn rows_of_full_shared_buckets_are_swept() {
    let server = PgServer::start();
    let url = server.fresh_database();
    let database = url.rsplit("dbname=").next().unwrap().to_owned();
    let policy = Policy::builder().shared_rate_limit("lookup", "1000000/second", RateScope::PerThread).build().unwrap();
    let host = Backend::Postgres(url).host(policy, |b| b);
    let runs = Arc::new(Runs::default());
    let rows = || server.psql(&database, "SELECT count(*) FROM airlock_rate_buckets").trim().parse::<usize>().unwrap();
    for thread in 0..1_000 {
        assert_ran(&host.lookup(&runs, Some(&format!("t{thread}"))));
    }
    assert_eq!(rows(), 1_000, "one row per thread until a sweep");
    for thread in 1_000..1_100 {
        assert_ran(&host.lookup(&runs, Some(&format!("t{thread}"))));
    }
    assert!(rows() < 100, "the 1,024th take swept the full buckets: {} rows", rows());
}

/// The server stopped: a call under a shared rule is refused (never run unlimited) with a reason that
/// says what is wrong; after a restart, calls run again. The server is crash-safe (`synchronous_commit=on`):
/// on a fast one, a crash right after the migrations can lose their commits, and the tables with them.
#[test]
fn a_stopped_server_refuses_shared_limits_with_a_clear_reason() {
    let server = PgServer::start_crash_safe();
    let url = server.fresh_database();
    let options = PostgresOptions { connect_timeout: Duration::from_secs(2), ..PostgresOptions::default() };
    let ledger = PostgresLedger::connect_with(&url, &options).unwrap();
    let policy = Policy::builder().shared_rate_limit("lookup", "100/minute", RateScope::PerTool).build().unwrap();
    let host = Host {
        dispatcher: Dispatcher::builder()
            .tool(tool!(lookup))
            .policy(policy)
            .shared_rates(ledger.shared_rate_buckets())
            .build()
            .unwrap(),
    };
    let runs = Arc::new(Runs::default());
    assert_ran(&host.lookup(&runs, None));
    server.kill();
    for _ in 0..2 {
        let refused = host.lookup(&runs, None);
        assert_eq!(kind(&refused), Some(RefusalKind::Unavailable), "{}", refused.content);
        assert!(refused.content.contains("its shared rate limit could not be checked"), "{}", refused.content);
        assert_eq!(refused.refusal.unwrap().rule.as_deref(), Some("lookup"));
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    server.start_again();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let message = host.lookup(&runs, None);
        if message.status == Status::Success {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no reconnection: {}", message.content);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `rate_shared = true` in a policy file builds a shared rule, enforced through the ledger's database.
#[test]
fn a_policy_file_rule_with_rate_shared_is_shared_through_the_database() {
    let policy = || {
        Policy::from_toml(
            "version = 1\ndefault = \"allow\"\n[tools.lookup]\nrate = \"2/hour\"\nrate_per = \"thread\"\nrate_shared = true\n",
        )
        .unwrap()
    };
    let backend = Backend::postgres();
    let (one, two) = (backend.host(policy(), |b| b), backend.host(policy(), |b| b));
    let runs = Arc::new(Runs::default());
    assert_ran(&one.lookup(&runs, Some("a")));
    assert_ran(&two.lookup(&runs, Some("a")));
    let refused = one.lookup(&runs, Some("a"));
    assert_eq!(kind(&refused), Some(RefusalKind::RateLimited));
    assert!(refused.content.contains("(2/hour); retry in 1800 s"), "{}", refused.content);
    assert_ran(&two.lookup(&runs, Some("b")));
}

/// A shared rule needs a store for its bucket: a dispatcher on redb (or with no store) does not build,
/// and says to use PostgreSQL; given buckets in memory, it builds.
#[test]
fn a_shared_rule_without_a_store_for_its_bucket_does_not_build() {
    let policy = || Policy::builder().shared_rate_limit("look*", "3/minute", RateScope::PerTool).build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redb = Arc::new(RedbLedger::open(dir.path().join("ledger.redb")).unwrap());
    let built = Dispatcher::builder().tool(tool!(lookup)).policy(policy()).effects(redb.effects()).build();
    let Err(err @ BuildError::NoSharedRateStore { .. }) = built else { panic!("built: {:?}", built.err()) };
    assert_eq!(err, BuildError::NoSharedRateStore { tool: "lookup".into(), rule: "look*".into() });
    assert!(err.to_string().contains("use a PostgreSQL ledger"), "{err}");
    assert!(Dispatcher::builder().tool(tool!(lookup)).policy(policy()).build().is_err());
    // The same rule without `shared` needs no store; in memory, the dispatchers of one process share it.
    let local = Policy::builder().rate_limit("look*", "3/minute").build().unwrap();
    assert!(Dispatcher::builder().tool(tool!(lookup)).policy(local).build().is_ok());
    assert!(
        Dispatcher::builder()
            .tool(tool!(lookup))
            .policy(policy())
            .effects(redb.effects())
            .shared_rates(SharedRateBuckets::in_memory())
            .build()
            .is_ok()
    );
}
