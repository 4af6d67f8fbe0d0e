//! `airlock console` over HTTP, as a browser would use it but without one: sign-in, sessions, CSRF, a
//! request recorded while the console runs, approve (the call then runs exactly once), deny (the model
//! gets the reason), a tampered request, and the loopback guard. The database is shared with the test in
//! multi-process mode, as an agent host would share it.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::time::Duration;

use agent_airlock::approval::{AdmitError, InterruptApprovals};
use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome};
use agent_airlock::effect::{EffectStore as _, RedbEffectStore, Resolution};
use agent_airlock::ledger::{RedbLedger, RequestStatus};
use agent_airlock::{Clock as _, SystemClock};
use hmac::{Hmac, KeyInit, Mac as _};
use reqwest::StatusCode;
use serde_json::{Map, Value, json};
use sha2::Sha256;

mod support;

use support::console::{Console, Visitor, element_text, hidden, shared_database, tamper};
use support::{Calls, SECRET, TTL, approvals_on, signing_key};

const REFUND: Calls = Calls { tool: "refund", arguments: refund_arguments };

fn refund_arguments(amount: u64) -> Map<String, Value> {
    json!({"payment_id": "pi_1", "amount": amount, "api_key": "sk_live_0123456789abcdefghijklmn"})
        .as_object()
        .unwrap()
        .clone()
}

/// The agent host's side: approvals on the shared file.
fn host(db: &Path) -> InterruptApprovals {
    approvals_on(Arc::new(RedbLedger::from_database(shared_database(db)).unwrap()), TTL)
}

/// Where a request stands, read through `host`'s ledger (one process opens the file once).
fn status_of(host: &InterruptApprovals, request_id: &str) -> RequestStatus {
    host.ledger().find_request(request_id).unwrap().unwrap().status
}

