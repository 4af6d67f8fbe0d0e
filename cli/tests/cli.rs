//! The `airlock` binary against a real database file: list, show, approve, deny, spent grants, effect
//! records, audit verification. Keys come from a file or the environment, never the command line.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use agent_airlock::effect::{EffectStore, RedbEffectStore, Resolution};
use agent_airlock::keys::AuditKey;
use agent_airlock::{
    Clock, SystemClock,
    approval::{AdmitError, BindingInput},
};
use serde_json::{Map, Value, json};

mod support;

use support::{Calls, SECRET, TTL, airlock, approvals, signing_key, stdout_json};

/// `refund` calls, numbered by amount.
const REFUND: Calls = Calls { tool: "refund", arguments: refund_arguments };

fn refund_arguments(amount: u64) -> Map<String, Value> {
    json!({"payment_id": "pi_1", "amount": amount}).as_object().unwrap().clone()
}

/// Records a pending request for a refund of `amount` (as the dispatcher's first pass would), then closes
/// the file so the CLI can open it.
fn pending_request(db: &Path, amount: u64) -> String {
    REFUND.request(db, amount, "moves money")
}

fn admit(db: &Path, amount: u64, resume: &Value) -> Result<(), AdmitError> {
    REFUND.admit(db, amount, resume)
}

#[test]
fn list_show_approve_and_deny_requests() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let first = pending_request(&db, 500);
    let second = pending_request(&db, 900);

    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(listed[0]["status"], "pending");
    assert_eq!(listed[0]["tool"], "refund");
    let text = String::from_utf8(airlock(&db, &["requests", "show", &first]).stdout).unwrap();
    assert!(text.contains("moves money") && text.contains("\"amount\": 500"), "{text}");

    // Approve with the key from the environment; the resume value admits the call once.
    let resume =
        stdout_json(&airlock(&db, &["approve", &first, "--yes", "--signing-key", &signing_key("alice"), "--json"]));
    assert!(resume["airlock_grant"]["token"].is_string());
    admit(&db, 500, &resume).unwrap();
    assert!(matches!(admit(&db, 500, &resume), Err(AdmitError::AlreadySpent { .. })));

    // Deny with the key from a file; the human's no reaches the call.
    let key_file = dir.path().join("approval.key");
    std::fs::write(&key_file, SECRET).unwrap();
    let key_arg = key_file.to_str().unwrap();
    let no = stdout_json(&airlock(
        &db,
        &[
            "deny",
            &second,
            "--signing-key",
            &signing_key("bob"),
            "--reason",
            "wrong customer",
            "--key-file",
            key_arg,
            "--json",
        ],
    ));
    assert!(matches!(admit(&db, 900, &no), Err(AdmitError::Denied { .. })));

    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    let statuses: Vec<&str> = listed.as_array().unwrap().iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["spent", "denied"]);
    let spent = stdout_json(&airlock(&db, &["spent", "--json"]));
    assert_eq!(spent[0]["approver"], "alice");
    assert_eq!(spent[0]["request_id"], first.as_str());
}

#[test]
fn a_wrong_or_missing_key_approves_nothing_and_never_prints_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let id = pending_request(&db, 500);
    let wrong = dir.path().join("wrong.key");
    std::fs::write(&wrong, "ff".repeat(32)).unwrap();
    let output = airlock(
        &db,
        &["approve", &id, "--yes", "--signing-key", &signing_key("mallory"), "--key-file", wrong.to_str().unwrap()],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("seal"), "{stderr}");
    assert!(!stderr.contains(SECRET) && !stderr.contains(&"ff".repeat(32)));
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(&db)
        .args(["approve", &id, "--yes", "--signing-key", &signing_key("x")])
        .env_remove("AIRLOCK_APPROVAL_KEY")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("AIRLOCK_APPROVAL_KEY"));
    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    assert_eq!(listed[0]["status"], "pending");
    let output = airlock(&db, &["requests", "show", "no-such-request"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("no approval request `no-such-request`"));
}

