//! Operator mode: approvals are attributable. Each operator signs with a key of their own, the host
//! checks every recorded grant against the operators file before it admits anything, and `approvals = N`
//! counts distinct credentials, not names. Whoever holds the shared approval key or can write the ledger
//! cannot approve: a grant written through the ledger API without a valid signature admits nothing on any
//! path (the admit step, `recorded_decision_blocking`, the dispatcher's resume).
//!
//! Each case runs on the in-memory ledger and a redb file; the ones about rows written behind the
//! protocol's back run on PostgreSQL too.

use std::path::Path;
use std::sync::Arc;

use agent_airlock::approval::operators::{
    DecisionKind, DecisionSignature, DecisionSubject, OperatorEntry, OperatorError, OperatorKey, OperatorRole,
    Operators,
};
use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::effect::EffectError;
use agent_airlock::ledger::{
    ApprovalLedger, Approved, DenialRecord, EffectClaim, GrantRecord, LedgerReply, MemoryLedger, PostgresLedger,
    RedbLedger, RequestStatus, SpendAttempt, SpendReserved, SpentRecord,
};
use agent_airlock::{
    ManualClock, Outcome, Policy, RefusalKind, Status,
    approval::{AdmitError, DecisionError, DecisionSigner, InterruptApprovals, InterruptRequest},
};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, LedgerHooks, OwnedCall, START, Wrapped, key_ring};
use agent_airlock_tests::payments::{ExecutionLog, context, dispatcher_audited, dispatcher_with, refund_call};
use serde_json::Value;
use tempfile::TempDir;

struct Host {
    ledger: Arc<dyn ApprovalLedger>,
    clock: Arc<ManualClock>,
    dir: TempDir,
}

impl Host {
    fn memory() -> Self {
        Host::with(Arc::new(MemoryLedger::new()))
    }

    fn redb() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ledger = RedbLedger::open(dir.path().join("ledger.redb")).unwrap();
        Host { ledger: Arc::new(ledger), clock: Arc::new(ManualClock::new(START)), dir }
    }

    fn postgres() -> Self {
        let url = agent_airlock_tests::pg_server::shared().fresh_database();
        Host::with(Arc::new(PostgresLedger::connect(&url).unwrap()))
    }

    fn with(ledger: Arc<dyn ApprovalLedger>) -> Self {
        Host { ledger, clock: Arc::new(ManualClock::new(START)), dir: tempfile::tempdir().unwrap() }
    }

    /// Approvals holding only the shared key: what the holder of that key (or a tool written against the
    /// ledger) can do.
    fn shared_key_only(&self) -> InterruptApprovals {
        InterruptApprovals::new(key_ring(), Arc::clone(&self.ledger), GRANT_TTL).with_clock(Arc::clone(&self.clock))
    }

    /// The host in operator mode.
    fn operator_mode(&self, operators: &Operators) -> InterruptApprovals {
        self.shared_key_only().with_operators(operators.clone())
    }

    fn request(&self, call: &OwnedCall, approvals: u32) -> InterruptRequest {
        self.shared_key_only().request_approved_by(&call.input(), "attribute", "moves money", approvals).wait().unwrap()
    }

    fn log(&self) -> ExecutionLog {
        ExecutionLog { path: self.dir.path().join("executions.log"), hang_after_start: false }
    }

    /// The dispatcher's resumed pass, in operator mode.
    fn resume(&self, operators: &Operators, resume: Value) -> Outcome {
        let dispatcher = dispatcher_with(self.operator_mode(operators), Arc::clone(&self.clock), Policy::new());
        block_on(dispatcher.dispatch(refund_call(500), &context(self.log(), "c1", Some(resume))))
    }

    /// The dispatcher's first pass: the interrupt value of `refund_call(500)`.
    fn interrupt(&self, operators: &Operators) -> Value {
        let dispatcher = dispatcher_with(self.operator_mode(operators), Arc::clone(&self.clock), Policy::new());
        match block_on(dispatcher.dispatch(refund_call(500), &context(self.log(), "c1", None))) {
            Outcome::Interrupt { request, .. } => request.into_value(),
            other => panic!("expected an interrupt, got {other:?}"),
        }
    }

    fn executions(&self) -> usize {
        self.log().lines().len()
    }
}

fn hosts() -> Vec<(&'static str, Host)> {
    vec![("memory", Host::memory()), ("redb", Host::redb())]
}

fn hosts_with_postgres() -> Vec<(&'static str, Host)> {
    let mut hosts = hosts();
    hosts.push(("postgres", Host::postgres()));
    hosts
}

/// `names` keys, each listed under its own name.
fn operators(names: &[&str]) -> (Operators, Vec<OperatorKey>) {
    let mut operators = Operators::default();
    let keys: Vec<OperatorKey> = names.iter().map(|name| OperatorKey::generate(name).unwrap()).collect();
    for key in &keys {
        operators
            .add(OperatorEntry {
                name: key.name().to_owned(),
                key: key.key_id(),
                role: OperatorRole::Operator,
                revoked: false,
            })
            .unwrap();
    }
    (operators, keys)
}

/// The same secret as `key`, signing under `name` (a key file whose name was edited).
fn renamed(key: &OperatorKey, name: &str, dir: &Path) -> OperatorKey {
    let original = dir.join(format!("{}.key", key.name()));
    key.write_new(&original).unwrap();
    let text = std::fs::read_to_string(&original)
        .unwrap()
        .replace(&format!("name = \"{}\"", key.name()), &format!("name = \"{name}\""));
    let edited = dir.join(format!("{name}-edited.key"));
    std::fs::write(&edited, text).unwrap();
    let renamed = OperatorKey::from_file(&edited).unwrap();
    assert_eq!((renamed.name(), renamed.key_id()), (name, key.key_id()));
    renamed
}

