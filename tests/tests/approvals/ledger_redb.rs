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
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
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

/// What `unresolved_requests` must answer: the listed requests whose status is unresolved, in the listing's
/// order (the full read it replaced).
fn listed_unresolved(ledger: &RedbLedger) -> Vec<agent_airlock::ledger::RequestEntry> {
    ledger.list_requests().unwrap().into_iter().filter(|entry| entry.status.is_unresolved()).collect()
}

/// One step of a ledger's life, on request `r{0}` (a few ids, so steps meet the same request).
#[derive(Debug, Clone)]
enum Step {
    Record { approvals: u32 },
    Approve { approver: &'static str },
    Deny,
    Spend,
    Wait { secs: u64 },
    Prune { age_secs: u64 },
}

fn step() -> impl proptest::strategy::Strategy<Value = (usize, Step)> {
    use proptest::prelude::*;
    let step = prop_oneof![
        (1_u32..=2).prop_map(|approvals| Step::Record { approvals }),
        prop_oneof![Just("alice"), Just("bob")].prop_map(|approver| Step::Approve { approver }),
        Just(Step::Deny),
        Just(Step::Spend),
        (1_u64..90).prop_map(|secs| Step::Wait { secs }),
        (0_u64..120).prop_map(|age_secs| Step::Prune { age_secs }),
    ];
    (0_usize..6, step)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// The index of unresolved requests stays what a read of every status finds, through any sequence of
    /// requests, partial and full approvals, denials (of a live or an expired grant), spends, expiries and
    /// prunes, failed transitions included (a second denial, a spend of an expired grant), and after the file
    /// is reopened.
    #[test]
    fn unresolved_requests_follow_every_transition(steps in proptest::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.redb");
        let ledger = RedbLedger::open(&path).unwrap();
        let mut now = START;
        let mut grants = std::collections::HashMap::new();
        for (n, (i, step)) in steps.iter().enumerate() {
            let id = format!("r{i}");
            match step {
                Step::Record { approvals } => {
                    let record = RequestRecord {
                        requested_at: now,
                        interrupt: json!({"airlock_approval": {"approvals": approvals}}),
                        ..agent_airlock_tests::ledger_fixtures::request_record(&id)
                    };
                    let _ = ledger.record_request(record, None).wait();
                }
                Step::Approve { approver } => {
                    let grant_id = format!("g{i}-{n}");
                    let grant = GrantRecord {
                        grant_id: grant_id.clone(),
                        request_id: id.clone(),
                        key_id: "k1".into(),
                        binding: format!("b-{id}"),
                        approver: (*approver).into(),
                        co_approvers: Vec::new(),
                        signatures: Vec::new(),
                        granted_at: now,
                        expires_at: now + Duration::from_secs(60),
                    };
                    if ledger.grant(grant, now).wait().is_ok() {
                        grants.insert(id.clone(), grant_id);
                    }
                }
                Step::Deny => {
                    let denial = agent_airlock::ledger::DenialRecord {
                        request_id: id.clone(),
                        denied_by: "carol".into(),
                        reason: None,
                        denied_at: now,
                        revoked_grant: None,
                        signature: None,
                    };
                    let _ = ledger.deny(denial).wait();
                }
                Step::Spend => {
                    if let Some(grant_id) = grants.get(&id) {
                        let attempt = SpendAttempt { grant_id: grant_id.clone(), binding: format!("b-{id}"), now };
                        let _ = ledger.spend(attempt).wait();
                    }
                }
                Step::Wait { secs } => now += Duration::from_secs(*secs),
                Step::Prune { age_secs } => {
                    let _ = ledger.prune(now.saturating_sub(Duration::from_secs(*age_secs)), now).wait();
                }
            }
            proptest::prop_assert_eq!(ledger.unresolved_requests().unwrap(), listed_unresolved(&ledger), "after {:?}", step);
        }
        let expected = listed_unresolved(&ledger);
        drop(ledger);
        let reopened = RedbLedger::open(&path).unwrap();
        proptest::prop_assert_eq!(&reopened.unresolved_requests().unwrap(), &expected);
    }
}

/// Read side by side in key order, the two tables agree with the full listing even where an edit of the file
/// left a request without a status (read as pending, as the listing reads it) or a status without a request.
#[test]
fn unresolved_requests_agree_with_the_listing_in_an_edited_file() {
    const REQUESTS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_requests");
    const STATUS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_status");
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = populated_file(dir.path());
    {
        let database = open_database(&path, &RedbOpenOptions::default()).unwrap();
        let txn = database.begin_write().unwrap();
        {
            let mut status = txn.open_table(STATUS).unwrap();
            let mut requests = txn.open_table(REQUESTS).unwrap();
            let first: String = requests.iter().unwrap().next().unwrap().unwrap().0.value().to_owned();
            status.remove(first.as_str()).unwrap();
            status.insert("zz-orphan", br#"{"status":"pending"}"#.as_slice()).unwrap();
            status.insert("00-orphan", br#"{"status":"pending"}"#.as_slice()).unwrap();
            let record =
                serde_json::to_vec(&agent_airlock_tests::ledger_fixtures::request_record("mm-no-status")).unwrap();
            requests.insert("mm-no-status", record.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let ledger = RedbLedger::open(&path).unwrap();
    let expected = listed_unresolved(&ledger);
    assert_eq!(expected.len(), 32, "30 open, the one whose status was removed, the one recorded without");
    assert_eq!(ledger.unresolved_requests().unwrap(), expected);
}