#[test]
fn effects_are_listed_and_ambiguous_ones_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let store = RedbEffectStore::open(&db).unwrap();
        let now = SystemClock.now();
        let done = store.reserve("refund:pi_1", Duration::from_secs(60), now).unwrap();
        store.commit(&done, now).unwrap();
        let unknown = store.reserve("refund:pi_2", Duration::from_secs(60), now).unwrap();
        store.mark_ambiguous(&unknown, now).unwrap();
        // A call still running, its lease live.
        store.reserve("refund:pi_3", Duration::from_secs(600), now).unwrap();
    }
    let ambiguous = stdout_json(&airlock(&db, &["effects", "list", "--ambiguous", "--json"]));
    assert_eq!(ambiguous.as_array().unwrap().len(), 1);
    assert_eq!(ambiguous[0]["key"], "refund:pi_2");

    // Nobody resolves anonymously.
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(&db)
        .args(["effects", "resolve", "refund:pi_2", "--outcome", "failed"])
        .env_remove("AIRLOCK_OPERATOR")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--operator"), "{output:?}");

    let resolve =
        |key: &str| airlock(&db, &["effects", "resolve", key, "--outcome", "failed", "--operator", "alice", "--json"]);
    let resolved = stdout_json(&resolve("refund:pi_2"));
    assert_eq!(resolved["status"], "failed");
    assert_eq!(resolved["record"]["resolved_by"], "alice", "{resolved}");
    let all = stdout_json(&airlock(&db, &["effects", "list", "--json"]));
    let statuses: Vec<&str> = all.as_array().unwrap().iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["committed", "failed", "reserved"]);
    let output = airlock(&db, &["effects", "resolve", "refund:pi_1", "--outcome", "failed", "--operator", "alice"]);
    assert!(!output.status.success(), "a committed effect is not ambiguous");

    // A reservation whose call may still be running is not the operator's to resolve.
    let output = resolve("refund:pi_3");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("may still be running") && stderr.contains("lapses 20"), "{stderr}");
    let all = stdout_json(&airlock(&db, &["effects", "list", "--json"]));
    assert_eq!(all[2]["status"], "reserved", "{all}");

    // The audit log says who resolved what, and how; the refused attempts left no record.
    let log = AuditLog::open(&db, AuditConfig::default()).unwrap();
    let records = log.records(1, 100).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].outcome, AuditOutcome::EffectResolved { resolution: Resolution::Failed });
    assert_eq!(records[0].tool_call_id, "refund:pi_2");
    assert!(records[0].detail.as_deref().unwrap().contains("by operator `alice`"), "{:?}", records[0]);
}

