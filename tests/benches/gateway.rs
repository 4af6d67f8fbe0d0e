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
//! Two more paths run this build with `--audit-file`: the audit log in an append-only file (one write and one
//! `fdatasync` per call's record) instead of the redb file, on the tmpfs and on the disk (the ledger's `--db`
//! beside it).
//!
//! A third path is the floor of any process between the two: a relay (this program, started again with
//! `--null-relay`) that only copies bytes both ways, one read and one write per message each way, as the gateway
//! does. What the gateway adds over the relay is its own work; what the relay adds over the direct connection is
//! the two extra pipe hops and the wake-ups of a process that sleeps between messages.
//!
//! `cargo bench -p agent-airlock-tests --bench gateway` (`-- --calls N` to change the sample size).
//!
//! Two builds side by side: `AIRLOCK_GATEWAY_BIN_B=<another airlock binary>` adds two paths, that binary as
//! the gateway with its `--db` on the tmpfs and on the disk, in the same alternating blocks, so a change is
//! read as a ratio within one run. `AIRLOCK_GATEWAY_BIN` replaces this build's binary (path A).

use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_airlock_tests::gateway_bench::{self, NOTE, Scratch, line, micros, percentile};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::json;
use tokio::process::{Child, Command};

const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
/// Another gateway binary to time beside path A (see the module docs).
const BIN_B: &str = "AIRLOCK_GATEWAY_BIN_B";
/// The gateway binary of path A, instead of this build's.
const BIN_A: &str = "AIRLOCK_GATEWAY_BIN";
/// The first argument that makes this program the null relay (see the module docs).
const RELAY: &str = "--null-relay";
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
    let arguments = json!({"name": NOTE}).as_object().cloned();
    let params = CallToolRequestParams::new("read_note").with_arguments(arguments.unwrap_or_default());
    let started = Instant::now();
    let result = client.peer().call_tool(params).await.expect("a tool result");
    let took = started.elapsed();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    took
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

/// `airlock mcp` (the binary `airlock`) with its store at `db`, in front of the upstream logging to `log`.
fn gateway_command(airlock: &str, scratch: &Scratch, db: &Path, python: &Path, log: &str) -> Command {
    Command::from(gateway_bench::gateway_command(airlock, scratch, db, &[], &scratch.upstream(python, log)))
}

/// One build's two gateways: its store on the disk (`airlock{suffix}.redb` in the scratch directory) and, when
/// there is a tmpfs, on it; each in front of an upstream logging to `gateway{suffix}.log` /
/// `gateway{suffix}_tmpfs.log`.
async fn connect_gateways(
    airlock: &str,
    scratch: &Scratch,
    memory: Option<&tempfile::TempDir>,
    python: &Path,
    suffix: &str,
) -> ((Client, Child), Option<(Client, Child)>) {
    let db = format!("airlock{suffix}.redb");
    let disk =
        connect(gateway_command(airlock, scratch, &scratch.path(&db), python, &format!("gateway{suffix}.log"))).await;
    let memory = match memory {
        Some(dir) => Some(
            connect(gateway_command(
                airlock,
                scratch,
                &dir.path().join(&db),
                python,
                &format!("gateway{suffix}_tmpfs.log"),
            ))
            .await,
        ),
        None => None,
    };
    (disk, memory)
}

/// This build's gateway with `--audit-file` in `dir` (the `--db` beside it), its upstream logging to `log`.
async fn connect_file_gateway(
    airlock: &str,
    scratch: &Scratch,
    dir: &Path,
    python: &Path,
    log: &str,
) -> (Client, Child) {
    let audit = dir.join(format!("{log}.audit"));
    let audit = audit.to_str().expect("a UTF-8 path");
    let upstream = scratch.upstream(python, log);
    let db = dir.join(format!("{log}.redb"));
    connect(Command::from(gateway_bench::gateway_command(airlock, scratch, &db, &["--audit-file", audit], &upstream)))
        .await
}

/// The second build's two gateways (tmpfs, disk), their latencies, and their upstreams' logs.
struct PathB {
    binary: String,
    memory: Option<(Client, Child)>,
    disk: (Client, Child),
    memory_times: Vec<Duration>,
    disk_times: Vec<Duration>,
}