#[test]
fn an_operator_signs_in_sees_a_new_request_and_approves_it_and_the_call_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let console = Console::start(&db, &["--operator", "alice"]);
    let token = console.token.clone().unwrap();
    let mut visitor = Visitor::new(&console);

    // Not signed in: every page sends the browser to sign in.
    let response = visitor.client.get(format!("{}/", console.url)).send().unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(visitor.sign_in("", "not-the-token"), StatusCode::UNAUTHORIZED);
    assert_eq!(visitor.sign_in("", &token), StatusCode::SEE_OTHER);
    let session = visitor.cookies.get("airlock_session").unwrap().clone();
    assert_eq!(session.len(), 64, "a 256-bit random session id");
    let (status, page) = visitor.get("/");
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("No request is waiting") && page.contains(r#"<span id="operator">alice</span>"#), "{page}");

    // The agent asks while the page is open; the rows the page refreshes itself with now hold it.
    let host = host(&db);
    let id = REFUND.request_in(&host, 500, "moves <b>money</b>");
    let (_, rows) = visitor.get("/pending/rows");
    assert!(rows.contains(&format!(r#"data-request="{id}""#)), "{rows}");
    assert!(
        rows.contains("refund") && rows.contains("moves &lt;b&gt;money&lt;/b&gt;") && rows.contains("t1"),
        "{rows}"
    );

    // The request in full: seal verified, every exact argument shown, the secret flagged, not hidden.
    let (status, page) = visitor.get(&format!("/requests/{id}"));
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="seal" class="verified""#), "{page}");
    let call = element_text(&page, "sealed-call");
    assert!(call.contains("\"amount\": 500") && call.contains("\"api_key\": \"sk_live_0123456789"), "{call}");
    assert!(call.contains("\"api_key\" looks like a Stripe key"), "{call}");
    let csrf = hidden(&page, "csrf");

    let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
    assert_eq!(status, StatusCode::OK, "{page}");
    let resume: Value = serde_json::from_str(&element_text(&page, "resume")).unwrap();
    let RequestStatus::Granted(grant) = status_of(&host, &id) else { panic!("not granted") };
    assert_eq!(grant.approver, "alice");

    // The waiting call is admitted once; the same approval admits nothing again.
    REFUND.with(500, |call| host.admit(call, &resume).wait()).unwrap();
    let again = REFUND.with(500, |call| host.admit(call, &resume).wait());
    assert!(matches!(again, Err(AdmitError::AlreadySpent { .. })), "{again:?}");
    // Approving it a second time from the console is refused: it is no longer pending.
    let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
    assert_eq!(status, StatusCode::CONFLICT, "{page}");
    let (_, page) = visitor.get("/decisions");
    assert!(page.contains("approved by alice, spent"), "{page}");

    // The one-time token was used up; signing out ends the session.
    let mut other = Visitor::new(&console);
    assert_eq!(other.sign_in("", &token), StatusCode::UNAUTHORIZED);
    let (status, _, location) = visitor.post("/logout", &[("csrf", &csrf)]);
    assert_eq!((status, location.as_deref()), (StatusCode::SEE_OTHER, Some("/login")));
    visitor.cookies.insert("airlock_session".to_owned(), session);
    assert_eq!(visitor.get("/").0, StatusCode::SEE_OTHER);
}

#[test]
fn a_request_needing_two_approvers_runs_only_after_two_distinct_operators_approve() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let host = host(&db);
    let id = REFUND.with(700, |call| host.request_approved_by(call, "policy", "moves money", 2).wait().unwrap());
    let id = id.request_id().to_owned();

    // Each approver signs in with a password of their own: a one-time token counts toward no `N`.
    let operators = operators_file(dir.path(), &[("alice", "alice's passphrase"), ("bob", "bob's passphrase")]);
    let console = Console::start(&db, &["--operators", operators.to_str().unwrap()]);
    let sign_in = |operator: &str| {
        let mut visitor = Visitor::new(&console);
        assert_eq!(visitor.sign_in(operator, &format!("{operator}'s passphrase")), StatusCode::SEE_OTHER);
        visitor
    };
    let approve = |visitor: &mut Visitor| {
        let (status, page) = visitor.get(&format!("/requests/{id}"));
        assert_eq!(status, StatusCode::OK, "{page}");
        assert!(element_text(&page, "approvals").contains("2 distinct people must approve"), "{page}");
        let csrf = hidden(&page, "csrf");
        let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
        assert_eq!(status, StatusCode::OK, "{page}");
        page
    };

    let mut alice = sign_in("alice");
    let page = approve(&mut alice);
    assert!(page.contains("approval recorded (1 of 2: alice)"), "{page}");
    assert!(!page.contains(r#"id="resume""#), "no resume value before the second approver: {page}");
    // The same operator again counts once; the request is still waiting, and listed as such.
    let page = approve(&mut alice);
    assert!(page.contains("approval recorded (1 of 2: alice)"), "{page}");
    assert!(matches!(status_of(&host, &id), RequestStatus::Approving { .. }));
    let (_, rows) = alice.get("/pending/rows");
    assert!(rows.contains(&format!(r#"data-request="{id}""#)), "{rows}");

    let mut bob = sign_in("bob");
    let page = approve(&mut bob);
    let resume: Value = serde_json::from_str(&element_text(&page, "resume")).unwrap();
    let RequestStatus::Granted(grant) = status_of(&host, &id) else { panic!("not granted") };
    assert_eq!(grant.approvers(), vec!["alice", "bob"]);
    REFUND.with(700, |call| host.admit(call, &resume).wait()).unwrap();
    let (_, page) = bob.get("/decisions");
    assert!(page.contains("approved by alice and bob, spent"), "{page}");
}

/// An operators file of `NAME:HASH` lines, each from `airlock console hash-password NAME`.
fn operators_file(dir: &Path, operators: &[(&str, &str)]) -> std::path::PathBuf {
    let mut lines = String::new();
    for (name, password) in operators {
        let output = hash_password(name, format!("{password}\n").as_bytes());
        assert!(output.status.success(), "{output:?}");
        lines.push_str(&String::from_utf8(output.stdout).unwrap());
    }
    let path = dir.join("operators");
    std::fs::write(&path, lines).unwrap();
    path
}

/// `airlock console hash-password NAME` with `input` on its standard input.
fn hash_password(name: &str, input: &[u8]) -> std::process::Output {
    let mut hashing = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["console", "hash-password", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    hashing.stdin.take().unwrap().write_all(input).unwrap();
    hashing.wait_with_output().unwrap()
}

#[test]
fn the_one_time_token_never_counts_toward_several_approvals() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let host = host(&db);
    let id = REFUND.with(710, |call| host.request_approved_by(call, "policy", "moves money", 2).wait().unwrap());
    let id = id.request_id().to_owned();
    let console = Console::start(&db, &["--operator", "alice"]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    // Its time reads as RFC 3339 in UTC with its age.
    let (_, rows) = visitor.get("/pending/rows");
    assert!(rows.contains("<td>20") && rows.contains("Z, ") && rows.contains(" s ago</td>"), "{rows}");
    let (_, page) = visitor.get(&format!("/requests/{id}"));
    let csrf = hidden(&page, "csrf");
    let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
    assert_eq!(status, StatusCode::CONFLICT, "{page}");
    assert!(page.contains("does not count toward them") && page.contains("--operators FILE"), "{page}");
    assert_eq!(status_of(&host, &id), RequestStatus::Pending, "not even one approval of two is recorded");
}

#[test]
fn hash_password_refuses_an_empty_or_blank_password() {
    for input in [&b""[..], b"\n", b"   \n", b"\t\r\n"] {
        let output = hash_password("alice", input);
        assert!(!output.status.success(), "{input:?}: {output:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("the password is empty"), "{output:?}");
        assert!(output.stdout.is_empty(), "no hash line: {output:?}");
    }
}

#[test]
fn failed_sign_ins_are_throttled_per_account_and_per_client() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let operators = operators_file(dir.path(), &[("carol", "correct horse"), ("dave", "battery staple")]);
    let console = Console::start(&db, &["--operators", operators.to_str().unwrap()]);
    let mut visitor = Visitor::new(&console);
    for _ in 0..3 {
        assert_eq!(visitor.sign_in("carol", "wrong"), StatusCode::UNAUTHORIZED);
    }
    // Now even the right password waits, and no password is checked meanwhile.
    let (status, headers, page) = visitor.sign_in_answer("carol", "correct horse");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{page}");
    let wait: u64 = headers.get("retry-after").unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "{wait}");
    assert!(page.contains("too many failed sign-ins: try again in"), "{page}");
    // From the same client, another account waits too.
    assert_eq!(visitor.sign_in("dave", "battery staple"), StatusCode::TOO_MANY_REQUESTS);
    assert!(!visitor.cookies.contains_key("airlock_session"));
    // Once the wait is over, the right password signs in.
    std::thread::sleep(Duration::from_secs(wait));
    assert_eq!(visitor.sign_in("carol", "correct horse"), StatusCode::SEE_OTHER);
}

#[test]
fn behind_a_proxy_sign_ins_are_throttled_per_forwarded_client() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let operators = operators_file(dir.path(), &[("carol", "correct horse")]);
    let forwarded = |address: &str| {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-forwarded-for", format!("198.51.100.7, {address}").parse().unwrap());
        headers
    };
    let attempts = |console: &Console| {
        let mut visitor = Visitor::new(console);
        for name in ["a", "b", "c"] {
            assert_eq!(visitor.sign_in_with(name, "wrong", &forwarded("203.0.113.1")).0, StatusCode::UNAUTHORIZED);
        }
        // Another account from the same forwarded client waits; what another client sends is its own.
        let same = visitor.sign_in_with("d", "wrong", &forwarded("203.0.113.1")).0;
        let other = visitor.sign_in_with("carol", "correct horse", &forwarded("203.0.113.2")).0;
        (same, other)
    };
    let behind = Console::start(
        &db,
        &["--operators", operators.to_str().unwrap(), "--client-address-header", "X-Forwarded-For"],
    );
    assert_eq!(attempts(&behind), (StatusCode::TOO_MANY_REQUESTS, StatusCode::SEE_OTHER));
    // Without the flag the header is not believed: every attempt is the peer's.
    let direct = Console::start(&db, &["--operators", operators.to_str().unwrap()]);
    assert_eq!(attempts(&direct), (StatusCode::TOO_MANY_REQUESTS, StatusCode::TOO_MANY_REQUESTS));
}

#[test]
fn cookies_are_secure_when_the_console_is_behind_tls() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let set_cookies = |args: &[&str]| {
        let console = Console::start(&db, args);
        let mut visitor = Visitor::new(&console);
        let (_, signed_in, _) = visitor.sign_in_answer("", console.token.as_deref().unwrap());
        let login = visitor.client.get(format!("{}/login", console.url)).send().unwrap();
        let set: Vec<String> = [&signed_in, login.headers()]
            .iter()
            .flat_map(|headers| headers.get_all("set-cookie"))
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        assert!(set.iter().any(|c| c.starts_with("airlock_session=")), "{set:?}");
        assert!(set.iter().any(|c| c.starts_with("airlock_login=")), "{set:?}");
        set
    };
    let secure = set_cookies(&["--operator", "alice", "--secure-cookies"]);
    assert!(secure.iter().all(|c| c.ends_with("; Secure") && c.contains("HttpOnly")), "{secure:?}");
    let plain = set_cookies(&["--operator", "alice"]);
    assert!(plain.iter().all(|c| !c.contains("Secure") && c.contains("HttpOnly")), "{plain:?}");
}

#[test]
fn a_denial_with_its_reason_reaches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let host = host(&db);
    let id = REFUND.request_in(&host, 900, "moves money");
    let console = Console::start(&db, &["--operator", "bob"]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, page) = visitor.get(&format!("/requests/{id}"));
    let csrf = hidden(&page, "csrf");
    let (status, page, _) =
        visitor.post(&format!("/requests/{id}/deny"), &[("csrf", &csrf), ("reason", "wrong customer")]);
    assert_eq!(status, StatusCode::OK, "{page}");
    let resume: Value = serde_json::from_str(&element_text(&page, "resume")).unwrap();
    let refused = REFUND.with(900, |call| host.admit(call, &resume).wait());
    let Err(AdmitError::Denied { reason, .. }) = refused else { panic!("{refused:?}") };
    assert_eq!(reason.as_deref(), Some("wrong customer"));
    let RequestStatus::Denied(denial) = status_of(&host, &id) else { panic!("not denied") };
    assert_eq!(denial.denied_by, "bob");
}

/// `--audit-file`: a denial in the console records in the gateway's append-only file the grant it revokes
/// (one issued by another approver meanwhile; a pending request has none, so nothing is recorded); with a file
/// that does not exist, nothing is denied.
#[test]
fn a_denial_with_the_gateways_audit_file_needs_the_file_and_records_no_grant_it_does_not_revoke() {
    use agent_airlock::audit::{AuditEvent, AuditOutcome};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let host = host(&db);
    let id = REFUND.request_in(&host, 900, "moves money");
    let deny = |console: &Console| {
        let mut visitor = Visitor::new(console);
        assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
        let (_, page) = visitor.get(&format!("/requests/{id}"));
        let csrf = hidden(&page, "csrf");
        let (status, page, _) = visitor.post(&format!("/requests/{id}/deny"), &[("csrf", &csrf), ("reason", "no")]);
        (status, page)
    };
    let missing = dir.path().join("typo.log");
    let console = Console::start(&db, &["--operator", "bob", "--audit-file", missing.to_str().unwrap()]);
    let (status, page) = deny(&console);
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("does not exist") && page.contains("nothing was denied"), "{page}");
    assert!(matches!(status_of(&host, &id), RequestStatus::Pending), "nothing was denied");
    assert!(!missing.exists(), "no new log was started");
    drop(console);

    let file = dir.path().join("audit.log");
    let writer = AuditLog::open_append_only(&file, AuditConfig::default()).unwrap();
    writer.append(AuditEvent::new("refund", "c1", AuditOutcome::Executed)).unwrap();
    let console = Console::start(&db, &["--operator", "bob", "--audit-file", file.to_str().unwrap()]);
    let (status, page) = deny(&console);
    assert_eq!(status, StatusCode::OK, "{page}");
    let RequestStatus::Denied(denial) = status_of(&host, &id) else { panic!("not denied") };
    assert_eq!((denial.denied_by.as_str(), denial.revoked_grant.as_deref()), ("bob", None));
    assert_eq!(writer.records(1, 10).unwrap().len(), 1, "a pending request's denial records nothing");
}

#[test]
fn posts_without_the_session_or_its_csrf_token_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let id = REFUND.request_in(&host(&db), 500, "moves money");
    let console = Console::start(&db, &["--operator", "alice"]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, page) = visitor.get(&format!("/requests/{id}"));
    let csrf = hidden(&page, "csrf");

    // No token, a wrong one, and the right one without the session cookie: all refused.
    let approve = format!("/requests/{id}/approve");
    let (status, page, _) = visitor.post(&approve, &[]);
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(page.contains("CSRF token is missing or wrong"), "{page}");
    let wrong = "0".repeat(csrf.len());
    assert_eq!(visitor.post(&approve, &[("csrf", &wrong)]).0, StatusCode::FORBIDDEN);
    assert_eq!(visitor.post(&format!("/requests/{id}/deny"), &[("reason", "x")]).0, StatusCode::FORBIDDEN);
    let mut stranger = Visitor::new(&console);
    let (status, page, _) = stranger.post(&approve, &[("csrf", &csrf)]);
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(page.contains("not signed in"), "{page}");
    assert_eq!(status_of(&host(&db), &id), RequestStatus::Pending);

    // A sign-in form posted without its own cookie (from another site) signs no one in.
    let mut forger = Visitor::new(&console);
    let (status, _, _) = forger.post("/login", &[("name", ""), ("secret", "x"), ("nonce", "abc")]);
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!forger.cookies.contains_key("airlock_session"));

    // A request addressed to another host name (DNS rebinding) is not answered.
    let response = visitor.client.get(format!("{}/login", console.url)).header("host", "evil.example").send().unwrap();
    assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST);
    let csp = visitor.client.get(format!("{}/login", console.url)).send().unwrap();
    let csp = csp.headers().get("content-security-policy").unwrap().to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
}

