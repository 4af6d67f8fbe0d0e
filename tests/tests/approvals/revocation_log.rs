//! Denials and closings that record the grant they revoke in the hosts' append-only audit file before the
//! ledger's write (`InterruptApprovals::with_revocation_log`): on a real redb ledger and a real audit file,
//! the ledger wrapped to look at the file the moment each denial reaches it, and to issue a grant just before
//! (another approver's), fail it (a storage fault), or show a request another request's grant (the database
//! changed).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditLog, AuditRecord};
use agent_airlock::ledger::{
    ApprovalLedger, DenialRecord, GrantRecord, LedgerError, LedgerReply, RedbLedger, RequestEntry, RequestRecord,
    RequestStatus,
};
use agent_airlock::{
    Dispatcher, ManualClock, Outcome, Policy, RefusalKind,
    approval::{DecisionError, InterruptApprovals},
};
use agent_airlock_tests::ledger_fixtures::{Faults, GRANT_TTL, LedgerHooks, START, Wrapped, key_ring};
use agent_airlock_tests::payments::{ExecutionLog, context, dispatcher_audited, refund_call};
use agent_airlock_tests::{block_on, eventually};
use serde_json::Value;
use tempfile::TempDir;

/// What the tests change of a redb ledger (wrapped in [`Faults`] first, which hold request writes and fail
/// denials): its denials watched and interfered with.
struct Watching {
    file: PathBuf,
    /// The revocations in the audit file when each denial reached the ledger.
    seen_at_denial: Mutex<Vec<Vec<String>>>,
    /// Issue a grant for the request just before the next denial is written.
    grant_before_denial: AtomicBool,
    /// Run this just before the next denial is written (a host admitting the grant's call).
    before_denial: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Show the request's entry holding this status (another request's grant) at the next read.
    swapped: Mutex<Option<RequestStatus>>,
}

impl Watching {
    fn new(file: &Path) -> Self {
        Watching {
            file: file.to_owned(),
            seen_at_denial: Mutex::new(Vec::new()),
            grant_before_denial: AtomicBool::new(false),
            before_denial: Mutex::new(None),
            swapped: Mutex::new(None),
        }
    }
}

impl LedgerHooks for Watching {
    fn deny(&self, inner: &dyn ApprovalLedger, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        self.seen_at_denial.lock().unwrap().push(revocations(&self.file));
        if let Some(before) = self.before_denial.lock().unwrap().take() {
            before();
        }
        if self.grant_before_denial.swap(false, Ordering::SeqCst) {
            let entry = inner.find_request(&denial.request_id).unwrap().unwrap();
            inner.grant(late_grant(&entry.request), START).wait().expect("another approver's grant");
        }
        inner.deny(denial)
    }
    fn find_request(&self, inner: &dyn ApprovalLedger, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        let found = inner.find_request(request_id)?;
        Ok(found.map(|mut entry| {
            if let Some(status) = self.swapped.lock().unwrap().take() {
                entry.status = status;
            }
            entry
        }))
    }
}

const LATE_GRANT: &str = "0123456789abcdef0123456789abcdef";

