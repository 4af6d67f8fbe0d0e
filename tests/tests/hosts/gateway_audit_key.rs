//! `airlock mcp --audit-key-file`: the gateway's audit log is keyed like the library's. The upstream is the
//! example MCP server (a Rust binary of this crate), the client a hand-written JSON-RPC session on the
//! gateway's stdio. The records the gateway wrote verify with its key, and fail without it or with another;
//! a gateway started without the key on a keyed log is refused, and `--env` cannot pass the variable of
//! `--audit-key-env` to the upstream (like the one of `--key-env`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agent_airlock_tests::mcp_stdio::StdioSession;
use serde_json::json;

const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
const UPSTREAM: &str = env!("CARGO_BIN_EXE_example_mcp_server");

const POLICY: &str = r#"version = 1
default = "allow"
"#;

fn write_key(path: &Path, seed: u8) {
    let secret: String = (0..32u8).map(|i| format!("{:02x}", i.wrapping_mul(seed).wrapping_add(seed))).collect();
    std::fs::write(path, secret).expect("the key is written");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("the key is private");
    }
}

fn gateway(dir: &Path, db: &Path, key: Option<&Path>) -> Command {
    let mut command = Command::new(AIRLOCK);
    command.arg("--db").arg(db).arg("mcp").arg("--policy").arg(dir.join("airlock.toml"));
    if let Some(key) = key {
        command.arg("--audit-key-file").arg(key);
    }
    command.arg("--").arg(UPSTREAM).env("TMPDIR", dir).current_dir(dir);
    command
}

fn verify(db: &Path, key: Option<&Path>) -> Output {
    let mut command = Command::new(AIRLOCK);
    command.arg("--db").arg(db).args(["audit", "verify"]);
    if let Some(key) = key {
        command.arg("--audit-key-file").arg(key);
    }
    command.stdin(Stdio::null()).output().expect("airlock runs")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[test]
fn the_gateways_records_verify_with_its_audit_key_only() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("airlock.toml"), POLICY).unwrap();
    let key: PathBuf = dir.path().join("audit.key");
    let other: PathBuf = dir.path().join("other.key");
    write_key(&key, 7);
    write_key(&other, 11);
    let db = dir.path().join("airlock.redb");

    let mut session = StdioSession::start(gateway(dir.path(), &db, Some(&key)).stderr(Stdio::inherit()));
    session.call(1, "echo", json!({"text": "hello"}));
    let answer = session.response(1, Duration::from_secs(60));
    assert!(answer["result"].is_object(), "the call ran: {answer}");
    session.close();

    let keyed = verify(&db, Some(&key));
    assert!(keyed.status.success(), "the records verify with the key: {}", text(&keyed));
    let unkeyed = verify(&db, None);
    assert!(!unkeyed.status.success(), "the records must not verify without the key: {}", text(&unkeyed));
    let wrong = verify(&db, Some(&other));
    assert!(!wrong.status.success(), "the records must not verify with another key: {}", text(&wrong));

    // A gateway without the key would add unkeyed records to a keyed log: it does not start.
    let refused = gateway(dir.path(), &db, None).stdin(Stdio::null()).output().expect("airlock runs");
    assert!(!refused.status.success(), "started without the audit key: {}", text(&refused));
    assert!(text(&refused).contains("the audit log is keyed"), "{}", text(&refused));
}

#[test]
fn the_audit_keys_variable_cannot_be_passed_to_the_upstream() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("airlock.toml"), POLICY).unwrap();
    let db = dir.path().join("airlock.redb");
    let mut command = Command::new(AIRLOCK);
    command.arg("--db").arg(&db).arg("mcp").arg("--policy").arg(dir.path().join("airlock.toml"));
    command.args(["--audit-key-env", "GATEWAY_AUDIT_SECRET", "--env", "GATEWAY_AUDIT_SECRET", "--", UPSTREAM]);
    let secret: String = (0..32).map(|i| format!("{i:02x}")).collect();
    let refused = command.env("GATEWAY_AUDIT_SECRET", &secret).stdin(Stdio::null()).output().expect("airlock runs");
    assert!(!refused.status.success(), "the audit key's variable was passed on: {}", text(&refused));
    assert!(text(&refused).contains("`GATEWAY_AUDIT_SECRET` is the gateway's own"), "{}", text(&refused));
    assert!(!text(&refused).contains(&secret), "the error shows the secret: {}", text(&refused));
}
