//! The approval protocol across an interrupt (DESIGN §5), run against every ledger: every attack in the
//! design has a case here, and each case runs on the in-memory ledger, on a real redb file and on a
//! real PostgreSQL server (a throwaway one, started by the test process).

use std::sync::{Arc, Barrier};
use std::time::Duration;

use agent_airlock::ledger::{
    ApprovalLedger, DenialRecord, GrantRecord, GrantState, LedgerError, MemoryLedger, PostgresLedger, RedbLedger,
    RequestRecord, RequestStatus, SpendAttempt,
};
use agent_airlock::{
    ManualClock,
    approval::{
        AdmitError, BindingField, DecisionError, InterruptApprovals, InterruptRequest, KeyRing, RequestError,
        ResumeValue, RetiredKeys,
    },
    keys::ApprovalKey,
};
use agent_airlock_tests::ledger_fixtures::{
    GRANT_TTL, OwnedCall, SECRET_HEX, START, approvals, key, key_ring, request_record,
};
use serde_json::{Value, json};
use tempfile::TempDir;

struct Harness {
    ledger: Arc<dyn ApprovalLedger>,
    clock: Arc<ManualClock>,
    approvals: InterruptApprovals,
    _dir: Option<TempDir>,
}

impl Harness {
    fn memory() -> Self {
        Self::with(Arc::new(MemoryLedger::new()), None)
    }

    fn redb() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ledger = RedbLedger::open(dir.path().join("ledger.redb")).unwrap();
        Self::with(Arc::new(ledger), Some(dir))
    }

    /// A ledger in a fresh database of this process's throwaway PostgreSQL server.
    fn postgres() -> Self {
        let url = agent_airlock_tests::pg_server::shared().fresh_database();
        Self::with(Arc::new(PostgresLedger::connect(&url).unwrap()), None)
    }

    fn with(ledger: Arc<dyn ApprovalLedger>, dir: Option<TempDir>) -> Self {
        let clock = Arc::new(ManualClock::new(START));
        let approvals = approvals(ledger.clone(), clock.clone());
        Harness { ledger, clock, approvals, _dir: dir }
    }

    /// The same ledger and clock, another key ring.
    fn with_keys(&self, keys: KeyRing) -> InterruptApprovals {
        InterruptApprovals::new(keys, self.ledger.clone(), GRANT_TTL).with_clock(self.clock.clone())
    }

    fn request(&self, call: &OwnedCall) -> InterruptRequest {
        self.approvals.request(&call.input(), "attribute", "moves money").wait().unwrap()
    }

    fn approved(&self, call: &OwnedCall) -> (InterruptRequest, Value) {
        let request = self.request(call);
        let resume = self.approvals.approve(request.as_value(), "alice").wait().unwrap();
        (request, resume.into_value())
    }

    fn status(&self, request: &InterruptRequest) -> RequestStatus {
        self.ledger.find_request(request.request_id()).unwrap().unwrap().status
    }
}

/// Error text never carries the key.
fn assert_no_secret(text: impl std::fmt::Display) {
    let text = text.to_string();
    assert!(!text.contains(SECRET_HEX), "{text}");
    assert!(!text.contains(&SECRET_HEX[..16]), "{text}");
}

fn approve_then_admit(h: Harness) {
    let call = OwnedCall::refund(500);
    let (request, resume) = h.approved(&call);
    assert_eq!(h.status(&request).label(h.clock.now_for_test()), "granted");
    let admission = h.approvals.admit(&call.input(), &resume).wait().unwrap();
    assert_eq!(admission.request_id, request.request_id());
    assert_eq!(admission.approver, "alice");
    assert_eq!(admission.key_id, "k1");
    assert!(matches!(h.status(&request), RequestStatus::Spent(_)));
    let grant = h.ledger.find_grant(&admission.grant_id).unwrap().unwrap();
    assert!(matches!(grant.state, GrantState::Spent { .. }));
}

fn the_interrupt_value_has_the_documented_shape(h: Harness) {
    let call = OwnedCall::refund(500);
    let request = h.request(&call);
    let body = &request.as_value()["airlock_approval"];
    for member in
        ["tool", "rule", "reason", "sealed_arguments", "arguments_sha256", "binding", "seal", "key_id", "request_id"]
    {
        assert!(body.get(member).is_some(), "missing `{member}` in {body}");
    }
    assert_eq!(body["tool"], "refund");
    assert_eq!(body["version"], 3);
    // No plaintext arguments: they are encrypted, and the key opens exactly them.
    assert!(body.get("arguments").is_none(), "{body}");
    assert!(!body.to_string().contains("pi_1"), "{body}");
    let opened = h.approvals.verify_request(request.as_value()).unwrap();
    assert_eq!(Value::Object(opened.arguments().clone()), json!({"payment_id": "pi_1", "amount": 500}));
    assert_eq!(body["binding"].as_str().unwrap().len(), 64);
    // It survives a trip through a host's JSON store (re-serialised, members reordered).
    let stored: Value = serde_json::from_str(&serde_json::to_string_pretty(request.as_value()).unwrap()).unwrap();
    assert_eq!(h.approvals.verify_request(&stored).unwrap(), request);
}