/// Another approver's grant for `request`, recorded behind the deciding process's back.
fn late_grant(request: &RequestRecord) -> GrantRecord {
    GrantRecord {
        grant_id: LATE_GRANT.into(),
        request_id: request.request_id.clone(),
        key_id: request.key_id.clone(),
        binding: request.binding.clone(),
        approver: "carol".into(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at: START,
        expires_at: START + GRANT_TTL,
    }
}

fn records(file: &Path) -> Vec<AuditRecord> {
    AuditLog::read_append_only(file, AuditConfig::default()).unwrap().records(1, 1_000).unwrap()
}

/// The details of the file's revocation records, in order.
fn revocations(file: &Path) -> Vec<String> {
    records(file)
        .into_iter()
        .filter_map(|record| record.detail.filter(|detail| detail.contains(" revoked by ")))
        .collect()
}

struct Host {
    dir: TempDir,
    ledger: Arc<Wrapped<Watching>>,
    clock: Arc<ManualClock>,
    file: PathBuf,
    log: Arc<AuditLog>,
}

impl Host {
    fn new(configure: impl FnOnce(&mut Faults)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("audit.log");
        let log = Arc::new(AuditLog::open_append_only(&file, AuditConfig::default()).unwrap());
        let redb = Arc::new(RedbLedger::open(dir.path().join("ledger.redb")).unwrap());
        let mut faults = Faults::default();
        configure(&mut faults);
        let inner = Arc::new(Wrapped { inner: redb, hooks: faults });
        let ledger = Arc::new(Wrapped { inner, hooks: Watching::new(&file) });
        Host { dir, ledger, clock: Arc::new(ManualClock::new(START)), file, log }
    }

    /// The approvals of a host (or an operator's tool) recording revocations in the shared file.
    fn approvals(&self) -> InterruptApprovals {
        InterruptApprovals::new(key_ring(), Arc::clone(&self.ledger) as Arc<dyn ApprovalLedger>, GRANT_TTL)
            .with_clock(Arc::clone(&self.clock))
            .with_revocation_log(Arc::clone(&self.log))
    }

    /// Approvals whose revocation log is a handle that can only read the shared file: every record fails.
    fn approvals_that_cannot_record(&self) -> InterruptApprovals {
        let read_only = AuditLog::read_append_only(&self.file, AuditConfig::default()).unwrap();
        self.approvals().with_revocation_log(Arc::new(read_only))
    }

    /// A host writing the shared file.
    fn dispatcher(&self) -> Dispatcher {
        dispatcher_audited(self.approvals(), Arc::clone(&self.clock), Policy::new(), Arc::clone(&self.log))
    }

    fn executions(&self) -> ExecutionLog {
        ExecutionLog { path: self.dir.path().join("executions.log"), hang_after_start: false }
    }

    /// A refund escalated to a human: its interrupt value.
    fn interrupt(&self) -> Value {
        match block_on(self.dispatcher().dispatch(refund_call(500), &context(self.executions(), "c1", None))) {
            Outcome::Interrupt { request, .. } => request.into_value(),
            other => panic!("expected an interrupt, got {other:?}"),
        }
    }

    /// The interrupt, approved by alice: the interrupt and the grant's id.
    fn approved(&self) -> (Value, String) {
        let interrupt = self.interrupt();
        let resume = self.approvals().approve(&interrupt, "alice").wait().unwrap().into_value();
        (interrupt, resume["airlock_grant"]["grant_id"].as_str().unwrap().to_owned())
    }

    fn status(&self, interrupt: &Value) -> RequestStatus {
        let request_id = interrupt["airlock_approval"]["request_id"].as_str().unwrap();
        self.ledger.inner.find_request(request_id).unwrap().unwrap().status
    }
}

fn revoked_by(grant_id: &str, by: &str) -> String {
    format!("grant {grant_id} revoked by {by}")
}

#[test]
fn a_denial_records_the_grant_it_revokes_before_the_ledgers_write() {
    let host = Host::new(|_| {});
    let (interrupt, grant_id) = host.approved();
    let resume = host.approvals().deny(&interrupt, "bob", Some("not today")).wait().unwrap();
    assert!(!resume.is_approval());
    assert_eq!(
        *host.ledger.hooks.seen_at_denial.lock().unwrap(),
        vec![vec![revoked_by(&grant_id, "bob")]],
        "the revocation was in the file when the denial reached the ledger"
    );
    match host.status(&interrupt) {
        RequestStatus::Denied(denial) => assert_eq!(denial.revoked_grant.as_deref(), Some(grant_id.as_str())),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(revocations(&host.file), [revoked_by(&grant_id, "bob")], "recorded once");
    let revocation = records(&host.file).pop().unwrap();
    assert_eq!(revocation.outcome.to_string(), "refused (human_denied)");
    assert_eq!((revocation.tool.as_str(), revocation.tool_call_id.as_str()), ("refund", "call_1"));

    // A pending request has no grant to revoke: denied, nothing recorded.
    let pending = host.interrupt();
    host.approvals().deny(&pending, "bob", None).wait().unwrap();
    assert!(matches!(host.status(&pending), RequestStatus::Denied(_)));
    assert_eq!(revocations(&host.file).len(), 1);
    // An operator's name that would forge a record's look is escaped in the record.
    let (interrupt, grant_id) = host.approved();
    host.approvals().deny(&interrupt, "eve\u{202e}\nx", None).wait().unwrap();
    let last = revocations(&host.file).pop().unwrap();
    assert!(last.starts_with(&revoked_by(&grant_id, "eve")) && !last.contains('\n') && !last.contains('\u{202e}'));
    assert!(
        agent_airlock::audit::verify(&AuditLog::read_append_only(&host.file, AuditConfig::default()).unwrap(), None)
            .is_ok()
    );
}

#[test]
fn a_grant_issued_while_the_denial_is_on_its_way_is_recorded_after_it() {
    let host = Host::new(|_| {});
    let interrupt = host.interrupt();
    host.ledger.hooks.grant_before_denial.store(true, Ordering::SeqCst);
    // Pending when read: nothing to record first; carol's grant, issued before the denial lands, is revoked by it.
    block_on(host.approvals().deny(&interrupt, "bob", None)).unwrap();
    assert_eq!(*host.ledger.hooks.seen_at_denial.lock().unwrap(), vec![Vec::<String>::new()]);
    match host.status(&interrupt) {
        RequestStatus::Denied(denial) => assert_eq!(denial.revoked_grant.as_deref(), Some(LATE_GRANT)),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(revocations(&host.file), [revoked_by(LATE_GRANT, "bob")]);
}

#[test]
fn a_revocation_that_cannot_be_recorded_denies_nothing() {
    let host = Host::new(|_| {});
    let (interrupt, grant_id) = host.approved();
    let approvals = host.approvals_that_cannot_record();
    match approvals.deny(&interrupt, "bob", None).wait() {
        Err(error @ DecisionError::RevocationNotRecorded { .. }) => {
            let text = error.to_string();
            assert!(text.contains(&grant_id) && text.contains("nothing was denied"), "{text}");
        }
        other => panic!("expected the record to fail, got {other:?}"),
    }
    assert!(host.ledger.hooks.seen_at_denial.lock().unwrap().is_empty(), "the ledger was not asked");
    assert!(matches!(host.status(&interrupt), RequestStatus::Granted(_)), "nothing was denied");
    assert!(revocations(&host.file).is_empty());
}

#[test]
fn another_requests_grant_shown_for_this_request_records_and_denies_nothing() {
    let host = Host::new(|_| {});
    let (approved, _) = host.approved();
    let other = host.interrupt();
    *host.ledger.hooks.swapped.lock().unwrap() = Some(host.status(&approved));
    match host.approvals().deny(&other, "bob", None).wait() {
        Err(error @ DecisionError::ForeignGrant { .. }) => {
            let text = error.to_string();
            assert!(text.contains("is not that request's") && text.contains("nothing was denied"), "{text}");
        }
        other => panic!("expected the swapped grant to be refused, got {other:?}"),
    }
    assert!(host.ledger.hooks.seen_at_denial.lock().unwrap().is_empty());
    assert!(matches!(host.status(&other), RequestStatus::Pending));
    assert!(revocations(&host.file).is_empty());

    // The grant id is the database's: shown cut short and escaped, never echoed whole.
    let RequestStatus::Granted(mut forged) = host.status(&approved) else { panic!("granted") };
    forged.grant_id = format!("\u{202e}{}\n", "f".repeat(100_000));
    *host.ledger.hooks.swapped.lock().unwrap() = Some(RequestStatus::Granted(forged));
    let text = host.approvals().deny(&other, "bob", None).wait().unwrap_err().to_string();
    assert!(text.contains("is not that request's") && text.len() < 2_000, "{}", &text[..text.len().min(300)]);
    assert!(!text.contains('\u{202e}') && !text.contains('\n'), "{text}");
    assert!(matches!(host.status(&other), RequestStatus::Pending));
}

/// The denial fails after the revocation was recorded: the ledger still shows the grant live (as a row set
/// back to live would), and every host writing the file refuses it.
#[test]
fn a_grant_recorded_revoked_is_refused_by_the_hosts_even_if_the_denial_then_fails() {
    let host = Host::new(|faults| faults.failing_denials = AtomicU32::new(1));
    let (interrupt, grant_id) = host.approved();
    let resume = host.approvals().approve(&interrupt, "alice").wait().unwrap().into_value();
    match host.approvals().deny(&interrupt, "bob", None).wait() {
        Err(error @ DecisionError::RevokedNotDenied { .. }) => {
            let text = error.to_string();
            assert!(text.contains("disk unplugged") && text.contains("records grant"), "{text}");
        }
        other => panic!("expected the denial to fail, got {other:?}"),
    }
    assert!(matches!(host.status(&interrupt), RequestStatus::Granted(_)), "the ledger's denial failed");
    assert_eq!(revocations(&host.file), [revoked_by(&grant_id, "bob")]);
    let context = context(host.executions(), "c1", Some(resume));
    let refused = block_on(host.dispatcher().dispatch(refund_call(500), &context)).expect_message();
    assert_eq!(refused.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{refused:?}");
    assert!(refused.content.contains("revoked"), "{refused:?}");
    // Its admission spent the grant in the ledger before the file refused it: another host finds it spent.
    let again = block_on(host.dispatcher().dispatch(refund_call(500), &context)).expect_message();
    assert_eq!(again.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{again:?}");
    assert!(host.executions().lines().is_empty(), "the revoked call never ran");
}

/// The grant's call resumed on a host between the revocation's record and the ledger's denial: the host's
/// admission spends the grant in the ledger, then finds the revocation before its own record and refuses the
/// call; the denial then fails (the grant is spent), and says that the file records the grant revoked.
#[test]
fn a_call_resumed_between_the_revocations_record_and_the_denial_is_refused_and_the_denial_says_so() {
    let host = Host::new(|_| {});
    let (interrupt, grant_id) = host.approved();
    let resume = host.approvals().approve(&interrupt, "alice").wait().unwrap().into_value();
    let outcome = Arc::new(Mutex::new(None));
    let (dispatcher, context) = (host.dispatcher(), context(host.executions(), "c1", Some(resume)));
    let resumed = {
        let outcome = Arc::clone(&outcome);
        move || *outcome.lock().unwrap() = Some(block_on(dispatcher.dispatch(refund_call(500), &context)))
    };
    *host.ledger.hooks.before_denial.lock().unwrap() = Some(Box::new(resumed));
    match host.approvals().deny(&interrupt, "bob", None).wait() {
        Err(DecisionError::RevokedNotDenied { grant_id: recorded, source }) => {
            assert_eq!(recorded, grant_id);
            assert!(matches!(*source, DecisionError::AlreadySpent { .. }), "{source:?}");
        }
        other => panic!("expected the denial to find the grant spent, got {other:?}"),
    }
    let refused = outcome.lock().unwrap().take().expect("the call was resumed").expect_message();
    assert_eq!(refused.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{refused:?}");
    assert!(refused.content.contains("revoked"), "{refused:?}");
    assert!(host.executions().lines().is_empty(), "the call never ran");
    assert!(matches!(host.status(&interrupt), RequestStatus::Spent(_)), "the admission spent it in the ledger");
    assert_eq!(revocations(&host.file), [revoked_by(&grant_id, "bob")]);
}

/// The file is the check of a revived grant: an approved call whose admission cannot be recorded in it (here the
/// file was damaged behind the host's back, so every append fails) cannot be checked, and is refused; the grant
/// stays spent, the call never runs. Before, the call ran unchecked.
#[test]
fn an_approved_call_whose_admission_the_shared_file_cannot_record_is_refused() {
    let host = Host::new(|_| {});
    let (interrupt, grant_id) = host.approved();
    let resume = host.approvals().approve(&interrupt, "alice").wait().unwrap().into_value();
    let dispatcher = host.dispatcher();
    // Damage: the file's frames written again after it, the first with a byte changed (its checksum fails, and
    // it is not a write cut short: whole frames follow it).
    let mut bytes = std::fs::read(&host.file).unwrap();
    let mut frames = bytes[16..].to_vec();
    frames[20] ^= 1;
    bytes.extend_from_slice(&frames);
    std::fs::write(&host.file, &bytes).unwrap();

    let context = context(host.executions(), "c1", Some(resume));
    let refused = block_on(dispatcher.dispatch(refund_call(500), &context)).expect_message();
    assert_eq!(refused.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::ApprovalInvalid), "{refused:?}");
    assert!(refused.content.contains("could not be recorded in the audit file"), "{refused:?}");
    assert!(host.executions().lines().is_empty(), "the unchecked call never ran");
    match host.status(&interrupt) {
        RequestStatus::Spent(spent) => assert_eq!(spent.grant.grant_id, grant_id),
        other => panic!("the grant stays spent, got {other:?}"),
    }
}

#[test]
fn a_host_closing_a_request_records_the_grant_it_revokes_first() {
    let host = Host::new(|_| {});
    let (interrupt, grant_id) = host.approved();
    let closed = block_on(host.approvals().close(&interrupt, "agent-airlock", Some("closed: the client cancelled")));
    assert!(!closed.unwrap().is_approval());
    assert_eq!(*host.ledger.hooks.seen_at_denial.lock().unwrap(), vec![vec![revoked_by(&grant_id, "agent-airlock")]]);
    assert!(matches!(host.status(&interrupt), RequestStatus::Denied(_)));
    assert_eq!(revocations(&host.file).len(), 1);
}

/// A closing must land: one whose revocation cannot be recorded first (a handle that can only read the file)
/// closes the request all the same, and says that the grant it revoked is not recorded.
#[test]
fn a_closing_whose_revocation_cannot_be_recorded_closes_the_request_all_the_same() {
    let host = Host::new(|_| {});
    let (interrupt, grant_id) = host.approved();
    let approvals = host.approvals_that_cannot_record();
    match block_on(approvals.close(&interrupt, "agent-airlock", Some("closed: the client cancelled"))) {
        Err(DecisionError::DeniedRevocationNotRecorded { grant_id: revoked, .. }) => assert_eq!(revoked, grant_id),
        other => panic!("expected the closing to land and report the record, got {other:?}"),
    }
    match host.status(&interrupt) {
        RequestStatus::Denied(denial) => assert_eq!(denial.revoked_grant.as_deref(), Some(grant_id.as_str())),
        other => panic!("the request is closed, got {other:?}"),
    }
    assert!(revocations(&host.file).is_empty());
}

/// A dispatch dropped while its request is being written closes the request; a grant an operator issued in
/// that instant is revoked by the closing and recorded after it.
#[test]
fn a_dropped_dispatchs_closing_records_a_grant_issued_meanwhile() {
    let host = Host::new(|faults| faults.hold_records = true);
    let dispatcher = host.dispatcher();
    let context = context(host.executions(), "c1", None);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (approved, grant_issued) = tokio::sync::oneshot::channel::<String>();
    let (ledger, approvals) = (Arc::clone(&host.ledger), host.approvals());
    std::thread::spawn(move || {
        // The operator reads the request from the ledger and approves it while the host waits.
        let entry = loop {
            match ledger.inner.list_requests().unwrap().pop() {
                Some(entry) => break entry,
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let resume = approvals.approve(&entry.request.interrupt, "alice").wait().unwrap().into_value();
        let _ = approved.send(resume["airlock_grant"]["grant_id"].as_str().unwrap().to_owned());
    });
    // The dispatch waits for the held answer; once the grant is issued, the client cancels (it is dropped).
    let grant_id = runtime.block_on(async {
        tokio::select! {
            outcome = dispatcher.dispatch(refund_call(5_000), &context) => panic!("the dispatch waits: {outcome:?}"),
            grant_id = grant_issued => grant_id.expect("the operator approves"),
        }
    });
    let request_id = host.ledger.inner.list_requests().unwrap()[0].request.request_id.clone();
    let recorded = eventually(Duration::from_secs(30), || !revocations(&host.file).is_empty());
    assert!(recorded, "the revoked grant was recorded");
    assert_eq!(revocations(&host.file), [revoked_by(&grant_id, "agent-airlock")]);
    match host.ledger.inner.find_request(&request_id).unwrap().unwrap().status {
        RequestStatus::Denied(denial) => assert_eq!(denial.revoked_grant.as_deref(), Some(grant_id.as_str())),
        other => panic!("expected the closing's denial, got {other:?}"),
    }
}
