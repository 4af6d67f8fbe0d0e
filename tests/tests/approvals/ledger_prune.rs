//! Ledger retention: `prune` removes exactly the requests settled before the cutoff (spent, denied,
//! expired) with their grants, never a pending request or a grant that can still be spent, on a real redb
//! file and in memory; a pruned grant admits nothing, so a replayed resume value stays refused.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ledger::{ApprovalLedger, MemoryLedger, PostgresLedger, PruneReport, RedbLedger};
use agent_airlock::{
    ManualClock,
    approval::{AdmitError, DecisionError, InterruptApprovals},
};
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, OwnedCall, START, approvals};
use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
use serde_json::Value;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One request of the scenario: its call, its stored interrupt value, its resume value (if approved).
struct Case {
    call: OwnedCall,
    interrupt: Value,
    resume: Option<Value>,
}

impl Case {
    fn request_id(&self) -> String {
        self.interrupt["airlock_approval"]["request_id"].as_str().unwrap().to_owned()
    }

    fn grant_id(&self) -> String {
        self.resume.as_ref().unwrap()["airlock_grant"]["grant_id"].as_str().unwrap().to_owned()
    }
}

struct Scenario {
    pending: Case,
    spent: Case,
    denied: Case,
    revoked: Case,
    expired: Case,
    live: Case,
    /// Approved, expired unspent, approved again: the first grant was replaced by a live one.
    reapproved: Case,
    replaced_grant: String,
}

fn request(approvals: &InterruptApprovals, n: u64) -> Case {
    let call = OwnedCall::refund(n).with_tool_call_id(&format!("call_{n}"));
    let interrupt = approvals.request(&call.input(), "attribute", "moves money").wait().unwrap().into_value();
    Case { call, interrupt, resume: None }
}

fn approve(approvals: &InterruptApprovals, case: &mut Case) {
    case.resume = Some(approvals.approve(&case.interrupt, "alice").wait().unwrap().into_value());
}

/// Builds every state a request can be in, settled at known times:
/// spent at +10 s, denied at +20 s, revoked at +30 s, expired at +600 s (the grant time-to-live), and a
/// live grant issued at +900 s. The clock ends at +1000 s.
fn scenario(approvals: &InterruptApprovals, clock: &ManualClock) -> Scenario {
    let mut expired = request(approvals, 1);
    approve(approvals, &mut expired);
    let mut reapproved = request(approvals, 2);
    approve(approvals, &mut reapproved);
    let replaced_grant = reapproved.grant_id();
    let pending = request(approvals, 3);

    clock.set(START + secs(10));
    let mut spent = request(approvals, 4);
    approve(approvals, &mut spent);
    approvals.admit(&spent.call.input(), spent.resume.as_ref().unwrap()).wait().unwrap();

    clock.set(START + secs(20));
    let denied = request(approvals, 5);
    approvals.deny(&denied.interrupt, "bob", Some("no")).wait().unwrap();

    clock.set(START + secs(30));
    let mut revoked = request(approvals, 6);
    approve(approvals, &mut revoked);
    approvals.deny(&revoked.interrupt, "bob", None).wait().unwrap();

    clock.set(START + secs(900));
    let mut live = request(approvals, 7);
    approve(approvals, &mut live);
    approve(approvals, &mut reapproved);
    assert_ne!(reapproved.grant_id(), replaced_grant, "the expired grant was replaced");

    clock.set(START + secs(1000));
    Scenario { pending, spent, denied, revoked, expired, live, reapproved, replaced_grant }
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Prunes in two steps and checks each removes exactly what it should; returns the scenario.
fn prune_and_check(ledger: &Arc<dyn ApprovalLedger>, approvals: &InterruptApprovals, clock: &ManualClock) -> Scenario {
    let s = scenario(approvals, clock);
    let now = START + secs(1000);
    assert_eq!(ledger.list_requests().unwrap().len(), 7);

    // Nothing was settled before the start.
    assert_eq!(ledger.prune(START, now).wait().unwrap(), PruneReport::default());

    // Settled before +15 s: only the spend at +10 s.
    let report = ledger.prune(START + secs(15), now).wait().unwrap();
    assert_eq!(report, PruneReport { requests: vec![s.spent.request_id()], grants: vec![s.spent.grant_id()] });

    // Settled before now: the denied, the revoked (with its grant) and the expired (with its grant).
    let report = ledger.prune(now, now).wait().unwrap();
    assert_eq!(
        report,
        PruneReport {
            requests: sorted(vec![s.denied.request_id(), s.revoked.request_id(), s.expired.request_id()]),
            grants: sorted(vec![s.revoked.grant_id(), s.expired.grant_id()]),
        }
    );
    // A cutoff in the future removes nothing more: pending requests and spendable grants stay.
    assert_eq!(ledger.prune(now + secs(1_000_000), now).wait().unwrap(), PruneReport::default());

    let left: Vec<String> = ledger.list_requests().unwrap().into_iter().map(|e| e.request.request_id).collect();
    assert_eq!(sorted(left), sorted(vec![s.pending.request_id(), s.live.request_id(), s.reapproved.request_id()]));
    // The replaced grant belongs to a request that holds a live grant: kept with it.
    assert!(ledger.find_grant(&s.replaced_grant).unwrap().is_some());

    // Pruned ids are unknown afterwards.
    for case in [&s.spent, &s.denied, &s.revoked, &s.expired] {
        assert!(ledger.find_request(&case.request_id()).unwrap().is_none());
        assert!(matches!(
            approvals.approve(&case.interrupt, "alice").wait(),
            Err(DecisionError::UnknownRequest { .. })
        ));
    }
    for case in [&s.spent, &s.revoked, &s.expired] {
        assert!(ledger.find_grant(&case.grant_id()).unwrap().is_none());
    }

    // The spent marker is gone, and still a replay of the spent grant's resume value is refused: an
    // unknown grant admits nothing.
    match approvals.admit(&s.spent.call.input(), s.spent.resume.as_ref().unwrap()).wait() {
        Err(AdmitError::UnknownGrant { grant_id }) => assert_eq!(grant_id, s.spent.grant_id()),
        other => panic!("a replay after pruning must be refused, got {other:?}"),
    }

    // Live grants still spend, once.
    approvals.admit(&s.live.call.input(), s.live.resume.as_ref().unwrap()).wait().unwrap();
    approvals.admit(&s.reapproved.call.input(), s.reapproved.resume.as_ref().unwrap()).wait().unwrap();
    assert!(matches!(
        approvals.admit(&s.live.call.input(), s.live.resume.as_ref().unwrap()).wait(),
        Err(AdmitError::AlreadySpent { .. })
    ));
    s
}

const REQUESTS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_requests");
const STATUS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_status");
const GRANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_grants");

/// Records in the file's request, status and grant tables, read with redb directly.
fn record_counts(path: &Path) -> (u64, u64, u64) {
    let database = redb::Database::open(path).unwrap();
    let txn = database.begin_read().unwrap();
    let count = |table| txn.open_table(table).unwrap().len().unwrap();
    (count(REQUESTS), count(STATUS), count(GRANTS))
}

#[test]
fn prune_removes_exactly_the_settled_records_from_a_redb_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let clock = Arc::new(ManualClock::new(START));
    {
        let ledger: Arc<dyn ApprovalLedger> = Arc::new(RedbLedger::open(&path).unwrap());
        let approvals = approvals(Arc::clone(&ledger), Arc::clone(&clock));
        let s = scenario(&approvals, &clock);
        drop((s, approvals, ledger));
    }
    // 7 requests with 7 statuses; grants: expired, replaced + its successor, spent, revoked, live.
    assert_eq!(record_counts(&path), (7, 7, 6));

    let dir2 = tempfile::tempdir().unwrap();
    let path2 = dir2.path().join("ledger.redb");
    let clock2 = Arc::new(ManualClock::new(START));
    {
        let ledger: Arc<dyn ApprovalLedger> = Arc::new(RedbLedger::open(&path2).unwrap());
        let approvals = approvals(Arc::clone(&ledger), Arc::clone(&clock2));
        prune_and_check(&ledger, &approvals, &clock2);
    }
    assert_eq!(record_counts(&path2), (3, 3, 3), "four requests and three grants fewer");

    // Reopened, the pruned records stay gone and the spends stay spent.
    let ledger = RedbLedger::open(&path2).unwrap();
    let labels: Vec<&str> =
        ledger.list_requests().unwrap().iter().map(|e| e.status.label(START + secs(1000))).collect();
    assert_eq!(sorted(labels.iter().map(|l| (*l).to_owned()).collect()), ["pending", "spent", "spent"]);
}