#[test]
fn a_tampered_request_is_shown_as_tampered_and_cannot_be_approved() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let id = REFUND.request_in(&host(&db), 900, "moves money");
    tamper(&shared_database(&db), &id);
    let console = Console::start(&db, &["--operator", "alice"]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, rows) = visitor.get("/pending/rows");
    assert!(rows.contains("TAMPERED") && !rows.contains("harmless"), "{rows}");
    let (_, page) = visitor.get(&format!("/requests/{id}"));
    assert!(page.contains(r#"id="seal" class="tampered""#) && !page.contains("harmless"), "{page}");
    assert!(!page.contains("/approve"), "no approve form for a tampered request: {page}");
    // Posting the approval anyway (with a valid session and token) approves nothing.
    let (_, pending) = visitor.get("/");
    let csrf = hidden(&pending, "csrf");
    let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("TAMPERED") && page.contains("nothing was approved"), "{page}");
    assert_eq!(status_of(&host(&db), &id), RequestStatus::Pending);
}

/// A request as a build before version 3 recorded it (version 1: the exact arguments in plaintext), sealed
/// with the test key by hand, so a call too long to show can be put in the ledger: this build never issues one.
fn first_layout_request(host: &InterruptApprovals, arguments: Value) -> String {
    let key = hex::decode(SECRET).unwrap();
    let mac = |tag: &[u8], fields: &[&[u8]], counts_after_two: Option<u64>| {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
        mac.update(tag);
        for (i, field) in fields.iter().enumerate() {
            if i == 2
                && let Some(count) = counts_after_two
            {
                mac.update(&count.to_be_bytes());
            }
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        hex::encode(mac.finalize().into_bytes())
    };
    let digest: [u8; 32] = {
        use sha2::Digest as _;
        Sha256::digest(agent_airlock::canonical::to_canonical_vec(&arguments).unwrap()).into()
    };
    let binding = mac(
        b"agent-airlock/approval/binding/v1\0",
        &[b"t1", b"", b"", b"c1", b"call_big", b"send_mail", &digest],
        Some(1),
    );
    let request_id = "0123456789abcdef0123456789abcdef";
    let mut inner = json!({
        "version": 1, "request_id": request_id, "key_id": "k1", "tool": "send_mail", "rule": "attribute",
        "reason": "sends mail", "arguments": arguments,
        "call": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint": {"": "c1"}, "tool_call_id": "call_big"},
        "requested_at_ms": u64::try_from(SystemClock.now().as_millis()).unwrap(), "binding": binding,
    });
    let canonical = agent_airlock::canonical::to_canonical_vec(&inner).unwrap();
    inner["seal"] = json!(mac(b"agent-airlock/approval/seal/v1\0", &[&canonical], None));
    let interrupt = json!({"airlock_approval": inner});
    // The hand-made request verifies as a genuine one.
    host.verify_request(&interrupt).unwrap();
    let record = agent_airlock::ledger::RequestRecord {
        request_id: request_id.to_owned(),
        key_id: "k1".into(),
        tool: "send_mail".into(),
        rule: "attribute".into(),
        reason: "sends mail".into(),
        binding: inner["binding"].as_str().unwrap().to_owned(),
        requested_at: SystemClock.now(),
        interrupt,
        caller: None,
    };
    host.ledger().record_request(record, None).wait().unwrap();
    request_id.to_owned()
}

/// A call that cannot be shown in full has no approve action: no button on its page, a refusal when its
/// approval is posted anyway, and `airlock approve --yes` refuses it too. It can still be denied.
#[test]
fn a_call_too_long_to_show_has_no_approve_action_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let recorder = host(&db);
    let body = "x".repeat(agent_airlock::approval::display::MAX_DISPLAY_BYTES);
    let id = first_layout_request(&recorder, json!({"to": "a@example.com", "body": body}));
    drop(recorder);
    let console = Console::start(&db, &["--operator", "alice"]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, page) = visitor.get(&format!("/requests/{id}"));
    assert!(page.contains(r#"id="not-approvable""#) && page.contains("too long to show in full"), "{page}");
    assert!(!page.contains("/approve"), "an approve form for a call that cannot be shown: {page}");
    assert!(page.contains("/deny"), "{page}");
    let csrf = hidden(&page, "csrf");
    let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
    assert_ne!(status, StatusCode::OK, "{page}");
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(&db)
        .args(["--multi-process", "approve", &id, "--yes", "--signing-key", &signing_key("bob")])
        .env("AIRLOCK_APPROVAL_KEY", SECRET)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be approved"), "{output:?}");
    drop(console);
    assert_eq!(status_of(&host(&db), &id), RequestStatus::Pending);
}

#[test]
fn operators_sign_in_with_their_password_from_an_operators_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let mut hashing = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["console", "hash-password", "carol"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hashing.stdin.take().unwrap().write_all(b"correct horse battery\n").unwrap();
    let line = String::from_utf8(hashing.wait_with_output().unwrap().stdout).unwrap();
    assert!(line.starts_with("carol:$argon2id$") && !line.contains("correct horse"), "{line}");
    let operators = dir.path().join("operators");
    std::fs::write(&operators, format!("# who may approve\n{line}")).unwrap();

    let console = Console::start(&db, &["--operators", operators.to_str().unwrap()]);
    assert!(console.token.is_none());
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("carol", "wrong"), StatusCode::UNAUTHORIZED);
    assert_eq!(visitor.sign_in("mallory", "correct horse battery"), StatusCode::UNAUTHORIZED);
    assert_eq!(visitor.sign_in("carol", "correct horse battery"), StatusCode::SEE_OTHER);
    let (status, page) = visitor.get("/");
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"<span id="operator">carol</span>"#), "{page}");
}

/// `--console-key`: a password sign-in's approval is signed by the console for the account, and counts on a
/// host that checks signatures; the one-time token's approval is unsigned and counts for nothing there.
#[test]
fn the_console_attests_password_sign_ins_and_never_the_one_time_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let operators_toml = dir.path().join("operators.toml");
    let console_key = dir.path().join("console.key");
    let added = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["operators", "add", "console", "--console", "--key-out", console_key.to_str().unwrap()])
        .arg("--operators")
        .arg(&operators_toml)
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let listed = agent_airlock::approval::operators::Operators::load(&operators_toml).unwrap();
    let checking = |host: InterruptApprovals| host.with_operators(listed.clone());

    let mut hashing = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["console", "hash-password", "carol"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hashing.stdin.take().unwrap().write_all(b"correct horse battery\n").unwrap();
    let line = String::from_utf8(hashing.wait_with_output().unwrap().stdout).unwrap();
    let passwords = dir.path().join("passwords");
    std::fs::write(&passwords, line).unwrap();

    let approve_in_console = |console: &Console, visitor: &mut Visitor, id: &str| -> Value {
        let (_, page) = visitor.get(&format!("/requests/{id}"));
        let csrf = hidden(&page, "csrf");
        let (status, page, _) = visitor.post(&format!("/requests/{id}/approve"), &[("csrf", &csrf)]);
        assert_eq!(status, StatusCode::OK, "{page}");
        let _ = console;
        serde_json::from_str(&element_text(&page, "resume")).unwrap()
    };

    let attested = REFUND.request_in(&host(&db), 500, "moves money");
    let token_only = REFUND.request_in(&host(&db), 600, "moves money");
    {
        let args = ["--operators", passwords.to_str().unwrap(), "--console-key", console_key.to_str().unwrap()];
        let console = Console::start(&db, &args);
        let mut visitor = Visitor::new(&console);
        assert_eq!(visitor.sign_in("carol", "correct horse battery"), StatusCode::SEE_OTHER);
        let resume = approve_in_console(&console, &mut visitor, &attested);
        let host = checking(host(&db));
        REFUND.with(500, |call| host.admit(call, &resume).wait()).unwrap();
        let RequestStatus::Spent(spent) = status_of(&host, &attested) else { panic!("not spent") };
        assert_eq!(spent.grant.approver, "carol");
        assert!(spent.grant.signatures[0].attested && spent.grant.signatures[0].operator == "carol");
    }
    {
        let console = Console::start(&db, &["--operator", "alice", "--console-key", console_key.to_str().unwrap()]);
        let mut visitor = Visitor::new(&console);
        assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
        let resume = approve_in_console(&console, &mut visitor, &token_only);
        let host = checking(host(&db));
        let refused = REFUND.with(600, |call| host.admit(call, &resume).wait());
        assert!(matches!(refused, Err(AdmitError::UnsignedGrant { .. })), "{refused:?}");
    }
}

