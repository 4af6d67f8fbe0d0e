//! The guarded MCP example server, driven over stdio by a client that is not ours: the official Python MCP
//! SDK. The script `tests/mcp/guarded_server.py` lists the tools and checks their schemas, then calls an
//! allowed tool, one with ghost arguments, a denied one, an escalated one approved and declined through
//! elicitation, one cancelled by the SDK's read timeout while its approval waits, one from a client without
//! elicitation, and replays a request.
//!
//! The SDK runs from a virtual environment this test provisions itself from the pinned
//! `tests/mcp/requirements.txt` (under the cargo target directory, reused between runs), so the test needs
//! only Python and pip on the machine, never a package installed beforehand.

use std::path::Path;
use std::time::Duration;

use agent_airlock_tests::checks_script::run_checks;
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
    let mut command = venv.command();
    command.arg(SCRIPT).arg(SERVER).env("TMPDIR", scratch.path());
    let passed = run_checks(command, DEADLINE);
    assert!(passed >= 14, "only {passed} checks ran");
}
