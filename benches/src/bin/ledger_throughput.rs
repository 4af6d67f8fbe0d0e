//! Durable spends from 1, 8 and 32 concurrent resumers against one `RedbLedger`, next to what one commit
//! per spend gives on the same disk in the same round: spends/s, p50/p99 latency, commits per spend.
//!
//! Every resumer is a thread admitting its own pre-approved grants (`admit_blocking`, the resume path of
//! the dispatcher). After each run the harness checks exactly-once: every grant was admitted once, a
//! second admission of each is `AlreadySpent`, and the ledger records each grant as spent.
//!
//! The rows of one round run back to back (floor, redb alone, then the ledger), so a ratio compares
//! figures taken under the same disk load; the machine is shared, so look at ratios within a round.
//!
//! `cargo run --release -p agent-airlock-benches --bin ledger_throughput -- [--spends 2048] [--rounds 3] [--resumers 1,8,32]`

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt as _;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use agent_airlock::AdmitError;
use agent_airlock::ledger::{ApprovalLedger, GrantState, RedbLedger};
use agent_airlock_benches::{BenchCall, approvals, approved_calls, percentiles};
use redb::{Database, Durability, TableDefinition};
use serde_json::Value;

const RAW: TableDefinition<u64, &[u8]> = TableDefinition::new("bench_raw");
const RECORD: usize = 300;

struct Options {
    spends: u64,
    rounds: usize,
    resumers: Vec<u64>,
}

fn options() -> Options {
    let mut options = Options { spends: 2048, rounds: 3, resumers: vec![1, 8, 32] };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&format!("`{flag}` needs a value")));
        match flag.as_str() {
            "--spends" => options.spends = value.parse().unwrap_or_else(|_| usage("`--spends` takes a count")),
            "--rounds" => options.rounds = value.parse().unwrap_or_else(|_| usage("`--rounds` takes a count")),
            "--resumers" => {
                options.resumers = value
                    .split(',')
                    .map(|n| n.trim().parse().unwrap_or_else(|_| usage("`--resumers` takes counts like `1,8,32`")))
                    .collect()
            }
            other => usage(&format!("unknown option `{other}`")),
        }
    }
    options
}

fn usage(message: &str) -> ! {
    eprintln!("error: {message}\nusage: ledger_throughput [--spends 2048] [--rounds 3] [--resumers 1,8,32]");
    std::process::exit(2)
}

/// One measured row of one round.
struct Row {
    what: String,
    threads: u64,
    ops: u64,
    elapsed: Duration,
    latencies_us: Vec<f64>,
    commits: u64,
}