fn forged_resume_admits_nothing(h: Harness) {
    let call = OwnedCall::refund(500);
    let (request, genuine) = h.approved(&call);
    let grant_id = genuine["airlock_grant"]["grant_id"].as_str().unwrap().to_owned();
    // A token made up, and one made with a key of the same id but another secret.
    let made_up = json!({"airlock_grant": {"key_id": "k1", "grant_id": grant_id, "token": "ab".repeat(32)}});
    let result = h.approvals.admit(&call.input(), &made_up).wait();
    assert!(matches!(result, Err(AdmitError::InvalidToken)), "{result:?}");
    assert_no_secret(result.unwrap_err());

    let impostor = h.with_keys(KeyRing::new(ApprovalKey::new("k1", &[9; 32]).unwrap()));
    let forged_request = impostor.request(&call.input(), "attribute", "x").wait().unwrap();
    let forged = json!({"airlock_grant": {"key_id": "k1", "grant_id": grant_id, "token":
        forge_token(&impostor, &forged_request, &h)}});
    assert!(matches!(h.approvals.admit(&call.input(), &forged).wait(), Err(AdmitError::InvalidToken)));
    // A grant id nobody issued.
    let unknown = json!({"airlock_grant": {"key_id": "k1", "grant_id": "00".repeat(16), "token": "cd".repeat(32)}});
    assert!(matches!(h.approvals.admit(&call.input(), &unknown).wait(), Err(AdmitError::InvalidToken)));
    // The genuine one is untouched by the attempts.
    assert!(matches!(h.status(&request), RequestStatus::Granted(_)));
    h.approvals.admit(&call.input(), &genuine).wait().unwrap();
}

/// A token made by approving through an impostor key ring sharing the ledger.
fn forge_token(impostor: &InterruptApprovals, request: &InterruptRequest, _h: &Harness) -> String {
    let resume = impostor.approve(request.as_value(), "mallory").wait().unwrap();
    resume.as_value()["airlock_grant"]["token"].as_str().unwrap().to_owned()
}

fn altered_request_is_refused_by_approve(h: Harness) {
    let call = OwnedCall::refund(500);
    let request = h.request(&call);
    let alter = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut value = request.to_value();
        edit(value["airlock_approval"].as_object_mut().unwrap());
        value
    };
    let cases: Vec<(&str, Value)> = vec![
        (
            "plaintext arguments added",
            alter(&|b| {
                b.insert("arguments".into(), json!({"payment_id": "pi_1", "amount": 50_000}));
            }),
        ),
        ("sealed arguments", alter(&|b| b["sealed_arguments"] = json!("00".repeat(60)))),
        ("arguments digest", alter(&|b| b["arguments_sha256"] = json!("0".repeat(64)))),
        ("tool", alter(&|b| b["tool"] = json!("delete_account"))),
        ("reason", alter(&|b| b["reason"] = json!("harmless"))),
        ("rule", alter(&|b| b["rule"] = json!("none"))),
        ("binding", alter(&|b| b["binding"] = json!("0".repeat(64)))),
        ("request id", alter(&|b| b["request_id"] = json!("1".repeat(32)))),
        ("call", alter(&|b| b["call"]["thread_id"] = json!("t2"))),
        ("time", alter(&|b| b["requested_at_ms"] = json!(1))),
        (
            "member added",
            alter(&|b| {
                b.insert("expires_at_ms".into(), json!(u32::MAX));
            }),
        ),
        (
            "member removed",
            alter(&|b| {
                b.remove("reason");
            }),
        ),
        ("version", alter(&|b| b["version"] = json!(2))),
    ];
    for (what, altered) in cases {
        let result = h.approvals.approve(&altered, "alice").wait();
        assert!(matches!(result, Err(DecisionError::SealMismatch)), "{what}: {result:?}");
        let result = h.approvals.deny(&altered, "alice", None).wait();
        assert!(matches!(result, Err(DecisionError::SealMismatch)), "{what}: {result:?}");
    }
    let seal = alter(&|b| b["seal"] = json!("f".repeat(64)));
    assert!(matches!(h.approvals.approve(&seal, "alice").wait(), Err(DecisionError::SealMismatch)));
    let seal = alter(&|b| b["seal"] = json!("F".repeat(64)));
    assert!(matches!(h.approvals.approve(&seal, "alice").wait(), Err(DecisionError::Malformed { .. })));
    let unsealed = alter(&|b| {
        b.remove("seal");
    });
    assert!(matches!(h.approvals.approve(&unsealed, "alice").wait(), Err(DecisionError::Malformed { .. })));
    for not_a_request in [json!(null), json!({"x": 1}), json!({"airlock_approval": 5}), json!("approve")] {
        assert!(matches!(h.approvals.approve(&not_a_request, "alice").wait(), Err(DecisionError::NotARequest)));
    }
    // Nothing was granted by the attempts; the genuine request still approves.
    assert_eq!(h.status(&request), RequestStatus::Pending);
    h.approvals.approve(request.as_value(), "alice").wait().unwrap();
}

fn replay_admits_nothing(h: Harness) {
    let call = OwnedCall::refund(500);
    let (_, resume) = h.approved(&call);
    h.approvals.admit(&call.input(), &resume).wait().unwrap();
    for _ in 0..3 {
        let result = h.approvals.admit(&call.input(), &resume).wait();
        assert!(matches!(result, Err(AdmitError::AlreadySpent { .. })), "{result:?}");
        assert!(result.unwrap_err().to_string().starts_with("the approval was already used"));
    }
}

fn time_travel_after_success_admits_nothing(h: Harness) {
    // The host replays the interrupted checkpoint: same thread, checkpoint, call id, arguments, resume.
    let call = OwnedCall::refund(500);
    let (request, resume) = h.approved(&call);
    h.approvals.admit(&call.input(), &resume).wait().unwrap();
    h.clock.advance(Duration::from_secs(5));
    let replayed = call.clone();
    assert!(matches!(h.approvals.admit(&replayed.input(), &resume).wait(), Err(AdmitError::AlreadySpent { .. })));
    // Approving the old request again does not make a second grant either.
    assert!(matches!(h.approvals.approve(request.as_value(), "alice").wait(), Err(DecisionError::AlreadySpent { .. })));
}