#[test]
fn prune_follows_the_same_rules_in_memory() {
    let clock = Arc::new(ManualClock::new(START));
    let ledger: Arc<dyn ApprovalLedger> = Arc::new(MemoryLedger::new());
    let approvals = approvals(Arc::clone(&ledger), Arc::clone(&clock));
    prune_and_check(&ledger, &approvals, &clock);
    assert_eq!(ledger.list_requests().unwrap().len(), 3);
}

#[test]
fn prune_follows_the_same_rules_on_postgres() {
    let server = agent_airlock_tests::pg_server::shared();
    let url = server.fresh_database();
    let clock = Arc::new(ManualClock::new(START));
    let ledger: Arc<dyn ApprovalLedger> = Arc::new(PostgresLedger::connect(&url).unwrap());
    let approvals = approvals(Arc::clone(&ledger), Arc::clone(&clock));
    prune_and_check(&ledger, &approvals, &clock);
    assert_eq!(ledger.list_requests().unwrap().len(), 3);
    // The rows are gone from the database, not only from the answers.
    let database = url.rsplit("dbname=").next().unwrap();
    let counts = server.psql(
        database,
        "SELECT (SELECT count(*) FROM airlock_requests) || ' ' || (SELECT count(*) FROM airlock_grants)",
    );
    assert_eq!(counts.trim(), "3 3", "four requests and three grants fewer");
}

/// A grant is never pruned while it can be spent, whatever the cutoff, and expires exactly at its
/// `expires_at`: the instant before, it is live and kept.
#[test]
fn a_grant_is_pruned_only_once_it_can_no_longer_be_spent() {
    let clock = Arc::new(ManualClock::new(START));
    let ledger: Arc<dyn ApprovalLedger> = Arc::new(MemoryLedger::new());
    let approvals = approvals(Arc::clone(&ledger), Arc::clone(&clock));
    let mut case = request(&approvals, 1);
    approve(&approvals, &mut case);
    let expires = START + GRANT_TTL;
    let just_before = expires - Duration::from_millis(1);
    assert_eq!(ledger.prune(expires + secs(1), just_before).wait().unwrap(), PruneReport::default());
    let report = ledger.prune(expires + secs(1), expires).wait().unwrap();
    assert_eq!(report.requests, vec![case.request_id()]);
}
