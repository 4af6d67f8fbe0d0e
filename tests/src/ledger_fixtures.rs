//! Fixtures shared by the approval-ledger tests and the `ledger_worker` helper process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_airlock::effect::{EffectError, EffectStore};
use agent_airlock::ledger::{
    ApprovalLedger, Approved, DenialRecord, EffectClaim, GrantEntry, GrantRecord, LedgerError, LedgerReply,
    LedgerReplySender, PruneReport, RequestEntry, RequestRecord, SpendAttempt, SpendReserved, SpentRecord,
};
use agent_airlock::{
    ManualClock,
    approval::{Admission, AdmitError, BindingInput, InterruptApprovals, KeyRing},
    keys::ApprovalKey,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The test key's secret, as hex. Tests check that no error message ever contains it.
pub const SECRET_HEX: &str = "5f1c0e9a7b3d2c4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6";

/// The environment variable through which helper processes receive the key.
pub const KEY_ENV: &str = "AIRLOCK_TEST_APPROVAL_KEY";

/// The grant time-to-live the fixtures use.
pub const GRANT_TTL: Duration = Duration::from_secs(600);

/// A fixed start time, so runs are reproducible.
pub const START: Duration = Duration::from_secs(1_767_225_600);

/// A pending request `id` of the tool `refund` under the test key, bound to `b-<id>`, requested at [`START`], with
/// an empty interrupt value and no caller: what the ledger tests record, changed with `..request_record(id)`.
pub fn request_record(id: &str) -> RequestRecord {
    RequestRecord {
        request_id: id.into(),
        key_id: "k1".into(),
        tool: "refund".into(),
        rule: "attribute".into(),
        reason: "r".into(),
        binding: format!("b-{id}"),
        requested_at: START,
        interrupt: json!({}),
        caller: None,
    }
}

/// The test key, id `k1`.
pub fn key() -> ApprovalKey {
    ApprovalKey::from_hex("k1", SECRET_HEX).expect("the test key is valid")
}

/// A key ring holding only the test key.
pub fn key_ring() -> KeyRing {
    KeyRing::new(key())
}

/// Approvals over `ledger` with the test key ring and `clock`.
pub fn approvals(ledger: Arc<dyn ApprovalLedger>, clock: Arc<ManualClock>) -> InterruptApprovals {
    InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(clock)
}

/// A call as the dispatcher would see it, owned so it can be stored and sent to another process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnedCall {
    /// The thread.
    pub thread_id: String,
    /// The checkpoint namespace.
    pub checkpoint_ns: String,
    /// The checkpoint map.
    pub checkpoint: BTreeMap<String, String>,
    /// The tool call id.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// The admitted arguments.
    pub arguments: Map<String, Value>,
}

impl OwnedCall {
    /// A refund of `amount` cents at checkpoint `c1` of thread `t1`.
    pub fn refund(amount: u64) -> Self {
        let arguments = json!({"payment_id": "pi_1", "amount": amount});
        OwnedCall {
            thread_id: "t1".into(),
            checkpoint_ns: String::new(),
            checkpoint: [(String::new(), "c1".to_owned())].into(),
            tool_call_id: "call_1".into(),
            tool: "refund".into(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
        }
    }

    /// The same call under another tool name.
    pub fn with_tool(mut self, tool: &str) -> Self {
        self.tool = tool.into();
        self
    }

    /// The same call at another checkpoint id.
    pub fn with_checkpoint(mut self, id: &str) -> Self {
        self.checkpoint.insert(String::new(), id.into());
        self
    }

    /// The same call with another tool call id.
    pub fn with_tool_call_id(mut self, id: &str) -> Self {
        self.tool_call_id = id.into();
        self
    }

    /// What the binding covers.
    pub fn input(&self) -> BindingInput<'_> {
        BindingInput {
            thread_id: &self.thread_id,
            checkpoint_ns: &self.checkpoint_ns,
            checkpoint: &self.checkpoint,
            tool_call_id: &self.tool_call_id,
            tool: &self.tool,
            arguments: &self.arguments,
        }
    }
}

/// One word per admission outcome, as helper processes print it.
pub fn outcome_word(result: &Result<Admission, AdmitError>) -> &'static str {
    match result {
        Ok(_) => "admitted",
        Err(AdmitError::AlreadySpent { .. }) => "already_spent",
        Err(AdmitError::InvalidToken) => "invalid_token",
        Err(AdmitError::DifferentCall { .. }) => "different_call",
        Err(AdmitError::Expired { .. }) => "expired",
        Err(AdmitError::UnknownGrant { .. }) => "unknown_grant",
        Err(AdmitError::Ledger(_)) => "ledger_error",
        Err(_) => "refused",
    }
}