fn another_checkpoint_admits_nothing(h: Harness) {
    let call = OwnedCall::refund(500);
    let (_, resume) = h.approved(&call);
    let older = call.clone().with_checkpoint("c0");
    match h.approvals.admit(&older.input(), &resume).wait() {
        Err(AdmitError::DifferentCall { differs, .. }) => {
            assert_eq!(differs, [BindingField::Checkpoint])
        }
        other => panic!("{other:?}"),
    }
    let other_call_id = call.clone().with_tool_call_id("call_2");
    match h.approvals.admit(&other_call_id.input(), &resume).wait() {
        Err(AdmitError::DifferentCall { differs, .. }) => {
            assert_eq!(differs, [BindingField::ToolCallId])
        }
        other => panic!("{other:?}"),
    }
    h.approvals.admit(&call.input(), &resume).wait().unwrap();
}

fn approval_for_a_with_b_admits_nothing_and_a_stays_usable(h: Harness) {
    let a = OwnedCall::refund(500);
    let b = OwnedCall::refund(50_000);
    let (request, resume) = h.approved(&a);
    let result = h.approvals.admit(&b.input(), &resume).wait();
    match &result {
        Err(AdmitError::DifferentCall { differs, .. }) => {
            assert_eq!(differs, &[BindingField::Arguments])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(result.unwrap_err().to_string(), "the approval was given for another call: arguments differs");
    // `true` is not `1`.
    let mut truthy = a.clone();
    truthy.arguments.insert("amount".into(), json!(true));
    let mut one = a.clone();
    one.arguments.insert("amount".into(), json!(1));
    let (_, resume_one) = h.approved(&one);
    assert!(matches!(h.approvals.admit(&truthy.input(), &resume_one).wait(), Err(AdmitError::DifferentCall { .. })));
    assert!(matches!(h.status(&request), RequestStatus::Granted(_)));
    h.approvals.admit(&a.input(), &resume).wait().unwrap();
}

fn tool_x_approval_for_tool_y_admits_nothing(h: Harness) {
    let x = OwnedCall::refund(500);
    let y = x.clone().with_tool("delete_account");
    let (_, resume) = h.approved(&x);
    match h.approvals.admit(&y.input(), &resume).wait() {
        Err(AdmitError::DifferentCall { differs, .. }) => assert_eq!(differs, [BindingField::Tool]),
        other => panic!("{other:?}"),
    }
    h.approvals.admit(&x.input(), &resume).wait().unwrap();
}

fn expired_grant_admits_nothing(h: Harness) {
    let call = OwnedCall::refund(500);
    let (request, resume) = h.approved(&call);
    h.clock.advance(GRANT_TTL - Duration::from_millis(1));
    let (other_request, other_resume) = h.approved(&call.clone().with_tool_call_id("call_2"));
    h.clock.advance(Duration::from_millis(1));
    let result = h.approvals.admit(&call.input(), &resume).wait();
    assert!(matches!(result, Err(AdmitError::Expired { .. })), "{result:?}");
    assert_eq!(h.status(&request).label(h.clock.now_for_test()), "expired");
    // A grant issued later is still valid.
    h.approvals.admit(&call.clone().with_tool_call_id("call_2").input(), &other_resume).wait().unwrap();
    assert!(matches!(h.status(&other_request), RequestStatus::Spent(_)));

    // Approving the expired request again issues a new grant; the old one is replaced, not revived.
    let renewed = h.approvals.approve(request.as_value(), "bob").wait().unwrap().into_value();
    assert_ne!(renewed["airlock_grant"]["grant_id"], resume["airlock_grant"]["grant_id"]);
    assert!(matches!(h.approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::Replaced { .. })));
    assert_eq!(h.approvals.admit(&call.input(), &renewed).wait().unwrap().approver, "bob");
}

fn approving_twice_issues_one_grant(h: Harness) {
    let call = OwnedCall::refund(500);
    let (request, first) = h.approved(&call);
    h.clock.advance(Duration::from_secs(1));
    let second = h.approvals.approve(request.as_value(), "bob").wait().unwrap().into_value();
    assert_eq!(first, second, "a lost resume value is recovered by approving again");
    h.approvals.admit(&call.input(), &first).wait().unwrap();
    assert!(matches!(h.approvals.admit(&call.input(), &second).wait(), Err(AdmitError::AlreadySpent { .. })));
}

fn a_no_is_a_no(h: Harness) {
    let call = OwnedCall::refund(500);
    let request = h.request(&call);
    let resume = h.approvals.deny(request.as_value(), "bob", Some("too large")).wait().unwrap();
    assert!(!resume.is_approval());
    match h.approvals.admit(&call.input(), resume.as_value()).wait() {
        Err(AdmitError::Denied { reason, request_id }) => {
            assert_eq!(reason.as_deref(), Some("too large"));
            assert_eq!(request_id.as_deref(), Some(request.request_id()));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        h.approvals.approve(request.as_value(), "alice").wait(),
        Err(DecisionError::AlreadyDenied { .. })
    ));
    // Any value other than an approval is a no.
    for no in [
        json!(false),
        json!("no"),
        json!(null),
        json!(0),
        json!({}),
        json!([]),
        json!({"approved": true}),
        json!({"airlock_grant": {}, "extra": 1}),
        json!("yes"),
        json!(true),
    ] {
        let result = h.approvals.admit(&call.input(), &no).wait();
        assert!(matches!(result, Err(AdmitError::NotAnApproval)), "{no}: {result:?}");
    }
    for malformed in [
        json!({"airlock_grant": "x"}),
        json!({"airlock_grant": {}}),
        json!({"airlock_grant": {"key_id": "k1", "grant_id": "zz", "token": "ab".repeat(32)}}),
        json!({"airlock_grant": {"key_id": "k1", "grant_id": "ab".repeat(16), "token": "AB".repeat(32)}}),
        json!({"airlock_grant": {"key_id": "k1", "grant_id": "ab".repeat(16), "token": "ab".repeat(32), "x": 1}}),
        json!({"airlock_grant": {"key_id": 1, "grant_id": "ab".repeat(16), "token": "ab".repeat(32)}}),
    ] {
        let result = h.approvals.admit(&call.input(), &malformed).wait();
        assert!(matches!(result, Err(AdmitError::MalformedGrant { .. })), "{malformed}: {result:?}");
    }
}

fn denial_revokes_an_unspent_grant(h: Harness) {
    let call = OwnedCall::refund(500);
    let (request, resume) = h.approved(&call);
    h.approvals.deny(request.as_value(), "bob", None).wait().unwrap();
    assert!(matches!(h.approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::Revoked { .. })));
    match h.status(&request) {
        RequestStatus::Denied(denial) => assert!(denial.revoked_grant.is_some()),
        other => panic!("{other:?}"),
    }
    // Denying a spent request is refused: the call ran.
    let (spent_request, spent_resume) = h.approved(&call.clone().with_tool_call_id("call_2"));
    h.approvals.admit(&call.clone().with_tool_call_id("call_2").input(), &spent_resume).wait().unwrap();
    assert!(matches!(
        h.approvals.deny(spent_request.as_value(), "bob", None).wait(),
        Err(DecisionError::AlreadySpent { .. })
    ));
}