/// `--audit PATH` and `--audit-file PATH`: the resolution goes to the gateway's own audit log (a separate redb
/// file, or an append-only file, each holding a record already), not `--db`'s; a path that does not exist is
/// refused and nothing is resolved.
#[test]
fn a_resolution_goes_into_the_gateways_own_audit_log_when_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let store = RedbEffectStore::open(&db).unwrap();
        let now = SystemClock.now();
        for key in ["refund:pi_1", "refund:pi_2"] {
            let unknown = store.reserve(key, Duration::from_secs(60), now).unwrap();
            store.mark_ambiguous(&unknown, now).unwrap();
        }
    }
    let (redb_log, file_log) = (dir.path().join("audit.redb"), dir.path().join("audit.log"));
    AuditLog::open(&redb_log, AuditConfig::default())
        .unwrap()
        .append(AuditEvent::new("refund", "call_1", AuditOutcome::Executed))
        .unwrap();
    AuditLog::open_append_only(&file_log, AuditConfig::default())
        .unwrap()
        .append(AuditEvent::new("refund", "call_2", AuditOutcome::Executed))
        .unwrap();
    let resolve = |key: &str, flag: &str, path: &Path| {
        airlock(
            &db,
            &["effects", "resolve", key, "--outcome", "failed", "--operator", "alice", flag, path.to_str().unwrap()],
        )
    };
    for flag in ["--audit", "--audit-file"] {
        let missing = dir.path().join("typo");
        let output = resolve("refund:pi_1", flag, &missing);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains("does not exist"), "{flag}: {stderr}");
        assert!(stderr.contains("nothing was resolved") && !missing.exists(), "{flag}: {stderr}");
    }
    let listed = stdout_json(&airlock(&db, &["effects", "list", "--ambiguous", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 2, "nothing resolved: {listed}");

    for (key, flag, path) in [("refund:pi_1", "--audit", &redb_log), ("refund:pi_2", "--audit-file", &file_log)] {
        let output = resolve(key, flag, path);
        assert!(output.status.success(), "{flag}: {}", String::from_utf8_lossy(&output.stderr));
    }
    let in_redb = AuditLog::open(&redb_log, AuditConfig::default()).unwrap().records(1, 10).unwrap();
    let in_file = AuditLog::read_append_only(&file_log, AuditConfig::default()).unwrap().records(1, 10).unwrap();
    for (records, first, resolved) in [(in_redb, "call_1", "refund:pi_1"), (in_file, "call_2", "refund:pi_2")] {
        let ids: Vec<&str> = records.iter().map(|r| r.tool_call_id.as_str()).collect();
        assert_eq!(ids, [first, resolved]);
        assert_eq!(records[1].outcome, AuditOutcome::EffectResolved { resolution: Resolution::Failed });
    }
    let in_db = AuditLog::open(&db, AuditConfig::default()).unwrap();
    assert!(in_db.records(1, 10).unwrap().is_empty(), "nothing in --db's log");
}

/// A signed audit log gets a signed resolution record, or none: without its key nothing is resolved.
#[test]
fn a_resolution_in_a_signed_audit_log_is_signed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let key_file = dir.path().join("audit.key");
    std::fs::write(&key_file, "ab".repeat(32)).unwrap();
    {
        let key = AuditKey::new("audit-1", &[0xab; 32]).unwrap();
        let database = std::sync::Arc::new(redb::Database::create(&db).unwrap());
        let config = AuditConfig { key: Some(key), ..AuditConfig::default() };
        let log = AuditLog::with_database(std::sync::Arc::clone(&database), config).unwrap();
        log.append(AuditEvent::new("refund", "call_1", AuditOutcome::Executed)).unwrap();
        let store = RedbEffectStore::new(database).unwrap();
        let now = SystemClock.now();
        let unknown = store.reserve("refund:pi_2", Duration::from_secs(60), now).unwrap();
        store.mark_ambiguous(&unknown, now).unwrap();
    }
    let args = ["effects", "resolve", "refund:pi_2", "--outcome", "committed", "--operator", "bob"];
    let output = airlock(&db, &args);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the audit log is signed (key `audit-1`)") && stderr.contains("nothing was resolved"));
    let listed = stdout_json(&airlock(&db, &["effects", "list", "--ambiguous", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 1, "still ambiguous: {listed}");

    let keyed = [&args[..], &["--audit-key-file", key_file.to_str().unwrap()]].concat();
    let output = airlock(&db, &keyed);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("refund:pi_2 is now committed, resolved by bob"));
    let report =
        stdout_json(&airlock(&db, &["audit", "verify", "--audit-key-file", key_file.to_str().unwrap(), "--json"]));
    assert_eq!((report["records"].as_u64(), report["head_signed"].as_bool()), (Some(2), Some(true)), "{report}");
}

/// The times of effect records read as RFC 3339 with their age; `--json` keeps the numbers.
#[test]
fn effect_times_are_shown_as_rfc_3339_with_their_age() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let store = RedbEffectStore::open(&db).unwrap();
        store.reserve("refund:pi_4", Duration::from_secs(600), SystemClock.now()).unwrap();
    }
    let listed = support::stdout(&airlock(&db, &["effects", "list"]));
    let line = listed.lines().next().unwrap();
    assert!(line.starts_with("reserved    refund:pi_4  (attempt 1)  updated 20"), "{line}");
    assert!(line.contains("Z, ") && line.contains(" s ago  lease until 20") && line.ends_with(" min"), "{line}");
    let json = stdout_json(&airlock(&db, &["effects", "list", "--json"]));
    assert!(json[0]["record"]["updated_at_ns"].is_u64(), "{json}");
}

