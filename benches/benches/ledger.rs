//! The approval ledger's latency, next to its floor measured in the same run: a raw `pwrite` + `fdatasync`
//! of ~300 B on a file in the same directory, and one redb insert (or remove) + commit of the same size
//! with `Durability::Immediate`. Then the protocol steps on a `RedbLedger` (durable) and on a
//! `MemoryLedger` (the CPU cost alone): request, approve, admit (the spend), approve + admit. Last, what a host
//! asking for the open requests on every resume pays (the LangGraph package's `waiting`): every request listed
//! against the unresolved ones only, in a redb ledger keeping 2,000 requests of which 10 are open.
//!
//! `cargo bench -p agent-airlock-benches --bench ledger`

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_airlock::approval::InterruptApprovals;
use agent_airlock::ledger::{ApprovalLedger, MemoryLedger, RedbLedger};
use agent_airlock_benches::{
    BenchCall, RECORD, SPEND_GRANTS, SPEND_STATUS, approvals, approved_calls, block_on, request_all, seed_spend_tables,
};
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime};
use futures_util::future::join_all;
use redb::{Database, Durability, ReadableDatabase as _, TableDefinition};
use tempfile::TempDir;

const RAW: TableDefinition<u64, &[u8]> = TableDefinition::new("bench_raw");

fn floor(c: &mut Criterion, dir: &TempDir) {
    let mut group = c.benchmark_group("ledger_floor");
    group.sample_size(30);
    let value = [0x61u8; RECORD];

    // One durable write of a record: the least any durable commit can cost on this disk.
    let file: File = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("floor.bin"))
        .expect("the floor file opens");
    file.write_all_at(&value, 0).expect("written");
    file.sync_all().expect("synced");
    group.bench_function("pwrite_fdatasync_300B", |b| {
        b.iter(|| {
            file.write_all_at(black_box(&value), 0).expect("written");
            file.sync_data().expect("synced");
        })
    });

    let db = Database::create(dir.path().join("raw.redb")).expect("the raw database opens");
    let mut next = 0u64;
    group.bench_function("redb_insert_commit_300B", |b| {
        b.iter(|| {
            next += 1;
            let mut txn = db.begin_write().expect("a transaction");
            txn.set_durability(Durability::Immediate).expect("durable");
            txn.open_table(RAW).expect("the table").insert(next, value.as_slice()).expect("inserted");
            txn.commit().expect("committed");
        })
    });
    // A spend's floor: remove a record (reading the old value) and commit.
    group.bench_function("redb_remove_commit_300B", |b| {
        b.iter_custom(|iters| {
            let first = next + 1;
            let txn = db.begin_write().expect("a transaction");
            {
                let mut table = txn.open_table(RAW).expect("the table");
                for _ in 0..iters {
                    next += 1;
                    table.insert(next, value.as_slice()).expect("inserted");
                }
            }
            txn.commit().expect("committed");
            let start = Instant::now();
            for key in first..first + iters {
                let mut txn = db.begin_write().expect("a transaction");
                txn.set_durability(Durability::Immediate).expect("durable");
                let old =
                    txn.open_table(RAW).expect("the table").remove(key).expect("removed").map(|v| v.value().len());
                assert_eq!(old, Some(RECORD));
                txn.commit().expect("committed");
            }
            start.elapsed()
        })
    });
    // A spend's shape without the ledger: in two tables keyed by random 32-hex ids (like grants and request
    // statuses) holding 4,096 records each, update one existing ~300 B record in each and commit, on the
    // calling thread.
    let ids = seed_spend_tables(&db, 4096);
    let mut pick = 0usize;
    group.bench_function("redb_spend_shaped_2_tables_300B", |b| {
        b.iter(|| {
            pick = (pick + 1_237) % ids.len();
            let id = ids[pick].as_str();
            let mut txn = db.begin_write().expect("a transaction");
            txn.set_durability(Durability::Immediate).expect("durable");
            txn.open_table(SPEND_GRANTS).expect("the table").insert(id, value.as_slice()).expect("updated");
            txn.open_table(SPEND_STATUS).expect("the table").insert(id, value.as_slice()).expect("updated");
            txn.commit().expect("committed");
        })
    });
    // What a committed read costs, for scale.
    group.bench_function("redb_read_300B", |b| {
        b.iter(|| {
            let txn = db.begin_read().expect("a read transaction");
            black_box(txn.open_table(RAW).expect("the table").get(next).expect("read").map(|v| v.value().len()))
        })
    });
    // A write handed to another thread and answered: what the ledger's writer thread adds to a commit.
    let (jobs, queue) = std::sync::mpsc::channel::<std::sync::mpsc::SyncSender<u64>>();
    let writer = std::thread::spawn(move || {
        while let Ok(reply) = queue.recv() {
            let _ = reply.send(1);
        }
    });
    group.bench_function("thread_handoff_round_trip", |b| {
        b.iter(|| {
            let (reply, answer) = std::sync::mpsc::sync_channel(1);
            jobs.send(reply).expect("the thread listens");
            black_box(answer.recv().expect("answered"))
        })
    });
    drop(jobs);
    writer.join().expect("the thread ends");
    group.finish();
}

