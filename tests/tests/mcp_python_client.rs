//! The guarded MCP example server, driven over stdio by a client that is not ours: the official Python MCP
//! SDK. The script `tests/mcp/guarded_server.py` lists the tools and checks their schemas, then calls an
//! allowed tool, one with ghost arguments, a denied one, an escalated one approved and declined through
//! elicitation, one cancelled by the SDK's read timeout while its approval waits, one from a client without
//! elicitation, and replays a request.
//!
//! The SDK runs from a virtual environment this test provisions itself from the pinned
//! `tests/mcp/requirements.txt` (under the cargo target directory, reused between runs), so the test needs
//! only Python and pip on the machine, never a package installed beforehand.

use std::io::Read as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_airlock_tests::python_env::PythonEnv;

const SERVER: &str = env!("CARGO_BIN_EXE_example_mcp_server");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/guarded_server.py");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements.txt");
/// A hung server or client must fail the test, not hang CI.
const DEADLINE: Duration = Duration::from_secs(180);

#[test]
fn the_official_python_sdk_drives_the_guarded_server() {
    let venv = PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("the Python MCP SDK cannot be provisioned: {why}"));
    // The client runs on the environment's interpreter, whatever `python3` on the PATH has installed.
    let prefix = venv.command().args(["-c", "import sys; print(sys.prefix)"]).output().expect("the venv runs");
    assert_eq!(
        Path::new(String::from_utf8_lossy(&prefix.stdout).trim()).canonicalize().expect("sys.prefix exists"),
        venv.dir().canonicalize().expect("the venv exists"),
        "the client must run inside the provisioned environment"
    );

    // Each server process keeps its approval ledger in the temporary directory: this test's own.
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut child = venv
        .command()
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