fn wrong_and_rotated_keys(h: Harness) {
    let call = OwnedCall::refund(500);
    // Another secret under the same id: the seal does not match.
    let impostor = h.with_keys(KeyRing::new(ApprovalKey::new("k1", &[9; 32]).unwrap()));
    let request = h.request(&call);
    let result = impostor.approve(request.as_value(), "mallory").wait();
    assert!(matches!(result, Err(DecisionError::SealMismatch)), "{result:?}");
    assert_no_secret(result.unwrap_err());
    // A ring without the key: unknown.
    let stranger = h.with_keys(KeyRing::new(ApprovalKey::new("k9", &[9; 32]).unwrap()));
    match stranger.approve(request.as_value(), "mallory").wait() {
        Err(err @ DecisionError::UnknownKey { .. }) => {
            assert_eq!(err.to_string(), "approval request made under unknown key `k1`");
        }
        other => panic!("{other:?}"),
    }
    let resume = h.approvals.approve(request.as_value(), "alice").wait().unwrap().into_value();
    assert!(matches!(stranger.admit(&call.input(), &resume).wait(), Err(AdmitError::UnknownKey { .. })));

    // Rotation: k2 current, k1 retired. Honoured: the k1 grant admits; new requests use k2.
    let rotated = key_ring().rotate(ApprovalKey::new("k2", &[2; 32]).unwrap()).unwrap();
    let honouring = h.with_keys(rotated.clone());
    let refusing = h.with_keys(rotated.retired_keys(RetiredKeys::Refuse));
    match refusing.admit(&call.input(), &resume).wait() {
        Err(err @ AdmitError::RetiredKey { .. }) => {
            assert_eq!(err.to_string(), "approval made under retired key `k1`, which this key ring refuses")
        }
        other => panic!("{other:?}"),
    }
    let pending = h.request(&call.clone().with_tool_call_id("call_2"));
    assert!(matches!(refusing.approve(pending.as_value(), "alice").wait(), Err(DecisionError::RetiredKey { .. })));
    honouring.admit(&call.input(), &resume).wait().unwrap();
    let fresh = honouring.request(&call.clone().with_tool_call_id("call_3").input(), "a", "b").wait().unwrap();
    assert_eq!(fresh.key_id(), "k2");
    let fresh_resume = honouring.approve(fresh.as_value(), "alice").wait().unwrap().into_value();
    assert!(matches!(
        h.approvals.admit(&call.clone().with_tool_call_id("call_3").input(), &fresh_resume).wait(),
        Err(AdmitError::UnknownKey { .. })
    ));
    refusing.admit(&call.clone().with_tool_call_id("call_3").input(), &fresh_resume).wait().unwrap();
}

fn integers_beyond_2_pow_53_are_refused(h: Harness) {
    let mut call = OwnedCall::refund(500);
    call.arguments.insert("amount".into(), json!(9_007_199_254_740_993u64));
    match h.approvals.request(&call.input(), "attribute", "moves money").wait() {
        Err(RequestError::Arguments(err)) => assert_eq!(err.path(), "/amount"),
        other => panic!("{other:?}"),
    }
    // An approval for the neighbouring integer does not admit it either.
    let mut near = OwnedCall::refund(500);
    near.arguments.insert("amount".into(), json!(9_007_199_254_740_991u64));
    let (_, resume) = h.approved(&near);
    assert!(matches!(h.approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::Arguments(_))));
}