/// The protocol steps over one ledger. `fresh` builds the approvals for one measurement sample (a new
/// memory ledger per sample keeps memory flat; the redb ledger is shared).
fn protocol(group: &mut BenchmarkGroup<'_, WallTime>, fresh: &dyn Fn() -> InterruptApprovals) {
    let mut next = 0u64;
    let mut numbered = |count: u64| {
        let first = next;
        next += count;
        first
    };

    // First pass: bind, seal and record the pending request.
    group.bench_function("request", |b| {
        b.iter_custom(|iters| {
            let approvals = fresh();
            let calls: Vec<BenchCall> = (numbered(iters)..).take(iters as usize).map(BenchCall::refund).collect();
            let start = Instant::now();
            for call in &calls {
                black_box(approvals.request(&call.input(), "attribute", "bench").wait().expect("recorded"));
            }
            start.elapsed()
        })
    });

    // A human's yes: verify the seal, record the grant.
    group.bench_function("approve", |b| {
        b.iter_custom(|iters| {
            let approvals = fresh();
            let calls: Vec<BenchCall> = (numbered(iters)..).take(iters as usize).map(BenchCall::refund).collect();
            let interrupts = request_all(&approvals, &calls);
            let start = Instant::now();
            for interrupt in &interrupts {
                black_box(approvals.approve(interrupt, "alice").wait().expect("approved"));
            }
            start.elapsed()
        })
    });

    // Resume: derive the binding from the call, check the token, spend the grant exactly once.
    group.bench_function("admit", |b| {
        b.iter_custom(|iters| {
            let approvals = fresh();
            let approved = approved_calls(&approvals, numbered(iters), iters);
            let start = Instant::now();
            for (call, resume) in &approved {
                black_box(approvals.admit(&call.input(), resume).wait().expect("admitted"));
            }
            start.elapsed()
        })
    });

    // Both durable steps of one approval, back to back.
    group.bench_function("approve_then_admit", |b| {
        b.iter_custom(|iters| {
            let approvals = fresh();
            let calls: Vec<BenchCall> = (numbered(iters)..).take(iters as usize).map(BenchCall::refund).collect();
            let interrupts = request_all(&approvals, &calls);
            let start = Instant::now();
            for (call, interrupt) in calls.iter().zip(&interrupts) {
                let resume = approvals.approve(interrupt, "alice").wait().expect("approved").into_value();
                black_box(approvals.admit(&call.input(), &resume).wait().expect("admitted"));
            }
            start.elapsed()
        })
    });

    // A replayed resume value: refused by the ledger (a read inside a write transaction; nothing to commit
    // on the memory ledger).
    group.bench_function("admit_replayed_refused", |b| {
        b.iter_custom(|iters| {
            let approvals = fresh();
            let approved = approved_calls(&approvals, numbered(1), 1);
            let (call, resume) = &approved[0];
            approvals.admit(&call.input(), resume).wait().expect("admitted once");
            let start = Instant::now();
            for _ in 0..iters {
                black_box(approvals.admit(&call.input(), resume).wait().expect_err("spent"));
            }
            start.elapsed()
        })
    });
}

fn ledgers(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    floor(c, &dir);

    let redb: Arc<dyn ApprovalLedger> =
        Arc::new(RedbLedger::open(dir.path().join("ledger.redb")).expect("the ledger opens"));
    let mut group = c.benchmark_group("ledger_redb");
    group.sample_size(30);
    protocol(&mut group, &|| approvals(Arc::clone(&redb)));
    group.finish();

    let mut group = c.benchmark_group("ledger_memory");
    protocol(&mut group, &|| approvals(Arc::new(MemoryLedger::new())));
    group.finish();

    listings(c, &dir);
}

/// A redb ledger keeping 2,000 requests, 1,990 of them denied and 10 pending: every request listed, against
/// the unresolved ones only (the records of settled requests left undecoded).
fn listings(c: &mut Criterion, dir: &TempDir) {
    let ledger: Arc<dyn ApprovalLedger> =
        Arc::new(RedbLedger::open(dir.path().join("listings.redb")).expect("the ledger opens"));
    let approvals = approvals(Arc::clone(&ledger));
    let calls: Vec<BenchCall> = (0..2_000).map(BenchCall::refund).collect();
    let interrupts = request_all(&approvals, &calls);
    let denials = block_on(join_all(interrupts[10..].iter().map(|interrupt| approvals.deny(interrupt, "bob", None))));
    assert!(denials.iter().all(Result::is_ok), "every denial is recorded");
    assert_eq!(ledger.unresolved_requests().expect("listed").len(), 10);

    let mut group = c.benchmark_group("ledger_listing_2000_kept_10_open");
    group.sample_size(20);
    group.bench_function("list_requests", |b| b.iter(|| black_box(ledger.list_requests().expect("listed"))));
    group
        .bench_function("unresolved_requests", |b| b.iter(|| black_box(ledger.unresolved_requests().expect("listed"))));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = ledgers
}
criterion_main!(benches);
