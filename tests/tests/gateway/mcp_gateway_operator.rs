//! `airlock mcp` with operator approvals and cancellation, every part a real process: the gateway, its
//! upstream (the Python SDK server of `tests/mcp/upstream_server.py`, which logs every call it receives),
//! and the operator's `airlock requests list` / `airlock approve` / `airlock deny`, each run against the
//! store the gateway uses (a redb file opened by every process with `--multi-process`, or PostgreSQL). The
//! client is a hand-written JSON-RPC session on the gateway's stdio, so the test decides when to cancel.
//!
//! What is shown, from the upstream's own log and the store: an escalated call routed to the operator waits
//! and runs once the operator approves, exactly once; a denied one never reaches the upstream and the model
//! reads the operator's reason; one nobody decides times out, is closed in the ledger and can no longer be
//! approved; one the client cancels while it waits never runs, even if the operator approves later; one
//! cancelled while the upstream runs it is cancelled upstream too, and its effect is left for an operator.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_airlock::ledger::{ApprovalLedger, GrantRecord, PostgresLedger, RedbLedger};
use agent_airlock::store::{ProcessSharing, RedbOpenOptions};
use agent_airlock_tests::mcp_stdio::StdioSession;
use agent_airlock_tests::pg_server;
use agent_airlock_tests::python_env::Venv;
use serde_json::{Value, json};

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{AIRLOCK, UPSTREAM, venv};

/// How long an escalated call waits for the operator in these tests.
const APPROVAL_TIMEOUT_SECS: u64 = 6;

const POLICY: &str = r#"version = 1
default = "allow"

[tools.transfer]
escalate = "moves money"
approver = "operator"
effect = "transfer:{to}"

[tools.slow]
effect = "slow:{name}"
"#;

/// Where the gateway keeps its records, as every `airlock` process is told.
enum Store {
    /// A redb file, opened by every process with `--multi-process`.
    Redb(PathBuf),
    /// A PostgreSQL database, with the audit log in a redb file of the gateway's own.
    Postgres { url: String, audit: PathBuf },
}

impl Store {
    /// The global arguments naming the store.
    fn args(&self) -> Vec<String> {
        match self {
            Store::Redb(path) => vec!["--db".into(), path.display().to_string(), "--multi-process".into()],
            Store::Postgres { url, .. } => vec!["--db".into(), url.clone()],
        }
    }
}

/// One operator test's files: the upstream's call log and notes, the key, the policy.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let scratch = Scratch { dir: tempfile::tempdir().expect("a temporary directory") };
        std::fs::write(scratch.path("airlock.toml"), POLICY).expect("the policy is written");
        // The approval key the gateway seals with and the operator checks with: 32 bytes of hex.
        let secret: String = (0..32).map(|i| format!("{:02x}", (i * 37 + 11) % 256)).collect();
        std::fs::write(scratch.path("approval.key"), secret).expect("the key is written");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let owner_only = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(scratch.path("approval.key"), owner_only).expect("the key is private");
        }
        // The operator's own signing key, listed in the operators file the gateway counts approvals by.
        let added = Command::new(AIRLOCK)
            .args(["operators", "add", "ops@example", "--key-out"])
            .arg(scratch.path("ops.key"))
            .arg("--operators")
            .arg(scratch.path("operators.toml"))
            .output()
            .expect("airlock runs");
        assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
        scratch
    }

    fn signing_key(&self) -> String {
        self.path("ops.key").display().to_string()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The upstream's view: every call it received, in order, as `(tool, arguments)`.
    fn upstream_calls(&self) -> Vec<(String, Value)> {
        std::fs::read_to_string(self.path("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let call: Value = serde_json::from_str(line).expect("the upstream logs JSON lines");
                (call["tool"].as_str().expect("a tool name").to_owned(), call["arguments"].clone())
            })
            .collect()
    }

    fn transfers(&self) -> String {
        std::fs::read_to_string(self.path("notes/transfers.log")).unwrap_or_default()
    }

    fn redb_store(&self) -> Store {
        Store::Redb(self.path("airlock.redb"))
    }

    fn postgres_store(&self) -> Store {
        // The form a deployment passes: a URL, the socket directory percent-encoded as the host.
        let url = pg_server::as_url(&pg_server::shared().fresh_database());
        Store::Postgres { url, audit: self.path("audit.redb") }
    }
}

/// Starts the gateway for `store` and opens an MCP session with it on its stdio.
fn start_session(scratch: &Scratch, venv: &Venv, store: &Store) -> StdioSession {
    start_session_with(scratch, venv, store, &[])
}

