//! `airlock mcp --sandbox` (Linux) against a real upstream (`tests/mcp/sandbox_upstream.py`) that tries what the
//! sandbox is to stop: a TCP connection to a listener this test runs on loopback, a secret file next to an
//! allowed one, a write outside the read-write paths, the gateway's own environment through `/proc`. The same
//! upstream without `--sandbox` does all of it, so each refusal is the sandbox's.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_airlock_tests::mcp_stdio::StdioSession;
use agent_airlock_tests::python_env::Venv;
use serde_json::{Value, json};

use crate::gateway;
use gateway::{airlock, venv};

const PROBE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/sandbox_upstream.py");
const APPROVAL_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A scratch folder: a file elsewhere (the secret), an allowed file, a read-write folder, and a place outside.
struct Scratch {
    base: gateway::Scratch,
}

impl Scratch {
    fn new() -> Self {
        let scratch = Scratch { base: gateway::Scratch::with_policy("version = 1\ndefault = \"allow\"\n") };
        for dir in ["elsewhere", "allowed", "rw"] {
            std::fs::create_dir(scratch.path(dir)).expect("a folder");
        }
        std::fs::write(scratch.path("elsewhere/words.txt"), "the private words").expect("the file elsewhere");
        std::fs::write(scratch.path("allowed/notes.txt"), "the allowed words").expect("the allowed file");
        scratch
    }

    fn path(&self, name: &str) -> PathBuf {
        self.base.path(name)
    }

    /// `airlock --db … mcp --policy … <gateway_args> -- python sandbox_upstream.py`, with a secret in the
    /// gateway's environment.
    fn gateway(&self, venv: &Venv, gateway_args: &[&str]) -> Command {
        let mut command = self.base.gateway();
        command
            .args(gateway_args)
            .arg("--")
            .arg(venv.python())
            .arg(PROBE)
            .env("AIRLOCK_APPROVAL_KEY", APPROVAL_KEY)
            .stderr(Stdio::inherit());
        command
    }

    /// Starts the gateway with `gateway_args`, calls `probe` once and returns the upstream's report.
    fn probe(&self, venv: &Venv, gateway_args: &[&str], port: u16, processes: u32) -> Value {
        let mut command = self.gateway(venv, gateway_args);
        let mut session = StdioSession::start(&mut command);
        let arguments = json!({
            "port": port,
            "elsewhere": self.path("elsewhere/words.txt"),
            "allowed": self.path("allowed/notes.txt"),
            "write_inside": self.path("rw/inside.txt"),
            "write_outside": self.path("outside.txt"),
            "processes": processes,
        });
        session.call(2, "probe", arguments);
        let answer = session.response(2, Duration::from_secs(60));
        session.close();
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("a text result: {answer}"));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("the probe's report ({e}): {text}"))
    }
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

/// Whether the tests run as root (the owner of `/proc/self`).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

fn ok(report: &Value, attempt: &str) -> bool {
    report[attempt].as_str().is_some_and(|result| result.starts_with("ok"))
}

#[test]
fn a_sandboxed_upstream_has_no_network_sees_only_its_paths_and_gains_no_privileges() {
    let venv = venv();
    let scratch = Scratch::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let port = listener.local_addr().expect("its address").port();

    // Without `--sandbox` the same upstream does everything it tries: the refusals below are the sandbox's.
    let open = scratch.probe(&venv, &[], port, 0);
    assert!(ok(&open, "connect"), "{open}");
    assert_eq!(open["read_elsewhere"], "ok:the private words", "{open}");
    assert_eq!(open["read_allowed"], "ok:the allowed words", "{open}");
    assert!(ok(&open, "write_outside") && scratch.path("outside.txt").exists(), "{open}");
    assert_eq!(open["no_new_privs"], "ok:0", "{open}");
    assert_eq!(open["gateway_environ"], "ok:AIRLOCK_ seen", "the upstream reads the gateway's secrets: {open}");
    std::fs::remove_file(scratch.path("outside.txt")).expect("removed");

    let allowed = path_arg(&scratch.path("allowed"));
    let rw = path_arg(&scratch.path("rw"));
    let sandboxed = scratch.probe(
        &venv,
        &["--sandbox", "--sandbox-read", &allowed, "--sandbox-read", PROBE, "--sandbox-write", &rw],
        port,
        0,
    );
    for refused in ["connect", "read_elsewhere", "write_outside", "gateway_environ"] {
        assert!(sandboxed[refused].as_str().is_some_and(|r| r.starts_with("denied")), "{refused}: {sandboxed}");
    }
    assert!(!scratch.path("outside.txt").exists(), "{sandboxed}");
    assert_eq!(sandboxed["read_allowed"], "ok:the allowed words", "{sandboxed}");
    assert!(ok(&sandboxed, "write_inside") && scratch.path("rw/inside.txt").exists(), "{sandboxed}");
    assert_eq!(sandboxed["no_new_privs"], "ok:1", "{sandboxed}");
    // The documented default limits.
    assert_eq!(sandboxed["open_files"], "ok:1024 1024", "{sandboxed}");
    assert_eq!(sandboxed["address_space"], format!("ok:{0} {0}", 8u64 << 30), "{sandboxed}");
    assert_eq!(sandboxed["processes_limit"], "ok:256 256", "{sandboxed}");
    drop(listener);
}

#[test]
fn the_sandboxs_network_and_limits_are_the_operators_to_set() {
    let venv = venv();
    let scratch = Scratch::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let port = listener.local_addr().expect("its address").port();
    let report = scratch.probe(
        &venv,
        &[
            "--sandbox",
            "--sandbox-net",
            "--sandbox-read",
            PROBE,
            "--sandbox-open-files",
            "64",
            "--sandbox-address-space",
            "2G",
            "--sandbox-processes",
            "8",
        ],
        port,
        20,
    );
    assert!(ok(&report, "connect"), "`--sandbox-net` keeps the network: {report}");
    assert!(report["read_elsewhere"].as_str().is_some_and(|r| r.starts_with("denied")), "{report}");
    assert_eq!(report["open_files"], "ok:64 64", "{report}");
    assert_eq!(report["address_space"], format!("ok:{0} {0}", 2u64 << 30), "{report}");
    assert_eq!(report["processes_limit"], "ok:8 8", "{report}");
    // The kernel exempts uid 0 from the process limit (`RLIMIT_NPROC`), in a user namespace too.
    if !running_as_root() {
        assert!(report["spawn"].as_str().is_some_and(|r| r.starts_with("denied")), "20 processes: {report}");
    }
    assert_eq!(report["no_new_privs"], "ok:1", "{report}");
    drop(listener);
}

#[test]
fn a_sandbox_path_that_does_not_exist_or_an_http_upstream_is_refused_at_start() {
    let scratch = Scratch::new();
    let db = path_arg(&scratch.path("airlock.redb"));
    let policy = path_arg(&scratch.path("airlock.toml"));
    let missing = path_arg(&scratch.path("no-such-folder"));
    let output = airlock(&[
        "--db",
        &db,
        "mcp",
        "--policy",
        &policy,
        "--sandbox",
        "--sandbox-read",
        &missing,
        "--",
        "/bin/sh",
        "-c",
        "exit 0",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("no-such-folder"), "{stderr}");

    let output = airlock(&["mcp", "--policy", &policy, "--sandbox", "--upstream-url", "http://127.0.0.1:9/mcp"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("--upstream-url"), "{stderr}");
}