impl Row {
    fn per_second(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `per_thread` on `threads` threads started together; each returns its operations' latencies.
fn concurrently<S: Send + 'static>(
    slices: Vec<S>,
    per_thread: impl Fn(S) -> Vec<f64> + Send + Sync + 'static,
) -> (Duration, Vec<f64>) {
    let barrier = Arc::new(Barrier::new(slices.len() + 1));
    let per_thread = Arc::new(per_thread);
    let workers: Vec<_> = slices
        .into_iter()
        .map(|slice| {
            let barrier = Arc::clone(&barrier);
            let per_thread = Arc::clone(&per_thread);
            std::thread::spawn(move || {
                barrier.wait();
                per_thread(slice)
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.join().expect("a worker finished"));
    }
    (start.elapsed(), latencies)
}

fn timed(mut op: impl FnMut()) -> f64 {
    let start = Instant::now();
    op();
    start.elapsed().as_secs_f64() * 1e6
}

/// The floor: `ops` durable 300 B writes, one after another.
fn floor(dir: &std::path::Path, ops: u64) -> Row {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("floor.bin"))
        .expect("the floor file opens");
    let value = [0x61u8; RECORD];
    file.write_all_at(&value, 0).expect("written");
    file.sync_all().expect("synced");
    let start = Instant::now();
    let latencies = (0..ops)
        .map(|_| {
            timed(|| {
                file.write_all_at(&value, 0).expect("written");
                file.sync_data().expect("synced");
            })
        })
        .collect();
    Row {
        what: "floor: pwrite + fdatasync 300 B".into(),
        threads: 1,
        ops,
        elapsed: start.elapsed(),
        latencies_us: latencies,
        commits: ops,
    }
}

/// One commit per spend: `threads` threads each removing their own keys from a raw redb table, one write
/// transaction (and one durable commit) per removal. redb runs write transactions one at a time.
fn redb_one_commit_per_spend(dir: &std::path::Path, threads: u64, ops: u64) -> Row {
    let db = Arc::new(Database::create(dir.join(format!("raw-{threads}.redb"))).expect("the raw database opens"));
    let value = [0x61u8; RECORD];
    let txn = db.begin_write().expect("a transaction");
    {
        let mut table = txn.open_table(RAW).expect("the table");
        for key in 0..ops {
            table.insert(key, value.as_slice()).expect("inserted");
        }
    }
    txn.commit().expect("committed");
    let per = ops / threads;
    let slices: Vec<(Arc<Database>, std::ops::Range<u64>)> =
        (0..threads).map(|t| (Arc::clone(&db), t * per..(t + 1) * per)).collect();
    let (elapsed, latencies) = concurrently(slices, |(db, keys)| {
        keys.map(|key| {
            timed(|| {
                let mut txn = db.begin_write().expect("a transaction");
                txn.set_durability(Durability::Immediate).expect("durable");
                let old =
                    txn.open_table(RAW).expect("the table").remove(key).expect("removed").map(|v| v.value().len());
                assert_eq!(old, Some(RECORD), "each key is removed once");
                txn.commit().expect("committed");
            })
        })
        .collect()
    });
    Row {
        what: "redb remove + commit, one commit per spend".into(),
        threads,
        ops: per * threads,
        elapsed,
        latencies_us: latencies,
        commits: per * threads,
    }
}

/// `resumers` threads each admitting their own pre-approved grants against one `RedbLedger`, then the
/// exactly-once checks.
fn ledger_spends(dir: &std::path::Path, resumers: u64, ops: u64) -> Row {
    let ledger = Arc::new(RedbLedger::open(dir.join(format!("ledger-{resumers}.redb"))).expect("the ledger opens"));
    let approvals = approvals(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>);
    let per = ops / resumers;
    let approved = approved_calls(&approvals, 0, per * resumers);
    let before = ledger.writer_stats();
    let mut remaining = approved.clone();
    let slices: Vec<(agent_airlock::InterruptApprovals, Vec<(BenchCall, Value)>)> =
        (0..resumers).map(|_| (approvals.clone(), remaining.drain(..per as usize).collect())).collect();
    let (elapsed, latencies) = concurrently(slices, |(approvals, calls)| {
        calls
            .iter()
            .map(|(call, resume)| {
                timed(|| {
                    approvals.admit_blocking(&call.input(), resume).expect("a fresh grant is admitted");
                })
            })
            .collect()
    });
    let after = ledger.writer_stats();

    // Exactly once: every grant is spent, and a second admission of each is refused as spent.
    for (call, resume) in &approved {
        match approvals.admit_blocking(&call.input(), resume) {
            Err(AdmitError::AlreadySpent { .. }) => {}
            other => panic!("a spent grant was admitted again or refused otherwise: {other:?}"),
        }
        let grant_id = resume["airlock_grant"]["grant_id"].as_str().expect("a grant id");
        let entry = ledger.find_grant(grant_id).expect("readable").expect("recorded");
        assert!(matches!(entry.state, GrantState::Spent { .. }), "grant {grant_id} is recorded as spent");
    }
    let verified = ledger.writer_stats();
    assert_eq!(verified.writes - after.writes, approved.len() as u64, "every replay reached the ledger");

    Row {
        what: "RedbLedger admit (group commit)".into(),
        threads: resumers,
        ops: per * resumers,
        elapsed,
        latencies_us: latencies,
        commits: after.commits - before.commits,
    }
}

/// What a row measured: (what, threads).
type RowKey = (String, u64);

/// One round's figures of a row: spends/s, p50 µs, p99 µs.
type Figures = (f64, f64, f64);

fn print_row(round: usize, row: &mut Row) -> Figures {
    let ops = row.ops;
    let per_second = row.per_second();
    let q = percentiles(&mut row.latencies_us, &[0.5, 0.99]);
    let per_commit = ops as f64 / row.commits.max(1) as f64;
    println!(
        "| {round} | {} | {} | {ops} | {per_second:.0} | {:.0} | {:.0} | {} | {per_commit:.1} |",
        row.what, row.threads, q[0], q[1], row.commits
    );
    (per_second, q[0], q[1])
}

fn main() {
    let options = options();
    println!(
        "{} spends per row, {} rounds, resumers {:?}; latencies in µs\n",
        options.spends, options.rounds, options.resumers
    );
    println!("| round | what | threads | spends | spends/s | p50 µs | p99 µs | commits | spends/commit |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut summary: Vec<(RowKey, Vec<Figures>)> = Vec::new();
    let mut keep = |row: &mut Row, round: usize| {
        let figures = print_row(round, row);
        let key = (row.what.clone(), row.threads);
        match summary.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rounds)) => rounds.push(figures),
            None => summary.push((key, vec![figures])),
        }
    };
    for round in 1..=options.rounds {
        let dir = tempfile::tempdir().expect("a temp dir");
        keep(&mut floor(dir.path(), options.spends.min(1000)), round);
        for &n in &options.resumers {
            keep(&mut redb_one_commit_per_spend(dir.path(), n, options.spends), round);
            keep(&mut ledger_spends(dir.path(), n, options.spends), round);
        }
    }
    println!("\nMedian over rounds (min–max of spends/s):\n");
    println!("| what | threads | spends/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|");
    for ((what, threads), rounds) in &mut summary {
        let mut rates: Vec<f64> = rounds.iter().map(|r| r.0).collect();
        let mut p50: Vec<f64> = rounds.iter().map(|r| r.1).collect();
        let mut p99: Vec<f64> = rounds.iter().map(|r| r.2).collect();
        let rate = percentiles(&mut rates, &[0.0, 0.5, 1.0]);
        let p50 = percentiles(&mut p50, &[0.5])[0];
        let p99 = percentiles(&mut p99, &[0.5])[0];
        println!("| {what} | {threads} | {:.0} ({:.0}–{:.0}) | {p50:.0} | {p99:.0} |", rate[1], rate[0], rate[2]);
    }
}
