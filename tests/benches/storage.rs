//! What the audit log and the effect records cost on the dispatch path, next to the floor they sit on:
//! one redb insert + commit with default (immediate) durability.
//!
//! `cargo bench -p agent-airlock-tests --bench storage`

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use agent_airlock::audit::{self, AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use agent_airlock::effect::{EffectStore, RedbEffectStore};
use criterion::{Criterion, criterion_group, criterion_main};
use redb::{Database, TableDefinition};
use serde_json::{Value, json};

const RAW: TableDefinition<u64, &[u8]> = TableDefinition::new("bench_raw");

fn arguments() -> Value {
    json!({"payment_id": "pi_3MtwBwLkdIwHu7ix28a3tqPa", "amount": 2500, "currency": "eur", "reason": "requested_by_customer"})
}

fn keyed() -> AuditConfig {
    AuditConfig { key: Some(agent_airlock_tests::audit_test_key()), ..AuditConfig::default() }
}

fn append_one(log: &AuditLog, arguments: &Value, i: u64) {
    let call_id = format!("call_{i}");
    let event = AuditEvent::new("refund", &call_id, AuditOutcome::Executed)
        .thread_id(Some("thread-1"))
        .rule(Some("attribute"))
        .arguments(arguments)
        .result(arguments);
    black_box(log.append(event).expect("appended"));
}

/// Total time for `total` appends spread over `threads` threads, all started together.
fn concurrent_appends(log: &Arc<AuditLog>, threads: u64, total: u64) -> Duration {
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let log = Arc::clone(log);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let arguments = arguments();
                barrier.wait();
                for i in 0..total / threads {
                    append_one(&log, &arguments, t * 1_000_000 + i);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for worker in workers {
        worker.join().expect("a worker ran");
    }
    start.elapsed()
}

fn audit(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut group = c.benchmark_group("audit");
    group.sample_size(30);

    // The floor: one insert + commit of a record-sized value.
    let db = Database::create(dir.path().join("raw.redb")).expect("opens");
    let value = vec![7u8; 600];
    let mut seq = 0u64;
    group.bench_function("redb_insert_commit_floor", |b| {
        b.iter(|| {
            seq += 1;
            let txn = db.begin_write().expect("a transaction");
            txn.open_table(RAW).expect("a table").insert(seq, value.as_slice()).expect("inserted");
            txn.commit().expect("committed");
        })
    });
    drop(db);

    let arguments = arguments();
    let memory = AuditLog::in_memory(keyed());
    let mut i = 0;
    group.bench_function("append_memory_keyed", |b| {
        b.iter(|| {
            i += 1;
            append_one(&memory, &arguments, i)
        })
    });

    let log = Arc::new(AuditLog::open(dir.path().join("audit.redb"), keyed()).expect("opens"));
    group.bench_function("append_redb_keyed_1_thread", |b| {
        b.iter(|| {
            i += 1;
            append_one(&log, &arguments, i)
        })
    });
    // Per-append cost with 8 threads appending at once: group commit shares each commit.
    group.bench_function("append_redb_keyed_8_threads_per_append", |b| {
        b.iter_custom(|iters| {
            let total = iters.max(8).div_ceil(8) * 8;
            concurrent_appends(&log, 8, total).mul_f64(iters as f64 / total as f64)
        })
    });

    let verified = AuditLog::in_memory(keyed());
    for n in 0..1_000 {
        append_one(&verified, &arguments, n);
    }
    group.bench_function("verify_1000_records_keyed", |b| {
        b.iter(|| black_box(audit::verify(&verified, None).expect("intact")))
    });
    group.finish();
}

fn effects(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = RedbEffectStore::open(dir.path().join("effects.redb")).expect("opens");
    let now = Duration::from_secs(1_700_000_000);
    let lease = Duration::from_secs(30);
    let mut group = c.benchmark_group("effects");
    group.sample_size(30);
    let mut i = 0u64;
    group.bench_function("reserve_then_commit", |b| {
        b.iter(|| {
            i += 1;
            let reservation = store.reserve(&format!("refund:pi_{i}"), lease, now).expect("reserved");
            black_box(store.commit(&reservation, now).expect("committed"));
        })
    });
    group.bench_function("reserve_refused_as_duplicate", |b| {
        b.iter(|| black_box(store.reserve("refund:pi_1", lease, now).expect_err("a duplicate")))
    });
    group.finish();
}

criterion_group!(benches, audit, effects);
criterion_main!(benches);
