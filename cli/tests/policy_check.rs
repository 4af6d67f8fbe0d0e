//! `airlock policy check FILE` as a real process: a summary and exit 0 for a valid file, the error with
//! `FILE:LINE:COLUMN` and exit 1 otherwise; no database is opened.

use std::path::Path;
use std::process::{Command, Output};

fn check(dir: &Path, file: &str, text: &str, extra: &[&str]) -> Output {
    std::fs::write(dir.join(file), text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .current_dir(dir)
        .args(extra)
        .args(["policy", "check", file])
        .output()
        .unwrap()
}

const VALID: &str = r#"version = 1
default = "deny"
allow = ["read_*", "refund"]

[tools.refund]
rate = "10/minute"

[[tools.refund.when]]
if = "amount > 10000"
escalate = "large refund"
"#;

#[test]
fn a_valid_file_prints_its_rules_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let output = check(dir.path(), "airlock.toml", VALID, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("airlock.toml: valid policy\n"), "{stdout}");
    for line in [
        "mode      enforce",
        "default   deny",
        "allow     read_*",
        "rate      refund: 10/minute",
        "escalate  refund when amount > 10000: large refund",
    ] {
        assert!(stdout.lines().any(|l| l == line), "missing {line:?} in {stdout}");
    }
    // Checking a policy opens no database.
    assert!(!dir.path().join("airlock.redb").exists());

    let json = check(dir.path(), "airlock.toml", VALID, &["--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((value["valid"].as_bool(), value["mode"].as_str()), (Some(true), Some("enforce")));
}

#[test]
fn an_invalid_file_names_the_line_and_column_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let bad_rate = VALID.replace("10/minute", "10/fortnight");
    let output = check(dir.path(), "bad.toml", &bad_rate, &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("airlock: bad.toml:6:8: invalid rate `10/fortnight` for `refund`: unknown rate unit"),
        "{stderr}"
    );

    let unknown_key = VALID.replace("escalate = ", "escalte = ");
    let stderr = String::from_utf8_lossy(&check(dir.path(), "bad.toml", &unknown_key, &[]).stderr).into_owned();
    assert!(stderr.starts_with("airlock: bad.toml:10:1: unknown field `escalte`"), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .current_dir(dir.path())
        .args(["policy", "check", "missing.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("airlock: missing.toml: "));
}
