//! Durable spends from 1, 8 and 32 concurrent resumers against one `RedbLedger`, next to what one commit
//! per spend gives on the same disk in the same round: spends/s, p50/p99 latency, commits per spend.
//!
//! Every resumer is a thread admitting its own pre-approved grants (`admit(..).wait()`, the resume path of
//! the dispatcher). After each run the harness checks exactly-once: every grant was admitted once, a
//! second admission of each is `AlreadySpent`, and the ledger records each grant as spent.
//!
//! The rows of one round run back to back (floor, redb alone, then the ledger), so a ratio compares
//! figures taken under the same disk load; the machine is shared, so look at ratios within a round.
//!
//! `cargo run --release -p agent-airlock-benches --bin ledger_throughput -- [--spends 1024] [--rounds 5] [--resumers 1,8,32]`

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt as _;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use agent_airlock::approval::AdmitError;
use agent_airlock::ledger::{ApprovalLedger, GrantState, RedbLedger};
use agent_airlock_benches::{
    BenchCall, RECORD, SPEND_GRANTS, SPEND_STATUS, approvals, approved_calls, percentiles, request_all,
    seed_spend_tables,
};
use redb::{Database, Durability, TableDefinition};
use serde_json::Value;

const RAW: TableDefinition<u64, &[u8]> = TableDefinition::new("bench_raw");

const FLOOR: &str = "floor: pwrite + fdatasync 300 B";
const ONE_COMMIT: &str = "redb remove + commit, one commit per spend";
const LEDGER_ADMIT: &str = "RedbLedger admit (spend, group commit)";
const LEDGER_APPROVE: &str = "RedbLedger approve";
const SPEND_SHAPED: &str = "redb 2 tables × 1 update + commit, in the ledger's file";
const SAME_FILE_ADMIT: &str = "RedbLedger admit, interleaved with the row above";

struct Options {
    spends: u64,
    rounds: usize,
    resumers: Vec<u64>,
}

fn options() -> Options {
    let mut options = Options { spends: 1024, rounds: 5, resumers: vec![1, 8, 32] };
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
    eprintln!("error: {message}\nusage: ledger_throughput [--spends 1024] [--rounds 5] [--resumers 1,8,32]");
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
    Row { what: FLOOR.into(), threads: 1, ops, elapsed: start.elapsed(), latencies_us: latencies, commits: ops }
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
        what: ONE_COMMIT.into(),
        threads,
        ops: per * threads,
        elapsed,
        latencies_us: latencies,
        commits: per * threads,
    }
}

/// A spend next to its own writes without the ledger, op by op, in the ledger's own file: `ops` times, a
/// raw write transaction updating one existing ~300 B record in each of two tables keyed by random-looking
/// 32-hex ids (as grants and request statuses are) and committing, then one `admit(..).wait()` of a
/// pre-approved grant. What the ledger adds to the redb commit it must make is the difference.
fn spend_next_to_raw_commit(dir: &std::path::Path, ops: u64) -> [Row; 2] {
    let ledger = Arc::new(RedbLedger::open(dir.join("ledger-same-file.redb")).expect("the ledger opens"));
    let approvals = approvals(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>);
    let approved = approved_calls(&approvals, 0, ops);
    let db = Arc::clone(ledger.database());
    let value = [0x61u8; RECORD];
    let ids = seed_spend_tables(&db, ops);
    let (mut raw, mut admit) = (Vec::new(), Vec::new());
    let (mut raw_time, mut admit_time) = (Duration::ZERO, Duration::ZERO);
    for (id, (call, resume)) in ids.iter().zip(&approved) {
        let start = Instant::now();
        let mut txn = db.begin_write().expect("a transaction");
        txn.set_durability(Durability::Immediate).expect("durable");
        txn.open_table(SPEND_GRANTS).expect("the table").insert(id.as_str(), value.as_slice()).expect("set");
        txn.open_table(SPEND_STATUS).expect("the table").insert(id.as_str(), value.as_slice()).expect("set");
        txn.commit().expect("committed");
        let elapsed = start.elapsed();
        raw_time += elapsed;
        raw.push(elapsed.as_secs_f64() * 1e6);

        let start = Instant::now();
        approvals.admit(&call.input(), resume).wait().expect("a fresh grant is admitted");
        let elapsed = start.elapsed();
        admit_time += elapsed;
        admit.push(elapsed.as_secs_f64() * 1e6);
    }
    [
        Row { what: SPEND_SHAPED.into(), threads: 1, ops, elapsed: raw_time, latencies_us: raw, commits: ops },
        Row { what: SAME_FILE_ADMIT.into(), threads: 1, ops, elapsed: admit_time, latencies_us: admit, commits: ops },
    ]
}