#[test]
fn the_console_refuses_to_serve_beyond_loopback_or_without_a_way_to_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .arg("--db")
            .arg(&db)
            .arg("console")
            .args(args)
            .env("AIRLOCK_APPROVAL_KEY", SECRET)
            .env_remove("AIRLOCK_OPERATOR")
            .output()
            .unwrap()
    };
    let output = run(&["--listen", "0.0.0.0:0", "--operator", "alice"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("`--allow-remote`"));
    let output = run(&["--listen", "127.0.0.1:0"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("`--operators FILE`"));
}

#[test]
fn the_cli_records_who_decides_and_requires_a_signing_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let id = REFUND.request(&db, 500, "moves money");
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(&db)
        .args(["approve", &id, "--yes"])
        .env("AIRLOCK_APPROVAL_KEY", SECRET)
        .env_remove("AIRLOCK_SIGNING_KEY")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--signing-key"), "{output:?}");
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(&db)
        .args(["approve", &id, "--yes"])
        .env("AIRLOCK_APPROVAL_KEY", SECRET)
        .env("AIRLOCK_SIGNING_KEY", signing_key("dave"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let shown = support::stdout(&support::airlock(&db, &["requests", "show", &id]));
    assert!(shown.contains("decision  approved by dave"), "{shown}");
}

#[test]
fn ambiguous_effects_are_resolved_and_the_audit_log_is_verified_from_the_console() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let store = RedbEffectStore::new(shared_database(&db)).unwrap();
        let now = SystemClock.now();
        let unknown = store.reserve("refund:pi_2", Duration::from_secs(60), now).unwrap();
        store.mark_ambiguous(&unknown, now).unwrap();
    }
    let console = Console::start(&db, &["--operator", "alice"]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, page) = visitor.get("/effects");
    assert!(page.contains("<code>refund:pi_2</code>"), "{page}");
    let csrf = hidden(&page, "csrf");
    let form = [("key", "refund:pi_2"), ("outcome", "failed")];
    assert_eq!(visitor.post("/effects/resolve", &form).0, StatusCode::FORBIDDEN, "no CSRF token");
    let (status, _, location) = visitor.post("/effects/resolve", &[form[0], form[1], ("csrf", &csrf)]);
    assert_eq!((status, location.as_deref()), (StatusCode::SEE_OTHER, Some("/effects")));
    let (_, page) = visitor.get("/effects");
    assert!(page.contains("No effect is waiting") && !page.contains("refund:pi_2"), "{page}");
    // Who resolved it is kept in the record and the audit log.
    let database = shared_database(&db);
    let record = RedbEffectStore::new(Arc::clone(&database)).unwrap().get("refund:pi_2").unwrap().unwrap();
    assert_eq!(record.resolved_by.as_deref(), Some("alice"));
    let log = AuditLog::with_database(database, AuditConfig::default()).unwrap();
    let resolved = log.records(1, 10).unwrap();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].outcome, AuditOutcome::EffectResolved { resolution: Resolution::Failed });
    assert!(resolved[0].detail.as_deref().unwrap().contains("by operator `alice`"), "{resolved:?}");
    drop(log);
    let (status, page) = visitor.get("/audit");
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="audit-status" class="verified""#), "{page}");
}

