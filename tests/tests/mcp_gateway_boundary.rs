//! The gateway's trust boundary, against a hostile upstream (`tests/mcp/hostile_upstream.py`, JSON-RPC by
//! hand) and a hand-written client (`StdioSession`): the upstream learns none of the gateway's secrets, and
//! every request gets an answer whatever arrives from either side.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_airlock_tests::mcp_stdio::StdioSession;
use agent_airlock_tests::python_env::Venv;
use serde_json::{Value, json};

#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;
use gateway::{AIRLOCK, airlock, venv};

const HOSTILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/hostile_upstream.py");
const APPROVAL_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(policy: &str) -> Self {
        let scratch = Scratch { dir: tempfile::tempdir().expect("a temporary directory") };
        std::fs::write(scratch.path("airlock.toml"), policy).expect("the policy is written");
        scratch
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `airlock --db … mcp --policy … <gateway_args> -- python hostile_upstream.py <dir>`.
    fn gateway(&self, venv: &Venv, gateway_args: &[&str]) -> Command {
        let mut command = Command::new(AIRLOCK);
        command
            .arg("--db")
            .arg(self.path("airlock.redb"))
            .args(["mcp", "--policy"])
            .arg(self.path("airlock.toml"))
            .args(gateway_args)
            .arg("--")
            .arg(venv.python())
            .arg(HOSTILE)
            .arg(self.dir.path())
            .stderr(Stdio::inherit());
        command
    }
}

fn text_of(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("a text result: {answer}"))
}

/// Every secret the gateway holds in its environment, and where each comes from.
fn with_secrets(command: &mut Command) -> &mut Command {
    command
        .env("AIRLOCK_APPROVAL_KEY", APPROVAL_KEY)
        .env("MY_APPROVAL_KEY", APPROVAL_KEY)
        .env("AIRLOCK_GATEWAY_TOKEN", "gateway-token-never-leaves")
        .env("AIRLOCK_WEBHOOK_KEY", "webhook-key-never-leaves")
        .env("AIRLOCK_DB", "postgresql://airlock:db-password-never-leaves@db/airlock")
        .env("AIRLOCK_OPERATOR", "alice")
        .env("UNLISTED_CLOUD_SECRET", "cloud-secret-never-leaves")
        .env("KEEP_ME", "kept")
}

#[test]
fn the_upstream_starts_with_a_scrubbed_environment() {
    let venv = venv();
    let scratch = Scratch::new("version = 1\ndefault = \"allow\"\n");
    let mut command =
        scratch.gateway(&venv, &["--key-env", "MY_APPROVAL_KEY", "--env", "KEEP_ME", "--env", "SET_ME=a=b"]);
    let mut session = StdioSession::start(with_secrets(&mut command));
    session.call(2, "environment", json!({}));
    let answer = session.response(2, Duration::from_secs(60));
    let relayed = text_of(&answer).to_owned();
    session.close();

    let seen: Value = serde_json::from_str(
        &std::fs::read_to_string(scratch.path("environment.json")).expect("the upstream recorded its environment"),
    )
    .expect("JSON");
    let seen = seen.as_object().expect("an object");
    let names: Vec<&String> = seen.keys().collect();
    for name in &names {
        assert!(!name.to_ascii_uppercase().starts_with("AIRLOCK_"), "{name} reached the upstream: {names:?}");
    }
    for name in ["MY_APPROVAL_KEY", "UNLISTED_CLOUD_SECRET"] {
        assert!(!seen.contains_key(name), "{name} reached the upstream: {names:?}");
    }
    assert_eq!(seen["KEEP_ME"], "kept", "`--env NAME` copies the gateway's value");
    assert_eq!(seen["SET_ME"], "a=b", "`--env NAME=VALUE` sets it");
    assert_eq!(seen["PATH"].as_str(), std::env::var("PATH").ok().as_deref(), "the allow-list passes");
    for secret in [APPROVAL_KEY, "never-leaves"] {
        assert!(!relayed.contains(secret), "{relayed}");
    }
}

#[test]
fn an_env_option_naming_one_of_the_gateways_secrets_is_refused() {
    let venv = venv();
    let scratch = Scratch::new("version = 1\ndefault = \"allow\"\n");
    let python = venv.python().display().to_string();
    let dir = scratch.dir.path().display().to_string();
    let db = scratch.path("airlock.redb").display().to_string();
    let policy = scratch.path("airlock.toml").display().to_string();
    for (extra, name) in [
        (&["--env", "AIRLOCK_APPROVAL_KEY"][..], "AIRLOCK_APPROVAL_KEY"),
        (&["--env", "airlock_db=x"][..], "airlock_db"),
        (&["--key-env", "MY_APPROVAL_KEY", "--env", "MY_APPROVAL_KEY"][..], "MY_APPROVAL_KEY"),
        (&["--token-env", "MY_TOKEN", "--env", "MY_TOKEN=x"][..], "MY_TOKEN"),
    ] {
        let mut args = vec!["--db", &db, "mcp", "--policy", &policy];
        args.extend(extra);
        args.extend(["--", &python, HOSTILE, &dir]);
        let output = airlock(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra:?} started: {stderr}");
        assert!(stderr.contains(&format!("`{name}` is the gateway's own")), "{stderr}");
    }
}

#[test]
fn the_gateways_own_secret_names_are_masked_in_what_the_upstream_returns() {
    let venv = venv();
    let scratch = Scratch::new("version = 1\ndefault = \"allow\"\n");
    let mut session = StdioSession::start(&mut scratch.gateway(&venv, &[]));
    let leaked = format!(
        "AIRLOCK_APPROVAL_KEY={APPROVAL_KEY}\nAIRLOCK_WEBHOOK_KEY=c0ffee00c0ffee00c0ffee00\nAIRLOCK_DB=/srv/airlock.redb"
    );
    session.call(2, "echo", json!({"text": leaked}));
    let answer = session.response(2, Duration::from_secs(60));
    let text = text_of(&answer);
    for value in [APPROVAL_KEY, "c0ffee00c0ffee00c0ffee00", "/srv/airlock.redb"] {
        assert!(!text.contains(value), "{text}");
    }
    assert!(text.contains("AIRLOCK_APPROVAL_KEY="), "the name stays, the value goes: {text}");
    session.close();
}