#[test]
fn the_audit_log_verifies_against_an_exported_head() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let key_file = dir.path().join("audit.key");
    std::fs::write(&key_file, "ab".repeat(32)).unwrap();
    {
        let key = AuditKey::new("audit-1", &[0xab; 32]).unwrap();
        let log = AuditLog::open(&db, AuditConfig { key: Some(key), ..AuditConfig::default() }).unwrap();
        for i in 0..3 {
            let id = format!("c{i}");
            log.append(AuditEvent::new("refund", &id, AuditOutcome::Executed)).unwrap();
        }
    }
    let key = key_file.to_str().unwrap();
    let anchor = dir.path().join("head.json");
    let exported = airlock(&db, &["audit", "export-head", "--to", anchor.to_str().unwrap(), "--audit-key-file", key]);
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let report = stdout_json(&airlock(
        &db,
        &["audit", "verify", "--anchor", anchor.to_str().unwrap(), "--audit-key-file", key, "--json"],
    ));
    assert_eq!(report["records"], 3);
    assert_eq!(report["head_signed"], true);
    // Without the key, a keyed log cannot be checked: a clear error, not a pass.
    let output = airlock(&db, &["audit", "verify"]);
    assert!(!output.status.success());
}

fn without_key(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("AIRLOCK_APPROVAL_KEY")
        .output()
        .unwrap()
}

