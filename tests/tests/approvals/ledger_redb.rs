//! The redb ledger's own properties: durability across reopen, sharing a database with other stores,
//! group commit, and refusing damaged files with a clear error (never a panic, never an empty ledger).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ManualClock;
use agent_airlock::approval::{AdmitError, InterruptApprovals};
use agent_airlock::ledger::{
    ApprovalLedger, GrantRecord, LedgerError, RedbLedger, RequestRecord, RequestStatus, SpendAttempt,
};
use agent_airlock::store::{OpenError, RedbOpenOptions, open_database};
use agent_airlock_tests::ledger_fixtures::{OwnedCall, START, approvals};
use redb::{ReadableDatabase, TableDefinition};
use serde_json::{Value, json};

fn ledger_at(path: &Path) -> (InterruptApprovals, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(START));
    let ledger = RedbLedger::open(path).unwrap();
    (approvals(Arc::new(ledger), clock.clone()), clock)
}

fn approve(approvals: &InterruptApprovals, call: &OwnedCall) -> Value {
    let request = approvals.request(&call.input(), "attribute", "moves money").wait().unwrap();
    approvals.approve(request.as_value(), "alice").wait().unwrap().into_value()
}

#[test]
fn grants_and_spends_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let call = OwnedCall::refund(500);
    let resume = {
        let (approvals, _) = ledger_at(&path);
        approve(&approvals, &call)
    };
    {
        let (approvals, _) = ledger_at(&path);
        approvals.admit(&call.input(), &resume).wait().unwrap();
    }
    let (approvals, _) = ledger_at(&path);
    assert!(matches!(approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::AlreadySpent { .. })));
    let listed = approvals.ledger().list_requests().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(matches!(listed[0].status, RequestStatus::Spent(_)));
    // The operator can read the full interrupt value back, and it still verifies.
    approvals.verify_request(&listed[0].request.interrupt).unwrap();
}

/// A replayed spend is refused without a commit (nothing changed), and the spend it replays stays durable.
#[test]
fn refused_replays_commit_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let call = OwnedCall::refund(500);
    {
        let ledger = Arc::new(RedbLedger::open(&path).unwrap());
        let approvals = approvals(ledger.clone(), Arc::new(ManualClock::new(START)));
        let resume = approve(&approvals, &call);
        approvals.admit(&call.input(), &resume).wait().unwrap();
        let before = ledger.writer_stats();
        for _ in 0..5 {
            assert!(matches!(approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::AlreadySpent { .. })));
        }
        let after = ledger.writer_stats();
        assert_eq!(after.writes - before.writes, 5, "every replay reached the writer");
        assert_eq!(after.commits, before.commits, "a batch of refusals is not committed");
    }
    let (approvals, _) = ledger_at(&path);
    let listed = approvals.ledger().list_requests().unwrap();
    assert!(matches!(listed[0].status, RequestStatus::Spent(_)), "the spend survived reopening");
}

const AUDIT: TableDefinition<u64, &str> = TableDefinition::new("someone_elses_audit_log");

#[test]
fn the_ledger_shares_a_database_with_other_stores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.redb");
    let database = Arc::new(open_database(&path, &RedbOpenOptions::default()).unwrap());
    {
        let txn = database.begin_write().unwrap();
        txn.open_table(AUDIT).unwrap().insert(1, "first record").unwrap();
        txn.commit().unwrap();
    }
    let ledger = Arc::new(RedbLedger::from_database(database.clone()).unwrap());
    assert!(Arc::ptr_eq(ledger.database(), &database));
    let approvals = approvals(ledger.clone(), Arc::new(ManualClock::new(START)));
    let call = OwnedCall::refund(500);
    let resume = approve(&approvals, &call);
    {
        let txn = database.begin_write().unwrap();
        txn.open_table(AUDIT).unwrap().insert(2, "second record").unwrap();
        txn.commit().unwrap();
    }
    approvals.admit(&call.input(), &resume).wait().unwrap();
    drop(approvals);
    drop(ledger);
    // The other store's records are intact, and the database is still usable without the ledger.
    let txn = database.begin_read().unwrap();
    let audit = txn.open_table(AUDIT).unwrap();
    assert_eq!(audit.get(1).unwrap().unwrap().value(), "first record");
    assert_eq!(audit.get(2).unwrap().unwrap().value(), "second record");
}

fn record(id: usize, now: Duration) -> (RequestRecord, GrantRecord) {
    let request = RequestRecord {
        request_id: format!("r{id:04}"),
        key_id: "k1".into(),
        tool: "refund".into(),
        rule: "attribute".into(),
        reason: "moves money".into(),
        binding: format!("b{id:04}"),
        requested_at: now,
        interrupt: json!({"n": id}),
        caller: None,
    };
    let grant = GrantRecord {
        grant_id: format!("g{id:04}"),
        request_id: request.request_id.clone(),
        key_id: "k1".into(),
        binding: request.binding.clone(),
        approver: "alice".into(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at: now,
        expires_at: now + Duration::from_secs(60),
    };
    (request, grant)
}

/// While a commit is held up, spends queue; they are then applied in one shared transaction, with
/// exactly-once intact inside the batch.
#[test]
fn concurrent_spends_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let database = Arc::new(open_database(dir.path().join("l.redb"), &RedbOpenOptions::default()).unwrap());
    let ledger = RedbLedger::from_database(database.clone()).unwrap();
    let now = START;
    for id in 0..64 {
        let (request, grant) = record(id, now);
        ledger.record_request(request, None).wait().unwrap();
        ledger.grant(grant, now).wait().unwrap();
    }
    let before = ledger.writer_stats();
    let blocker = database.begin_write().unwrap();
    // Every grant twice: 128 spends queued behind the blocker.
    let replies: Vec<_> = (0..128)
        .map(|i| {
            let id = i % 64;
            ledger.spend(SpendAttempt { grant_id: format!("g{id:04}"), binding: format!("b{id:04}"), now })
        })
        .collect();
    blocker.abort().unwrap();
    let results: Vec<_> = replies.into_iter().map(|reply| reply.wait()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 64);
    assert!(results[64..].iter().all(|r| matches!(r, Err(LedgerError::AlreadySpent { .. }))));
    let after = ledger.writer_stats();
    assert_eq!(after.writes - before.writes, 128);
    assert!(after.commits - before.commits <= 2, "{before:?} → {after:?}");
    // At most two commits carried 128 writes, so one carried at least 64.
    assert!(after.largest_batch >= 64, "{after:?}");
}