/// [`start_session`] with more of the gateway's arguments.
fn start_session_with(scratch: &Scratch, venv: &Venv, store: &Store, extra: &[&str]) -> StdioSession {
    let mut command = Command::new(AIRLOCK);
    command.args(store.args()).args(["mcp", "--policy"]).arg(scratch.path("airlock.toml")).args(extra);
    command.arg("--key-file").arg(scratch.path("approval.key"));
    command.arg("--operators").arg(scratch.path("operators.toml"));
    command.args(["--approval-timeout-secs", &APPROVAL_TIMEOUT_SECS.to_string()]);
    if let Store::Postgres { audit, .. } = store {
        command.arg("--audit").arg(audit);
    }
    command.arg("--").arg(venv.python()).arg(UPSTREAM).arg(scratch.path("calls.log")).arg(scratch.path("notes"));
    StdioSession::start(command.stderr(Stdio::inherit()))
}

/// The text of a tool result, and whether it is an error.
fn result_text(response: &Value) -> (String, bool) {
    let result = &response["result"];
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("a text result: {response}"));
    (text.to_owned(), result["isError"] == true)
}

/// Runs the operator's `airlock` with the store's arguments, `args` and the approval key; its stdout, or
/// its stderr as the error.
fn operator(store: &Store, scratch: &Scratch, args: &[&str]) -> Result<String, String> {
    let key = ["--key-file", scratch.path("approval.key").to_str().expect("UTF-8 path")].map(str::to_owned);
    run_airlock(store, args, &key)
}