/// Rewrites one stored request record, as someone who can write the file but has no key would.
fn tamper(db: &Path, request_id: &str, edit: impl FnOnce(&mut Value)) {
    const REQUESTS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("airlock_approval_requests");
    let database = redb::Database::open(db).unwrap();
    let txn = database.begin_write().unwrap();
    {
        let mut table = txn.open_table(REQUESTS).unwrap();
        let mut record: Value =
            serde_json::from_slice(redb::ReadableTable::get(&table, request_id).unwrap().unwrap().value()).unwrap();
        edit(&mut record);
        table.insert(request_id, serde_json::to_vec(&record).unwrap().as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn requests_are_shown_only_from_their_verified_seal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    // An amount no request id, time or hash in the output can spell by chance.
    let relabelled = pending_request(&db, 4_812_377);
    let altered = pending_request(&db, 900);
    // The unsealed copies say something harmless: never shown.
    tamper(&db, &relabelled, |record| {
        record["tool"] = json!("read_balance");
        record["reason"] = json!("harmless read");
    });
    // The sealed value itself altered: its seal fails.
    tamper(&db, &altered, |record| {
        record["interrupt"]["airlock_approval"]["reason"] = json!("harmless read");
        record["interrupt"]["airlock_approval"]["arguments"]["amount"] = json!(1);
    });

    let text = String::from_utf8(airlock(&db, &["requests", "list"]).stdout).unwrap();
    assert!(!text.contains("harmless") && !text.contains("read_balance"), "{text}");
    let line = |id: &str| text.lines().find(|l| l.starts_with(id)).unwrap().to_owned();
    assert!(line(&relabelled).contains("refund") && line(&relabelled).contains("moves money"), "{text}");
    assert!(line(&altered).contains("TAMPERED"), "{text}");

    let shown = String::from_utf8(airlock(&db, &["requests", "show", &altered]).stdout).unwrap();
    assert!(shown.contains("TAMPERED") && !shown.contains("harmless") && !shown.contains("refund"), "{shown}");
    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    let by_id = |id: &str| listed.as_array().unwrap().iter().find(|e| e["request_id"] == id).unwrap().clone();
    assert_eq!(by_id(&relabelled)["tool"], "refund");
    assert_eq!(by_id(&altered)["seal"], "tampered");
    assert!(by_id(&altered).get("tool").is_none() && by_id(&altered).get("arguments").is_none());

    // Without a key nothing in a request is trusted, so nothing of it is shown.
    let output = without_key(&db, &["requests", "list"]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("UNVERIFIED") && !text.contains("refund") && !text.contains("harmless"), "{text}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("no approval key given"));
    let shown = String::from_utf8(without_key(&db, &["requests", "show", &relabelled]).stdout).unwrap();
    assert!(shown.contains("UNVERIFIED") && !shown.contains("refund") && !shown.contains("4812377"), "{shown}");

    // A tampered request is not approved, with or without `--yes`.
    let output = airlock(&db, &["approve", &altered, "--yes", "--signing-key", &signing_key("alice")]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("TAMPERED"));
}

#[test]
fn approve_shows_the_call_and_asks_unless_told_yes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let approvals = approvals(&db, TTL);
    let checkpoint = [(String::new(), "c1".to_owned())].into();
    let args = json!({"payment_id": "pi_1\u{202E}9ip", "amount": 5}).as_object().unwrap().clone();
    let call = BindingInput {
        thread_id: "t1",
        checkpoint_ns: "",
        checkpoint: &checkpoint,
        tool_call_id: "call_x",
        tool: "refund",
        arguments: &args,
    };
    let id = approvals.request(&call, "attribute", "moves money").wait().unwrap().request_id().to_owned();
    drop(approvals);

    // Shown in full, the override escaped.
    let shown = String::from_utf8(airlock(&db, &["requests", "show", &id]).stdout).unwrap();
    assert!(shown.contains("\"payment_id\": \"pi_1\\u{202E}9ip\""), "{shown}");
    assert!(!shown.contains('\u{202E}'));

    // No terminal to ask on and no `--yes`: nothing approved.
    let output = airlock(&db, &["approve", &id, "--signing-key", &signing_key("alice")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a terminal") && stderr.contains("--yes"), "{stderr}");
    assert_eq!(stdout_json(&airlock(&db, &["requests", "list", "--json"]))[0]["status"], "pending");
    let resume =
        stdout_json(&airlock(&db, &["approve", &id, "--yes", "--signing-key", &signing_key("alice"), "--json"]));
    assert!(resume["airlock_grant"].is_object());
}

#[cfg(unix)]
#[test]
fn a_key_file_others_can_read_gives_a_warning_naming_the_fix() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let key_file = dir.path().join("approval.key");
    std::fs::write(&key_file, SECRET).unwrap();
    let key_arg = key_file.to_str().unwrap();
    let deny = |mode: u32| {
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(mode)).unwrap();
        let id = pending_request(&db, 100 + u64::from(mode));
        let output =
            airlock(&db, &["deny", &id, "--signing-key", &signing_key("bob"), "--key-file", key_arg, "--json"]);
        stdout_json(&output);
        String::from_utf8(output.stderr).unwrap()
    };

    let exposed = deny(0o644);
    assert!(exposed.contains(&format!("`{key_arg}` can be read by other users (mode 644)")), "{exposed}");
    assert!(exposed.contains(&format!("`chmod 600 {key_arg}`")), "{exposed}");
    let private = deny(0o600);
    assert!(!private.contains("warning"), "a 0600 key file is not warned about: {private}");
}

#[test]
fn the_audit_key_loads_like_every_other_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let key = AuditKey::new("audit-1", &[0xcd; 32]).unwrap();
        let log = AuditLog::open(&db, AuditConfig { key: Some(key), ..AuditConfig::default() }).unwrap();
        log.append(AuditEvent::new("refund", "c0", AuditOutcome::Executed)).unwrap();
    }
    let verify_with_env = |var: &str, value: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
        command.arg("--db").arg(&db).args(["audit", "verify", "--audit-key-env", var, "--json"]);
        match value {
            Some(value) => command.env(var, value),
            None => command.env_remove(var),
        };
        command.output().unwrap()
    };
    // Upper-case hex with a trailing newline, from the environment.
    let report = stdout_json(&verify_with_env("AIRLOCK_TEST_AUDIT_KEY", Some(&format!("{}\n", "CD".repeat(32)))));
    assert_eq!(report["head_signed"], true);

    let missing = verify_with_env("AIRLOCK_TEST_AUDIT_KEY", None);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("audit key `audit-1`: environment variable `AIRLOCK_TEST_AUDIT_KEY` is not set"),
        "{stderr}"
    );

    let bad = dir.path().join("bad.key");
    std::fs::write(&bad, format!("{}zz\n", "cd".repeat(31))).unwrap();
    let output = airlock(&db, &["audit", "verify", "--audit-key-file", bad.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("audit key `audit-1` from file `"), "{stderr}");
    assert!(stderr.contains("a non-hex character at position 62"), "{stderr}");
    assert!(!stderr.contains("cdcd"), "{stderr}");
}