/// `ops` approvals one after another (each a durable commit), on a fresh ledger.
fn ledger_approvals(dir: &std::path::Path, ops: u64) -> Row {
    let ledger = Arc::new(RedbLedger::open(dir.join("ledger-approve.redb")).expect("the ledger opens"));
    let approvals = approvals(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>);
    let calls: Vec<BenchCall> = (0..ops).map(BenchCall::refund).collect();
    let interrupts = request_all(&approvals, &calls);
    let before = ledger.writer_stats();
    let start = Instant::now();
    let latencies = interrupts
        .iter()
        .map(|interrupt| {
            timed(|| {
                approvals.approve(interrupt, "alice").wait().expect("approved");
            })
        })
        .collect();
    let elapsed = start.elapsed();
    Row {
        what: LEDGER_APPROVE.into(),
        threads: 1,
        ops,
        elapsed,
        latencies_us: latencies,
        commits: ledger.writer_stats().commits - before.commits,
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
    let slices: Vec<(agent_airlock::approval::InterruptApprovals, Vec<(BenchCall, Value)>)> =
        (0..resumers).map(|_| (approvals.clone(), remaining.drain(..per as usize).collect())).collect();
    let (elapsed, latencies) = concurrently(slices, |(approvals, calls)| {
        calls
            .iter()
            .map(|(call, resume)| {
                timed(|| {
                    approvals.admit(&call.input(), resume).wait().expect("a fresh grant is admitted");
                })
            })
            .collect()
    });
    let after = ledger.writer_stats();

    // Exactly once: every grant is spent, and a second admission of each is refused as spent.
    for (call, resume) in &approved {
        match approvals.admit(&call.input(), resume).wait() {
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
        what: LEDGER_ADMIT.into(),
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

/// Every row of one round.
type Round = [(RowKey, Figures)];

fn print_row(round: usize, row: &mut Row) -> Figures {
    let ops = row.ops;
    let per_second = row.per_second();
    let q = percentiles(&mut row.latencies_us, &[0.5, 0.99]);
    let per_commit = ops as f64 / row.commits.max(1) as f64;
    println!(
        "| {round} | {} | {} | {ops} | {per_second:.0} | {:.0} | {:.0} | {} | {per_commit:.1} |",
        row.what, row.threads, q[0], q[1], row.commits
    );
    // Show each row as it comes during a long run.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    (per_second, q[0], q[1])
}

fn main() {
    let options = options();
    println!(
        "{} spends per row, {} rounds, resumers {:?}; latencies in µs\n",
        options.spends, options.rounds, options.resumers
    );
    println!("| round | what | threads | ops | ops/s | p50 µs | p99 µs | commits | ops/commit |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let single = options.spends.min(500);
    let mut rounds: Vec<Vec<(RowKey, Figures)>> = Vec::new();
    for round in 1..=options.rounds {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut rows = vec![floor(dir.path(), single)];
        rows.extend(spend_next_to_raw_commit(dir.path(), single));
        rows.push(ledger_approvals(dir.path(), single));
        for &n in &options.resumers {
            rows.push(redb_one_commit_per_spend(dir.path(), n, options.spends));
            rows.push(ledger_spends(dir.path(), n, options.spends));
        }
        rounds.push(rows.iter_mut().map(|row| ((row.what.clone(), row.threads), print_row(round, row))).collect());
    }
    summarize(&rounds);
}

/// Medians over rounds, and each row's ratios to rows of the same round: its p50 to the floor's p50, its
/// throughput to one commit per spend at the same concurrency and to the same row with one thread.
fn summarize(rounds: &[Vec<(RowKey, Figures)>]) {
    let find = |round: &Round, what: &str, threads: u64| {
        round.iter().find(|((w, t), _)| w == what && *t == threads).map(|(_, figures)| *figures)
    };
    let median = |mut values: Vec<f64>| percentiles(&mut values, &[0.5])[0];
    let Some(first) = rounds.first() else { return };
    println!(
        "\nMedians over {} rounds (spends/s: min–max over rounds; ratios: per round, then the median):\n",
        rounds.len()
    );
    println!(
        "| what | threads | ops/s | p50 µs | p99 µs | p50 / floor p50 | ops/s / one commit per spend | ops/s / 1 thread |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for ((what, threads), _) in first {
        let figures: Vec<Figures> = rounds.iter().filter_map(|round| find(round, what, *threads)).collect();
        let mut rates: Vec<f64> = figures.iter().map(|f| f.0).collect();
        let rate = percentiles(&mut rates, &[0.0, 0.5, 1.0]);
        let p50 = median(figures.iter().map(|f| f.1).collect());
        let p99 = median(figures.iter().map(|f| f.2).collect());
        let ratio = |other: &dyn Fn(&Round) -> Option<f64>, mine: &dyn Fn(Figures) -> f64| {
            let ratios: Vec<f64> =
                rounds.iter().filter_map(|round| Some(mine(find(round, what, *threads)?) / other(round)?)).collect();
            if ratios.is_empty() { "-".to_owned() } else { format!("{:.2}", median(ratios)) }
        };
        let to_floor = ratio(&|round| find(round, FLOOR, 1).map(|f| f.1), &|f| f.1);
        let (to_naive, to_single) = if what == LEDGER_ADMIT {
            (
                ratio(&|round| find(round, ONE_COMMIT, *threads).map(|f| f.0), &|f| f.0),
                ratio(&|round| find(round, LEDGER_ADMIT, 1).map(|f| f.0), &|f| f.0),
            )
        } else {
            ("-".to_owned(), "-".to_owned())
        };
        println!(
            "| {what} | {threads} | {:.0} ({:.0}–{:.0}) | {p50:.0} | {p99:.0} | {to_floor} | {to_naive} | {to_single} |",
            rate[1], rate[0], rate[2]
        );
    }
    let overhead: Vec<f64> = rounds
        .iter()
        .filter_map(|round| Some(find(round, SAME_FILE_ADMIT, 1)?.1 / find(round, SPEND_SHAPED, 1)?.1))
        .collect();
    if !overhead.is_empty() {
        println!(
            "\nA spend's p50 over the p50 of its own writes committed raw in the same file (per round, median): {:.2}",
            median(overhead)
        );
    }
}