/// A grant for `request` written straight through the ledger API, carrying `signatures`.
fn forge_grant(
    host: &Host,
    request: &InterruptRequest,
    approver: &str,
    signatures: Vec<DecisionSignature>,
) -> GrantRecord {
    let entry = host.ledger.find_request(request.request_id()).unwrap().unwrap();
    let grant = GrantRecord {
        grant_id: format!("{:032x}", u128::from_str_radix(&request.request_id()[..30], 16).unwrap() ^ 0xabc),
        request_id: entry.request.request_id.clone(),
        key_id: entry.request.key_id.clone(),
        binding: entry.request.binding.clone(),
        approver: approver.to_owned(),
        co_approvers: Vec::new(),
        signatures,
        granted_at: START,
        expires_at: START + GRANT_TTL,
    };
    match host.ledger.grant(grant, START).wait().unwrap() {
        Approved::Granted(grant) => grant,
        waiting => panic!("{waiting:?}"),
    }
}

/// What the holder of the shared key gets for a granted request: the resume value it mints itself.
fn minted_resume(host: &Host, request: &InterruptRequest) -> Value {
    host.shared_key_only().recorded_decision_blocking(request.as_value()).unwrap().expect("granted").into_value()
}

/// Every way a host in operator mode could let `request`'s granted call run refuses it.
fn assert_admits_nothing(host: &Host, operators: &Operators, request: &InterruptRequest, label: &str) {
    let host_approvals = host.operator_mode(operators);
    let recorded = host_approvals.recorded_decision_blocking(request.as_value());
    assert!(matches!(recorded, Err(DecisionError::UnsignedGrant { .. })), "{label}: {recorded:?}");
    let resume = minted_resume(host, request);
    let call = OwnedCall::refund(500);
    let admitted = host_approvals.admit(&call.input(), &resume).wait();
    assert!(matches!(admitted, Err(AdmitError::UnsignedGrant { .. })), "{label}: {admitted:?}");
    let message = host.resume(operators, resume).expect_message();
    assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{label}");
    assert_eq!(host.executions(), 0, "{label}: the call never ran");
    // Nothing was spent: a later, validly signed approval is not blocked by the refusal.
    let status = host.ledger.find_request(request.request_id()).unwrap().unwrap().status;
    assert!(matches!(status, RequestStatus::Granted(_)), "{label}: {status:?}");
}

#[test]
fn one_credential_under_two_names_does_not_grant_a_request_needing_two_approvals() {
    for (label, host) in hosts_with_postgres() {
        let alice = OperatorKey::generate("alice").unwrap();
        let bob_alias = renamed(&alice, "bob", host.dir.path());
        // The operators file lists the one key under both names.
        let operators = Operators::from_toml(
            &format!(
                "[[operator]]\nname = \"alice\"\nkey = \"{0}\"\n\n[[operator]]\nname = \"bob\"\nkey = \"{0}\"\n",
                alice.key_id()
            ),
            "test",
        )
        .unwrap();
        let approvals = host.operator_mode(&operators);
        let request = host.request(&OwnedCall::refund(500), 2);
        for key in [&alice, &bob_alias, &alice] {
            let approved = approvals.approve_signed(request.as_value(), DecisionSigner::Operator(key)).wait();
            assert!(
                matches!(&approved, Err(DecisionError::MoreApproversNeeded { approvers, required: 2 }) if approvers.len() == 1),
                "{label}: one key is one approver whatever name it signs under: {approved:?}"
            );
        }
        assert_eq!(approvals.recorded_decision_blocking(request.as_value()).unwrap(), None, "{label}: still waiting");

        // The host counts the same way: both of that key's signatures are one credential.
        let subject = subject_of(&request, 2);
        let signatures =
            [alice.sign(&subject, "alice", false, 1).unwrap(), bob_alias.sign(&subject, "bob", false, 2).unwrap()];
        assert_eq!(operators.count(&signatures, &subject).credentials, 1, "{label}");
        // And the ledger, asked directly with the second name's signature: still one approver.
        let entry = host.ledger.find_request(request.request_id()).unwrap().unwrap();
        let grant = GrantRecord {
            grant_id: "0123456789abcdef0123456789abcdef".into(),
            request_id: entry.request.request_id.clone(),
            key_id: entry.request.key_id.clone(),
            binding: entry.request.binding.clone(),
            approver: "bob".into(),
            co_approvers: Vec::new(),
            signatures: vec![signatures[1].clone()],
            granted_at: START,
            expires_at: START + GRANT_TTL,
        };
        let answer = host.ledger.grant(grant, START).wait().unwrap();
        assert!(matches!(&answer, Approved::Waiting { approvers, .. } if approvers.len() == 1), "{label}: {answer:?}");
    }
}

