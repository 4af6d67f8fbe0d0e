//! Many threads appending at once: nothing lost, nothing duplicated, and the chain verifies.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};

use agent_airlock::audit::{self, AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use agent_airlock_tests::audit_test_key;
use serde_json::json;

const THREADS: usize = 16;
const PER_THREAD: usize = 60;

fn hammer(log: Arc<AuditLog>) {
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let log = Arc::clone(&log);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                (0..PER_THREAD)
                    .map(|i| {
                        let call_id = format!("call-{thread}-{i}");
                        let arguments = json!({"thread": thread, "i": i});
                        let event = AuditEvent::new("work", &call_id, AuditOutcome::Executed).arguments(&arguments);
                        (call_id.clone(), log.append(event).expect("appended"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut by_seq = HashMap::new();
    for worker in workers {
        for (call_id, receipt) in worker.join().expect("a worker ran") {
            assert!(by_seq.insert(receipt.seq, (call_id, receipt.hash)).is_none(), "seq {} given twice", receipt.seq);
        }
    }
    let total = (THREADS * PER_THREAD) as u64;
    assert_eq!(by_seq.len() as u64, total);

    let report = audit::verify(&log, None).expect("the chain verifies");
    assert_eq!(report.records, total);
    let records = log.records(1, usize::MAX).expect("readable");
    assert_eq!(records.len() as u64, total);
    for record in records {
        let (call_id, hash) = &by_seq[&record.seq];
        assert_eq!(&record.tool_call_id, call_id, "record #{} holds the call its receipt named", record.seq);
        assert_eq!(&record.hash, hash);
    }
}

#[test]
fn concurrent_appends_to_a_redb_log_lose_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
    let log = AuditLog::open(dir.path().join("audit.redb"), config).expect("opens");
    hammer(Arc::new(log));
}

#[test]
fn concurrent_appends_to_an_append_only_file_lose_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
    let log = AuditLog::open_append_only(dir.path().join("audit.log"), config.clone()).expect("opens");
    hammer(Arc::new(log));
    let reader = AuditLog::read_append_only(dir.path().join("audit.log"), config).expect("opens to read");
    assert_eq!(audit::verify(&reader, None).expect("verifies").records, (THREADS * PER_THREAD) as u64);
}

/// Four OS processes, three threads each, append to one append-only file at once (each append under the
/// file's lock, going on from what the others wrote): every acknowledged sequence number is given once, every
/// one from 1 to the total is someone's, and the one chain verifies with every record signed.
#[test]
fn processes_appending_to_one_append_only_file_lose_nothing() {
    const PROCESSES: usize = 4;
    const THREADS_EACH: usize = 3;
    const EACH: usize = 40;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("audit.log");
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_worker"))
                .arg("audit_append_loop")
                .arg(&path)
                .args([THREADS_EACH.to_string(), "file".to_owned(), EACH.to_string()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("the worker starts")
        })
        .collect();
    let mut acked = Vec::new();
    for worker in workers {
        let output = worker.wait_with_output().expect("the worker ends");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let stdout = String::from_utf8(output.stdout).expect("UTF-8");
        let seqs: Vec<u64> = stdout.lines().map(|line| line.parse().expect("a sequence number")).collect();
        assert_eq!(seqs.len(), THREADS_EACH * EACH, "every append of a worker acknowledged");
        acked.extend(seqs);
    }
    let total = (PROCESSES * THREADS_EACH * EACH) as u64;
    acked.sort_unstable();
    assert_eq!(acked, (1..=total).collect::<Vec<_>>(), "each sequence number given once, none skipped");
    let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
    let reader = AuditLog::read_append_only(&path, config).expect("opens to read");
    let report = audit::verify(&reader, None).expect("one chain");
    assert_eq!((report.records, report.signed_records), (total, total));
}

#[test]
fn concurrent_appends_to_a_memory_log_lose_nothing() {
    hammer(Arc::new(AuditLog::in_memory(AuditConfig::default())));
}

#[test]
fn a_log_shares_its_database_with_other_stores() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = Arc::new(redb::Database::create(dir.path().join("shared.redb")).expect("opens"));
    let log = AuditLog::with_database(Arc::clone(&db), AuditConfig::default()).expect("audit tables");
    let effects = agent_airlock::effect::RedbEffectStore::new(Arc::clone(&db)).expect("effects table");
    use agent_airlock::effect::EffectStore as _;
    let now = std::time::Duration::from_secs(1_000);
    let reservation = effects.reserve("refund:pi_1", std::time::Duration::from_secs(30), now).expect("reserved");
    log.append(AuditEvent::new("refund", "c1", AuditOutcome::Executed)).expect("appended");
    effects.commit(&reservation, now).expect("committed");
    assert_eq!(audit::verify(&log, None).expect("intact").records, 1);
}

/// A reader verifying an append-only file over and over while a writer appends to it: every read verifies (a
/// batch caught half-written is left for a later read, never taken for damage), the count never goes back, and
/// the last read sees every record.
#[test]
fn a_reader_verifies_an_append_only_file_while_it_is_written() {
    const BATCHES: usize = 300;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("audit.log");
    let config = AuditConfig { key: Some(audit_test_key()), store_raw: true, ..AuditConfig::default() };
    let writer = Arc::new(AuditLog::open_append_only(&path, config.clone()).expect("opens"));
    let reader = AuditLog::read_append_only(&path, config).expect("opens to read");
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appending = {
        let (writer, done) = (Arc::clone(&writer), Arc::clone(&done));
        std::thread::spawn(move || {
            for i in 0..BATCHES {
                // Raw values stored and a long argument: each record spans pages, so a read can land mid-write.
                let arguments = json!({"i": i, "padding": "x".repeat(3000 + i * 7)});
                let call_id = format!("call-{i}");
                writer
                    .append(AuditEvent::new("work", &call_id, AuditOutcome::Executed).arguments(&arguments))
                    .expect("appended");
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let (mut last, mut reads) = (0, 0);
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        let report = audit::verify(&reader, None).unwrap_or_else(|err| panic!("read {reads} after #{last}: {err}"));
        assert!(report.records >= last, "the count went back from {last} to {}", report.records);
        last = report.records;
        reads += 1;
    }
    appending.join().expect("the writer ran");
    assert_eq!(audit::verify(&reader, None).expect("verifies").records, BATCHES as u64);
    assert!(reads > 1, "the reader read while the writer wrote");
}
