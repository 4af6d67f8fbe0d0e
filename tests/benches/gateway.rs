//! The gateway's cost, in one run (BENCHMARKS.md §8): the added latency of a `tools/call` through
//! `airlock mcp` over calling the same upstream directly, both over stdio with rmcp's client, and the
//! gateway's resident memory idle and under a burst of 200 concurrent calls.
//!
//! The upstream is the Python SDK server of `tests/mcp/upstream_server.py` (its `read_note` tool); the
//! gateway runs the policy below (allow, audit every call to a redb file). Two gateways run side by side:
//! one whose `--db` is on the disk (each call's audit record is one durable commit, an `fdatasync`), and
//! one whose `--db` is on a tmpfs (`/dev/shm`), the same code with a flush that costs nothing, which is the
//! gateway's own work. (`airlock mcp` has no configuration without a store: it audits every call and spends
//! approvals through the ledger.) Calls alternate in blocks between the three paths so that load on the
//! shared machine falls on all alike. The raw cost of a durable redb commit on the same disk is timed in
//! the same run, so the disk line can be read against it.
//!
//! `cargo bench -p agent-airlock-tests --bench gateway` (`-- --calls N` to change the sample size).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_airlock_tests::python_env::PythonEnv;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::json;
use tokio::process::{Child, Command};

const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements.txt");
const BLOCK: usize = 50;
const BURST: usize = 200;

type Client = RunningService<RoleClient, ()>;

/// Starts `command` with piped stdio and connects rmcp's client to it.
async fn connect(mut command: Command) -> (Client, Child) {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("the server starts");
    let io = (child.stdout.take().expect("piped"), child.stdin.take().expect("piped"));
    (().serve(io).await.expect("the MCP handshake"), child)
}

async fn read_note(client: &Client) -> Duration {
    let arguments = json!({"name": "bench.txt"}).as_object().cloned();
    let params = CallToolRequestParams::new("read_note").with_arguments(arguments.unwrap_or_default());
    let started = Instant::now();
    let result = client.peer().call_tool(params).await.expect("a tool result");
    let took = started.elapsed();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The process's resident set, from `/proc`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// Whether `dir` is a tmpfs mount point (from `/proc/mounts`).
fn is_tmpfs(dir: &str) -> bool {
    std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines().any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        fields.next() == Some(dir) && fields.next() == Some("tmpfs")
    })
}

/// A redb file of its own for timing bare durable commits on a file system.
struct Commits {
    db: redb::Database,
    next: u64,
    times: Vec<Duration>,
}

impl Commits {
    const TABLE: redb::TableDefinition<'static, u64, &'static [u8]> = redb::TableDefinition::new("bench");

    fn create(dir: &Path) -> Commits {
        Commits {
            db: redb::Database::create(dir.join("commits.redb")).expect("a redb file"),
            next: 0,
            times: Vec::new(),
        }
    }

    /// Times `count` commits of one small row each, a write transaction at redb's default durability
    /// (`Immediate`), as every store of the runtime commits.
    fn run(&mut self, count: usize) {
        let row = [7u8; 256];
        for _ in 0..count {
            let started = Instant::now();
            let txn = self.db.begin_write().expect("a write transaction");
            txn.open_table(Self::TABLE).expect("the table").insert(self.next, row.as_slice()).expect("a row");
            txn.commit().expect("the commit");
            self.times.push(started.elapsed());
            self.next += 1;
        }
    }
}

/// Starts `airlock mcp` with its store at `db`, in front of the upstream logging to `log`.
fn gateway_command(db: &Path, policy: &Path, upstream: Command) -> Command {
    let mut command = Command::new(AIRLOCK);
    command.arg("--db").arg(db).args(["mcp", "--policy"]).arg(policy);
    command.arg("--").arg(upstream.as_std().get_program()).args(upstream.as_std().get_args());
    command
}

