//! `airlock mcp` over Streamable HTTP on both sides: the upstream is the Python SDK server of
//! `tests/mcp/upstream_server.py` serving HTTP on loopback (`--upstream-url`), and the gateway serves HTTP
//! itself (`--listen`, bearer token required) to the official Python SDK's HTTP client
//! (`tests/mcp/http_client.py`). The upstream's own log shows what reached it.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{Listening, Reaped, Scratch, UPSTREAM, run_client, venv};

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/http_client.py");
const TOKEN: &str = "gateway-test-token-5b1f";

const POLICY: &str = "version = 1\ndefault = \"allow\"\ndeny = [\"delete_everything\"]\n\n\
                      [tools.read_note]\nrate = \"2/minute\"\nrate_per = \"thread\"\n";

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
    let scratch = Scratch::with_policy(POLICY);

    let upstream_port = free_port();
    let _upstream = Reaped(
        venv.command()
            .arg(UPSTREAM)
            .arg(scratch.path("calls.log"))
            .arg(scratch.path("notes"))
            .env("UPSTREAM_HTTP_PORT", upstream_port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the upstream starts"),
    );
    wait_for_port(upstream_port);

    let gateway = Listening::start(
        scratch
            .gateway()
            .args(["--upstream-url", &format!("http://127.0.0.1:{upstream_port}/mcp"), "--listen", "127.0.0.1:0"])
            // The audit log in an append-only file: written by its own thread for the many clients of `--listen`
            // (the OAuth tests keep it in the redb file).
            .arg("--audit-file")
            .arg(scratch.path("audit.log"))
            .env("AIRLOCK_GATEWAY_TOKEN", TOKEN),
    );

    let config =
        json!({"url": gateway.url, "token": TOKEN, "log": scratch.path("calls.log"), "notes": scratch.path("notes")});
    run_client(&venv, CLIENT, &config, scratch.dir(), 6);
    assert!(!scratch.audit_file_records("audit.log").is_empty(), "readable while the gateway writes it");

    // A refusal answered before the request's body arrived closes the connection and says so: a client's pool
    // must not send its next request on it (the Python SDK's httpx did, and met a closed connection, now and then).
    let listing = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    let refused = post_in_two_parts(&gateway.url, &[("Authorization", "Bearer not-the-token")], listing);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{refused}");
    let foreign = [("Authorization", format!("Bearer {TOKEN}")), ("Mcp-Session-Id", "not-a-session-of-ours".into())];
    let foreign: Vec<(&str, &str)> = foreign.iter().map(|(name, value)| (*name, value.as_str())).collect();
    let refused = post_in_two_parts(&gateway.url, &foreign, listing);
    assert!(refused.starts_with("HTTP/1.1 404"), "{refused}");
    assert!(refused.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{refused}");
    gateway.terminate();

    // The two sessions shared one per-thread budget, yet each kept its own thread: the thread (what an
    // approval is bound to) is still the session's.
    assert!(scratch.audit_records().is_empty(), "nothing audited in the redb file");
    let records = scratch.audit_file_records("audit.log");
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

/// One `POST` to `url` on a connection of its own, its head and its body written 50 ms apart (so the body has not
/// arrived when the gateway answers a refusal), and the answer read until the gateway closes the connection.
fn post_in_two_parts(url: &str, headers: &[(&str, &str)], body: &str) -> String {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_once('/').expect("a URL with a path");
    let mut stream = TcpStream::connect(authority).expect("the gateway accepts");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("a read timeout");
    let mut head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("the head is sent");
    std::thread::sleep(Duration::from_millis(50));
    // The gateway may have closed the connection already.
    let _ = stream.write_all(body.as_bytes());
    let mut answer = Vec::new();
    // To the end: a connection kept open would end this read at its timeout, with the answer read so far.
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn listening_beyond_loopback_needs_to_be_asked_for_and_a_token_is_required() {
    let scratch = Scratch::with_policy(POLICY);
    let run = |listen: &str, token: Option<&str>| {
        let mut command = scratch.gateway();
        command.args(["--listen", listen, "--upstream-url", "http://127.0.0.1:9/mcp"]);
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
