//! What a grant spend costs on PostgreSQL, next to the floor on the same server: one bare single-row
//! `INSERT … RETURNING` (autocommit: one statement, one commit, one round trip). Then spends' throughput
//! with 1, 8 and 32 clients spending at once through one ledger (one pool of 32 connections). And a dispatch
//! under a shared rate limit (its one `INSERT … ON CONFLICT … RETURNING` on the same server), next to the
//! same dispatch with its bucket in memory.
//!
//! The server is a throwaway one (`initdb` into a temporary directory, a Unix socket) with a
//! deployment's durability: `fsync=on`, `synchronous_commit=on`, so every commit waits for the disk.
//!
//! `cargo bench -p agent-airlock-benches --bench postgres -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use agent_airlock::ledger::{ApprovalLedger, GrantRecord, PostgresLedger, RequestRecord, SpendAttempt};
use agent_airlock::store::PostgresOptions;
use agent_airlock::{CallContext, Dispatcher, Policy, RateScope, ToolCall, airlock_tool, tool};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pg_server::PgServer;
use serde_json::json;

// The integration tests' throwaway server, compiled in from its one source (this crate does not depend on
// the tests crate); the bench uses only part of it.
#[allow(dead_code)]
#[path = "../../tests/src/pg_server.rs"]
mod pg_server;

const NOW: Duration = Duration::from_secs(1_700_000_000);

/// Answer (the tool of the rate-limit benchmark: nothing but the gates).
#[airlock_tool]
fn ping() -> String {
    "pong".to_owned()
}

/// Records and grants `count` requests numbered from `first` (untimed), written concurrently; returns the
/// spends that use them.
fn granted(ledger: &PostgresLedger, first: u64, count: u64) -> Vec<SpendAttempt> {
    let ids: Vec<u64> = (first..first + count).collect();
    let requests: Vec<_> = ids
        .iter()
        .map(|n| {
            ledger.record_request(
                RequestRecord {
                    request_id: format!("r{n}"),
                    key_id: "k1".into(),
                    tool: "refund".into(),
                    rule: "attribute".into(),
                    reason: "moves money".into(),
                    binding: format!("b-{n}"),
                    requested_at: NOW,
                    interrupt: json!({"tool": "refund", "arguments": {"payment_id": format!("pi_{n}"), "amount": 2500}}),
                    caller: None,
                },
                None,
            )
        })
        .collect();
    for request in requests {
        request.wait().expect("recorded");
    }
    let grants: Vec<_> = ids
        .iter()
        .map(|n| {
            ledger.grant(
                GrantRecord {
                    grant_id: format!("g{n}"),
                    request_id: format!("r{n}"),
                    key_id: "k1".into(),
                    binding: format!("b-{n}"),
                    approver: "alice".into(),
                    co_approvers: Vec::new(),
                    signatures: Vec::new(),
                    granted_at: NOW,
                    expires_at: NOW + Duration::from_secs(600),
                },
                NOW,
            )
        })
        .collect();
    for grant in grants {
        grant.wait().expect("granted");
    }
    ids.iter()
        .map(|n| SpendAttempt {
            grant_id: format!("g{n}"),
            binding: format!("b-{n}"),
            now: NOW + Duration::from_secs(1),
        })
        .collect()
}

fn postgres(c: &mut Criterion) {
    let server = PgServer::start_durable();
    let url = server.fresh_database();
    let options = PostgresOptions { pool_size: 32, ..PostgresOptions::default() };
    let ledger = Arc::new(PostgresLedger::connect_with(&url, &options).expect("the ledger opens"));
    let mut next = 0u64;
    let mut numbered = |count: u64| {
        let first = next;
        next += count;
        first
    };

    let mut group = c.benchmark_group("postgres");
    group.sample_size(20);

    // The floor: one bare single-row insert, its id returned, from a client on the same socket.
    {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
            tokio::spawn(connection);
            client
                .batch_execute("CREATE TABLE bench_raw (id bigint PRIMARY KEY, payload text NOT NULL)")
                .await
                .expect("the table is created");
            client
        });
        let insert = runtime
            .block_on(client.prepare("INSERT INTO bench_raw (id, payload) VALUES ($1, $2) RETURNING id"))
            .expect("prepared");
        let payload = "a".repeat(300);
        let mut id = 0i64;
        group.bench_function("floor_insert_returning", |b| {
            b.iter(|| {
                id += 1;
                let row = runtime.block_on(client.query_one(&insert, &[&id, &payload])).expect("inserted");
                black_box(row.get::<_, i64>(0));
            })
        });
    }

    // One spend: the request and the grant locked, the grant rewritten as spent, one commit.
    group.bench_function("spend", |b| {
        b.iter_custom(|iters| {
            let attempts = granted(&ledger, numbered(iters), iters);
            let start = Instant::now();
            for attempt in attempts {
                black_box(ledger.spend(attempt).wait().expect("spent"));
            }
            start.elapsed()
        })
    });

    // One dispatch whose rate limit is shared through the database (one statement, autocommit), next to the
    // same dispatch with its bucket in memory: the difference is the shared acquire.
    {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let dispatcher = |shared: bool| {
            let policy = if shared {
                Policy::builder().shared_rate_limit("ping", "1000000/second", RateScope::PerTool)
            } else {
                Policy::builder().rate_limit("ping", "1000000/second")
            };
            Dispatcher::builder()
                .tool(tool!(ping))
                .policy(policy.build().expect("the policy builds"))
                .effects(ledger.effect_store())
                .build()
                .expect("the dispatcher builds")
        };
        for (name, shared) in [("dispatch_rate_in_memory", false), ("dispatch_rate_shared", true)] {
            let dispatcher = dispatcher(shared);
            let context = CallContext::new();
            group.bench_function(name, |b| {
                b.iter(|| {
                    let call = ToolCall::new("c", "ping", json!({}));
                    black_box(runtime.block_on(dispatcher.dispatch(call, &context)).expect_message());
                })
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("postgres_spend_clients");
    group.sample_size(10);
    for clients in [1u64, 8, 32] {
        group.throughput(Throughput::Elements(clients));
        group.bench_function(format!("{clients}"), |b| {
            b.iter_custom(|iters| {
                // Each client spends `iters` grants of its own, one after the other.
                let attempts = granted(&ledger, numbered(iters * clients), iters * clients);
                let barrier = Arc::new(Barrier::new(usize::try_from(clients).expect("small") + 1));
                let workers: Vec<_> = attempts
                    .chunks(usize::try_from(iters).expect("small"))
                    .map(|mine| {
                        let (ledger, barrier, mine) = (Arc::clone(&ledger), Arc::clone(&barrier), mine.to_vec());
                        std::thread::spawn(move || {
                            barrier.wait();
                            for attempt in mine {
                                black_box(ledger.spend(attempt).wait().expect("spent"));
                            }
                        })
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                for worker in workers {
                    worker.join().expect("the client ran");
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = postgres
}
criterion_main!(benches);