/// `--audit-file`: the audit page verifies the gateway's append-only file while the gateway (here, a writer in
/// this process) holds it, sees what is appended since the last visit, and reports damage at its offset.
#[test]
fn the_audit_page_verifies_the_gateways_audit_file_while_it_is_written() {
    use agent_airlock::audit::{AuditEvent, AuditOutcome};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    let file = dir.path().join("audit.log");
    let writer = AuditLog::open_append_only(&file, AuditConfig::default()).unwrap();
    for call in ["c1", "c2", "c3"] {
        writer.append(AuditEvent::new("read_note", call, AuditOutcome::Executed)).unwrap();
    }
    let console = Console::start(&db, &["--operator", "alice", "--audit-file", file.to_str().unwrap()]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (status, page) = visitor.get("/audit");
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"class="verified""#) && page.contains("audit log intact: 3 records"), "{page}");
    writer.append(AuditEvent::new("read_note", "c4", AuditOutcome::Executed)).unwrap();
    let (_, page) = visitor.get("/audit");
    assert!(page.contains("audit log intact: 4 records"), "the page reads what was appended since: {page}");

    // A byte of the file's second frame (the first append's head) changed: the page says where.
    let mut bytes = std::fs::read(&file).unwrap();
    let second = 16 + 17 + u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    bytes[second + 40] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    drop(writer);
    let reopened = Console::start(&db, &["--operator", "alice", "--audit-file", file.to_str().unwrap()]);
    let mut visitor = Visitor::new(&reopened);
    assert_eq!(visitor.sign_in("", reopened.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, page) = visitor.get("/audit");
    assert!(page.contains(r#"class="error""#) && page.contains(&format!("damaged at byte {second}")), "{page}");
}

/// `--audit-file`: an effect resolved in the console is recorded in the gateway's append-only file, in the chain
/// the gateway (here, a writer in this process) goes on writing, and not in `--db`'s log; with a file that does
/// not exist, nothing is resolved.
#[test]
fn a_resolution_is_recorded_in_the_gateways_audit_file_while_it_is_written() {
    use agent_airlock::audit::{AuditEvent, AuditOutcome};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let store = RedbEffectStore::new(shared_database(&db)).unwrap();
        let now = SystemClock.now();
        let unknown = store.reserve("refund:pi_9", Duration::from_secs(60), now).unwrap();
        store.mark_ambiguous(&unknown, now).unwrap();
    }
    let resolve = |console: &Console| {
        let mut visitor = Visitor::new(console);
        assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
        let (_, page) = visitor.get("/effects");
        let csrf = hidden(&page, "csrf");
        let (status, page, _) =
            visitor.post("/effects/resolve", &[("key", "refund:pi_9"), ("outcome", "committed"), ("csrf", &csrf)]);
        (status, page, visitor)
    };
    let missing = dir.path().join("typo.log");
    let console = Console::start(&db, &["--operator", "alice", "--audit-file", missing.to_str().unwrap()]);
    let (status, page, _) = resolve(&console);
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("does not exist") && page.contains("nothing was resolved"), "{page}");
    assert!(!missing.exists(), "no new log was started");
    drop(console);

    let file = dir.path().join("audit.log");
    let writer = AuditLog::open_append_only(&file, AuditConfig::default()).unwrap();
    writer.append(AuditEvent::new("refund", "c1", AuditOutcome::Executed)).unwrap();
    let console = Console::start(&db, &["--operator", "alice", "--audit-file", file.to_str().unwrap()]);
    let (status, _, mut visitor) = resolve(&console);
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(writer.append(AuditEvent::new("refund", "c2", AuditOutcome::Executed)).unwrap().seq, 3);
    let records = writer.records(1, 10).unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r.tool_call_id.as_str()).collect();
    assert_eq!(ids, ["c1", "refund:pi_9", "c2"]);
    assert_eq!(records[1].outcome, AuditOutcome::EffectResolved { resolution: Resolution::Committed });
    assert!(records[1].detail.as_deref().unwrap().contains("by operator `alice`"), "{records:?}");
    let (_, page) = visitor.get("/audit");
    assert!(page.contains("audit log intact: 3 records"), "{page}");
    drop(console);
    let in_db = AuditLog::with_database(shared_database(&db), AuditConfig::default()).unwrap();
    assert!(in_db.records(1, 10).unwrap().is_empty(), "nothing in --db's log");
}

/// `--audit`: with the gateway's separate redb audit file, a resolution is recorded there and the audit page
/// verifies it, not `--db`'s log.
#[test]
fn a_resolution_is_recorded_in_the_gateways_separate_audit_database() {
    use agent_airlock::audit::{AuditEvent, AuditOutcome};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    {
        let store = RedbEffectStore::new(shared_database(&db)).unwrap();
        let now = SystemClock.now();
        let unknown = store.reserve("refund:pi_8", Duration::from_secs(60), now).unwrap();
        store.mark_ambiguous(&unknown, now).unwrap();
    }
    let audit = dir.path().join("audit.redb");
    AuditLog::open(&audit, AuditConfig::default())
        .unwrap()
        .append(AuditEvent::new("refund", "c1", AuditOutcome::Executed))
        .unwrap();
    let console = Console::start(&db, &["--operator", "alice", "--audit", audit.to_str().unwrap()]);
    let mut visitor = Visitor::new(&console);
    assert_eq!(visitor.sign_in("", console.token.as_deref().unwrap()), StatusCode::SEE_OTHER);
    let (_, page) = visitor.get("/effects");
    let csrf = hidden(&page, "csrf");
    let form = [("key", "refund:pi_8"), ("outcome", "failed"), ("csrf", csrf.as_str())];
    assert_eq!(visitor.post("/effects/resolve", &form).0, StatusCode::SEE_OTHER);
    let (_, page) = visitor.get("/audit");
    assert!(page.contains("audit log intact: 2 records"), "{page}");
    drop(console);
    let records = AuditLog::open(&audit, AuditConfig::default()).unwrap().records(1, 10).unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r.tool_call_id.as_str()).collect();
    assert_eq!(ids, ["c1", "refund:pi_8"]);
    let in_db = AuditLog::with_database(shared_database(&db), AuditConfig::default()).unwrap();
    assert!(in_db.records(1, 10).unwrap().is_empty(), "nothing in --db's log");
}