#[test]
fn two_distinct_credentials_grant_a_request_needing_two_and_its_call_runs_once() {
    for (label, host) in hosts() {
        let (operators, keys) = operators(&["alice", "bob"]);
        let approvals = host.operator_mode(&operators);
        let interrupt = host.interrupt(&operators);
        // The dispatcher's request needs one approver; a request needing two, made the same way:
        let two = host.request(&OwnedCall::refund(7), 2);
        let first = approvals.approve_signed(two.as_value(), DecisionSigner::Operator(&keys[0])).wait();
        assert!(matches!(first, Err(DecisionError::MoreApproversNeeded { .. })), "{label}: {first:?}");
        let granted = approvals.approve_signed(two.as_value(), DecisionSigner::Operator(&keys[1])).wait().unwrap();
        let recorded = approvals.recorded_decision_blocking(two.as_value()).unwrap().expect("granted");
        assert_eq!(recorded, granted, "{label}");
        let admission = approvals.admit(&OwnedCall::refund(7).input(), granted.as_value()).wait().unwrap();
        assert_eq!(admission.approver, "bob", "{label}");

        // The dispatcher: one signed approval admits its call, once.
        let resume = approvals.approve_signed(&interrupt, DecisionSigner::Operator(&keys[0])).wait().unwrap();
        let message = host.resume(&operators, resume.clone().into_value()).expect_message();
        assert_eq!(message.status, Status::Success, "{label}: {message:?}");
        assert_eq!(host.executions(), 1, "{label}");
        let again = host.resume(&operators, resume.into_value()).expect_message();
        assert_eq!(again.refusal.map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{label}");
        assert_eq!(host.executions(), 1, "{label}");
    }
}

#[test]
fn a_grant_written_through_the_ledger_without_a_valid_signature_admits_nothing_on_any_path() {
    for (label, host) in hosts_with_postgres() {
        let (operators, keys) = operators(&["alice"]);
        let interrupt = host.interrupt(&operators);
        let request = host.shared_key_only().verify_request(&interrupt).unwrap();
        // Unsigned, as every grant was before signatures (and as an old row is).
        forge_grant(&host, &request, "alice", Vec::new());
        assert_admits_nothing(&host, &operators, &request, label);

        // Signed by a key nobody listed.
        let host = Host {
            ledger: Arc::clone(&host.ledger),
            clock: Arc::clone(&host.clock),
            dir: tempfile::tempdir().unwrap(),
        };
        let interrupt = host.interrupt(&operators);
        let request = host.shared_key_only().verify_request(&interrupt).unwrap();
        let stranger = OperatorKey::generate("alice").unwrap();
        let subject = subject_of(&request, 1);
        forge_grant(&host, &request, "alice", vec![stranger.sign(&subject, "alice", false, 1).unwrap()]);
        assert_admits_nothing(&host, &operators, &request, label);

        // A listed key's signature with its bytes altered.
        let host = Host {
            ledger: Arc::clone(&host.ledger),
            clock: Arc::clone(&host.clock),
            dir: tempfile::tempdir().unwrap(),
        };
        let interrupt = host.interrupt(&operators);
        let request = host.shared_key_only().verify_request(&interrupt).unwrap();
        let mut signature = keys[0].sign(&subject_of(&request, 1), "alice", false, 1).unwrap();
        signature.signed_at_ms += 1;
        forge_grant(&host, &request, "alice", vec![signature]);
        assert_admits_nothing(&host, &operators, &request, label);
    }
}

fn subject_of(request: &InterruptRequest, approvals: u32) -> DecisionSubject<'_> {
    DecisionSubject {
        kind: DecisionKind::Grant,
        request_id: request.request_id(),
        binding: request.as_value()["airlock_approval"]["binding"].as_str().unwrap(),
        approvals,
    }
}

#[test]
fn a_signature_over_another_request_or_binding_or_decision_admits_nothing() {
    for (label, host) in hosts_with_postgres() {
        let (operators, keys) = operators(&["alice"]);
        let interrupt = host.interrupt(&operators);
        let request = host.shared_key_only().verify_request(&interrupt).unwrap();
        let elsewhere = host.request(&OwnedCall::refund(9), 1);
        let other_request = keys[0].sign(&subject_of(&elsewhere, 1), "alice", false, 1).unwrap();
        let other_binding = keys[0]
            .sign(&DecisionSubject { binding: &"0".repeat(64), ..subject_of(&request, 1) }, "alice", false, 1)
            .unwrap();
        let a_denial = keys[0]
            .sign(&DecisionSubject { kind: DecisionKind::Deny, ..subject_of(&request, 1) }, "alice", false, 1)
            .unwrap();
        let fewer_approvals = keys[0].sign(&subject_of(&request, 2), "alice", false, 1).unwrap();
        let other_name = keys[0].sign(&subject_of(&request, 1), "root", false, 1).unwrap();
        let subject = subject_of(&request, 1);
        for (what, signature) in [
            ("another request", other_request),
            ("another binding", other_binding),
            ("a denial", a_denial),
            ("another number of approvals", fewer_approvals),
            ("a name the key is not listed under", other_name),
        ] {
            assert_eq!(operators.count(std::slice::from_ref(&signature), &subject).credentials, 0, "{label}: {what}");
        }
        let signature = keys[0].sign(&subject_of(&elsewhere, 1), "alice", false, 1).unwrap();
        forge_grant(&host, &request, "alice", vec![signature]);
        assert_admits_nothing(&host, &operators, &request, label);
    }
}

#[test]
fn a_signature_by_a_revoked_key_admits_nothing_even_if_made_before_the_revocation() {
    for (label, host) in hosts() {
        let (mut operators, keys) = operators(&["alice", "bob"]);
        let approvals = host.operator_mode(&operators);
        let interrupt = host.interrupt(&operators);
        let request = approvals.verify_request(&interrupt).unwrap();
        // Signed while alice's key was good.
        approvals.approve_signed(&interrupt, DecisionSigner::Operator(&keys[0])).wait().unwrap();
        assert_eq!(operators.revoke("alice"), 1);
        assert_admits_nothing(&host, &operators, &request, label);
        // And after: refused at once.
        let later = host.request(&OwnedCall::refund(3), 1);
        let refused =
            host.operator_mode(&operators).approve_signed(later.as_value(), DecisionSigner::Operator(&keys[0])).wait();
        assert!(matches!(refused, Err(DecisionError::UnsignedGrant { .. })), "{label}: {refused:?}");
        // Bob's key still counts.
        let bob = host.request(&OwnedCall::refund(4), 1);
        host.operator_mode(&operators)
            .approve_signed(bob.as_value(), DecisionSigner::Operator(&keys[1]))
            .wait()
            .unwrap();
    }
}

