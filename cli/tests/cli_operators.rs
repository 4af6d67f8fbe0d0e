//! `airlock operators add | list | revoke`, and `airlock approve --signing-key`: each operator's key is
//! written once, readable by its owner only; the operators file lists the public keys a host counts; one
//! key under two names is one approval.

use std::path::Path;
use std::process::{Command, Output};

use agent_airlock::approval::operators::Operators;
use agent_airlock::approval::{AdmitError, DecisionError};
use serde_json::{Map, Value, json};

mod support;

use support::{Calls, TTL, airlock, approvals, stdout, stdout_json};

const REFUND: Calls = Calls { tool: "refund", arguments: refund_arguments };

fn refund_arguments(amount: u64) -> Map<String, Value> {
    json!({"payment_id": "pi_1", "amount": amount}).as_object().unwrap().clone()
}

fn operators(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("operators")
        .args(args)
        .arg("--operators")
        .arg(dir.join("operators.toml"))
        .output()
        .unwrap()
}

fn add(dir: &Path, name: &str) -> String {
    let key = dir.join(format!("{name}.key"));
    stdout(&operators(dir, &["add", name, "--key-out", key.to_str().unwrap()]));
    key.display().to_string()
}

#[test]
fn operators_add_writes_a_private_key_once_and_lists_its_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = add(dir.path(), "alice");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let written = std::fs::read(&key).unwrap();
    // The same path again (for another name): refused, the key untouched, nothing listed.
    let again = operators(dir.path(), &["add", "bob", "--key-out", &key]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwritten"), "{again:?}");
    assert_eq!(std::fs::read(&key).unwrap(), written);
    // A name already listed: refused before any key is written.
    let other = dir.path().join("other.key");
    let twice = operators(dir.path(), &["add", "alice", "--key-out", other.to_str().unwrap()]);
    assert!(!twice.status.success() && !other.exists(), "{twice:?}");

    let listed = stdout_json(&operators(dir.path(), &["list", "--json"]));
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["name"], "alice");
    let public = listed[0]["key"].as_str().unwrap();
    assert!(public.starts_with("ed25519:") && public.len() == 8 + 64, "{public}");
    let secret = String::from_utf8(written).unwrap();
    assert!(!secret.contains(&public[8..]), "the key file holds the secret, not the public key");
    let text = stdout(&operators(dir.path(), &["list"]));
    assert!(text.contains("alice") && text.contains("active"), "{text}");
    assert!(!text.contains(secret.lines().last().unwrap()), "the secret is never listed");

    stdout(&operators(dir.path(), &["revoke", "alice"]));
    let text = stdout(&operators(dir.path(), &["list"]));
    assert!(text.contains("REVOKED"), "{text}");
    assert!(!operators(dir.path(), &["revoke", "alice"]).status.success(), "nothing left to revoke");
    assert!(!operators(dir.path(), &["revoke", "nobody"]).status.success());
}

#[test]
fn one_key_under_two_names_is_one_approval_and_a_second_key_grants() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let alice = add(dir.path(), "alice");
    let bob = add(dir.path(), "bob");
    // Alice's key, its name edited to bob's.
    let alias = dir.path().join("alias.key");
    std::fs::write(&alias, std::fs::read_to_string(&alice).unwrap().replace("name = \"alice\"", "name = \"bob\""))
        .unwrap();
    let id = {
        let approvals = approvals(&db, TTL);
        REFUND.with(500, |call| approvals.request_approved_by(call, "attribute", "moves money", 2).wait()).unwrap()
    }
    .request_id()
    .to_owned();
    for key in [&alice, alias.to_str().unwrap()] {
        let output = airlock(&db, &["approve", &id, "--yes", "--signing-key", key]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && stderr.contains("approval recorded (1 of 2"), "{stderr}");
    }
    let resume = stdout_json(&airlock(&db, &["approve", &id, "--yes", "--signing-key", &bob, "--json"]));
    assert!(resume["airlock_grant"]["token"].is_string(), "{resume}");

    // A host in operator mode admits it: two listed keys signed.
    let listed = Operators::load(&dir.path().join("operators.toml")).unwrap();
    let host = approvals(&db, TTL).with_operators(listed);
    REFUND.with(500, |call| host.admit(call, &resume).wait()).unwrap();
    drop(host);

    // Once alice is revoked, a grant she signed admits nothing.
    let next = {
        let approvals = approvals(&db, TTL);
        REFUND.with(501, |call| approvals.request(call, "attribute", "moves money").wait()).unwrap()
    }
    .request_id()
    .to_owned();
    let resume = stdout_json(&airlock(&db, &["approve", &next, "--yes", "--signing-key", &alice, "--json"]));
    stdout(&operators(dir.path(), &["revoke", "alice"]));
    let revoked = Operators::load(&dir.path().join("operators.toml")).unwrap();
    let host = approvals(&db, TTL).with_operators(revoked);
    let refused = REFUND.with(501, |call| host.admit(call, &resume).wait());
    assert!(matches!(refused, Err(AdmitError::UnsignedGrant { .. })), "{refused:?}");
    let entry = host.ledger().find_request(&next).unwrap().unwrap();
    let recorded = host.recorded_decision_blocking(&entry.request.interrupt);
    assert!(matches!(recorded, Err(DecisionError::UnsignedGrant { .. })), "{recorded:?}");
}

#[test]
fn a_missing_or_damaged_signing_key_approves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let id = REFUND.request(&db, 500, "moves money");
    let missing = dir.path().join("missing.key");
    let output = airlock(&db, &["approve", &id, "--yes", "--signing-key", missing.to_str().unwrap()]);
    assert!(!output.status.success(), "{output:?}");
    let damaged = dir.path().join("damaged.key");
    std::fs::write(&damaged, "name = \"alice\"\nsecret = \"ed25519:nothex\"\n").unwrap();
    let output = airlock(&db, &["approve", &id, "--yes", "--signing-key", damaged.to_str().unwrap()]);
    assert!(!output.status.success(), "{output:?}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("nothex"), "the secret is not quoted: {output:?}");
    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    assert_eq!(listed[0]["status"], "pending");
}
