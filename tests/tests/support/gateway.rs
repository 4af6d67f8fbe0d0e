//! What the gateway tests share: the `airlock` binary, a Python client run to its summary line within a
//! deadline, and `airlock mcp scan`.

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use agent_airlock_tests::python_env::{PythonEnv, Venv};
use serde_json::Value;

pub const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements.txt");
/// A hung gateway, upstream or client must fail the test, not hang CI.
const DEADLINE: Duration = Duration::from_secs(240);

/// The virtual environment with the official Python MCP SDK, provisioned from the pinned requirements.
pub fn venv() -> Venv {
    PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("the Python MCP SDK cannot be provisioned: {why}"))
}

/// Runs `airlock` with `args` to completion.
pub fn airlock(args: &[&str]) -> Output {
    Command::new(AIRLOCK).args(args).stdin(Stdio::null()).output().expect("airlock runs")
}

/// `airlock mcp scan -- <upstream>`'s starter policy.
pub fn scan(upstream: &[String]) -> String {
    let mut args = vec!["mcp", "scan", "--"];
    args.extend(upstream.iter().map(String::as_str));
    let scan = airlock(&args);
    assert!(scan.status.success(), "scan failed: {}", String::from_utf8_lossy(&scan.stderr));
    String::from_utf8(scan.stdout).expect("UTF-8")
}

/// Waits for `child`, killing it after `deadline`; `None` if it had to be killed.
pub fn wait_with_deadline(child: &mut Child, deadline: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return Some(status);
        }
        if started.elapsed() > deadline {
            child.kill().expect("the hung child can be killed");
            child.wait().expect("the killed child is reaped");
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the Python client `script` with `config` (written next to it as JSON) and asserts it passed
/// exactly `checks` checks and failed none.
pub fn run_client(venv: &Venv, script: &str, config: &Value, scratch: &Path, checks: u32) {
    let config_path = scratch.join("config.json");
    std::fs::write(&config_path, config.to_string()).expect("the config is written");
    let mut child = venv
        .command()
        .arg(script)
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the Python client starts");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).map(|_| text)
    });
    let status = wait_with_deadline(&mut child, DEADLINE);
    let stdout = out.join().expect("reader thread").expect("stdout is UTF-8");
    let stderr = err.join().expect("reader thread").expect("stderr is UTF-8");
    println!("{stdout}");
    eprintln!("{stderr}");
    let status = status.unwrap_or_else(|| panic!("the client did not finish within {DEADLINE:?}"));
    let summary =
        stdout.lines().rev().find(|line| line.ends_with(" failed")).expect("the client prints `N passed, N failed`");
    assert!(status.success(), "the Python client reported failures: {summary}");
    assert_eq!(summary, format!("{checks} passed, 0 failed"));
}
