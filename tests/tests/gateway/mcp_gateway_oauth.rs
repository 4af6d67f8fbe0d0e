//! `airlock mcp --listen --oauth-issuer …`: the gateway as an OAuth 2.1 resource server, in front of the Python
//! SDK upstream of `tests/mcp/upstream_server.py`. The issuer is `tests/mcp/oauth_issuer.py` on loopback (its own
//! keys, RFC 8414 discovery, a JWKS); the client, `tests/mcp/oauth_client.py`, mints real tokens with PyJWT and
//! speaks MCP with the official Python SDK over Streamable HTTP. Refused tokens never reach the upstream; two
//! identities see different tool lists and different outcomes of one `identity.groups` condition; rate limits
//! and audit records follow the identity.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock_tests::checks_script::wait_with_deadline;
use serde_json::json;

use crate::gateway;
use gateway::{AIRLOCK, run_client, venv};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
const ISSUER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/oauth_issuer.py");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/oauth_client.py");

const POLICY: &str = r#"version = 1
default = "allow"
deny = ["delete_everything"]

[tools.read_note]
rate = "1/minute"
rate_per = "thread"

[[tools.transfer.when]]
if = 'not (identity.groups contains "payments")'
deny = "payments team only"

[[tools.write_note.when]]
if = 'identity.sub == "alice"'
escalate = "alice's notes are reviewed"
"#;

/// A process killed when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line of `child`'s standard output (or error) that contains `marker`, and what follows it.
fn line_after(reader: &mut impl std::io::BufRead, marker: &str, what: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).expect("readable") > 0, "{what} stopped before saying `{marker}`");
        if let Some(rest) = line.split(marker).nth(1) {
            return rest.split_whitespace().next().expect("a value").to_owned();
        }
    }
}

#[test]
fn the_gateway_admits_oauth_tokens_of_its_issuer_only_and_the_policy_sees_who_calls() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| scratch.path().join(name);
    std::fs::write(path("airlock.toml"), POLICY).expect("the policy is written");

    let mut issuer = venv
        .command()
        .arg(ISSUER)
        .arg(path("issuer"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the issuer starts");
    let mut issuer_out = BufReader::new(issuer.stdout.take().expect("stdout is piped"));
    let _issuer = Reaped(issuer);
    let issuer_url = line_after(&mut issuer_out, "issuer ", "the issuer");

    let mut gateway = Command::new(AIRLOCK)
        .arg("--db")
        .arg(path("airlock.redb"))
        .args(["mcp", "--policy"])
        .arg(path("airlock.toml"))
        .args(["--listen", "127.0.0.1:0", "--oauth-issuer", &issuer_url, "--oauth-claims", "groups,scope"])
        .args(["--oauth-scopes", "mcp:tools", "--"])
        .arg(venv.python())
        .arg(UPSTREAM)
        .arg(path("calls.log"))
        .arg(path("notes"))
        .env_remove("AIRLOCK_GATEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gateway starts");
    let mut stderr = BufReader::new(gateway.stderr.take().expect("stderr is piped"));
    let url = line_after(&mut stderr, "Streamable HTTP on ", "the gateway");
    std::thread::spawn(move || for _ in stderr.lines() {});
    let mut gateway = Reaped(gateway);

    let config = json!({
        "url": url,
        "keys": path("issuer").join("keys.json"),
        "log": path("calls.log"),
        "notes": path("notes"),
    });
    run_client(&venv, CLIENT, &config, scratch.path(), 20);

    let kill = Command::new("kill").arg("-TERM").arg(gateway.0.id().to_string()).status().expect("kill runs");
    assert!(kill.success());
    let status = wait_with_deadline(&mut gateway.0, Duration::from_secs(20)).expect("the gateway exits on SIGTERM");
    assert!(status.success(), "{status}");

    // The keys were fetched once, at start: no token (not even those naming an unknown key id, within the
    // refetch interval) made the gateway fetch them again.
    let requests = std::fs::read_to_string(path("issuer").join("requests.log")).expect("the issuer logged");
    assert_eq!(requests.lines().collect::<Vec<_>>(), ["/.well-known/oauth-authorization-server", "/jwks.json"]);

    // The audit records name who asked: the subject, prefixed with its issuer.
    let log = AuditLog::open(path("airlock.redb"), AuditConfig::default()).expect("the gateway's audit log opens");
    let records = log.records(0, 10_000).expect("the records are read");
    let transfers: Vec<(String, Option<String>)> = records
        .iter()
        .filter(|record| record.tool == "transfer")
        .map(|record| (record.outcome.to_string(), record.caller.clone()))
        .collect();
    let caller = |sub: &str| Some(format!("{issuer_url}#{sub}"));
    assert_eq!(
        transfers,
        [
            ("executed".to_owned(), caller("alice")),
            ("refused (denied)".to_owned(), caller("bob")),
            ("refused (denied)".to_owned(), caller("carol")),
        ],
        "{records:#?}"
    );
    assert!(records.iter().all(|record| record.caller.as_deref().is_some_and(|c| c.starts_with(&issuer_url))));
    // The caller is part of each record's hashed body: the chain still verifies.
    let verified = agent_airlock::audit::verify(&log, None).expect("the log verifies");
    assert_eq!(verified.records, records.len() as u64, "{verified}");
}

#[test]
fn oauth_and_the_static_token_are_exclusive_and_a_bad_issuer_stops_the_start() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(scratch.path().join("airlock.toml"), POLICY).expect("the policy is written");
    let run = |extra: &[&str], token: Option<&str>| {
        let mut command = Command::new(AIRLOCK);
        command
            .arg("--db")
            .arg(scratch.path().join("airlock.redb"))
            .args(["mcp", "--policy"])
            .arg(scratch.path().join("airlock.toml"))
            .args(["--listen", "127.0.0.1:0", "--upstream-url", "http://127.0.0.1:9/mcp"])
            .args(extra)
            .env_remove("AIRLOCK_GATEWAY_TOKEN")
            .stdin(Stdio::null());
        if let Some(token) = token {
            command.env("AIRLOCK_GATEWAY_TOKEN", token);
        }
        let output = command.output().expect("airlock runs");
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let both = run(&["--oauth-issuer", "http://127.0.0.1:9"], Some("a-static-token"));
    assert!(both.contains("unset `AIRLOCK_GATEWAY_TOKEN`"), "{both}");
    let unreachable = run(&["--oauth-issuer", "http://127.0.0.1:9"], None);
    assert!(unreachable.contains("the issuer's keys cannot be fetched"), "{unreachable}");
    let hmac = run(&["--oauth-issuer", "http://127.0.0.1:9", "--oauth-algorithms", "RS256,HS256"], None);
    assert!(hmac.contains("shared-secret algorithm"), "{hmac}");
    let jwks = scratch.path().join("jwks.json");
    std::fs::write(&jwks, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).expect("written");
    let symmetric = run(&["--oauth-issuer", "http://127.0.0.1:9", "--jwks-file", jwks.to_str().expect("UTF-8")], None);
    assert!(symmetric.contains("holds no public signing key"), "{symmetric}");
}
