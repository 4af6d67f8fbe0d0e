//! `airlock mcp` over Streamable HTTP on both sides: the upstream is the Python SDK server of
//! `tests/mcp/upstream_server.py` serving HTTP on loopback (`--upstream-url`), and the gateway serves HTTP
//! itself (`--listen`, bearer token required) to the official Python SDK's HTTP client
//! (`tests/mcp/http_client.py`). The upstream's own log shows what reached it.

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock_tests::checks_script::wait_with_deadline;
use serde_json::json;

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{AIRLOCK, run_client, venv};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/http_client.py");
const TOKEN: &str = "gateway-test-token-5b1f";

const POLICY: &str = "version = 1\ndefault = \"allow\"\ndeny = [\"delete_everything\"]\n\n\
                      [tools.read_note]\nrate = \"2/minute\"\nrate_per = \"thread\"\n";

/// A process killed when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).expect("a free port").port()
}

fn wait_for_port(port: u16) {
    let started = Instant::now();
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(60), "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_gateway_serves_http_with_a_bearer_token_in_front_of_an_http_upstream() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| scratch.path().join(name);
    std::fs::write(path("airlock.toml"), POLICY).expect("the policy is written");

    let upstream_port = free_port();
    let _upstream = Reaped(
        venv.command()
            .arg(UPSTREAM)
            .arg(path("calls.log"))
            .arg(path("notes"))
            .env("UPSTREAM_HTTP_PORT", upstream_port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the upstream starts"),
    );
    wait_for_port(upstream_port);

    let mut gateway = Command::new(AIRLOCK)
        .arg("--db")
        .arg(path("airlock.redb"))
        .args(["mcp", "--policy"])
        .arg(path("airlock.toml"))
        .args(["--upstream-url", &format!("http://127.0.0.1:{upstream_port}/mcp"), "--listen", "127.0.0.1:0"])
        .env("AIRLOCK_GATEWAY_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gateway starts");
    let mut stderr = BufReader::new(gateway.stderr.take().expect("stderr is piped"));
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("stderr is readable") > 0, "the gateway stopped before serving");
        if let Some(rest) = line.split("Streamable HTTP on ").nth(1) {
            break rest.split_whitespace().next().expect("the address").to_owned();
        }
    };
    std::thread::spawn(move || for _ in stderr.lines() {});
    let mut gateway = Reaped(gateway);

    let config = json!({"url": url, "token": TOKEN, "log": path("calls.log"), "notes": path("notes")});
    run_client(&venv, CLIENT, &config, scratch.path(), 6);

    let kill = Command::new("kill").arg("-TERM").arg(gateway.0.id().to_string()).status().expect("kill runs");
    assert!(kill.success());
    let status = wait_with_deadline(&mut gateway.0, Duration::from_secs(20)).expect("the gateway exits on SIGTERM");
    assert!(status.success(), "{status}");

    // The two sessions shared one per-thread budget, yet each kept its own thread: the thread (what an
    // approval is bound to) is still the session's.
    let log = AuditLog::open(path("airlock.redb"), AuditConfig::default()).expect("the gateway's audit log opens");
    let records = log.records(0, 10_000).expect("the records are read");
    let reads: Vec<(String, String)> = records
        .iter()
        .filter(|record| record.tool == "read_note")
        .map(|record| (record.outcome.to_string(), record.thread_id.clone().expect("a thread")))
        .collect();
    let outcomes: Vec<&str> = reads.iter().map(|(outcome, _)| outcome.as_str()).collect();
    assert_eq!(outcomes, ["executed", "executed", "refused (rate_limited)", "refused (rate_limited)"], "{records:#?}");
    assert_eq!(reads[0].1, reads[2].1, "{reads:?}");
    assert_ne!(reads[2].1, reads[3].1, "the second session has a thread of its own: {reads:?}");
}

#[test]
fn listening_beyond_loopback_needs_to_be_asked_for_and_a_token_is_required() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(scratch.path().join("airlock.toml"), POLICY).expect("the policy is written");
    let run = |listen: &str, token: Option<&str>| {
        let mut command = Command::new(AIRLOCK);
        command
            .arg("--db")
            .arg(scratch.path().join("airlock.redb"))
            .args(["mcp", "--policy"])
            .arg(scratch.path().join("airlock.toml"))
            .args(["--listen", listen, "--upstream-url", "http://127.0.0.1:9/mcp"])
            .env_remove("AIRLOCK_GATEWAY_TOKEN")
            .stdin(Stdio::null());
        if let Some(token) = token {
            command.env("AIRLOCK_GATEWAY_TOKEN", token);
        }
        let output = command.output().expect("airlock runs");
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let remote = run("0.0.0.0:0", Some(TOKEN));
    assert!(remote.contains("not a loopback address") && remote.contains("`--allow-remote`"), "{remote}");
    let tokenless = run("127.0.0.1:0", None);
    assert!(tokenless.contains("needs the bearer token"), "{tokenless}");
}
