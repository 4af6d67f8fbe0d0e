//! The gateway's cost, in one run (BENCHMARKS.md §8): the added latency of a `tools/call` through
//! `airlock mcp` over calling the same upstream directly, both over stdio with rmcp's client, and the
//! gateway's resident memory idle and under a burst of 200 concurrent calls.
//!
//! The upstream is the Python SDK server of `tests/mcp/upstream_server.py` (its `read_note` tool); the
//! gateway runs the policy below (allow, audit every call to a redb file). Calls alternate in blocks
//! between the two paths so that load on the shared machine falls on both alike.
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
        let mut gateway_command = Command::new(AIRLOCK);
        gateway_command.arg("--db").arg(path("airlock.redb")).args(["mcp", "--policy"]).arg(path("airlock.toml"));
        let inner = upstream("gateway.log");
        gateway_command.arg("--").arg(inner.as_std().get_program()).args(inner.as_std().get_args());
        let (gateway, gateway_child) = connect(gateway_command).await;
        let pid = gateway_child.id().expect("the gateway runs");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle_kib = rss_kib(pid);

        // Warm both paths up, then alternate blocks.
        for _ in 0..BLOCK {
            read_note(&direct).await;
            read_note(&gateway).await;
        }
        let (mut direct_times, mut gateway_times) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
        while direct_times.len() < calls {
            for _ in 0..BLOCK {
                direct_times.push(read_note(&direct).await);
            }
            for _ in 0..BLOCK {
                gateway_times.push(read_note(&gateway).await);
            }
        }
        let after_sequential_kib = rss_kib(pid);

        // A burst of concurrent calls through the gateway, its memory sampled while they run.
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
        let mut burst = burst;
        burst.sort();
        let (d50, d99) = (percentile(&direct_times, 0.50), percentile(&direct_times, 0.99));
        let (g50, g99) = (percentile(&gateway_times, 0.50), percentile(&gateway_times, 0.99));
        println!("calls per path: {calls} (blocks of {BLOCK}, alternating)");
        println!("direct  p50 {:>9.1} us  p99 {:>9.1} us", micros(d50), micros(d99));
        println!("gateway p50 {:>9.1} us  p99 {:>9.1} us", micros(g50), micros(g99));
        println!(
            "added   p50 {:>9.1} us  p99 {:>9.1} us",
            micros(g50) - micros(d50),
            micros(g99) - micros(d99)
        );
        println!("gateway RSS idle {idle_kib} KiB, after {calls} sequential calls {after_sequential_kib} KiB");
        println!(
            "burst of {BURST} concurrent calls: wall {:.1} ms, per call p50 {:.1} ms p99 {:.1} ms; RSS peak {burst_peak_kib} KiB, after {after_burst_kib} KiB",
            burst_wall.as_secs_f64() * 1e3,
            burst[BURST / 2].as_secs_f64() * 1e3,
            percentile(&burst, 0.99).as_secs_f64() * 1e3,
        );
        let gateway_log = std::fs::read_to_string(path("gateway.log")).unwrap_or_default();
        assert_eq!(gateway_log.lines().count(), BLOCK + gateway_times.len() + BURST, "every call reached the upstream");
        drop(direct);
        drop(gateway);
    });
}
