//! What a durable guard costs on the dispatch path: an escalated call's first pass (the request recorded)
//! and its resume (the grant spent), an effect tool (reserve + commit), an audited call, and all of them
//! at once, over one shared redb file with durable commits — next to the same dispatcher over memory
//! stores (the CPU part) and a raw redb insert + commit measured in the same run (the floor).
//!
//! A last group measures throughput: 32 everything-on calls dispatched at once (their writes share the
//! database's commits) against one raw commit per call.
//!
//! `cargo bench -p agent-airlock-benches --bench durable`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::effect::{EffectStore, RedbEffectStore};
use agent_airlock::keys::AuditKey;
use agent_airlock::ledger::{ApprovalLedger, MemoryLedger, RedbLedger};
use agent_airlock::store::{RedbOpenOptions, open_database};
use agent_airlock::{Dispatcher, ManualClock, Outcome, Status, airlock_tool, tool};
use agent_airlock_benches::{BenchCall, START, approvals, approve_calls, block_on};
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime};
use futures_util::future::join_all;
use redb::{Database, Durability, TableDefinition};

const RAW: TableDefinition<u64, &[u8]> = TableDefinition::new("bench_raw");

/// Dispatches in flight at once in the concurrency group.
const CONCURRENT: u64 = 32;

/// Refund a payment.
#[airlock_tool(escalate = "moves money")]
fn refund(
    /// The payment.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
) -> String {
    format!("refunded {amount} on {payment_id}")
}

/// Charge a payment, once per payment id.
#[airlock_tool(effect = "charge:{payment_id}")]
fn charge(
    /// The payment.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
) -> String {
    format!("charged {amount} on {payment_id}")
}

/// Look a payment up.
#[airlock_tool]
fn lookup(
    /// The payment.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
) -> String {
    format!("{payment_id}: {amount}")
}

/// Refund a payment, approved by a human, once per payment id.
#[airlock_tool(escalate = "moves money", effect = "refund:{payment_id}")]
fn guarded_refund(
    /// The payment.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
) -> String {
    format!("refunded {amount} on {payment_id}")
}

/// The stores one dispatcher uses.
#[derive(Clone)]
struct Stores {
    ledger: Arc<dyn ApprovalLedger>,
    effects: Arc<dyn EffectStore>,
    audit: Arc<AuditLog>,
}

fn audit_config() -> AuditConfig {
    AuditConfig { key: Some(AuditKey::new("bench", &[0x3c; 32]).expect("a valid key")), ..AuditConfig::default() }
}

fn dispatcher(stores: &Stores, audited: bool) -> Dispatcher {
    let mut builder = Dispatcher::builder()
        .tool(tool!(refund))
        .tool(tool!(charge))
        .tool(tool!(lookup))
        .tool(tool!(guarded_refund))
        .interrupt_approvals(approvals(Arc::clone(&stores.ledger)))
        .effects(Arc::clone(&stores.effects))
        .clock(ManualClock::new(START));
    if audited {
        builder = builder.audit(Arc::clone(&stores.audit));
    }
    builder.build().expect("distinct names")
}

fn expect_success(outcome: Outcome) {
    let message = outcome.expect_message();
    assert_eq!(message.status, Status::Success, "{}", message.content);
    black_box(message);
}

/// The dispatch cases over the stores `fresh` returns for each measurement sample (new memory stores per
/// sample keep memory flat; the redb stores are shared).
fn cases(group: &mut BenchmarkGroup<'_, WallTime>, fresh: &dyn Fn() -> Stores) {
    let mut next = 0u64;
    let mut numbered = |count: u64| {
        let first = next;
        next += count;
        first..first + count
    };

    // Nothing durable: the baseline the others add to.
    group.bench_function("allowed", |b| {
        b.iter_custom(|iters| {
            let plain = dispatcher(&fresh(), false);
            let calls: Vec<BenchCall> = numbered(iters).map(|n| BenchCall::to_tool("lookup", n)).collect();
            let start = Instant::now();
            for call in &calls {
                expect_success(block_on(plain.dispatch(call.tool_call(), &call.context(None))));
            }
            start.elapsed()
        })
    });

    // One audit record appended (one commit).
    group.bench_function("allowed_audited", |b| {
        b.iter_custom(|iters| {
            let audited = dispatcher(&fresh(), true);
            let calls: Vec<BenchCall> = numbered(iters).map(|n| BenchCall::to_tool("lookup", n)).collect();
            let start = Instant::now();
            for call in &calls {
                expect_success(block_on(audited.dispatch(call.tool_call(), &call.context(None))));
            }
            start.elapsed()
        })
    });

    // The effect key reserved before the tool runs and committed after (two commits).
    group.bench_function("effect_reserve_commit", |b| {
        b.iter_custom(|iters| {
            let plain = dispatcher(&fresh(), false);
            let calls: Vec<BenchCall> = numbered(iters).map(|n| BenchCall::to_tool("charge", n)).collect();
            let start = Instant::now();
            for call in &calls {
                expect_success(block_on(plain.dispatch(call.tool_call(), &call.context(None))));
            }
            start.elapsed()
        })
    });

    // First pass of an escalated call: bound, sealed, recorded as pending (one commit), interrupted.
    group.bench_function("escalated_first_pass_interrupt", |b| {
        b.iter_custom(|iters| {
            let plain = dispatcher(&fresh(), false);
            let calls: Vec<BenchCall> = numbered(iters).map(BenchCall::refund).collect();
            let start = Instant::now();
            for call in &calls {
                let outcome = block_on(plain.dispatch(call.tool_call(), &call.context(None)));
                assert!(matches!(outcome, Outcome::Interrupt { .. }), "the first pass interrupts");
                black_box(outcome);
            }
            start.elapsed()
        })
    });

    // Resume with an approval: the binding derived again, the grant spent once (one commit), the tool run.
    group.bench_function("escalated_resumed_admitted", |b| {
        b.iter_custom(|iters| {
            let stores = fresh();
            let plain = dispatcher(&stores, false);
            let approvals = approvals(Arc::clone(&stores.ledger));
            let approved = approve_calls(&approvals, numbered(iters).map(BenchCall::refund).collect());
            let start = Instant::now();
            for (call, resume) in &approved {
                expect_success(block_on(plain.dispatch(call.tool_call(), &call.context(Some(resume.clone())))));
            }
            start.elapsed()
        })
    });

    // Everything on: a resumed, approved effect tool with audit — a spend, a reservation and its commit,
    // and two audit records (approved, executed).
    group.bench_function("escalated_effect_audited_resumed", |b| {
        b.iter_custom(|iters| {
            let stores = fresh();
            let audited = dispatcher(&stores, true);
            let approvals = approvals(Arc::clone(&stores.ledger));
            let calls = numbered(iters).map(|n| BenchCall::to_tool("guarded_refund", n)).collect();
            let approved = approve_calls(&approvals, calls);
            let start = Instant::now();
            for (call, resume) in &approved {
                expect_success(block_on(audited.dispatch(call.tool_call(), &call.context(Some(resume.clone())))));
            }
            start.elapsed()
        })
    });
}

