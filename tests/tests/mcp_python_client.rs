//! The guarded MCP example server, driven over stdio by a client that is not ours: the official Python MCP
//! SDK (`pip install mcp==2.3.0`). The script `tests/mcp/guarded_server.py` lists the tools and checks their
//! schemas, then calls an allowed tool, one with ghost arguments, a denied one, an escalated one approved and
//! declined through elicitation, one cancelled by the SDK's read timeout while its approval waits, one from a
//! client without elicitation, and replays a request.
//!
//! Without the Python SDK the test fails when `CI` is set, and is skipped with a loud message otherwise.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SERVER: &str = env!("CARGO_BIN_EXE_example_mcp_server");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/guarded_server.py");
/// A hung server or client must fail the test, not hang CI.
const DEADLINE: Duration = Duration::from_secs(180);

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Why the Python SDK cannot be used, if it cannot.
fn sdk_missing(python: &str) -> Option<String> {
    match Command::new(python).args(["-c", "import mcp, jsonschema"]).output() {
        Ok(output) if output.status.success() => None,
        Ok(output) => Some(String::from_utf8_lossy(&output.stderr).trim().to_owned()),
        Err(error) => Some(format!("`{python}` cannot be run: {error}")),
    }
}

#[test]
fn the_official_python_sdk_drives_the_guarded_server() {
    let python = python();
    if let Some(why) = sdk_missing(&python) {
        let message = format!("the Python MCP SDK is not importable ({why}); install it with `pip install mcp==2.3.0`");
        if in_ci() {
            panic!("{message}");
        }
        eprintln!("\n!!! SKIPPED mcp_python_client: {message}\n");
        return;
    }

    // Each server process keeps its approval ledger in the temporary directory: this test's own.
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut child = Command::new(&python)
        .arg(SCRIPT)
        .arg(SERVER)
        .env("TMPDIR", scratch.path())
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

    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the client can be waited for") {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            child.kill().expect("the hung client can be killed");
            child.wait().expect("the killed client is reaped");
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().expect("reader thread").expect("stdout is UTF-8");
    let stderr = err.join().expect("reader thread").expect("stderr is UTF-8");
    println!("{stdout}");
    eprintln!("{stderr}");

    let status = status.unwrap_or_else(|| panic!("the client did not finish within {DEADLINE:?}"));
    assert!(status.success(), "the Python client reported failures");
    let summary =
        stdout.lines().rev().find(|line| line.ends_with(" failed")).expect("the client prints `N passed, N failed`");
    let (passed, failed) = summary.split_once(" passed, ").expect("`N passed, N failed`");
    assert_eq!(failed, "0 failed", "{summary}");
    let passed: u32 = passed.parse().expect("a count");
    assert!(passed >= 14, "only {passed} checks ran: {summary}");
}