/// The null relay: starts the command after [`RELAY`] and copies its standard input to the command's and the
/// command's standard output to its own until either side closes.
fn relay() {
    let command: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
    let [program, args @ ..] = command.as_slice() else { panic!("{RELAY} needs a command") };
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the relayed command starts");
    let (mut to_child, mut from_child) = (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
    let forward = std::thread::spawn(move || pump(&mut std::io::stdin().lock(), &mut to_child));
    pump(&mut from_child, &mut std::io::stdout().lock());
    let _ = forward.join();
    let _ = child.wait();
}

/// Copies what `from` reads to `to` as it comes, until either fails or `from` ends.
fn pump(from: &mut impl Read, to: &mut impl Write) {
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(read @ 1..) = from.read(&mut buffer) {
        if to.write_all(&buffer[..read]).and_then(|()| to.flush()).is_err() {
            break;
        }
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(RELAY) {
        return relay();
    }
    let calls = gateway_bench::calls_arg(1000);
    let venv = gateway_bench::python(env!("CARGO_TARGET_TMPDIR"));
    let python = venv.python();
    let scratch = Scratch::new(false);
    let memory =
        gateway_bench::is_tmpfs("/dev/shm").then(|| tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm"));
    let airlock_a = std::env::var(BIN_A).unwrap_or_else(|_| AIRLOCK.to_owned());
    let binary_b = std::env::var(BIN_B).ok().filter(|b| !b.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    runtime.block_on(async {
        let direct_upstream = {
            let [program, args @ ..] = &scratch.upstream(python, "direct.log")[..] else { unreachable!() };
            let mut command = Command::new(program);
            command.args(args);
            command
        };
        let (direct, _direct_child) = connect(direct_upstream).await;
        let relayed_upstream = {
            let mut command = Command::new(std::env::current_exe().expect("this program's path"));
            command.arg(RELAY).args(scratch.upstream(python, "relay.log"));
            command
        };
        let (relay, _relay_child) = connect(relayed_upstream).await;
        let ((gateway, gateway_child), in_memory) =
            connect_gateways(&airlock_a, &scratch, memory.as_ref(), python, "").await;
        let mut path_b = match binary_b {
            Some(binary) => {
                let (disk, memory) = connect_gateways(&binary, &scratch, memory.as_ref(), python, "_b").await;
                Some(PathB { binary, memory, disk, memory_times: Vec::with_capacity(calls), disk_times: Vec::with_capacity(calls) })
            }
            None => None,
        };
        let file_disk = connect_file_gateway(&airlock_a, &scratch, scratch.dir(), python, "file_disk.log").await;
        let file_memory = match &memory {
            Some(dir) => Some(connect_file_gateway(&airlock_a, &scratch, dir.path(), python, "file_tmpfs.log").await),
            None => None,
        };
        let pid = gateway_child.id().expect("the gateway runs");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle_kib = rss_kib(pid);

        // Warm every path up, then alternate blocks.
        for _ in 0..BLOCK {
            read_note(&direct).await;
            read_note(&relay).await;
            read_note(&gateway).await;
            if let Some((client, _)) = &in_memory {
                read_note(client).await;
            }
            read_note(&file_disk.0).await;
            if let Some((client, _)) = &file_memory {
                read_note(client).await;
            }
            if let Some(b) = &path_b {
                read_note(&b.disk.0).await;
                if let Some((client, _)) = &b.memory {
                    read_note(client).await;
                }
            }
        }
        let mut direct_times = Vec::with_capacity(calls);
        let mut relay_times = Vec::with_capacity(calls);
        let mut gateway_times = Vec::with_capacity(calls);
        let mut memory_times = Vec::with_capacity(calls);
        let mut file_disk_times = Vec::with_capacity(calls);
        let mut file_memory_times = Vec::with_capacity(calls);
        // The file systems' own commit latency, in blocks between the calls', so both see the same load.
        let mut disk_commits = Commits::create(scratch.dir());
        let mut memory_commits = memory.as_ref().map(|dir| Commits::create(dir.path()));
        // Each round runs every path's block, starting one path later than the round before: every path takes every
        // place in the order equally often, so no place's own effect (the block after the commits, after another
        // gateway) is read as a path's. Two gateways of one build (each with its own upstream) still differ by up to
        // ~90 µs at p50 in one run (BENCHMARKS.md §8): compare A and B over two runs with the binaries swapped.
        let mut round = 0;
        while direct_times.len() < calls {
            let mut blocks: Vec<(&Client, &mut Vec<Duration>)> =
                vec![(&direct, &mut direct_times), (&relay, &mut relay_times), (&gateway, &mut gateway_times)];
            if let Some((client, _)) = &in_memory {
                blocks.push((client, &mut memory_times));
            }
            blocks.push((&file_disk.0, &mut file_disk_times));
            if let Some((client, _)) = &file_memory {
                blocks.push((client, &mut file_memory_times));
            }
            if let Some(PathB { memory, disk, memory_times, disk_times, .. }) = &mut path_b {
                if let Some((client, _)) = memory {
                    blocks.push((&*client, memory_times));
                }
                blocks.push((&disk.0, disk_times));
            }
            let first = round % blocks.len();
            blocks.rotate_left(first);
            round += 1;
            for (client, times) in blocks {
                for _ in 0..BLOCK {
                    times.push(read_note(client).await);
                }
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
        relay_times.sort();
        gateway_times.sort();
        memory_times.sort();
        file_disk_times.sort();
        file_memory_times.sort();
        disk_commits.times.sort();
        if let Some(commits) = &mut memory_commits {
            commits.times.sort();
        }
        let mut burst = burst;
        burst.sort();
        println!("calls per path: {calls} (blocks of {BLOCK}, alternating)");
        line("direct", &direct_times, None);
        line("null relay (copies bytes)", &relay_times, Some(&direct_times));
        if memory.is_some() {
            line("gateway, db on tmpfs", &memory_times, Some(&direct_times));
            line("gateway, db on tmpfs, beside the relay", &memory_times, Some(&relay_times));
        } else {
            println!("gateway, db on tmpfs: not measured (/dev/shm is not a tmpfs here)");
        }
        line("gateway, db on disk", &gateway_times, Some(&direct_times));
        if file_memory.is_some() {
            line("gateway, audit file on tmpfs", &file_memory_times, Some(&direct_times));
            line("gateway, audit file on tmpfs, beside the relay", &file_memory_times, Some(&relay_times));
            line("gateway, audit file on tmpfs, beside db on tmpfs", &file_memory_times, Some(&memory_times));
        }
        line("gateway, audit file on disk", &file_disk_times, Some(&direct_times));
        line("gateway, audit file on disk, beside db on disk", &file_disk_times, Some(&gateway_times));
        if let Some(b) = &mut path_b {
            b.memory_times.sort();
            b.disk_times.sort();
            println!("B = {}", b.binary);
            if b.memory.is_some() {
                line("gateway B, db on tmpfs", &b.memory_times, Some(&direct_times));
                line("gateway B, db on tmpfs, beside A's tmpfs", &b.memory_times, Some(&memory_times));
                line("gateway B, db on tmpfs, beside the relay", &b.memory_times, Some(&relay_times));
            }
            line("gateway B, db on disk", &b.disk_times, Some(&direct_times));
            line("gateway B, db on disk, beside A's disk", &b.disk_times, Some(&gateway_times));
        }
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
        assert_eq!(scratch.calls_logged("gateway.log"), BLOCK + gateway_times.len() + BURST, "every call reached the upstream");
        assert_eq!(scratch.calls_logged("relay.log"), BLOCK + relay_times.len(), "every call reached the upstream");
        if memory.is_some() {
            assert_eq!(scratch.calls_logged("gateway_tmpfs.log"), BLOCK + memory_times.len(), "every call reached the upstream");
        }
        assert_eq!(scratch.calls_logged("file_disk.log"), BLOCK + file_disk_times.len(), "every call reached the upstream");
        if file_memory.is_some() {
            assert_eq!(scratch.calls_logged("file_tmpfs.log"), BLOCK + file_memory_times.len(), "every call reached the upstream");
        }
        if let Some(b) = &path_b {
            assert_eq!(scratch.calls_logged("gateway_b.log"), BLOCK + b.disk_times.len(), "every call reached the upstream");
            if b.memory.is_some() {
                assert_eq!(
                    scratch.calls_logged("gateway_b_tmpfs.log"),
                    BLOCK + b.memory_times.len(),
                    "every call reached the upstream"
                );
            }
        }
        drop(direct);
        drop(relay);
        drop(gateway);
        drop(in_memory);
        drop(file_disk);
        drop(file_memory);
        drop(path_b);
    });
}