fn durable(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");

    // The floor, in the same run: one raw 300 B insert + commit.
    let mut group = c.benchmark_group("durable_dispatch_redb");
    group.sample_size(20);
    {
        let db = Database::create(dir.path().join("raw.redb")).expect("the raw database opens");
        let value = [0x61u8; 300];
        let mut next = 0u64;
        group.bench_function("floor_redb_insert_commit_300B", |b| {
            b.iter(|| {
                next += 1;
                let mut txn = db.begin_write().expect("a transaction");
                txn.set_durability(Durability::Immediate).expect("durable");
                txn.open_table(RAW).expect("the table").insert(next, value.as_slice()).expect("inserted");
                txn.commit().expect("committed");
            })
        });
    }

    // One redb file shared by the ledger, the effect records and the audit log, as DESIGN §8 suggests.
    let database = Arc::new(
        open_database(dir.path().join("airlock.redb"), &RedbOpenOptions::default()).expect("the database opens"),
    );
    let stores = Stores {
        ledger: Arc::new(RedbLedger::from_database(Arc::clone(&database)).expect("the ledger opens")),
        effects: Arc::new(RedbEffectStore::new(Arc::clone(&database)).expect("the effect store opens")),
        audit: Arc::new(AuditLog::with_database(Arc::clone(&database), audit_config()).expect("the audit log opens")),
    };
    cases(&mut group, &|| stores.clone());
    group.finish();

    // Throughput: 32 everything-on calls dispatched at once on one thread (their writes share commits),
    // next to one raw commit per call, one call after another (what a store without group commit allows
    // at best). Both count calls per second.
    let mut group = c.benchmark_group("durable_concurrency_redb");
    group.sample_size(10);
    group.throughput(Throughput::Elements(CONCURRENT));
    {
        let db = Database::create(dir.path().join("raw_per_call.redb")).expect("the raw database opens");
        let value = [0x61u8; 300];
        let mut next = 0u64;
        group.bench_function("one_commit_per_call_32", |b| {
            b.iter(|| {
                for _ in 0..CONCURRENT {
                    next += 1;
                    let mut txn = db.begin_write().expect("a transaction");
                    txn.set_durability(Durability::Immediate).expect("durable");
                    txn.open_table(RAW).expect("the table").insert(next, value.as_slice()).expect("inserted");
                    txn.commit().expect("committed");
                }
            })
        });
    }
    let mut next = 1u64 << 40;
    group.bench_function("escalated_effect_audited_resumed_32_concurrent", |b| {
        b.iter_custom(|iters| {
            let audited = dispatcher(&stores, true);
            let approvals = approvals(Arc::clone(&stores.ledger));
            let calls = (next..next + iters * CONCURRENT).map(|n| BenchCall::to_tool("guarded_refund", n)).collect();
            next += iters * CONCURRENT;
            let approved = approve_calls(&approvals, calls);
            let start = Instant::now();
            for batch in approved.chunks(usize::try_from(CONCURRENT).expect("small")) {
                let outcomes = block_on(join_all(batch.iter().map(|(call, resume)| {
                    let context = call.context(Some(resume.clone()));
                    let audited = &audited;
                    async move { audited.dispatch(call.tool_call(), &context).await }
                })));
                outcomes.into_iter().for_each(expect_success);
            }
            start.elapsed()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("durable_dispatch_memory");
    cases(&mut group, &|| {
        // The effect records live beside the ledger's, so a spend and a reservation are one step.
        let ledger = Arc::new(MemoryLedger::new());
        Stores { effects: ledger.effects(), ledger, audit: Arc::new(AuditLog::in_memory(audit_config())) }
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = durable
}
criterion_main!(benches);