/// One path's percentiles, and what it adds over the direct path's when given.
fn line(label: &str, sorted: &[Duration], direct: Option<&[Duration]>) {
    let (p50, p99) = (percentile(sorted, 0.50), percentile(sorted, 0.99));
    let added = direct.map_or_else(String::new, |direct| {
        format!(
            "   added p50 {:>7.1} us  p99 {:>7.1} us",
            micros(p50) - micros(percentile(direct, 0.50)),
            micros(p99) - micros(percentile(direct, 0.99))
        )
    });
    println!("{label:<22} p50 {:>8.1} us  p99 {:>8.1} us{added}", micros(p50), micros(p99));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; only `--calls N` is ours.
    let calls: usize = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let venv = PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("the Python MCP SDK cannot be provisioned: {why}"));
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let memory = is_tmpfs("/dev/shm").then(|| tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm"));
    let path = |name: &str| scratch.path().join(name);
    std::fs::create_dir_all(path("notes")).expect("notes");
    std::fs::write(path("notes").join("bench.txt"), "a short note").expect("a note");
    std::fs::write(path("airlock.toml"), "version = 1\ndefault = \"allow\"\n").expect("the policy");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    runtime.block_on(async {
        let upstream = |log: &str| {
            let mut command = Command::new(venv.python());
            command.arg(UPSTREAM).arg(path(log)).arg(path("notes"));
            command
        };
        let (direct, _direct_child) = connect(upstream("direct.log")).await;
        let (gateway, gateway_child) =
            connect(gateway_command(&path("airlock.redb"), &path("airlock.toml"), upstream("gateway.log"))).await;
        let in_memory = match &memory {
            Some(dir) => Some(
                connect(gateway_command(
                    &dir.path().join("airlock.redb"),
                    &path("airlock.toml"),
                    upstream("gateway_tmpfs.log"),
                ))
                .await,
            ),
            None => None,
        };
        let pid = gateway_child.id().expect("the gateway runs");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle_kib = rss_kib(pid);

        // Warm every path up, then alternate blocks.
        for _ in 0..BLOCK {
            read_note(&direct).await;
            read_note(&gateway).await;
            if let Some((client, _)) = &in_memory {
                read_note(client).await;
            }
        }
        let mut direct_times = Vec::with_capacity(calls);
        let mut gateway_times = Vec::with_capacity(calls);
        let mut memory_times = Vec::with_capacity(calls);
        // The file systems' own commit latency, in blocks between the calls', so both see the same load.
        let mut disk_commits = Commits::create(scratch.path());
        let mut memory_commits = memory.as_ref().map(|dir| Commits::create(dir.path()));
        while direct_times.len() < calls {
            for _ in 0..BLOCK {
                direct_times.push(read_note(&direct).await);
            }
            if let Some((client, _)) = &in_memory {
                for _ in 0..BLOCK {
                    memory_times.push(read_note(client).await);
                }
            }
            for _ in 0..BLOCK {
                gateway_times.push(read_note(&gateway).await);
            }
            disk_commits.run(BLOCK);
            if let Some(commits) = &mut memory_commits {
                commits.run(BLOCK);
            }
        }
        let after_sequential_kib = rss_kib(pid);

        // A burst of concurrent calls through the (disk) gateway, its memory sampled while they run.
        let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = {
            let sampling = std::sync::Arc::clone(&sampling);
            std::thread::spawn(move || {
                let mut peak = 0;
                while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(rss_kib(pid));
                    std::thread::sleep(Duration::from_millis(2));
                }
                peak
            })
        };
        let burst_started = Instant::now();
        let burst: Vec<Duration> = futures_util::future::join_all((0..BURST).map(|_| read_note(&gateway))).await;
        let burst_wall = burst_started.elapsed();
        sampling.store(false, std::sync::atomic::Ordering::Relaxed);
        let burst_peak_kib = sampler.join().expect("the sampler");
        let after_burst_kib = rss_kib(pid);

        direct_times.sort();
        gateway_times.sort();
        memory_times.sort();
        disk_commits.times.sort();
        if let Some(commits) = &mut memory_commits {
            commits.times.sort();
        }
        let mut burst = burst;
        burst.sort();
        println!("calls per path: {calls} (blocks of {BLOCK}, alternating)");
        line("direct", &direct_times, None);
        if memory.is_some() {
            line("gateway, db on tmpfs", &memory_times, Some(&direct_times));
        } else {
            println!("gateway, db on tmpfs: not measured (/dev/shm is not a tmpfs here)");
        }
        line("gateway, db on disk", &gateway_times, Some(&direct_times));
        println!(
            "redb durable commit, disk   p50 {:>8.1} us  p99 {:>8.1} us ({calls} commits)",
            micros(percentile(&disk_commits.times, 0.50)),
            micros(percentile(&disk_commits.times, 0.99))
        );
        if let Some(commits) = &memory_commits {
            println!(
                "redb durable commit, tmpfs  p50 {:>8.1} us  p99 {:>8.1} us",
                micros(percentile(&commits.times, 0.50)),
                micros(percentile(&commits.times, 0.99))
            );
        }
        println!("gateway (disk) RSS idle {idle_kib} KiB, after {calls} sequential calls {after_sequential_kib} KiB");
        println!(
            "burst of {BURST} concurrent calls: wall {:.1} ms, per call p50 {:.1} ms p99 {:.1} ms; RSS peak {burst_peak_kib} KiB, after {after_burst_kib} KiB",
            burst_wall.as_secs_f64() * 1e3,
            burst[BURST / 2].as_secs_f64() * 1e3,
            percentile(&burst, 0.99).as_secs_f64() * 1e3,
        );
        let gateway_log = std::fs::read_to_string(path("gateway.log")).unwrap_or_default();
        assert_eq!(gateway_log.lines().count(), BLOCK + gateway_times.len() + BURST, "every call reached the upstream");
        if memory.is_some() {
            let memory_log = std::fs::read_to_string(path("gateway_tmpfs.log")).unwrap_or_default();
            assert_eq!(memory_log.lines().count(), BLOCK + memory_times.len(), "every call reached the upstream");
        }
        drop(direct);
        drop(gateway);
        drop(in_memory);
    });
}