#[test]
fn an_unsigned_decision_is_refused_in_operator_mode_and_the_shared_key_alone_approves_nothing() {
    for (label, host) in hosts() {
        let (operators, keys) = operators(&["alice"]);
        let approvals = host.operator_mode(&operators);
        let request = host.request(&OwnedCall::refund(500), 1);
        let unsigned = approvals.approve(request.as_value(), "alice").wait();
        assert!(matches!(unsigned, Err(DecisionError::SignatureRequired)), "{label}: {unsigned:?}");
        let unsigned = approvals.deny(request.as_value(), "alice", None).wait();
        assert!(matches!(unsigned, Err(DecisionError::SignatureRequired)), "{label}: {unsigned:?}");
        // The holder of the shared key records a grant; it mints a token that fits; the host refuses it.
        host.shared_key_only().approve(request.as_value(), "alice").wait().unwrap();
        assert_admits_nothing(&host, &operators, &request, label);
        // A signed denial is recorded with its signature; the call is refused with the denier's words.
        let denied =
            approvals.deny_signed(request.as_value(), DecisionSigner::Operator(&keys[0]), Some("no")).wait().unwrap();
        let status = host.ledger.find_request(request.request_id()).unwrap().unwrap().status;
        let RequestStatus::Denied(DenialRecord { signature: Some(signature), denied_by, .. }) = status else {
            panic!("{label}: {status:?}")
        };
        assert_eq!((denied_by.as_str(), signature.key.as_str()), ("alice", keys[0].key_id().as_str()));
        let subject = DecisionSubject { kind: DecisionKind::Deny, ..subject_of(&request, 1) };
        assert_eq!(operators.count(&[signature], &subject).credentials, 1, "{label}");
        assert_eq!(approvals.recorded_decision_blocking(request.as_value()).unwrap(), Some(denied));
    }
}

#[test]
fn console_attestations_count_each_signed_in_account_once() {
    let host = Host::memory();
    let console = OperatorKey::generate("console").unwrap();
    let (mut operators, keys) = operators(&["alice"]);
    operators
        .add(OperatorEntry {
            name: "console".into(),
            key: console.key_id(),
            role: OperatorRole::Console,
            revoked: false,
        })
        .unwrap();
    let approvals = host.operator_mode(&operators);
    let attest = |account| DecisionSigner::Console { key: &console, account };

    // Two accounts signed in to the console: two approvers.
    let two = host.request(&OwnedCall::refund(1), 2);
    assert!(approvals.approve_signed(two.as_value(), attest("carol")).wait().is_err());
    let granted = approvals.approve_signed(two.as_value(), attest("dave")).wait().unwrap();
    approvals.admit(&OwnedCall::refund(1).input(), granted.as_value()).wait().unwrap();

    // One account twice: one approver.
    let twice = host.request(&OwnedCall::refund(2), 2);
    for _ in 0..2 {
        let waiting = approvals.approve_signed(twice.as_value(), attest("carol")).wait();
        assert!(matches!(waiting, Err(DecisionError::MoreApproversNeeded { .. })), "{waiting:?}");
    }

    // Alice with her key and alice through the console: one person, one approver.
    let same = host.request(&OwnedCall::refund(3), 2);
    let subject = subject_of(&same, 2);
    let both = [keys[0].sign(&subject, "alice", false, 1).unwrap(), console.sign(&subject, "alice", true, 2).unwrap()];
    assert_eq!(operators.count(&both, &subject).credentials, 1);
    // And so they are counted when they approve: the second is not recorded (a grant with the two would carry
    // one credential and admit nothing), and a second person's approval then grants.
    let same = same.as_value();
    assert!(matches!(
        approvals.approve_signed(same, DecisionSigner::Operator(&keys[0])).wait(),
        Err(DecisionError::MoreApproversNeeded { .. })
    ));
    let again = approvals.approve_signed(same, attest("alice")).wait();
    assert!(
        matches!(&again, Err(DecisionError::MoreApproversNeeded { approvers, required: 2 }) if approvers == &["alice"]),
        "{again:?}"
    );
    let granted = approvals.approve_signed(same, attest("carol")).wait().unwrap();
    approvals.admit(&OwnedCall::refund(3).input(), granted.as_value()).wait().unwrap();
    // An operator's key cannot attest, and a console's key does not count as a person's own.
    let wrong_roles =
        [keys[0].sign(&subject, "zed", true, 1).unwrap(), console.sign(&subject, "console", false, 2).unwrap()];
    assert_eq!(operators.count(&wrong_roles, &subject).credentials, 0);
}

#[test]
fn an_operator_key_is_written_once_readable_by_its_owner_only_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alice.key");
    let key = OperatorKey::generate("alice").unwrap();
    key.write_new(&path).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let before = std::fs::read(&path).unwrap();
    let again = OperatorKey::generate("alice").unwrap().write_new(&path);
    assert!(matches!(again, Err(OperatorError::Exists { .. })), "{again:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the first key is untouched");
    let read = OperatorKey::from_file(&path).unwrap();
    assert_eq!(read.key_id(), key.key_id());
    let text = String::from_utf8(before).unwrap();
    let secret =
        text.lines().find_map(|l| l.strip_prefix("secret = \"ed25519:")).unwrap().trim_end_matches('"').to_owned();
    assert!(!format!("{read:?}").contains(&secret), "Debug never shows the secret");
    // A damaged file is refused without quoting it.
    std::fs::write(dir.path().join("bad.key"), text.replace("secret", "secrte")).unwrap();
    let bad = OperatorKey::from_file(&dir.path().join("bad.key")).unwrap_err().to_string();
    assert!(!bad.contains(&secret), "{bad}");
}

#[test]
fn the_operators_file_refuses_malformed_keys_and_reused_names() {
    let (mut operators, keys) = operators(&["alice"]);
    let text = operators.to_toml();
    assert_eq!(Operators::from_toml(&text, "t").unwrap(), operators);
    for bad in [
        "[[operator]]\nname = \"x\"\nkey = \"ed25519:zz\"\n",
        "[[operator]]\nname = \"\"\nkey = \"ed25519:00\"\n",
        "[[operator]]\nname = \"x\"\nkey = \"rsa:00\"\nextra = 1\n",
    ] {
        assert!(Operators::from_toml(bad, "t").is_err(), "{bad}");
    }
    let again = OperatorEntry {
        name: "alice".into(),
        key: OperatorKey::generate("a").unwrap().key_id(),
        role: OperatorRole::Operator,
        revoked: false,
    };
    assert!(operators.add(again).is_err(), "a name is listed once");
    let same_key =
        OperatorEntry { name: "eve".into(), key: keys[0].key_id(), role: OperatorRole::Operator, revoked: false };
    assert!(operators.add(same_key).is_err(), "a key is listed once");
    assert_eq!(operators.revoke("alice"), 1);
    assert_eq!(operators.revoke("alice"), 0);
}