/// A row holding another request's sealed value is approved by no one: `approve` checks that the sealed
/// request is the one asked for (before, it approved the other request).
#[test]
fn approve_refuses_a_row_holding_another_requests_sealed_value() {
    const REQUESTS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("airlock_approval_requests");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let asked = pending_request(&db, 5);
    let other = pending_request(&db, 50_000);
    {
        let database = redb::Database::open(&db).unwrap();
        let txn = database.begin_write().unwrap();
        {
            let mut table = txn.open_table(REQUESTS).unwrap();
            let read = |id: &str| -> Value {
                serde_json::from_slice(redb::ReadableTable::get(&table, id).unwrap().unwrap().value()).unwrap()
            };
            let mut record = read(&asked);
            record["interrupt"] = read(&other)["interrupt"].clone();
            table.insert(asked.as_str(), serde_json::to_vec(&record).unwrap().as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let output = airlock(&db, &["approve", &asked, "--yes", "--signing-key", &signing_key("alice")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("TAMPERED") && stderr.contains(&other), "{stderr}");
    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    assert!(listed.as_array().unwrap().iter().all(|e| e["status"] == "pending"), "{listed}");
}

/// Times a person reads are RFC 3339 in UTC with their age; `--json` keeps the numbers.
#[test]
fn times_are_shown_as_rfc_3339_with_their_age() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let id = pending_request(&db, 5);
    let shown = String::from_utf8(airlock(&db, &["requests", "show", &id]).stdout).unwrap();
    let line = shown.lines().find(|l| l.starts_with("requested ")).unwrap();
    assert!(line.starts_with("requested 20") && line.contains("Z, ") && line.ends_with(" s ago"), "{line}");
    let listed = stdout_json(&airlock(&db, &["requests", "list", "--json"]));
    assert!(listed[0]["requested_at_ms"].is_u64(), "{listed}");
    let listed = support::stdout(&airlock(&db, &["requests", "list"]));
    let row = listed.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(row.contains("pending   20") && row.contains("Z, ") && row.contains(" s ago"), "{row}");
    let resume =
        stdout_json(&airlock(&db, &["approve", &id, "--yes", "--signing-key", &signing_key("alice"), "--json"]));
    admit(&db, 5, &resume).unwrap();
    let spent = String::from_utf8(airlock(&db, &["spent"]).stdout).unwrap();
    assert!(spent.contains("approved by alice  spent 20") && spent.contains(" ago"), "{spent}");
}
