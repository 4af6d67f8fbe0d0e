//! What the gateway tests share: the `airlock` binary, a Python client run to its summary line within a
//! deadline, and `airlock mcp scan`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agent_airlock_tests::checks_script::run_checks;
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

/// Runs the Python client `script` with `config` (written next to it as JSON) and asserts it passed
/// exactly `checks` checks and failed none.
pub fn run_client(venv: &Venv, script: &str, config: &Value, scratch: &Path, checks: u32) {
    let config_path = scratch.join("config.json");
    std::fs::write(&config_path, config.to_string()).expect("the config is written");
    let mut command = venv.command();
    command.arg(script).arg(&config_path);
    assert_eq!(run_checks(command, DEADLINE), checks, "not every check of the client ran");
}