/// What a loopback webhook receiver was sent.
struct Received {
    headers: HashMap<String, String>,
    body: Vec<u8>,
    answered: u16,
}

/// A webhook receiver on a free loopback port that answers its first `failures` notifications with 500
/// and the rest with 204; returns its URL and what it received.
fn webhook_receiver(failures: usize) -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut headers = HashMap::new();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                let Some((name, value)) = line.trim_end().split_once(": ") else { break };
                headers.insert(name.to_ascii_lowercase(), value.to_owned());
            }
            let mut body = vec![0; headers.get("content-length").map_or(0, |n| n.parse().unwrap())];
            reader.read_exact(&mut body).unwrap();
            let mut log = log.lock().unwrap();
            let answered = if log.len() < failures { 500 } else { 204 };
            write!(stream, "HTTP/1.1 {answered} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").unwrap();
            log.push(Received { headers, body, answered });
        }
    });
    (url, received)
}

#[test]
fn a_new_pending_request_is_announced_once_to_the_webhook_signed_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let secret = "5a".repeat(32);
    let key_file = dir.path().join("webhook.key");
    std::fs::write(&key_file, &secret).unwrap();
    let (url, received) = webhook_receiver(1);
    let key_arg = key_file.to_str().unwrap();
    let webhook = ["--webhook-url", &url, "--webhook-key-file", key_arg, "--webhook-backoff-ms", "100"];
    let console = Console::start(&db, &[&["--operator", "alice"][..], &webhook[..]].concat());

    let id = REFUND.request_in(&host(&db), 500, "moves money");
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Refused once, so sent again after the backoff; then never again for the same request.
    std::thread::sleep(Duration::from_millis(2500));
    let received = received.lock().unwrap();
    assert_eq!(received.iter().map(|r| r.answered).collect::<Vec<_>>(), [500, 204]);
    for notification in received.iter() {
        let body: Value = serde_json::from_slice(&notification.body).unwrap();
        assert_eq!(body["event"], "approval.pending");
        assert_eq!(body["request_id"], id.as_str());
        assert_eq!(
            (&body["tool"], &body["reason"], &body["seal"]),
            (&json!("refund"), &json!("moves money"), &json!("verified"))
        );
        assert_eq!(body["url"], format!("{}/requests/{id}", console.url));
        let text = String::from_utf8_lossy(&notification.body);
        assert!(!text.contains("sk_live") && !text.contains("amount"), "arguments are never sent: {text}");
        // HMAC-SHA256(secret, domain tag ‖ timestamp ‖ "." ‖ body), checked without the runtime's code.
        let timestamp = &notification.headers["x-airlock-timestamp"];
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&hex::decode(&secret).unwrap()).unwrap();
        mac.update(b"agent-airlock/webhook/v1\0");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(&notification.body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(notification.headers["x-airlock-signature"], expected);
    }

    // A scheme other than `http://` and `https://`, or a CA file for a plain `http://` webhook, is refused at
    // start, not silently dropped.
    for (url, ca, refusal) in [
        ("ftp://chat.example/hook", None, "neither `http://` nor `https://`"),
        (url.as_str(), Some(key_arg), "is for an `https://` webhook"),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
        command.arg("--db").arg(&db).args(["console", "--operator", "alice", "--webhook-url", url]);
        command.args(["--webhook-key-file", key_arg]).env("AIRLOCK_APPROVAL_KEY", SECRET);
        if let Some(ca) = ca {
            command.args(["--webhook-ca-file", ca]);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success() && String::from_utf8_lossy(&output.stderr).contains(refusal), "{output:?}");
    }
}

