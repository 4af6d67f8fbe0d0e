//! What the gateway's latency benches (`benches/gateway.rs` over stdio, `benches/gateway_listen.rs` over
//! `--listen`) share: the Python SDK upstream and its scratch directory, the gateway processes, and how a path's
//! latencies are summed up and printed beside a baseline's.

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::python_env::{PythonEnv, Venv};

/// The upstream MCP server every path calls (the official Python SDK; its `read_note` tool).
pub const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
/// The pinned requirements of [`UPSTREAM`].
pub const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements.txt");
/// The policy every benched gateway runs: every call allowed (and audited).
pub const POLICY: &str = "version = 1\ndefault = \"allow\"\n";
/// The note `read_note` reads.
pub const NOTE: &str = "bench.txt";

/// The `--calls N` of a bench's command line (`cargo bench` passes `--bench` too), else `default`.
pub fn calls_arg(default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// The Python SDK's virtual environment under `target_tmpdir` (a bench's `CARGO_TARGET_TMPDIR`).
pub fn python(target_tmpdir: &str) -> Venv {
    PythonEnv::under_target(target_tmpdir)
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("the Python MCP SDK cannot be provisioned: {why}"))
}

/// Whether `dir` is a tmpfs mount point (from `/proc/mounts`).
pub fn is_tmpfs(dir: &str) -> bool {
    std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines().any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        fields.next() == Some(dir) && fields.next() == Some("tmpfs")
    })
}

/// A scratch directory with the policy ([`POLICY`] as `airlock.toml`) and the notes directory holding
/// [`NOTE`]; on `/dev/shm` when asked and that is a tmpfs.
pub struct Scratch {
    dir: tempfile::TempDir,
    /// Whether it is on a tmpfs.
    pub on_tmpfs: bool,
}

impl Scratch {
    pub fn new(on_tmpfs: bool) -> Scratch {
        let on_tmpfs = on_tmpfs && is_tmpfs("/dev/shm");
        let dir = if on_tmpfs { tempfile::tempdir_in("/dev/shm") } else { tempfile::tempdir() }.expect("a directory");
        std::fs::create_dir_all(dir.path().join("notes")).expect("notes");
        std::fs::write(dir.path().join("notes").join(NOTE), "a short note").expect("a note");
        std::fs::write(dir.path().join("airlock.toml"), POLICY).expect("the policy");
        Scratch { dir, on_tmpfs }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The upstream's command line, its calls logged to `log` (a file of this directory): the interpreter
    /// first.
    pub fn upstream(&self, python: &Path, log: &str) -> Vec<std::ffi::OsString> {
        vec![python.into(), UPSTREAM.into(), self.path(log).into(), self.path("notes").into()]
    }

    /// How many calls reached the upstream logging to `log`.
    pub fn calls_logged(&self, log: &str) -> usize {
        std::fs::read_to_string(self.path(log)).unwrap_or_default().lines().count()
    }
}

/// A process killed when dropped.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).expect("a free port").port()
}

/// Starts the upstream serving Streamable HTTP on loopback (logging to `log`); its URL once it listens.
pub fn http_upstream(scratch: &Scratch, python: &Path, log: &str) -> (String, Reaped) {
    let port = free_port();
    let [program, args @ ..] = &scratch.upstream(python, log)[..] else { unreachable!("a program and its args") };
    let child = Command::new(program)
        .args(args)
        .env("UPSTREAM_HTTP_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the upstream starts");
    let child = Reaped(child);
    let started = Instant::now();
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(60), "the upstream does not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (format!("http://127.0.0.1:{port}/mcp"), child)
}

/// `airlock` (the bench's `CARGO_BIN_EXE_airlock_cli`) as `airlock --db <db> mcp --policy <scratch's policy>
/// <extra…>`, then `-- <upstream…>` when an upstream command line is given (none with `--upstream-url`).
pub fn gateway_command(
    airlock: &str,
    scratch: &Scratch,
    db: &Path,
    extra: &[&str],
    upstream: &[std::ffi::OsString],
) -> Command {
    let mut command = Command::new(airlock);
    command.arg("--db").arg(db).args(["mcp", "--policy"]).arg(scratch.path("airlock.toml")).args(extra);
    if !upstream.is_empty() {
        command.arg("--").args(upstream);
    }
    command.env_remove("AIRLOCK_GATEWAY_TOKEN");
    command
}

/// Starts `command` (an `airlock mcp --listen …`) and returns the URL it serves once it says so.
pub fn listening_gateway(mut command: Command) -> (String, Reaped) {
    let mut child =
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("the gateway starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let child = Reaped(child);
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("readable") > 0, "the gateway stopped: {line}");
        if let Some(rest) = line.split("Streamable HTTP on ").nth(1) {
            break rest.split_whitespace().next().expect("a URL").to_owned();
        }
    };
    std::thread::spawn(move || for _ in stderr.lines() {});
    (url, child)
}

/// The `p`-th percentile of sorted latencies (nearest rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints one path's p50 and p99 (`sorted` in increasing order) and, beside a baseline's, what it adds and
/// the ratio at p50.
pub fn line(label: &str, sorted: &[Duration], baseline: Option<&[Duration]>) {
    let (p50, p99) = (percentile(sorted, 0.50), percentile(sorted, 0.99));
    let added = baseline.map_or_else(String::new, |base| {
        let (base50, base99) = (percentile(base, 0.50), percentile(base, 0.99));
        format!(
            "   added p50 {:>+8.1} us  p99 {:>+8.1} us  ({:.2}x at p50)",
            micros(p50) - micros(base50),
            micros(p99) - micros(base99),
            p50.as_secs_f64() / base50.as_secs_f64()
        )
    });
    println!("{label:<44} p50 {:>8.1} us  p99 {:>8.1} us{added}", micros(p50), micros(p99));
}