#[test]
fn rows_written_before_signatures_read_as_unsigned_and_signed_rows_keep_their_signatures() {
    let old = serde_json::json!({
        "grant_id": "00112233445566778899aabbccddeeff", "request_id": "ffeeddccbbaa99887766554433221100",
        "key_id": "k1", "binding": "ab".repeat(32), "approver": "alice",
        "granted_at": 1_767_225_600_000_u64, "expires_at": 1_767_226_200_000_u64,
    });
    let grant: GrantRecord = serde_json::from_value(old.clone()).unwrap();
    assert!(grant.signatures.is_empty());
    assert_eq!(serde_json::to_value(&grant).unwrap(), old, "an unsigned row is written as before");
    let denial: DenialRecord = serde_json::from_value(serde_json::json!({
        "request_id": "ffeeddccbbaa99887766554433221100", "denied_by": "bob", "reason": null,
        "denied_at": 1_767_225_600_000_u64, "revoked_grant": null,
    }))
    .unwrap();
    assert_eq!(denial.signature, None);

    let key = OperatorKey::generate("alice").unwrap();
    let binding = "ab".repeat(32);
    let subject =
        DecisionSubject { kind: DecisionKind::Grant, request_id: &grant.request_id, binding: &binding, approvals: 1 };
    let signed = GrantRecord { signatures: vec![key.sign(&subject, "alice", false, 5).unwrap()], ..grant };
    let text = serde_json::to_string(&signed).unwrap();
    assert_eq!(serde_json::from_str::<GrantRecord>(&text).unwrap(), signed);
}

/// Spends that answer with another grant than the one verified: what a database writer who swaps the grant's row
/// between the host's verification and its spend leaves the host to find.
struct SwappedOnSpend;

impl SwappedOnSpend {
    fn swapped(mut spent: SpentRecord) -> SpentRecord {
        spent.grant.approver = "mallory".to_owned();
        spent.grant.signatures.clear();
        spent
    }
}

impl LedgerHooks for SwappedOnSpend {
    fn spend(&self, inner: &dyn ApprovalLedger, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        LedgerReply::ready(inner.spend(attempt).wait().map(Self::swapped))
    }
    fn spend_and_reserve(
        &self,
        inner: &dyn ApprovalLedger,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        let answer = inner.spend_and_reserve(attempt, claim).wait().map(|reserved| {
            reserved.map(|mut reserved| {
                reserved.spent = Self::swapped(reserved.spent);
                reserved
            })
        });
        LedgerReply::ready(answer)
    }
}

/// The grant spent is not the one whose signatures were verified (its row swapped in between): the call is
/// refused and never runs, its effect key is left free for a properly approved call (not held until its
/// lease lapses and then blocked as ambiguous), and the audit log records what happened once each.
#[test]
fn a_grant_swapped_between_its_verification_and_its_spend_runs_nothing_and_holds_no_effect_key() {
    use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome};
    use agent_airlock::effect::EffectState;
    use agent_airlock::{Dispatcher, tool};
    use agent_airlock_tests::payments::{pay_call, pay_invoice};

    let ledger: Arc<dyn ApprovalLedger> =
        Arc::new(Wrapped { inner: Arc::new(MemoryLedger::new()), hooks: SwappedOnSpend });
    let host = Host::with(Arc::clone(&ledger));
    let (operators, keys) = operators(&["alice"]);
    let audit = Arc::new(AuditLog::in_memory(AuditConfig::default()));
    let dispatcher = Dispatcher::builder()
        .tool(tool!(pay_invoice))
        .interrupt_approvals(host.operator_mode(&operators))
        .clock(Arc::clone(&host.clock) as Arc<dyn agent_airlock::Clock>)
        .audit(Arc::clone(&audit))
        .build()
        .expect("one tool");
    let interrupt = match block_on(dispatcher.dispatch(pay_call("c1", "inv-1"), &context(host.log(), "c1", None))) {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("expected an interrupt, got {other:?}"),
    };
    let approvals = host.operator_mode(&operators);
    let resume = approvals.approve_signed(&interrupt, DecisionSigner::Operator(&keys[0])).wait().unwrap();
    let resumed = context(host.log(), "c1", Some(resume.into_value()));
    let message = block_on(dispatcher.dispatch(pay_call("c1", "inv-1"), &resumed)).expect_message();
    assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{:?}", message.content);
    assert!(message.content.contains("changed while it was being spent"), "{}", message.content);
    assert_eq!(host.executions(), 0, "the call never ran");

    let effect = ledger.effects().get("pay:inv-1").unwrap();
    assert!(
        effect.as_ref().is_none_or(|record| matches!(record.state, EffectState::Failed { .. })),
        "the key is free for a properly approved call: {effect:?}"
    );
    let records = audit.records(0, 100).unwrap();
    let outcomes: Vec<String> = records.iter().map(|r| r.outcome.to_string()).collect();
    // The spend landed with its record (the grant is spent); the refusal follows it, once.
    assert_eq!(outcomes, ["interrupted", "approved", "refused (approval_invalid)"], "{records:#?}");
    assert!(!records.iter().any(|r| r.outcome == AuditOutcome::Executed), "{outcomes:?}");
}

/// The database of a PostgreSQL host, for edits made behind the ledger's back.
fn database_of(url: &str) -> &str {
    url.split_whitespace().find_map(|part| part.strip_prefix("dbname=")).expect("a dbname in the URL")
}

/// What whoever can write the database does to undo a spend: every grant's row set back to live, and its
/// expiry pushed a century out (no signature covers either).
fn revive_every_grant(url: &str) {
    agent_airlock_tests::pg_server::shared().psql(
        database_of(url),
        r#"UPDATE airlock_grants SET entry = jsonb_set(jsonb_set(entry::jsonb, '{state}', '{"state": "live"}'),
                                                 '{grant,expires_at}', '4102444800000')::text"#,
    );
}