/// A certificate authority of the test's own, and a receiver's certificate it signed for `localhost` and
/// `127.0.0.1`: `(CA PEM, another CA's PEM, the receiver's TLS configuration)`.
fn tls_receiver_certificates() -> (String, String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert, Issuer::new(params, key))
    };
    let (ca_cert, issuer) = ca("webhook test CA");
    let (other_cert, _) = ca("another CA");
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .unwrap();
    (ca_cert.pem(), other_cert.pem(), Arc::new(config))
}

/// An `https://` webhook receiver on a free loopback port, answering 204; returns its URL (for `host`) and
/// what it received. A connection whose handshake fails is dropped.
fn tls_webhook_receiver(config: Arc<rustls::ServerConfig>, host: &str) -> (String, Arc<Mutex<Vec<Received>>>) {
    // Any 127.0.0.0/8 address is this machine: `127.0.0.2` reaches it under a name the certificate lacks.
    let listener = TcpListener::bind((if host == "localhost" { "127.0.0.1" } else { host }, 0)).unwrap();
    let url = format!("https://{host}:{}/hook?team=ops", listener.local_addr().unwrap().port());
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else { continue };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            let mut reader = BufReader::new(&mut tls);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut headers = HashMap::new();
            headers.insert("request-line".to_owned(), request_line.trim_end().to_owned());
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).is_err() {
                    break;
                }
                let Some((name, value)) = line.trim_end().split_once(": ") else { break };
                headers.insert(name.to_ascii_lowercase(), value.to_owned());
            }
            let mut body = vec![0; headers.get("content-length").map_or(0, |n| n.parse().unwrap_or(0))];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            drop(reader);
            let _ = write!(tls, "HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
            log.lock().unwrap().push(Received { headers, body, answered: 204 });
        }
    });
    (url, received)
}