fn decisions_need_a_decider_and_a_fresh_request(h: Harness) {
    let call = OwnedCall::refund(500);
    let request = h.request(&call);
    assert!(matches!(h.approvals.approve(request.as_value(), " ").wait(), Err(DecisionError::MissingDecider)));
    let timed = h.approvals.clone().with_request_ttl(Duration::from_secs(60));
    let request = timed.request(&call.input(), "attribute", "moves money").wait().unwrap();
    assert!(request.expires_at().is_some());
    h.clock.advance(Duration::from_secs(60));
    assert!(matches!(timed.approve(request.as_value(), "alice").wait(), Err(DecisionError::RequestExpired { .. })));
    // A request the ledger never recorded (sealed by the key, but recorded elsewhere) is refused.
    let elsewhere =
        InterruptApprovals::new(key_ring(), Arc::new(MemoryLedger::new()), GRANT_TTL).with_clock(h.clock.clone());
    let foreign = elsewhere.request(&call.input(), "attribute", "moves money").wait().unwrap();
    assert!(matches!(
        h.approvals.approve(foreign.as_value(), "alice").wait(),
        Err(DecisionError::UnknownRequest { .. })
    ));
}

fn threads_racing_one_grant_admit_exactly_once(h: Harness) {
    let call = OwnedCall::refund(500);
    let (_, resume) = h.approved(&call);
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let approvals = h.approvals.clone();
            let call = call.clone();
            let resume = resume.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                approvals.admit(&call.input(), &resume).wait()
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(
        results.iter().filter(|r| r.is_err()).all(|r| matches!(r, Err(AdmitError::AlreadySpent { .. }))),
        "{results:?}"
    );
}

fn async_tasks_racing_one_grant_admit_exactly_once(h: Harness) {
    let call = OwnedCall::refund(500);
    let (_, resume) = h.approved(&call);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let admitted = runtime.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let approvals = h.approvals.clone();
                let call = call.clone();
                let resume = resume.clone();
                tokio::spawn(async move { approvals.admit(&call.input(), &resume).await.is_ok() })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += usize::from(task.await.unwrap());
        }
        admitted
    });
    assert_eq!(admitted, 1);
}