/// A spent grant's row set back to live in the database (and its expiry pushed out) does not run the approved
/// call again in the host that spent it, through the dispatcher or `admit`; in another host (a process that did
/// not spend it) the grant lives only until the expiry its operators signed, whatever expiry the row says.
#[test]
fn a_spent_grant_set_back_to_live_in_the_database_is_bounded_by_the_host_and_the_signatures() {
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let host = Host::with(Arc::new(PostgresLedger::connect(&url).unwrap()));
    let (operators, keys) = operators(&["alice"]);

    // The dispatcher (one process): the approved call runs once, and not again once the row is revived.
    let dispatcher = dispatcher_with(host.operator_mode(&operators), Arc::clone(&host.clock), Policy::new());
    let interrupt = match block_on(dispatcher.dispatch(refund_call(500), &context(host.log(), "c1", None))) {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("expected an interrupt, got {other:?}"),
    };
    let resume = host.operator_mode(&operators).approve_signed(&interrupt, DecisionSigner::Operator(&keys[0]));
    let resume = resume.wait().unwrap().into_value();
    let resumed = || context(host.log(), "c1", Some(resume.clone()));
    let message = block_on(dispatcher.dispatch(refund_call(500), &resumed())).expect_message();
    assert_eq!(message.status, Status::Success, "{message:?}");
    revive_every_grant(&url);
    let again = block_on(dispatcher.dispatch(refund_call(500), &resumed())).expect_message();
    assert_eq!(again.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{again:?}");
    assert_eq!(host.executions(), 1, "the approved call ran once");

    // `admit`, the same: one set of approvals (a process) admits the call once.
    let approvals = host.operator_mode(&operators);
    let call = OwnedCall::refund(7);
    let request = host.request(&call, 1);
    let granted = approvals.approve_signed(request.as_value(), DecisionSigner::Operator(&keys[0])).wait().unwrap();
    approvals.admit(&call.input(), granted.as_value()).wait().unwrap();
    revive_every_grant(&url);
    let replayed = approvals.admit(&call.input(), granted.as_value()).wait();
    assert!(matches!(replayed, Err(AdmitError::AlreadySpent { .. })), "{replayed:?}");

    // Another process does not know what this one spent: until the signed expiry it admits the revived grant
    // (the limit the README states), from then on not, whatever the row's expiry says.
    revive_every_grant(&url);
    host.clock.advance(GRANT_TTL - std::time::Duration::from_secs(1));
    host.operator_mode(&operators).admit(&call.input(), granted.as_value()).wait().expect("before the signed expiry");
    revive_every_grant(&url);
    host.clock.advance(std::time::Duration::from_secs(1));
    let late = host.operator_mode(&operators).admit(&call.input(), granted.as_value()).wait();
    assert!(matches!(late, Err(AdmitError::Expired { expired_at, .. }) if expired_at == START + GRANT_TTL), "{late:?}");
    let late = host.resume(&operators, resume).expect_message();
    assert_eq!(late.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{late:?}");
    assert_eq!(host.executions(), 1, "the approved call ran once");
}

/// Hosts that share an append-only audit file refuse a spent grant set back to live in the database: the file
/// records the first spend, and a database holder cannot take a record out of it. Another host on the file
/// refuses it, so does another dispatcher sharing the first host's log (with approvals of its own), and so does
/// the first host restarted; a host whose records go to a file of its own still admits it before the signed
/// expiry (the limit the README states).
#[test]
fn hosts_sharing_an_audit_file_refuse_a_spent_grant_revived_in_the_database() {
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let host = Host::with(Arc::new(PostgresLedger::connect(&url).unwrap()));
    let (operators, keys) = operators(&["alice"]);
    let shared = host.dir.path().join("audit.log");
    // A host: approvals of its own (what it spent, it remembers) and its own handle on an audit file.
    let on_log = |log: &Arc<AuditLog>| {
        dispatcher_audited(host.operator_mode(&operators), Arc::clone(&host.clock), Policy::new(), Arc::clone(log))
    };
    let start = |audit: &Path| on_log(&Arc::new(AuditLog::open_append_only(audit, AuditConfig::default()).unwrap()));
    let resumed = |dispatcher: &agent_airlock::Dispatcher, resume: &Value| {
        block_on(dispatcher.dispatch(refund_call(500), &context(host.log(), "c1", Some(resume.clone()))))
            .expect_message()
    };
    let first_log = Arc::new(AuditLog::open_append_only(&shared, AuditConfig::default()).unwrap());
    let first = on_log(&first_log);
    let interrupt = match block_on(first.dispatch(refund_call(500), &context(host.log(), "c1", None))) {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("expected an interrupt, got {other:?}"),
    };
    let resume = host.operator_mode(&operators).approve_signed(&interrupt, DecisionSigner::Operator(&keys[0]));
    let resume = resume.wait().unwrap().into_value();
    let ran = resumed(&first, &resume);
    assert_eq!(ran.status, Status::Success, "{ran:?}");

    // A dispatcher beside the first, on its log, with approvals of its own (which never spent the grant).
    revive_every_grant(&url);
    let sibling = on_log(&first_log);
    let refused = resumed(&sibling, &resume);
    assert_eq!(refused.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{refused:?}");
    assert_eq!(host.executions(), 1, "the approved call ran once");

    // Another host on the file.
    revive_every_grant(&url);
    let second = start(&shared);
    let refused = resumed(&second, &resume);
    let refusal = refused.refusal.as_ref().expect("refused");
    assert_eq!(refusal.kind, RefusalKind::ApprovalInvalid, "{refused:?}");
    assert!(refused.content.contains("already"), "{refused:?}");
    assert_eq!(host.executions(), 1, "the approved call ran once");

    // The first host restarted reads the spend back from the file.
    drop((first, second, sibling, first_log));
    revive_every_grant(&url);
    let restarted = start(&shared);
    let refused = resumed(&restarted, &resume);
    assert_eq!(refused.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{refused:?}");
    assert_eq!(host.executions(), 1, "the approved call ran once");

    // The file holds one chain: the spend that ran, the three refused spends' records, each refusal.
    drop(restarted);
    let log = AuditLog::read_append_only(&shared, AuditConfig::default()).unwrap();
    assert!(agent_airlock::audit::verify(&log, None).is_ok());
    let outcomes: Vec<String> = log.records(1, 100).unwrap().iter().map(|r| r.outcome.to_string()).collect();
    assert_eq!(outcomes.iter().filter(|o| *o == "approved").count(), 4, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| o.starts_with("refused")).count(), 3, "{outcomes:?}");

    // A host writing a file of its own does not see the spend: before the signed expiry it runs the call.
    revive_every_grant(&url);
    let elsewhere = start(&host.dir.path().join("another.log"));
    assert_eq!(resumed(&elsewhere, &resume).status, Status::Success);
    assert_eq!(host.executions(), 2, "the limit left: a host that shares neither the file nor the memory");
}

/// An operator's `airlock deny --audit-file` (a real process) of an approved, unspent grant records the
/// revocation in the hosts' append-only audit file before the ledger's denial, so it outlives the database:
/// with the grant's row set back to live, a host writing the file refuses it as revoked, and so does that host
/// restarted; a host writing its log elsewhere still runs it before the signed expiry (the limit the README
/// states). The CLI denies nothing when it cannot record the revocation first (a file that does not exist, a
/// signed file without its key), and records none for a request with no grant to revoke.
#[test]
fn an_operators_revocation_recorded_in_the_shared_audit_file_outlives_a_grant_revived_in_the_database() {
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let host = Host::with(Arc::new(PostgresLedger::connect(&url).unwrap()));
    let (operators, keys) = operators(&["alice"]);
    let dir = host.dir.path();
    keys[0].write_new(&dir.join("alice.key")).unwrap();
    std::fs::write(dir.join("approval.key"), agent_airlock_tests::ledger_fixtures::SECRET_HEX).unwrap();
    std::fs::write(dir.join("audit.key"), "ab".repeat(32)).unwrap();
    #[cfg(unix)]
    for file in ["approval.key", "audit.key"] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let signed = || AuditConfig {
        key: Some(agent_airlock::keys::AuditKey::new("audit-1", &[0xab; 32]).unwrap()),
        ..AuditConfig::default()
    };
    let shared = dir.join("audit.log");
    let start = |audit: &Path| {
        let log = Arc::new(AuditLog::open_append_only(audit, signed()).unwrap());
        dispatcher_audited(host.operator_mode(&operators), Arc::clone(&host.clock), Policy::new(), log)
    };
    let interrupt_of = |dispatcher: &agent_airlock::Dispatcher, thread: &str, amount: u64| match block_on(
        dispatcher.dispatch(refund_call(amount), &context(host.log(), thread, None)),
    ) {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("expected an interrupt, got {other:?}"),
    };
    let deny = |request_id: &str, audit: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_airlock_cli"))
            .args([
                "--db",
                &agent_airlock_tests::pg_server::as_url(&url),
                "deny",
                request_id,
                "--reason",
                "not this one",
            ])
            .arg("--signing-key")
            .arg(dir.join("alice.key"))
            .arg("--key-file")
            .arg(dir.join("approval.key"))
            .args(audit)
            .output()
            .expect("airlock runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if output.status.success() { Ok(()) } else { Err(stderr) }
    };
    let status = |request_id: &str| host.ledger.find_request(request_id).unwrap().unwrap().status;
    let records = || AuditLog::read_append_only(&shared, signed()).unwrap().records(1, 100).unwrap();

    let first = start(&shared);
    let interrupt = interrupt_of(&first, "c1", 500);
    let request_id = interrupt["airlock_approval"]["request_id"].as_str().unwrap().to_owned();
    let resume = host.operator_mode(&operators).approve_signed(&interrupt, DecisionSigner::Operator(&keys[0]));
    let resume = resume.wait().unwrap().into_value();
    let grant_id = resume["airlock_grant"]["grant_id"].as_str().unwrap().to_owned();
    let written = records().len();

    // Refused before anything is written: the file must exist, and a signed file needs its key.
    let missing = dir.join("typo.log");
    let refused = deny(&request_id, &["--audit-file", missing.to_str().unwrap()]).unwrap_err();
    assert!(refused.contains("does not exist") && refused.contains("nothing was denied"), "{refused}");
    let refused = deny(&request_id, &["--audit-file", shared.to_str().unwrap()]).unwrap_err();
    assert!(refused.contains("is signed (key `audit-1`)") && refused.contains("nothing was denied"), "{refused}");
    assert!(matches!(status(&request_id), RequestStatus::Granted(_)), "nothing was denied");
    assert_eq!(records().len(), written, "nothing was recorded");

    let audit_key = dir.join("audit.key");
    let with_key = ["--audit-file", shared.to_str().unwrap(), "--audit-key-file", audit_key.to_str().unwrap()];
    // The database's holder shows another request's grant as this one's: nothing is recorded, nothing denied.
    let other = interrupt_of(&first, "c3", 700);
    let other_id = other["airlock_approval"]["request_id"].as_str().unwrap();
    agent_airlock_tests::pg_server::shared().psql(
        database_of(&url),
        &format!(
            "UPDATE airlock_requests SET status = (SELECT status FROM airlock_requests WHERE request_id = '{request_id}') \
             WHERE request_id = '{other_id}'"
        ),
    );
    let refused = deny(other_id, &with_key).unwrap_err();
    assert!(refused.contains("is not that request's") && refused.contains("nothing was denied"), "{refused}");
    assert_eq!(records().len(), written + 1, "nothing recorded (one record: the interrupt of the other call)");
    assert!(matches!(status(&request_id), RequestStatus::Granted(_)), "nothing was denied");
    let written = records().len();

    deny(&request_id, &with_key).expect("the operator denies");
    match status(&request_id) {
        RequestStatus::Denied(denial) => assert_eq!(denial.revoked_grant.as_deref(), Some(grant_id.as_str())),
        other => panic!("expected a denial, got {other:?}"),
    }
    let recorded = records();
    assert_eq!(recorded.len(), written + 1, "one record: the revocation");
    let revocation = recorded.last().unwrap();
    assert_eq!(revocation.outcome.to_string(), "refused (human_denied)");
    assert_eq!(revocation.detail.as_deref(), Some(format!("grant {grant_id} revoked by alice").as_str()));
    assert_eq!((revocation.tool.as_str(), revocation.tool_call_id.as_str()), ("refund", "call_1"));

    // The database's holder sets the grant back to live (again after each refused spend, which the ledger
    // records): the host refuses it as revoked, so do another host on the file and the first host restarted;
    // nothing ran.
    for dispatcher in [first, start(&shared), start(&shared)] {
        revive_every_grant(&url);
        let refused = block_on(dispatcher.dispatch(refund_call(500), &context(host.log(), "c1", Some(resume.clone()))))
            .expect_message();
        let refusal = refused.refusal.as_ref().expect("refused");
        assert_eq!(refusal.kind, RefusalKind::ApprovalInvalid, "{refused:?}");
        assert!(refused.content.contains("revoked"), "{refused:?}");
    }
    assert_eq!(host.executions(), 0, "the revoked call never ran");
    assert!(agent_airlock::audit::verify(&AuditLog::read_append_only(&shared, signed()).unwrap(), None).is_ok());

    // A pending request has no grant to revoke: denied, nothing recorded by the operator.
    let pending = interrupt_of(&start(&shared), "c2", 600);
    let pending_id = pending["airlock_approval"]["request_id"].as_str().unwrap();
    let before = records().len();
    deny(pending_id, &with_key).expect("the operator denies");
    assert!(matches!(status(pending_id), RequestStatus::Denied(_)));
    assert_eq!(records().len(), before);

    // The limit left: a host whose log is another file runs the revived grant before its signed expiry.
    revive_every_grant(&url);
    let elsewhere = start(&dir.join("another.log"));
    let ran = block_on(elsewhere.dispatch(refund_call(500), &context(host.log(), "c1", Some(resume))));
    assert_eq!(ran.expect_message().status, Status::Success);
    assert_eq!(host.executions(), 1);
}

/// The expiry an operator signs is the approving host's (its grant time-to-live): a host with a shorter one
/// admits the grant until then. A signed expiry edited in the database (to keep a grant alive) breaks its
/// signature, and the grant admits nothing.
#[test]
fn a_grant_lives_until_its_signed_expiry_and_an_edited_one_breaks_its_signature() {
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let host = Host::with(Arc::new(PostgresLedger::connect(&url).unwrap()));
    let (operators, keys) = operators(&["alice"]);
    let hour = std::time::Duration::from_secs(3600);
    let approving = InterruptApprovals::new(key_ring(), Arc::clone(&host.ledger), hour)
        .with_clock(Arc::clone(&host.clock))
        .with_operators(operators.clone());
    let (first, second) = (OwnedCall::refund(7), OwnedCall::refund(8));
    let (one, two) = (host.request(&first, 1), host.request(&second, 1));
    let granted_one = approving.approve_signed(one.as_value(), DecisionSigner::Operator(&keys[0])).wait().unwrap();
    let granted_two = approving.approve_signed(two.as_value(), DecisionSigner::Operator(&keys[0])).wait().unwrap();
    // The admitting host's own time-to-live is GRANT_TTL (shorter than the hour signed).
    host.clock.advance(GRANT_TTL * 2);
    host.operator_mode(&operators)
        .admit(&first.input(), granted_one.as_value())
        .wait()
        .expect("within the hour signed");

    agent_airlock_tests::pg_server::shared().psql(
        database_of(&url),
        r#"UPDATE airlock_grants SET entry = jsonb_set(entry::jsonb, '{grant,signatures,0,expires_at_ms}', '4102444800000')::text
           WHERE entry::jsonb -> 'state' ->> 'state' = 'live'"#,
    );
    let edited = host.operator_mode(&operators).admit(&second.input(), granted_two.as_value()).wait();
    assert!(matches!(edited, Err(AdmitError::UnsignedGrant { .. })), "{edited:?}");
}

/// A grant two operators approved from hosts with different time-to-lives lives until the expiry its last
/// approval signed (the grant's own), not the longest any of its signatures carries, whatever the row says.
#[test]
fn a_grant_approved_twice_lives_until_the_expiry_its_last_approval_signed() {
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let host = Host::with(Arc::new(PostgresLedger::connect(&url).unwrap()));
    let (operators, keys) = operators(&["alice", "bob"]);
    let for_an_hour =
        InterruptApprovals::new(key_ring(), Arc::clone(&host.ledger), std::time::Duration::from_secs(3600))
            .with_clock(Arc::clone(&host.clock))
            .with_operators(operators.clone());
    let call = OwnedCall::refund(9);
    let request = host.request(&call, 2);
    let first = for_an_hour.approve_signed(request.as_value(), DecisionSigner::Operator(&keys[0])).wait();
    assert!(matches!(first, Err(DecisionError::MoreApproversNeeded { .. })), "{first:?}");
    host.clock.advance(std::time::Duration::from_secs(100));
    let approvals = host.operator_mode(&operators);
    let granted = approvals.approve_signed(request.as_value(), DecisionSigner::Operator(&keys[1])).wait().unwrap();
    agent_airlock_tests::pg_server::shared().psql(
        database_of(&url),
        r#"UPDATE airlock_grants SET entry = jsonb_set(entry::jsonb, '{grant,expires_at}', '4102444800000')::text"#,
    );
    host.clock.advance(GRANT_TTL);
    let late = host.operator_mode(&operators).admit(&call.input(), granted.as_value()).wait();
    let expected = START + std::time::Duration::from_secs(100) + GRANT_TTL;
    assert!(matches!(late, Err(AdmitError::Expired { expired_at, .. }) if expired_at == expected), "{late:?}");
}