/// A ledger file with some history, and what it lists.
fn populated_file(dir: &Path) -> (PathBuf, Vec<agent_airlock::ledger::RequestEntry>) {
    let path = dir.join("ledger.redb");
    let ledger = RedbLedger::open(&path).unwrap();
    let now = START;
    for id in 0..40 {
        let (request, grant) = record(id, now);
        ledger.record_request(request, None).wait().unwrap();
        if id % 2 == 0 {
            ledger.grant(grant.clone(), now).wait().unwrap();
        }
        if id % 4 == 0 {
            ledger.spend(SpendAttempt { grant_id: grant.grant_id, binding: grant.binding, now }).wait().unwrap();
        }
    }
    let listed = ledger.list_requests().unwrap();
    assert_eq!(listed.len(), 40);
    (path, listed)
}

/// Opening a damaged copy either fails with a clear error or shows exactly the original history.
fn open_damaged(path: &Path, original: &[agent_airlock::ledger::RequestEntry]) -> Option<OpenError> {
    match RedbLedger::open(path) {
        Ok(ledger) => {
            let listed = ledger.list_requests();
            assert!(
                matches!(&listed, Ok(listed) if listed == original),
                "a damaged file opened with other contents: {listed:?}"
            );
            None
        }
        Err(err) => {
            let text = err.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            Some(err)
        }
    }
}

#[test]
fn a_truncated_file_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = populated_file(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    let mut refused = 0;
    for cut in [0, 1, 100, 512, 4096, 8192, len / 2, len - 4096, len - 1] {
        let copy = dir.path().join(format!("cut-{cut}.redb"));
        std::fs::write(&copy, &bytes[..cut]).unwrap();
        match open_damaged(&copy, &original) {
            Some(OpenError::Empty { .. }) => assert_eq!(cut, 0),
            Some(OpenError::Corrupt { .. }) => refused += 1,
            Some(other) => panic!("cut at {cut}: unexpected error kind: {other}"),
            None => assert!(cut >= len / 2, "cut at {cut} of {len} opened"),
        }
        // A refused file is left as it was: not repaired into an empty ledger.
        assert_eq!(std::fs::metadata(&copy).unwrap().len(), cut as u64);
    }
    eprintln!("{refused} of 8 truncations refused as corrupt, the empty one as empty ({len} bytes)");
    assert!(refused >= 5, "only {refused} truncations were refused");
}

#[test]
fn an_overwritten_file_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = populated_file(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let mut offsets: Vec<usize> = vec![0, 8, 32, 64, 100, 200, 300, 400, 600, 1024, 2048];
    offsets.extend((1..bytes.len() / 4096).map(|page| page * 4096 + 100));
    let mut refused = 0;
    for &offset in &offsets {
        let mut damaged = bytes.clone();
        for byte in &mut damaged[offset..(offset + 16).min(bytes.len())] {
            *byte ^= 0x5a;
        }
        let copy = dir.path().join(format!("flip-{offset}.redb"));
        std::fs::write(&copy, &damaged).unwrap();
        if let Some(err) = open_damaged(&copy, &original) {
            assert!(matches!(err, OpenError::Corrupt { .. }), "offset {offset}: {err}");
            assert!(err.to_string().contains("is corrupt"), "{err}");
            refused += 1;
        }
    }
    eprintln!("{refused} of {} overwrites refused ({} bytes)", offsets.len(), bytes.len());
    // The header and every page holding data are checked; unused pages may be damaged harmlessly.
    assert!(refused >= 3, "only {refused} of {} overwrites were refused", offsets.len());
}

#[test]
fn an_empty_or_foreign_file_is_not_taken_for_an_empty_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let err = RedbLedger::open(&empty).unwrap_err();
    assert!(matches!(err, OpenError::Empty { .. }), "{err}");
    assert!(err.to_string().contains("is empty (0 bytes), so it is not a ledger"), "{err}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);

    let foreign = dir.path().join("notes.txt");
    std::fs::write(&foreign, "these are my notes, not a database\n".repeat(200)).unwrap();
    let err = RedbLedger::open(&foreign).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "these are my notes, not a database\n".repeat(200));
}

#[test]
fn an_unknown_schema_version_is_refused() {
    const META: TableDefinition<&str, u64> = TableDefinition::new("airlock_approval_meta");
    let dir = tempfile::tempdir().unwrap();
    let database = Arc::new(open_database(dir.path().join("l.redb"), &RedbOpenOptions::default()).unwrap());
    {
        let txn = database.begin_write().unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 99).unwrap();
        txn.commit().unwrap();
    }
    let err = RedbLedger::from_database(database).unwrap_err();
    assert!(matches!(err, OpenError::UnsupportedSchema { found: 99 }), "{err}");
}