fn the_ledger_rules_hold_without_the_protocol(h: Harness) {
    let now = START;
    let record = |id: &str, binding: &str| RequestRecord {
        request_id: id.into(),
        key_id: "k1".into(),
        tool: "refund".into(),
        rule: "attribute".into(),
        reason: "r".into(),
        binding: binding.into(),
        requested_at: now,
        interrupt: json!({}),
        caller: None,
    };
    let grant = |id: &str, request: &str, binding: &str| GrantRecord {
        grant_id: id.into(),
        request_id: request.into(),
        key_id: "k1".into(),
        binding: binding.into(),
        approver: "alice".into(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at: now,
        expires_at: now + Duration::from_secs(10),
    };
    let spend =
        |id: &str, binding: &str, at: Duration| SpendAttempt { grant_id: id.into(), binding: binding.into(), now: at };
    let l = &h.ledger;
    l.record_request(record("r1", "b1"), None).wait().unwrap();
    l.record_request(record("r1", "b1"), None).wait().unwrap();
    assert!(matches!(l.record_request(record("r1", "b2"), None).wait(), Err(LedgerError::DuplicateRequest { .. })));
    assert!(matches!(l.grant(grant("g0", "r9", "b1"), now).wait(), Err(LedgerError::UnknownRequest { .. })));
    assert!(matches!(l.grant(grant("g0", "r1", "b2"), now).wait(), Err(LedgerError::RequestMismatch { .. })));
    assert!(matches!(l.spend(spend("g1", "b1", now)).wait(), Err(LedgerError::UnknownGrant { .. })));
    assert_eq!(l.grant(grant("g1", "r1", "b1"), now).wait().unwrap().into_grant().unwrap().grant_id, "g1");
    // A second grant for a live-granted request answers the first.
    assert_eq!(l.grant(grant("g2", "r1", "b1"), now).wait().unwrap().into_grant().unwrap().grant_id, "g1");
    assert!(l.find_grant("g2").unwrap().is_none());
    assert!(matches!(l.spend(spend("g1", "b2", now)).wait(), Err(LedgerError::BindingMismatch { .. })));
    assert!(matches!(
        l.spend(spend("g1", "b1", now + Duration::from_secs(10))).wait(),
        Err(LedgerError::GrantExpired { .. })
    ));
    let spent = l.spend(spend("g1", "b1", now + Duration::from_secs(9))).wait().unwrap();
    assert_eq!(spent.spent_at, now + Duration::from_secs(9));
    assert!(matches!(l.spend(spend("g1", "b1", now)).wait(), Err(LedgerError::AlreadySpent { .. })));
    assert!(matches!(l.grant(grant("g3", "r1", "b1"), now).wait(), Err(LedgerError::AlreadySpent { .. })));
    // Denial: first one wins; denial of a pending request; grant after denial refused.
    l.record_request(record("r2", "b2"), None).wait().unwrap();
    let denial = |by: &str| DenialRecord {
        request_id: "r2".into(),
        denied_by: by.into(),
        reason: None,
        denied_at: now,
        revoked_grant: None,
        signature: None,
    };
    assert_eq!(l.deny(denial("bob")).wait().unwrap().denied_by, "bob");
    assert_eq!(l.deny(denial("carol")).wait().unwrap().denied_by, "bob");
    assert!(matches!(l.grant(grant("g4", "r2", "b2"), now).wait(), Err(LedgerError::AlreadyDenied(_))));
    assert!(matches!(l.grant(grant("g1", "r2", "b2"), now).wait(), Err(LedgerError::DuplicateGrant { .. })));
    let listed: Vec<_> = l.list_requests().unwrap().into_iter().map(|e| e.request.request_id).collect();
    assert_eq!(listed, ["r1", "r2"]);
}

fn pending_requests_are_bounded_per_tool_and_thread(h: Harness) {
    let approvals = h.approvals.clone().with_request_ttl(Duration::from_secs(60)).with_max_pending(Some(2));
    let call = OwnedCall::refund(500);
    let ask = |call: &OwnedCall| approvals.request(&call.input(), "attribute", "moves money").wait();
    let first = ask(&call).unwrap();
    h.clock.advance(Duration::from_secs(10));
    let second = ask(&call).unwrap();
    let full = |result: Result<InterruptRequest, RequestError>, oldest: Duration| match result {
        Err(RequestError::Ledger(error @ LedgerError::TooManyPending { .. })) => {
            let LedgerError::TooManyPending { ref tool, pending, max, oldest_expires_at } = error else {
                unreachable!()
            };
            assert_eq!((tool.as_str(), pending, max, oldest_expires_at), ("refund", 2, 2, Some(oldest)));
            assert!(error.to_string().contains("retry once one is decided or after the oldest expires"), "{error}");
        }
        other => panic!("{other:?}"),
    };
    full(ask(&call), START + Duration::from_secs(60));
    // Another thread, another tool: their own counts.
    let mut elsewhere = call.clone();
    elsewhere.thread_id = "another thread".into();
    ask(&elsewhere).unwrap();
    ask(&call.clone().with_tool("cancel_subscription")).unwrap();
    // A decision frees a place: a denial, then an approval.
    approvals.deny(first.as_value(), "bob", None).wait().unwrap();
    let third = ask(&call).unwrap();
    full(ask(&call), START + Duration::from_secs(70));
    approvals.approve(second.as_value(), "alice").wait().unwrap();
    ask(&call).unwrap();
    full(ask(&call), START + Duration::from_secs(70));
    // Expired requests stop counting.
    h.clock.advance(Duration::from_secs(60));
    assert!(approvals.approve(third.as_value(), "alice").wait().is_err(), "expired");
    ask(&call).unwrap();
    ask(&call).unwrap();
    // The default holds a few per tool and thread, never unbounded.
    let default = h.approvals.clone();
    let mut looping = call.clone();
    looping.thread_id = "a model in a loop".into();
    let recorded = (0..200).filter(|_| default.request(&looping.input(), "attribute", "x").wait().is_ok()).count();
    assert_eq!(recorded, agent_airlock::approval::DEFAULT_MAX_PENDING as usize);
}

/// A caller's requests count together whatever thread each came from (a new MCP session is no fresh budget);
/// another caller, and a call naming none (counted by its thread), have counts of their own; a decision frees
/// the caller's place.
fn pending_requests_are_bounded_per_caller_across_threads(h: Harness) {
    let record = |id: &str, thread: &str, caller: Option<&str>| RequestRecord {
        interrupt: json!({"airlock_approval": {"call": {"thread_id": thread}}}),
        caller: caller.map(str::to_owned),
        ..request_record(id)
    };
    let l = &h.ledger;
    let max = Some(2);
    l.record_request(record("a1", "session-1", Some("alice")), max).wait().unwrap();
    l.record_request(record("a2", "session-2", Some("alice")), max).wait().unwrap();
    match l.record_request(record("a3", "session-3", Some("alice")), max).wait() {
        Err(LedgerError::TooManyPending { tool, pending: 2, max: 2, .. }) => assert_eq!(tool, "refund"),
        other => panic!("a third pending request of alice's, from a third thread: {other:?}"),
    }
    // Bob, in alice's very threads, has his own count; so does a call naming no caller, by its thread.
    l.record_request(record("b1", "session-1", Some("bob")), max).wait().unwrap();
    l.record_request(record("b2", "session-2", Some("bob")), max).wait().unwrap();
    l.record_request(record("t1", "session-1", None), max).wait().unwrap();
    l.record_request(record("t2", "session-1", None), max).wait().unwrap();
    assert!(matches!(
        l.record_request(record("t4", "session-1", None), max).wait(),
        Err(LedgerError::TooManyPending { .. })
    ));
    // A decision on either of alice's requests frees her place, from any thread.
    l.deny(DenialRecord {
        request_id: "a2".into(),
        denied_by: "carol".into(),
        reason: None,
        denied_at: START,
        revoked_grant: None,
        signature: None,
    })
    .wait()
    .unwrap();
    l.record_request(record("a4", "session-9", Some("alice")), max).wait().unwrap();
    assert!(matches!(
        l.record_request(record("a5", "session-1", Some("alice")), max).wait(),
        Err(LedgerError::TooManyPending { .. })
    ));
    // The caller is kept with the request.
    assert_eq!(l.find_request("a4").unwrap().unwrap().request.caller.as_deref(), Some("alice"));
}

fn racing_requests_never_overshoot_the_pending_limit(h: Harness) {
    let approvals = h.approvals.clone().with_max_pending(Some(3));
    let barrier = Arc::new(Barrier::new(12));
    let handles: Vec<_> = (0..12)
        .map(|_| {
            let (approvals, barrier) = (approvals.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let call = OwnedCall::refund(500);
                barrier.wait();
                approvals.request(&call.input(), "attribute", "moves money").wait().is_ok()
            })
        })
        .collect();
    let recorded = handles.into_iter().map(|h| h.join().unwrap()).filter(|ok| *ok).count();
    assert_eq!(recorded, 3);
    assert_eq!(h.ledger.list_requests().unwrap().len(), 3);
}