#[test]
fn an_https_webhook_is_sent_over_tls_to_a_receiver_its_ca_file_trusts_and_never_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.redb");
    drop(shared_database(&db));
    let secret = "5a".repeat(32);
    let key_file = dir.path().join("webhook.key");
    std::fs::write(&key_file, &secret).unwrap();
    let key_arg = key_file.to_str().unwrap();
    let (ca_pem, other_pem, config) = tls_receiver_certificates();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let other_file = dir.path().join("other-ca.pem");
    std::fs::write(&other_file, other_pem).unwrap();

    // Trusted: delivered once, signed, with its path and query.
    let (url, received) = tls_webhook_receiver(Arc::clone(&config), "localhost");
    let webhook =
        ["--webhook-url", &url, "--webhook-key-file", key_arg, "--webhook-ca-file", ca_file.to_str().unwrap()];
    let console = Console::start(&db, &[&["--operator", "alice"][..], &webhook[..]].concat());
    let id = REFUND.request_in(&host(&db), 500, "moves money");
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(console);
    {
        let received = received.lock().unwrap();
        assert_eq!(received.len(), 1, "delivered once over TLS");
        let notification = &received[0];
        assert_eq!(notification.headers["request-line"], "POST /hook?team=ops HTTP/1.1");
        let body: Value = serde_json::from_slice(&notification.body).unwrap();
        assert_eq!((&body["event"], &body["request_id"]), (&json!("approval.pending"), &json!(id.as_str())));
        let timestamp = &notification.headers["x-airlock-timestamp"];
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&hex::decode(&secret).unwrap()).unwrap();
        mac.update(b"agent-airlock/webhook/v1\0");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(&notification.body);
        assert_eq!(
            notification.headers["x-airlock-signature"],
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
    }

    // Another CA, or no CA file (the system's roots do not know the test's CA), or another host name: the
    // handshake is refused, nothing is delivered, and the console says why.
    for (host_name, ca, reason) in [
        ("localhost", Some(&other_file), "the receiver's certificate is not trusted"),
        ("localhost", None, "the receiver's certificate is not trusted"),
        ("127.0.0.2", Some(&ca_file), "not valid for the host name `127.0.0.2`"),
    ] {
        let db = dir.path().join(format!("refused-{}.redb", ca.is_some() as u8 + host_name.len() as u8));
        drop(shared_database(&db));
        let (url, received) = tls_webhook_receiver(Arc::clone(&config), host_name);
        let mut webhook = vec!["--webhook-url", &url, "--webhook-key-file", key_arg, "--webhook-attempts", "1"];
        if let Some(ca) = ca {
            webhook.extend(["--webhook-ca-file", ca.to_str().unwrap()]);
        }
        let mut console = Console::start(&db, &[&["--operator", "alice"][..], &webhook[..]].concat());
        REFUND.request_in(&host(&db), 500, "moves money");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut stderr = String::new();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1500));
            stderr = console.stop_and_read_stderr();
            if stderr.contains("failed (attempt 1 of 1)") {
                break;
            }
            console = Console::start(&db, &[&["--operator", "alice"][..], &webhook[..]].concat());
        }
        assert!(stderr.contains(reason), "{host_name} {ca:?}: {stderr}");
        assert!(!stderr.contains(&secret), "{stderr}");
        assert!(received.lock().unwrap().is_empty(), "{host_name} {ca:?}: delivered to an untrusted receiver");
    }
}