/// What a test's ledger changes of the ledger it wraps ([`Wrapped`]): each hook is one of the ledger's writes or
/// reads, given the wrapped ledger, and passes the call on unchanged unless the test overrides it.
pub trait LedgerHooks: Send + Sync + 'static {
    /// [`ApprovalLedger::record_request`].
    fn record_request(
        &self,
        inner: &dyn ApprovalLedger,
        request: RequestRecord,
        max_pending: Option<u32>,
    ) -> LedgerReply<()> {
        inner.record_request(request, max_pending)
    }
    /// [`ApprovalLedger::grant`].
    fn grant(&self, inner: &dyn ApprovalLedger, grant: GrantRecord, now: Duration) -> LedgerReply<Approved> {
        inner.grant(grant, now)
    }
    /// [`ApprovalLedger::deny`].
    fn deny(&self, inner: &dyn ApprovalLedger, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        inner.deny(denial)
    }
    /// [`ApprovalLedger::spend`].
    fn spend(&self, inner: &dyn ApprovalLedger, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        inner.spend(attempt)
    }
    /// [`ApprovalLedger::spend_and_reserve`].
    fn spend_and_reserve(
        &self,
        inner: &dyn ApprovalLedger,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        inner.spend_and_reserve(attempt, claim)
    }
    /// [`ApprovalLedger::find_request`].
    fn find_request(&self, inner: &dyn ApprovalLedger, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        inner.find_request(request_id)
    }
}

/// A ledger that passes every call to `inner`, the writes and reads of [`LedgerHooks`] through `hooks`: a test's
/// ledger that fails, holds or changes some of them (a storage fault, a reply lost in flight, a row swapped by
/// whoever holds the database) on a real ledger.
pub struct Wrapped<H> {
    /// The real ledger.
    pub inner: Arc<dyn ApprovalLedger>,
    /// What the test changes.
    pub hooks: H,
}

impl<H: LedgerHooks> ApprovalLedger for Wrapped<H> {
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()> {
        self.hooks.record_request(&*self.inner, request, max_pending)
    }
    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<Approved> {
        self.hooks.grant(&*self.inner, grant, now)
    }
    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        self.hooks.deny(&*self.inner, denial)
    }
    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        self.hooks.spend(&*self.inner, attempt)
    }
    fn spend_and_reserve(
        &self,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        self.hooks.spend_and_reserve(&*self.inner, attempt, claim)
    }
    fn effects(&self) -> Arc<dyn EffectStore> {
        self.inner.effects()
    }
    fn find_request(&self, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        self.hooks.find_request(&*self.inner, request_id)
    }
    fn list_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        self.inner.list_requests()
    }
    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        self.inner.find_grant(grant_id)
    }
    fn prune(&self, cutoff: Duration, now: Duration) -> LedgerReply<PruneReport> {
        self.inner.prune(cutoff, now)
    }
}

/// Faults a test's ledger injects ([`LedgerHooks`]): request writes whose answer is held back once they are
/// durable (a client cancelling while its request is written, a reply lost in flight), and denials that fail
/// as a storage fault would.
#[derive(Default)]
pub struct Faults {
    /// Hold back the answer to every request write.
    pub hold_records: bool,
    /// The answers held back.
    pub held: Mutex<Vec<LedgerReplySender<()>>>,
    /// How many of the next denials fail.
    pub failing_denials: AtomicU32,
    /// How many denials were tried.
    pub denials_tried: AtomicU32,
}

impl LedgerHooks for Faults {
    fn record_request(
        &self,
        inner: &dyn ApprovalLedger,
        request: RequestRecord,
        max_pending: Option<u32>,
    ) -> LedgerReply<()> {
        let recorded = inner.record_request(request, max_pending);
        if !self.hold_records {
            return recorded;
        }
        // Durable before the caller hears of it, as with a reply lost in flight.
        recorded.wait().expect("the request is recorded");
        let (sender, reply) = LedgerReply::channel();
        self.held.lock().unwrap_or_else(PoisonError::into_inner).push(sender);
        reply
    }
    fn deny(&self, inner: &dyn ApprovalLedger, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        self.denials_tried.fetch_add(1, Ordering::SeqCst);
        let failing = self.failing_denials.load(Ordering::SeqCst);
        if failing > 0 {
            self.failing_denials.store(failing - 1, Ordering::SeqCst);
            return LedgerReply::ready(Err(LedgerError::Storage(Arc::new(std::io::Error::other("disk unplugged")))));
        }
        inner.deny(denial)
    }
}