/// A request that needs two distinct approvers: the first approval is recorded and issues nothing (the
/// same approver again counts once), the second issues the grant naming both, which admits once; a
/// second request is ended by a single denial after one approval.
fn two_person_approval(h: Harness) {
    let call = OwnedCall::refund(5000);
    let request = h.approvals.request_approved_by(&call.input(), "attribute", "moves money", 2).wait().unwrap();
    assert_eq!(request.approvals_required(), 2);
    assert_eq!(h.ledger.find_request(request.request_id()).unwrap().unwrap().request.approvals_required(), 2);
    // The number is sealed: a checkpoint that says one approver (or none) is not a request of ours.
    for lowered in [json!(1), Value::Null] {
        let mut forged = request.as_value().clone();
        match lowered {
            Value::Null => forged["airlock_approval"].as_object_mut().unwrap().remove("approvals"),
            n => forged["airlock_approval"].as_object_mut().unwrap().insert("approvals".to_owned(), n),
        };
        assert!(matches!(h.approvals.approve(&forged, "alice").wait(), Err(DecisionError::SealMismatch)));
    }
    for _ in 0..2 {
        match h.approvals.approve(request.as_value(), "alice").wait() {
            Err(DecisionError::MoreApproversNeeded { approvers, required }) => {
                assert_eq!((approvers, required), (vec!["alice".to_owned()], 2));
            }
            other => panic!("one approver of two must not grant: {other:?}"),
        }
    }
    assert!(h.status(&request).is_waiting());
    assert_eq!(h.status(&request).label(START), "approving");
    // Without a grant, nothing admits: no resume value was issued, and a forged one names no grant.
    let resume = h.approvals.approve(request.as_value(), "bob").wait().unwrap();
    match h.status(&request) {
        RequestStatus::Granted(grant) => {
            assert_eq!(grant.approvers(), vec!["alice", "bob"]);
            assert_eq!(grant.co_approvers, vec!["alice".to_owned()]);
        }
        other => panic!("the second distinct approver grants: {other:?}"),
    }
    // A third approval answers the live grant, as for one approver.
    let again = h.approvals.approve(request.as_value(), "carol").wait().unwrap();
    assert_eq!(again.as_value(), resume.as_value());
    h.approvals.admit(&call.input(), resume.as_value()).wait().unwrap();
    assert!(matches!(h.approvals.admit(&call.input(), resume.as_value()).wait(), Err(AdmitError::AlreadySpent { .. })));

    // One approval, then one denial: the request is over, and the second approver cannot revive it.
    let other = OwnedCall::refund(6000);
    let request = h.approvals.request_approved_by(&other.input(), "attribute", "moves money", 2).wait().unwrap();
    assert!(matches!(
        h.approvals.approve(request.as_value(), "alice").wait(),
        Err(DecisionError::MoreApproversNeeded { .. })
    ));
    let denied = h.approvals.deny(request.as_value(), "bob", Some("not today")).wait().unwrap();
    assert!(!denied.is_approval());
    assert!(matches!(
        h.approvals.approve(request.as_value(), "carol").wait(),
        Err(DecisionError::AlreadyDenied { .. })
    ));
    assert!(matches!(h.status(&request), RequestStatus::Denied(_)));
}