fn run_airlock(store: &Store, args: &[&str], key: &[String]) -> Result<String, String> {
    let output = Command::new(AIRLOCK)
        .args(store.args())
        .args(args)
        .args(key)
        .stdin(Stdio::null())
        .output()
        .expect("airlock runs");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    if output.status.success() { Ok(stdout) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
}

/// Waits until the ledger holds a pending request for `tool` that no earlier wait returned; its id.
fn pending_request(store: &Store, scratch: &Scratch, tool: &str, seen: &mut Vec<String>) -> String {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let listed = operator(store, scratch, &["--json", "requests", "list", "--pending"])
            .unwrap_or_else(|e| panic!("the operator lists requests while the gateway runs: {e}"));
        let listed: Value = serde_json::from_str(&listed).expect("JSON");
        let fresh = listed.as_array().expect("a list").iter().find(|entry| {
            entry["tool"] == tool
                && entry["seal"] == "verified"
                && !seen.iter().any(|id| entry["request_id"].as_str() == Some(id))
        });
        if let Some(entry) = fresh {
            let id = entry["request_id"].as_str().expect("an id").to_owned();
            seen.push(id.clone());
            return id;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no pending `{tool}` request appeared in the ledger");
}

/// The ledger's record of `request_id` once it is settled (denied or spent): the gateway closes a cancelled
/// call's request on its own time (at its next look at the ledger, or on a thread that retries the write).
/// Waits for that event, for at most 30 s; the record as it stands then.
fn closed_status(store: &Store, scratch: &Scratch, request_id: &str) -> Value {
    let started = Instant::now();
    loop {
        let shown = operator(store, scratch, &["--json", "requests", "show", request_id])
            .unwrap_or_else(|e| panic!("the operator shows the request: {e}"));
        let shown: Value = serde_json::from_str(&shown).expect("JSON");
        let settled = shown["status"] == "denied" || shown["status"] == "spent";
        if settled || started.elapsed() > Duration::from_secs(30) {
            return shown;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn approve(store: &Store, scratch: &Scratch, request_id: &str) -> Result<String, String> {
    operator(store, scratch, &["approve", request_id, "--signing-key", &scratch.signing_key(), "--yes"])
}

/// The whole operator story against one store.
fn operator_approvals(scratch: &Scratch, store: &Store) {
    let venv = venv();
    let mut session = start_session(scratch, &venv, store);
    let mut seen = Vec::new();

    // 1. Approved by the operator: the call waits, then runs exactly once.
    session.call(1, "transfer", json!({"amount": 5, "to": "alice"}));
    let first = pending_request(store, scratch, "transfer", &mut seen);
    assert!(session.try_response(1, Duration::from_millis(500)).is_none(), "the call waits for the operator");
    assert!(scratch.upstream_calls().is_empty(), "nothing reached the upstream before the approval");
    approve(store, scratch, &first).expect("the operator approves");
    let (text, is_error) = result_text(&session.response(1, Duration::from_secs(30)));
    assert!(!is_error, "{text}");
    assert_eq!(text, "transferred 5 to alice");
    assert_eq!(scratch.transfers(), "5 -> alice\n");
    // The grant was spent by that call: approving again admits nothing.
    let again = approve(store, scratch, &first).expect_err("a spent request cannot be approved again");
    assert!(again.contains("already used"), "{again}");

    // 2. Denied by the operator: never reaches the upstream; the model reads the operator's reason.
    session.call(2, "transfer", json!({"amount": 7, "to": "mallory"}));
    let second = pending_request(store, scratch, "transfer", &mut seen);
    let key = scratch.signing_key();
    operator(store, scratch, &["deny", &second, "--signing-key", &key, "--reason", "mallory is not a customer"])
        .expect("the operator denies");
    let (text, is_error) = result_text(&session.response(2, Duration::from_secs(30)));
    assert!(is_error, "{text}");
    assert!(text.contains("mallory is not a customer"), "{text}");

    // 3. Nobody decides: refused after the timeout and closed in the ledger, so a late approval admits nothing.
    let asked = Instant::now();
    session.call(3, "transfer", json!({"amount": 9, "to": "bob"}));
    let third = pending_request(store, scratch, "transfer", &mut seen);
    let (text, is_error) = result_text(&session.response(3, Duration::from_secs(APPROVAL_TIMEOUT_SECS + 30)));
    assert!(asked.elapsed() >= Duration::from_secs(APPROVAL_TIMEOUT_SECS), "refused only after the timeout");
    assert!(is_error, "{text}");
    assert!(text.contains(&format!("no operator decided within {APPROVAL_TIMEOUT_SECS} s")), "{text}");
    let late = approve(store, scratch, &third).expect_err("a closed request cannot be approved");
    assert!(late.contains("already denied"), "{late}");

    // 4. Cancelled by the client while it waits: never runs, and its request is closed in the ledger, so an
    //    operator's approval admits nothing. The operator approves at once, racing the gateway's closing
    //    denial: either the approval comes first and the denial revokes its grant, or the denial comes
    //    first and the approval is refused. Either way the request ends denied, however the race goes.
    session.call(4, "transfer", json!({"amount": 11, "to": "carol"}));
    let fourth = pending_request(store, scratch, "transfer", &mut seen);
    session.cancel(4);
    let _racing = approve(store, scratch, &fourth);
    let status = closed_status(store, scratch, &fourth);
    assert_eq!(status["status"], "denied", "the cancelled call's request was closed: {status}");
    assert_eq!(status["decision"]["denied_by"], "agent-airlock", "{status}");
    let refused = approve(store, scratch, &fourth).expect_err("a closed request cannot be approved");
    assert!(refused.contains("already denied"), "{refused}");

    // Only the approved transfer ever reached the upstream, and it ran once.
    let calls = scratch.upstream_calls();
    assert_eq!(calls, [("transfer".to_owned(), json!({"amount": 5, "to": "alice"}))], "the upstream's own log");
    assert_eq!(scratch.transfers(), "5 -> alice\n");

    // The ledger agrees: one spent grant, for the first request.
    let spent: Value =
        serde_json::from_str(&run_airlock(store, &["--json", "spent"], &[]).expect("spent lists")).expect("JSON");
    let spent = spent.as_array().expect("a list");
    assert_eq!(spent.len(), 1, "{spent:?}");
    assert_eq!(spent[0]["tool"], "transfer");
    session.close();
}

/// `--audit-file`: a request the gateway closes revokes a grant an operator issued meanwhile (here the client
/// cancels after the operator approved, before the gateway looked at the ledger again), and the gateway records
/// the revocation in its append-only audit file before the ledger's denial, so every host writing that file
/// refuses the grant even if its row is later set back to live. The call never reaches the upstream.
#[test]
fn a_grant_revoked_by_a_request_the_gateway_closes_is_recorded_in_its_audit_file() {
    use agent_airlock::audit::{AuditConfig, AuditLog};
    let scratch = Scratch::new();
    let store = scratch.redb_store();
    let venv = venv();
    let audit = scratch.path("audit.log");
    // The gateway looks at the ledger once when the call starts to wait, then not for ten minutes.
    let extra = ["--audit-file", audit.to_str().expect("UTF-8 path"), "--operator-poll-ms", "600000"];
    let mut session = start_session_with(&scratch, &venv, &store, &extra);
    session.call(1, "transfer", json!({"amount": 13, "to": "dave"}));
    let request_id = pending_request(&store, &scratch, "transfer", &mut Vec::new());
    // Well after that first look.
    std::thread::sleep(Duration::from_secs(1));
    approve(&store, &scratch, &request_id).expect("the operator approves");
    session.cancel(1);
    let status = closed_status(&store, &scratch, &request_id);
    assert_eq!(status["status"], "denied", "the cancelled call's request was closed: {status}");
    assert_eq!(status["decision"]["denied_by"], "agent-airlock", "{status}");
    let grant_id = status["decision"]["revoked_grant"].as_str().expect("the closing revoked the operator's grant");
    let records = AuditLog::read_append_only(&audit, AuditConfig::default()).unwrap().records(1, 100).unwrap();
    let revocations: Vec<_> =
        records.iter().filter(|record| record.detail.as_deref().is_some_and(|d| d.contains(" revoked by "))).collect();
    assert_eq!(revocations.len(), 1, "{records:?}");
    assert_eq!(revocations[0].detail.as_deref(), Some(format!("grant {grant_id} revoked by agent-airlock").as_str()));
    assert_eq!(revocations[0].outcome.to_string(), "refused (human_denied)");
    assert!(scratch.upstream_calls().is_empty(), "the call never reached the upstream");
    session.close();
}

#[test]
fn an_operator_approves_through_a_redb_file_shared_by_processes() {
    let scratch = Scratch::new();
    let store = scratch.redb_store();
    operator_approvals(&scratch, &store);
}

#[test]
fn an_operator_approves_through_postgres() {
    let scratch = Scratch::new();
    let store = scratch.postgres_store();
    operator_approvals(&scratch, &store);
    // The gateway audited every outcome in the file of `--audit`.
    let Store::Postgres { audit, .. } = &store else { unreachable!() };
    let verified =
        Command::new(AIRLOCK).arg("--db").arg(audit).args(["audit", "verify"]).output().expect("airlock runs");
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stderr));
}

/// A grant written into the store through the ledger API, without an operator's signature (what anyone
/// who can write the database, or holds the approval key, can do), admits nothing through the gateway's
/// operator route: the call is refused and never reaches the upstream. A grant signed by a key the
/// operators file does not list admits nothing either.
fn forged_grants_admit_nothing(scratch: &Scratch, store: &Store) {
    let venv = venv();
    let mut session = start_session(scratch, &venv, store);
    let mut seen = Vec::new();
    let ledger: std::sync::Arc<dyn ApprovalLedger> = match store {
        Store::Redb(path) => std::sync::Arc::new(
            RedbLedger::open_with(path, &RedbOpenOptions::default().sharing(ProcessSharing::MultiProcess))
                .expect("the test opens the shared file"),
        ),
        Store::Postgres { url, .. } => std::sync::Arc::new(PostgresLedger::connect(url).expect("the database")),
    };

    session.call(1, "transfer", json!({"amount": 50, "to": "mallory"}));
    let id = pending_request(store, scratch, "transfer", &mut seen);
    let request = ledger.find_request(&id).expect("the ledger answers").expect("the request").request;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    let forged = GrantRecord {
        grant_id: "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0".to_owned(),
        request_id: request.request_id.clone(),
        key_id: request.key_id.clone(),
        binding: request.binding.clone(),
        approver: "ops@example".to_owned(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at: now,
        expires_at: now + Duration::from_secs(600),
    };
    ledger.grant(forged, now).wait().expect("the ledger records what it is given");
    let (text, is_error) = result_text(&session.response(1, Duration::from_secs(30)));
    assert!(is_error, "{text}");
    assert!(text.contains("not signed by enough operators"), "{text}");

    // Signed, by a key nobody listed.
    let stranger = Command::new(AIRLOCK)
        .args(["operators", "add", "ops@example", "--key-out"])
        .arg(scratch.path("stranger.key"))
        .arg("--operators")
        .arg(scratch.path("elsewhere.toml"))
        .output()
        .expect("airlock runs");
    assert!(stranger.status.success());
    session.call(2, "transfer", json!({"amount": 60, "to": "mallory"}));
    let id = pending_request(store, scratch, "transfer", &mut seen);
    let stranger_key = scratch.path("stranger.key").display().to_string();
    operator(store, scratch, &["approve", &id, "--signing-key", &stranger_key, "--yes"]).expect("recorded");
    let (text, is_error) = result_text(&session.response(2, Duration::from_secs(30)));
    assert!(is_error, "{text}");
    assert!(text.contains("does not list"), "{text}");

    assert!(scratch.upstream_calls().is_empty(), "nothing reached the upstream: {:?}", scratch.upstream_calls());
    session.close();
}

#[test]
fn a_grant_forged_in_a_redb_file_admits_nothing_through_the_gateway() {
    let scratch = Scratch::new();
    let store = scratch.redb_store();
    forged_grants_admit_nothing(&scratch, &store);
}

#[test]
fn a_grant_forged_in_postgres_admits_nothing_through_the_gateway() {
    let scratch = Scratch::new();
    let store = scratch.postgres_store();
    forged_grants_admit_nothing(&scratch, &store);
}

#[test]
fn operator_approvals_need_a_key_and_a_store_other_processes_can_open() {
    let venv = venv();
    let scratch = Scratch::new();
    let upstream = [venv.python().display().to_string(), UPSTREAM.to_owned()];
    let start = |extra: &[&str]| {
        let output = Command::new(AIRLOCK)
            .arg("--db")
            .arg(scratch.path("airlock.redb"))
            .args(extra)
            .args(["mcp", "--policy"])
            .arg(scratch.path("airlock.toml"))
            .args(["--key-env", "AIRLOCK_TEST_NO_SUCH_KEY", "--"])
            .args(&upstream)
            .arg(scratch.path("calls.log"))
            .arg(scratch.path("notes"))
            .stdin(Stdio::null())
            .output()
            .expect("airlock runs");
        assert!(!output.status.success(), "the gateway refuses to start");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let without_key = start(&["--multi-process"]);
    assert!(without_key.contains("routes the approvals of transfer to an operator"), "{without_key}");
    assert!(without_key.contains("`--key-file`"), "{without_key}");
    std::fs::remove_file(scratch.path("airlock.redb")).expect("the file was created");

    let unshared = Command::new(AIRLOCK)
        .arg("--db")
        .arg(scratch.path("airlock.redb"))
        .args(["mcp", "--policy"])
        .arg(scratch.path("airlock.toml"))
        .arg("--key-file")
        .arg(scratch.path("approval.key"))
        .arg("--")
        .args(&upstream)
        .arg(scratch.path("calls.log"))
        .arg(scratch.path("notes"))
        .stdin(Stdio::null())
        .output()
        .expect("airlock runs");
    assert!(!unshared.status.success());
    let unshared = String::from_utf8_lossy(&unshared.stderr);
    assert!(unshared.contains("`--multi-process`"), "{unshared}");
    assert!(scratch.upstream_calls().is_empty());
}

#[test]
fn a_call_cancelled_while_the_upstream_runs_it_is_cancelled_upstream_and_its_effect_left_ambiguous() {
    let venv = venv();
    let scratch = Scratch::new();
    let store = scratch.redb_store();
    let mut session = start_session(&scratch, &venv, &store);
    let note = |name: &str| scratch.path("notes").join(name);
    let appears = |path: PathBuf, within: Duration| {
        let started = Instant::now();
        while !path.exists() && started.elapsed() < within {
            std::thread::sleep(Duration::from_millis(50));
        }
        path.exists()
    };

    session.call(1, "slow", json!({"name": "cut"}));
    assert!(appears(note("cut.started"), Duration::from_secs(30)), "the upstream started the call");
    let cancelled_at = Instant::now();
    session.cancel(1);
    // The gateway passes the cancellation on: the upstream's own record says the call was cut short.
    assert!(appears(note("cut.cancelled"), Duration::from_secs(10)), "the upstream was told of the cancellation");
    // Well past the four seconds the call would have taken, its effect never happened.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(cancelled_at.elapsed()));
    assert!(!note("cut").exists(), "the cancelled call ran to its end upstream");
    assert!(session.try_response(1, Duration::from_millis(200)).is_none(), "no answer to a cancelled request");

    // The gateway goes on serving: the next call runs to its end.
    session.call(2, "slow", json!({"name": "whole"}));
    let (text, is_error) = result_text(&session.response(2, Duration::from_secs(30)));
    assert!(!is_error, "{text}");
    assert_eq!(std::fs::read_to_string(note("whole")).expect("the second call's effect"), "done");
    session.close();

    // The cut call's effect may have happened in part: ambiguous, for an operator; the whole one committed.
    let listed = run_airlock(&store, &["--json", "effects", "list"], &[]).expect("effects list");
    let listed: Value = serde_json::from_str(&listed).expect("JSON");
    let status: Vec<(String, String)> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| (r["key"].as_str().unwrap_or("").to_owned(), r["status"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(
        status,
        [("slow:cut".to_owned(), "ambiguous".to_owned()), ("slow:whole".to_owned(), "committed".to_owned())]
    );
    let calls: Vec<String> = scratch.upstream_calls().into_iter().map(|(tool, _)| tool).collect();
    assert_eq!(calls, ["slow", "slow"]);
}