/// A two-person grant that expired unspent is approved again by two distinct approvers, not one: the
/// approvals that issued it approved that grant. The expired grant stays until the new round ends, then is
/// replaced by the new grant (or revoked by a denial in between).
fn two_person_approval_again_after_the_grant_expired(h: Harness) {
    let more_needed = |result: Result<ResumeValue, DecisionError>, who: &[&str]| match result {
        Err(DecisionError::MoreApproversNeeded { approvers, required }) => {
            assert_eq!((approvers, required), (who.iter().map(|s| s.to_string()).collect::<Vec<_>>(), 2));
        }
        other => panic!("one approver of two must not grant: {other:?}"),
    };
    let two_approved = |call: &OwnedCall| {
        let request = h.approvals.request_approved_by(&call.input(), "attribute", "moves money", 2).wait().unwrap();
        more_needed(h.approvals.approve(request.as_value(), "alice").wait(), &["alice"]);
        let resume = h.approvals.approve(request.as_value(), "bob").wait().unwrap().into_value();
        (request, resume)
    };
    let grant_id = |resume: &Value| resume["airlock_grant"]["grant_id"].as_str().unwrap().to_owned();

    let call = OwnedCall::refund(5000);
    let (request, expired) = two_approved(&call);
    h.clock.advance(GRANT_TTL);
    more_needed(h.approvals.approve(request.as_value(), "carol").wait(), &["carol"]);
    more_needed(h.approvals.approve(request.as_value(), "carol").wait(), &["carol"]);
    assert_eq!(h.status(&request).label(h.clock.now_for_test()), "approving");
    assert!(matches!(h.approvals.admit(&call.input(), &expired).wait(), Err(AdmitError::Expired { .. })));
    let renewed = h.approvals.approve(request.as_value(), "dave").wait().unwrap().into_value();
    match h.status(&request) {
        RequestStatus::Granted(grant) => assert_eq!(grant.approvers(), vec!["carol", "dave"]),
        other => panic!("the second distinct approver of the new round grants: {other:?}"),
    }
    match h.ledger.find_grant(&grant_id(&expired)).unwrap().unwrap().state {
        GrantState::Replaced { by_grant, .. } => assert_eq!(by_grant, grant_id(&renewed)),
        other => panic!("the expired grant is replaced by the new one: {other:?}"),
    }
    assert!(matches!(h.approvals.admit(&call.input(), &expired).wait(), Err(AdmitError::Replaced { .. })));
    assert_eq!(h.approvals.admit(&call.input(), &renewed).wait().unwrap().approver, "dave");

    // A denial during the new round ends the request and revokes the expired grant.
    let other = OwnedCall::refund(6000);
    let (request, expired) = two_approved(&other);
    h.clock.advance(GRANT_TTL);
    more_needed(h.approvals.approve(request.as_value(), "carol").wait(), &["carol"]);
    h.approvals.deny(request.as_value(), "erin", Some("not today")).wait().unwrap();
    match h.status(&request) {
        RequestStatus::Denied(denial) => assert_eq!(denial.revoked_grant, Some(grant_id(&expired))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(h.ledger.find_grant(&grant_id(&expired)).unwrap().unwrap().state, GrantState::Revoked { .. }));
    assert!(matches!(h.approvals.approve(request.as_value(), "dave").wait(), Err(DecisionError::AlreadyDenied { .. })));
}

/// `unresolved_requests` answers what `list_requests` lists of the requests still open (pending, partly
/// approved, granted and not spent), in the same order, whatever else the ledger keeps (spent, denied).
fn unresolved_requests_are_the_listed_ones_still_open(h: Harness) {
    let now = START;
    let record = |id: &str, approvals: u32, at: u64| RequestRecord {
        requested_at: now + Duration::from_secs(at),
        interrupt: json!({"airlock_approval": {"approvals": approvals}}),
        ..request_record(id)
    };
    let grant = |id: &str, request: &str, approver: &str| GrantRecord {
        grant_id: id.into(),
        request_id: request.into(),
        key_id: "k1".into(),
        binding: format!("b-{request}"),
        approver: approver.into(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at: now,
        expires_at: now + Duration::from_secs(60),
    };
    let l = &h.ledger;
    assert!(l.unresolved_requests().unwrap().is_empty());
    // Recorded out of order: the answer is oldest first, as the listing's.
    for (id, approvals, at) in [("r6", 1, 1), ("r1", 1, 5), ("r5", 1, 3), ("r2", 2, 2), ("r3", 1, 4), ("r4", 1, 4)] {
        l.record_request(record(id, approvals, at), None).wait().unwrap();
    }
    l.grant(grant("g2", "r2", "alice"), now).wait().unwrap();
    l.grant(grant("g3", "r3", "alice"), now).wait().unwrap();
    l.grant(grant("g5", "r5", "alice"), now).wait().unwrap();
    l.spend(SpendAttempt { grant_id: "g5".into(), binding: "b-r5".into(), now }).wait().unwrap();
    let denial = DenialRecord {
        request_id: "r6".into(),
        denied_by: "bob".into(),
        reason: None,
        denied_at: now,
        revoked_grant: None,
        signature: None,
    };
    l.deny(denial).wait().unwrap();

    let listed = l.list_requests().unwrap();
    assert_eq!(listed.len(), 6);
    let open: Vec<_> = listed.into_iter().filter(|entry| entry.status.is_unresolved()).collect();
    let unresolved = l.unresolved_requests().unwrap();
    assert_eq!(unresolved, open);
    let ids: Vec<_> = unresolved.iter().map(|entry| entry.request.request_id.as_str()).collect();
    assert_eq!(ids, ["r2", "r3", "r4", "r1"], "oldest first, ties by id");
    assert!(matches!(unresolved[0].status, RequestStatus::Approving { .. }));
    assert!(matches!(unresolved[1].status, RequestStatus::Granted(_)));
    assert!(matches!(unresolved[2].status, RequestStatus::Pending));
}

macro_rules! on_every_ledger {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $case() { super::$case(super::Harness::memory()); } )*
        }
        mod redb {
            $( #[test] fn $case() { super::$case(super::Harness::redb()); } )*
        }
        mod postgres {
            $( #[test] fn $case() { super::$case(super::Harness::postgres()); } )*
        }
    };
}

on_every_ledger!(
    unresolved_requests_are_the_listed_ones_still_open,
    approve_then_admit,
    the_interrupt_value_has_the_documented_shape,
    forged_resume_admits_nothing,
    altered_request_is_refused_by_approve,
    replay_admits_nothing,
    time_travel_after_success_admits_nothing,
    another_checkpoint_admits_nothing,
    approval_for_a_with_b_admits_nothing_and_a_stays_usable,
    tool_x_approval_for_tool_y_admits_nothing,
    expired_grant_admits_nothing,
    approving_twice_issues_one_grant,
    two_person_approval,
    two_person_approval_again_after_the_grant_expired,
    a_no_is_a_no,
    denial_revokes_an_unspent_grant,
    wrong_and_rotated_keys,
    integers_beyond_2_pow_53_are_refused,
    decisions_need_a_decider_and_a_fresh_request,
    threads_racing_one_grant_admit_exactly_once,
    async_tasks_racing_one_grant_admit_exactly_once,
    the_ledger_rules_hold_without_the_protocol,
    pending_requests_are_bounded_per_tool_and_thread,
    pending_requests_are_bounded_per_caller_across_threads,
    racing_requests_never_overshoot_the_pending_limit,
);

#[test]
fn resume_values_name_their_kind() {
    assert_eq!(ResumeValue::GRANT_MEMBER, "airlock_grant");
    assert_eq!(InterruptRequest::MEMBER, "airlock_approval");
    let _ = key();
}

trait NowForTest {
    fn now_for_test(&self) -> Duration;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> Duration {
        agent_airlock::Clock::now(self)
    }
}
