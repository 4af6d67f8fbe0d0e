//! Approvals across an interrupt: a host (graph runtime, MCP server, agent loop) pauses an escalated
//! call, a human decides, the host resumes, and the call runs only if the approval matches the call now
//! being made and has not been used before.
//!
//! 1. First pass: [`InterruptApprovals::request`] binds the call (thread, checkpoint, tool call id, tool,
//!    arguments) under the current key, seals the request, records it as pending in the ledger and
//!    returns the [`InterruptRequest`] whose JSON the interrupt carries. The exact arguments in it are
//!    encrypted under a key derived from the approval key, so the checkpoint and the ledger hold no
//!    plaintext arguments; the binding covers their digest. A call too long to show a human in full is
//!    refused here, before anything is recorded.
//! 2. A human: [`InterruptApprovals::approve`] checks the seal *first* (a request altered in storage is
//!    refused), opens the arguments and checks their digest, refuses a call that cannot be shown exactly
//!    and whole ([`InterruptRequest::render`], what every surface shows), records a grant with an expiry and returns the [`ResumeValue`] holding a token bound to the
//!    binding; [`InterruptApprovals::deny`] records a no.
//! 3. Resume: [`InterruptApprovals::admit`] derives the binding again *from the call now being made*,
//!    checks the token against it in constant time, and spends the grant in the ledger exactly once,
//!    durably, before answering. Any resume value other than a valid approval is a refusal.
//!
//! **At most once.** Admission spends the grant *before* the call runs. If the process dies after the
//! spend and before the call completes, the grant stays spent: the same resume value admits nothing on
//! restart, and a human must approve the call again. A call that was approved therefore runs at most
//! once, never twice; whether a call that was cut short had its effect is for effect records (and the
//! operator) to tell.
//!
//! **Keys.** The key ring lives outside the checkpoint store (the checkpoint is untrusted input). All MACs
//! of one approval use the key named in the request (`key_id`); new requests use the current key, and a
//! retired key's requests and grants are honoured or refused as the ring says.

mod closing;
mod error;
mod key_ring;
mod mac;
mod message;
mod sealed_arguments;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

#[cfg(feature = "mcp")]
pub(crate) use self::closing::CLOSED_BY;
pub(crate) use self::closing::IssuedRequest;
pub use self::error::{AdmitError, BindingField, DecisionError, RequestError, ShowError};
pub use self::key_ring::{KeyLookupError, KeyRing, RetiredKeys};
pub use self::mac::{Binding, BindingInput};
pub use self::message::{Admission, CallSite, InterruptRequest, ResumeValue};
use self::message::{
    DENIED_MEMBER, GRANT_MEMBER, REQUEST_MEMBER, REQUEST_VERSION, REQUEST_VERSION_MASKED, REQUEST_VERSION_UNMASKED,
    RequestBody,
};
use crate::approval::EscalationReason;
use crate::approval::display;
use crate::approval::operators::{DecisionKind, DecisionSignature, DecisionSubject, OperatorKey, Operators};
use crate::canonical;
use crate::clock::{Clock, SystemClock};
use crate::keys::{ApprovalKey, MAC_LEN, decode_lower_hex};
use crate::ledger::{
    ApprovalLedger, Approved, DenialRecord, GrantRecord, LedgerError, RequestRecord, RequestStatus, SpendAttempt,
    SpentRecord,
};
use crate::mask::{MaskSet, Masker};
use crate::store::Reply;
pub use crate::store::closing::DEFAULT_CLOSING_PATIENCE;

/// The approval protocol: binds, seals and records requests, records decisions, admits resumed calls.
///
/// Cheap to clone (shared ledger and clock). Each step that writes to the ledger answers a [`Reply`]: await
/// it from async code, or [`wait`](Reply::wait) for it from a thread that may block (command-line tools).
/// The write is sent when the step is called; dropping the reply does not cancel it.
#[derive(Clone)]
pub struct InterruptApprovals {
    keys: KeyRing,
    ledger: Arc<dyn ApprovalLedger>,
    clock: Arc<dyn Clock>,
    grant_ttl: Duration,
    request_ttl: Option<Duration>,
    max_pending: Option<u32>,
    closing_patience: Duration,
    operators: Option<Arc<Operators>>,
}

/// Who signs a decision: an operator with their own key, or a console with its key, for the operator
/// signed in to it.
#[derive(Debug, Clone, Copy)]
pub enum DecisionSigner<'a> {
    /// An operator's own key; the decision is recorded under the key's name.
    Operator(&'a OperatorKey),
    /// A console's key (listed with `role = "console"`), attesting that `account` signed in to it and
    /// decided; the decision is recorded under `account`.
    Console {
        /// The console's key.
        key: &'a OperatorKey,
        /// The account that signed in.
        account: &'a str,
    },
}

impl DecisionSigner<'_> {
    fn name(&self) -> &str {
        match self {
            DecisionSigner::Operator(key) => key.name(),
            DecisionSigner::Console { account, .. } => account,
        }
    }

    fn sign(&self, subject: &DecisionSubject<'_>, signed_at: Duration) -> Result<DecisionSignature, DecisionError> {
        let at = millis(signed_at);
        match self {
            DecisionSigner::Operator(key) => key.sign(subject, key.name(), false, at),
            DecisionSigner::Console { key, account } => key.sign(subject, account, true, at),
        }
        .map_err(|err| DecisionError::Signing(err.to_string()))
    }
}

/// How many approval requests of one tool may wait for one caller (or in one thread, for a call naming no
/// caller) at a time, unless set ([`InterruptApprovals::with_max_pending`]).
pub const DEFAULT_MAX_PENDING: u32 = 4;

impl std::fmt::Debug for InterruptApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterruptApprovals")
            .field("keys", &self.keys)
            .field("grant_ttl", &self.grant_ttl)
            .field("request_ttl", &self.request_ttl)
            .field("max_pending", &self.max_pending)
            .field("operator_mode", &self.operators.is_some())
            .finish_non_exhaustive()
    }
}

/// A resume value verified against the call now being made, not yet spent.
#[derive(Debug, Clone)]
pub(crate) struct PreparedAdmission {
    attempt: SpendAttempt,
    key_id: String,
    /// Operator mode: the grant whose signatures were verified; the spend must spend exactly it.
    verified: Option<Box<GrantRecord>>,
}

impl PreparedAdmission {
    /// The spend to write (the dispatcher writes it with the call's effect reservation and audit record).
    pub(crate) fn attempt(&self) -> &SpendAttempt {
        &self.attempt
    }

    /// What the ledger's answer to the spend means for the call.
    pub(crate) fn admitted(self, spent: Result<SpentRecord, LedgerError>) -> Result<Admission, AdmitError> {
        finish_admission(self, spent)
    }
}

impl InterruptApprovals {
    /// Approvals that MAC with `keys`, record in `ledger` (any [`ApprovalLedger`], e.g. `RedbLedger`,
    /// `Arc<MemoryLedger>` or an `Arc<dyn ApprovalLedger>`), and issue grants valid for `grant_ttl` after the
    /// approval. Time comes from the system clock; [`with_clock`](Self::with_clock) replaces it, and a
    /// dispatcher given a [`clock`](crate::DispatcherBuilder::clock) hands it to the approvals it holds.
    pub fn new(keys: KeyRing, ledger: impl ApprovalLedger, grant_ttl: Duration) -> Self {
        InterruptApprovals {
            keys,
            ledger: Arc::new(ledger),
            clock: Arc::new(SystemClock),
            grant_ttl,
            request_ttl: None,
            max_pending: Some(DEFAULT_MAX_PENDING),
            closing_patience: DEFAULT_CLOSING_PATIENCE,
            operators: None,
        }
    }

    /// Operator mode: a recorded decision counts only if it is signed by keys `operators` lists
    /// ([`crate::approval::operators`]). A grant admits a call only when as many distinct, listed,
    /// unrevoked credentials signed it as its request needs; the shared approval key alone, or write
    /// access to the ledger, no longer approves. Unsigned [`approve`](Self::approve) and
    /// [`deny`](Self::deny) are refused ([`DecisionError::SignatureRequired`]); sign with
    /// [`approve_signed`](Self::approve_signed) and [`deny_signed`](Self::deny_signed).
    pub fn with_operators(mut self, operators: Operators) -> Self {
        self.operators = Some(Arc::new(operators));
        self
    }

    /// The operators file this host checks decisions against, in operator mode.
    pub fn operators(&self) -> Option<&Operators> {
        self.operators.as_deref()
    }

    /// The clock requests, grants and spends are dated by (tests use a [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    pub(crate) fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// At most `max` requests of one tool may be pending (undecided, unexpired) for one caller, or in one
    /// thread when the call names no caller ([`DEFAULT_MAX_PENDING`] unless set; `None`: no limit): a caller
    /// the host authenticated ([`CallContext::with_caller`](crate::CallContext::with_caller)) does not get a
    /// fresh count by opening another thread or MCP session. The dispatcher passes the call's caller; the
    /// `request*` methods here name none, so they count per thread. A model calling in a loop then gets refusals
    /// that say when to retry, not a stored request (and a human's prompt) per call. Counted and recorded
    /// in one ledger write, so racing calls cannot overshoot. With a request time-to-live
    /// ([`with_request_ttl`](Self::with_request_ttl)), expired requests stop counting.
    pub fn with_max_pending(mut self, max: Option<u32>) -> Self {
        self.max_pending = max;
        self
    }

    /// Requests older than `ttl` can no longer be approved (they can still be denied).
    pub fn with_request_ttl(mut self, ttl: Duration) -> Self {
        self.request_ttl = Some(ttl);
        self
    }

    /// The key ring.
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// The ledger, e.g. to list requests for an operator.
    pub fn ledger(&self) -> &Arc<dyn ApprovalLedger> {
        &self.ledger
    }

    /// How long a grant stays valid after the approval.
    pub fn grant_ttl(&self) -> Duration {
        self.grant_ttl
    }

    // ---- 1. request ----

    /// Issues a sealed request for `call`, recorded as pending, needing one approver. `rule` and `reason`
    /// say why approval is needed (e.g. `attribute` and the tool author's `escalate` text). The exact
    /// arguments are stored encrypted ([`InterruptRequest`]); a call too long to show a human in full is
    /// refused ([`RequestError::CannotShow`]) and nothing is recorded.
    pub fn request(&self, call: &BindingInput<'_>, rule: &str, reason: &str) -> Reply<InterruptRequest, RequestError> {
        self.request_approved_by(call, rule, reason, 1)
    }

    /// [`InterruptApprovals::request`] for a call that `approvals` distinct approvers must approve before
    /// the grant is issued (a policy's `approvals = N`; 0 counts as 1). It is sealed into the request, so
    /// nobody can lower it.
    ///
    /// The interrupt value the host checkpoints and the ledger's record hold the exact arguments only
    /// encrypted; the binding covers them (through their digest, `arguments_sha256`), so the resumed call
    /// must carry exactly them, and a human is shown exactly them ([`InterruptRequest::render`]).
    pub fn request_approved_by(
        &self,
        call: &BindingInput<'_>,
        rule: &str,
        reason: &str,
        approvals: u32,
    ) -> Reply<InterruptRequest, RequestError> {
        match self.prepare_request(call, None, rule, reason, approvals) {
            Ok((request, record)) => self
                .ledger
                .record_request(record, self.max_pending)
                .then(move |recorded| recorded.map(|()| request).map_err(RequestError::Ledger), request_writer_stopped),
            Err(error) => Reply::ready_or(Err(error), request_writer_stopped),
        }
    }

    /// [`InterruptApprovals::request_approved_by`]; `masker` and `mask` are ignored. Requests used to store
    /// their arguments masked, which showed the approver something other than what the grant covers; they
    /// now store the exact arguments encrypted.
    #[deprecated(note = "use `request_approved_by`: a request no longer stores masked arguments")]
    pub fn request_masked(
        &self,
        call: &BindingInput<'_>,
        rule: &str,
        reason: &str,
        _masker: &Masker,
        _mask: MaskSet,
        approvals: u32,
    ) -> Reply<InterruptRequest, RequestError> {
        self.request_approved_by(call, rule, reason, approvals)
    }

    /// [`InterruptApprovals::request_approved_by`] for the dispatcher: with the guard that closes the request
    /// if the dispatch is dropped before the interrupt reaches the host, armed from before the write. The
    /// pending limit counts by `caller` when the call names one.
    pub(crate) async fn request_issued(
        &self,
        call: &BindingInput<'_>,
        caller: Option<&str>,
        rule: &str,
        reason: &str,
        approvals: u32,
    ) -> Result<(InterruptRequest, IssuedRequest), RequestError> {
        let (request, record) = self.prepare_request(call, caller, rule, reason, approvals)?;
        let issued = self.issued(request.request_id());
        match self.ledger.record_request(record, self.max_pending).await {
            Ok(()) => Ok((request, issued)),
            // The write may have happened: the guard closes what may be there.
            Err(error @ LedgerError::WriterStopped) => Err(RequestError::Ledger(error)),
            Err(error) => {
                issued.not_recorded();
                Err(RequestError::Ledger(error))
            }
        }
    }

    fn prepare_request(
        &self,
        call: &BindingInput<'_>,
        caller: Option<&str>,
        rule: &str,
        reason: &str,
        approvals: u32,
    ) -> Result<(InterruptRequest, RequestRecord), RequestError> {
        let key = self.keys.current();
        let exact = Value::Object(call.arguments.clone());
        // A human is never asked about what they cannot be shown whole: refuse before recording anything.
        let reasons = [EscalationReason { rule: rule.to_owned(), reason: reason.to_owned() }];
        display::render_call(call.tool, &reasons, &exact).map_err(RequestError::CannotShow)?;
        let plaintext = Zeroizing::new(canonical::to_canonical_vec(&exact).map_err(RequestError::Arguments)?);
        let arguments_digest: [u8; 32] = Sha256::digest(plaintext.as_slice()).into();
        let binding = mac::binding_of_digest(key, call, &arguments_digest);
        let request_id = random_id().map_err(RequestError::Randomness)?;
        let sealed = sealed_arguments::seal(key, &request_id, &plaintext).map_err(RequestError::Randomness)?;
        let now = self.clock.now();
        let body = RequestBody {
            version: REQUEST_VERSION,
            request_id,
            key_id: key.id().to_owned(),
            tool: call.tool.to_owned(),
            rule: rule.to_owned(),
            reason: reason.to_owned(),
            arguments: call.arguments.clone(),
            sealed_arguments: Some(sealed),
            arguments_sha256: Some(hex::encode(arguments_digest)),
            call: CallSite {
                thread_id: call.thread_id.to_owned(),
                checkpoint_ns: call.checkpoint_ns.to_owned(),
                checkpoint: call.checkpoint.clone(),
                tool_call_id: call.tool_call_id.to_owned(),
            },
            requested_at_ms: millis(now),
            expires_at_ms: self.request_ttl.map(|ttl| millis(now.saturating_add(ttl))),
            approvals: approvals.max(1),
            binding: binding.to_hex(),
            seal: String::new(),
        };
        let mut object = unsealed_object(&body);
        let canonical = canonical::to_canonical_vec(&Value::Object(object.clone())).map_err(RequestError::Arguments)?;
        let seal = hex::encode(mac::seal(key, &canonical));
        object.insert("seal".to_owned(), Value::String(seal.clone()));
        let body = RequestBody { seal, ..body };
        let value = json!({ REQUEST_MEMBER: Value::Object(object) });
        let record = RequestRecord {
            request_id: body.request_id.clone(),
            key_id: body.key_id.clone(),
            tool: body.tool.clone(),
            rule: body.rule.clone(),
            reason: body.reason.clone(),
            binding: body.binding.clone(),
            requested_at: now,
            interrupt: value.clone(),
            caller: caller.map(str::to_owned),
        };
        Ok((InterruptRequest { body, value }, record))
    }

    // ---- 2. decide ----

    /// Checks a stored interrupt value: its shape, its key, its seal (in constant time) and its binding.
    /// Touches no ledger; [`InterruptApprovals::approve`] and [`InterruptApprovals::deny`] start with it.
    pub fn verify_request(&self, interrupt: &Value) -> Result<InterruptRequest, DecisionError> {
        let Some(outer) = interrupt.as_object().filter(|outer| outer.len() == 1) else {
            return Err(DecisionError::NotARequest);
        };
        let Some(inner) = outer.get(REQUEST_MEMBER).and_then(Value::as_object) else {
            return Err(DecisionError::NotARequest);
        };
        let key_id = string_member(inner, "key_id")?;
        let key = self.keys.find(key_id).map_err(|err| match err {
            KeyLookupError::Retired { key_id } => DecisionError::RetiredKey { key_id },
            KeyLookupError::Unknown { key_id } => DecisionError::UnknownKey { key_id },
        })?;
        let seal = decode_lower_hex::<MAC_LEN>(string_member(inner, "seal")?).ok_or_else(|| {
            DecisionError::Malformed { detail: "`seal` is not 64 lowercase hex characters".to_owned() }
        })?;
        let mut unsealed = inner.clone();
        unsealed.remove("seal");
        let canonical = canonical::to_canonical_vec(&Value::Object(unsealed))
            .map_err(|err| DecisionError::Malformed { detail: err.to_string() })?;
        if !mac::verify_seal(key, &canonical, &seal) {
            return Err(DecisionError::SealMismatch);
        }
        // Sealed by this key: from here on the content is our own. Each version is read as its own layout,
        // never one as another.
        if let Some(version) = inner
            .get("version")
            .and_then(Value::as_u64)
            .filter(|v| ![REQUEST_VERSION, REQUEST_VERSION_MASKED, REQUEST_VERSION_UNMASKED].contains(v))
        {
            return Err(DecisionError::UnsupportedVersion { version });
        }
        let mut body: RequestBody = serde_json::from_value(Value::Object(inner.clone()))
            .map_err(|err| DecisionError::Malformed { detail: err.to_string() })?;
        let malformed = |detail: &str| DecisionError::Malformed { detail: detail.to_owned() };
        if body.version == REQUEST_VERSION {
            if inner.contains_key("arguments") {
                return Err(malformed("a version-3 request holds no plaintext `arguments`"));
            }
            let sealed = body.sealed_arguments.as_deref().ok_or_else(|| malformed("`sealed_arguments` is missing"))?;
            let plaintext =
                sealed_arguments::open(key, &body.request_id, sealed).map_err(|detail| malformed(&detail))?;
            body.arguments = serde_json::from_slice(&plaintext)
                .map_err(|_| malformed("`sealed_arguments` does not hold an object of arguments"))?;
        } else {
            if body.sealed_arguments.is_some() {
                return Err(malformed("only a version-3 request holds `sealed_arguments`"));
            }
            if !inner.contains_key("arguments") {
                return Err(malformed("`arguments` is missing"));
            }
        }
        let digest = body.arguments_digest().map_err(|detail| DecisionError::Malformed { detail })?;
        let binding = mac::binding_of_digest(key, &body.binding_input(), &digest);
        if binding.to_hex() != body.binding {
            return Err(DecisionError::InconsistentBinding);
        }
        Ok(InterruptRequest { body, value: interrupt.clone() })
    }

    /// Approves a request (given as the stored interrupt value): checks the seal first, records a grant
    /// valid for the grant time-to-live, and returns the resume value. Approving a request that holds a
    /// live grant returns that grant's resume value again (one approval, one grant), so a host that lost
    /// the resume value can recover it.
    ///
    /// In operator mode ([`with_operators`](Self::with_operators)) an unsigned approval is refused
    /// ([`DecisionError::SignatureRequired`]): use [`approve_signed`](Self::approve_signed).
    pub fn approve(&self, interrupt: &Value, approver: &str) -> Reply<ResumeValue, DecisionError> {
        let prepared = self.require_unsigned_allowed().and_then(|()| self.prepare_grant(interrupt, approver, None));
        self.record_grant(prepared)
    }

    /// [`approve`](Self::approve), signed by `signer`: the grant (or, for a request that needs several
    /// approvers, this approval) carries a [`DecisionSignature`] over the request id, its binding, the
    /// number of approvals it needs, the approver's name and the time, which a host in operator mode
    /// verifies before the grant admits anything.
    pub fn approve_signed(&self, interrupt: &Value, signer: DecisionSigner<'_>) -> Reply<ResumeValue, DecisionError> {
        let prepared = self.prepare_grant(interrupt, signer.name(), Some(signer));
        self.record_grant(prepared)
    }

    fn record_grant(
        &self,
        prepared: Result<(InterruptRequest, GrantRecord), DecisionError>,
    ) -> Reply<ResumeValue, DecisionError> {
        match prepared {
            Ok((request, grant)) => {
                let approvals = self.clone();
                self.ledger
                    .grant(grant, self.clock.now())
                    .then(move |granted| approvals.finish_grant(&request, granted), decision_writer_stopped)
            }
            Err(error) => Reply::ready_or(Err(error), decision_writer_stopped),
        }
    }

    fn require_unsigned_allowed(&self) -> Result<(), DecisionError> {
        match self.operators {
            Some(_) => Err(DecisionError::SignatureRequired),
            None => Ok(()),
        }
    }

    fn prepare_grant(
        &self,
        interrupt: &Value,
        approver: &str,
        signer: Option<DecisionSigner<'_>>,
    ) -> Result<(InterruptRequest, GrantRecord), DecisionError> {
        let request = self.verify_request(interrupt)?;
        if approver.trim().is_empty() {
            return Err(DecisionError::MissingDecider);
        }
        // What the approver could not have been shown exactly and whole, nobody approves.
        request.render().map_err(DecisionError::CannotShow)?;
        let now = self.clock.now();
        if let Some(expires_at) = request.expires_at()
            && now >= expires_at
        {
            return Err(DecisionError::RequestExpired { expired_at: expires_at });
        }
        let subject = DecisionSubject {
            kind: DecisionKind::Grant,
            request_id: &request.body.request_id,
            binding: &request.body.binding,
            approvals: request.body.approvals,
        };
        let signatures = match signer {
            Some(signer) => vec![signer.sign(&subject, now)?],
            None => Vec::new(),
        };
        let grant = GrantRecord {
            grant_id: random_id().map_err(DecisionError::Randomness)?,
            request_id: request.body.request_id.clone(),
            key_id: request.body.key_id.clone(),
            binding: request.body.binding.clone(),
            approver: approver.to_owned(),
            co_approvers: Vec::new(),
            signatures,
            granted_at: now,
            expires_at: now.saturating_add(self.grant_ttl),
        };
        Ok((request, grant))
    }

    fn finish_grant(
        &self,
        request: &InterruptRequest,
        granted: Result<Approved, LedgerError>,
    ) -> Result<ResumeValue, DecisionError> {
        let grant = match granted.map_err(decision_ledger_error)? {
            Approved::Granted(grant) => grant,
            Approved::Waiting { approvers, required } => {
                return Err(DecisionError::MoreApproversNeeded { approvers, required });
            }
        };
        // Operator mode: the host mints a token only for a grant enough listed operators signed.
        if let Err(detail) = self.verify_grant_signatures(&grant, &request.body.binding, request.body.approvals) {
            tracing::warn!(
                target: "agent_airlock", request_id = %grant.request_id, grant_id = %grant.grant_id, %detail,
                "a recorded approval is not signed by enough operators; it admits nothing"
            );
            return Err(DecisionError::UnsignedGrant { grant_id: grant.grant_id, detail });
        }
        let key = self.keys.find(&grant.key_id).map_err(|err| match err {
            KeyLookupError::Retired { key_id } => DecisionError::RetiredKey { key_id },
            KeyLookupError::Unknown { key_id } => DecisionError::UnknownKey { key_id },
        })?;
        let binding = decode_lower_hex::<MAC_LEN>(&request.body.binding)
            .map(Binding)
            .ok_or(DecisionError::InconsistentBinding)?;
        let token = hex::encode(mac::token(key, &binding, &grant.grant_id));
        Ok(ResumeValue(json!({
            GRANT_MEMBER: { "key_id": grant.key_id, "grant_id": grant.grant_id, "token": token }
        })))
    }

    /// Records a human's no (the seal is checked first). An unspent grant of the request is revoked.
    /// Returns the resume value that tells the call it was denied.
    pub fn deny(&self, interrupt: &Value, denied_by: &str, reason: Option<&str>) -> Reply<ResumeValue, DecisionError> {
        let denial = self.require_unsigned_allowed().and_then(|()| self.prepare_denial(interrupt, denied_by, reason));
        self.record_denial(denial)
    }

    /// [`deny`](Self::deny), signed by `signer` (recorded with the denial, so who denied is attributable).
    pub fn deny_signed(
        &self,
        interrupt: &Value,
        signer: DecisionSigner<'_>,
        reason: Option<&str>,
    ) -> Reply<ResumeValue, DecisionError> {
        self.record_denial(self.prepare_signed_denial(interrupt, signer, reason))
    }

    fn record_denial(&self, denial: Result<DenialRecord, DecisionError>) -> Reply<ResumeValue, DecisionError> {
        match denial {
            Ok(denial) => self.ledger.deny(denial).then(
                |denied| denied.map(|denied| denied_resume(&denied)).map_err(decision_ledger_error),
                decision_writer_stopped,
            ),
            Err(error) => Reply::ready_or(Err(error), decision_writer_stopped),
        }
    }

    fn prepare_signed_denial(
        &self,
        interrupt: &Value,
        signer: DecisionSigner<'_>,
        reason: Option<&str>,
    ) -> Result<DenialRecord, DecisionError> {
        let mut denial = self.prepare_denial(interrupt, signer.name(), reason)?;
        let request = self.verify_request(interrupt)?;
        let subject = DecisionSubject {
            kind: DecisionKind::Deny,
            request_id: &request.body.request_id,
            binding: &request.body.binding,
            approvals: request.body.approvals,
        };
        denial.signature = Some(signer.sign(&subject, denial.denied_at)?);
        Ok(denial)
    }

    fn prepare_denial(
        &self,
        interrupt: &Value,
        denied_by: &str,
        reason: Option<&str>,
    ) -> Result<DenialRecord, DecisionError> {
        let request = self.verify_request(interrupt)?;
        if denied_by.trim().is_empty() {
            return Err(DecisionError::MissingDecider);
        }
        Ok(DenialRecord {
            request_id: request.body.request_id,
            denied_by: denied_by.to_owned(),
            reason: reason.map(str::to_owned),
            denied_at: self.clock.now(),
            revoked_grant: None,
            signature: None,
        })
    }

    /// The decision recorded for a request (given as its interrupt value, seal checked first), by this
    /// process or another sharing the ledger (`airlock approve` or `airlock deny`): the resume value to
    /// resume its call with, or `None` while it waits (pending, or approved by fewer distinct approvers than
    /// it needs). Records nothing, so a host waiting for an
    /// operator polls with it; the grant's expiry and single use are checked when the call is admitted.
    /// Blocks the current thread on the ledger (from async code, call it in `spawn_blocking`).
    pub fn recorded_decision_blocking(&self, interrupt: &Value) -> Result<Option<ResumeValue>, DecisionError> {
        let request = self.verify_request(interrupt)?;
        let request_id = &request.body.request_id;
        let entry = self
            .ledger
            .find_request(request_id)
            .map_err(decision_ledger_error)?
            .ok_or_else(|| DecisionError::UnknownRequest { request_id: request_id.clone() })?;
        match entry.status {
            // Approved by fewer distinct approvers than it needs: still waiting.
            RequestStatus::Pending | RequestStatus::Approving { .. } => Ok(None),
            RequestStatus::Granted(grant) => {
                // A grant recorded for another request (or another binding) is never this call's.
                if grant.request_id != *request_id || grant.binding != request.body.binding {
                    return Err(DecisionError::InconsistentBinding);
                }
                self.finish_grant(&request, Ok(Approved::Granted(grant))).map(Some)
            }
            RequestStatus::Denied(denial) => {
                // A denial admits nothing, so one that is not signed still refuses the call (whoever can
                // write the ledger can deny service anyway); in operator mode it is reported.
                self.report_unsigned_denial(&denial, &request);
                Ok(Some(denied_resume(&denial)))
            }
            RequestStatus::Spent(spent) => {
                Err(DecisionError::AlreadySpent { grant_id: spent.grant.grant_id, spent_at: spent.spent_at })
            }
        }
    }

    /// Operator mode: a denial that is neither the host's own closing nor validly signed is reported.
    fn report_unsigned_denial(&self, denial: &DenialRecord, request: &InterruptRequest) {
        let Some(operators) = &self.operators else { return };
        if denial.denied_by == closing::CLOSED_BY && denial.signature.is_none() {
            return;
        }
        let subject = DecisionSubject {
            kind: DecisionKind::Deny,
            request_id: &request.body.request_id,
            binding: &request.body.binding,
            approvals: request.body.approvals,
        };
        let count = operators.count(denial.signature.as_slice(), &subject);
        if count.credentials == 0 {
            let detail = if count.problems.is_empty() { "unsigned".to_owned() } else { count.problems.join("; ") };
            tracing::warn!(
                target: "agent_airlock", request_id = %denial.request_id, %detail,
                "a recorded denial is not signed by a listed operator; the call is refused all the same"
            );
        }
    }

    /// Operator mode: whether `grant` is signed by as many distinct listed, unrevoked credentials as
    /// `approvals`, for the request and binding it names. Outside operator mode every grant passes.
    fn verify_grant_signatures(&self, grant: &GrantRecord, binding: &str, approvals: u32) -> Result<(), String> {
        let Some(operators) = &self.operators else { return Ok(()) };
        if grant.binding != binding {
            return Err("the grant names another binding".to_owned());
        }
        let subject = DecisionSubject { kind: DecisionKind::Grant, request_id: &grant.request_id, binding, approvals };
        let count = operators.count(&grant.signatures, &subject);
        let needed = approvals.max(1);
        if count.credentials >= needed {
            return Ok(());
        }
        let mut detail = format!("{} of {needed} distinct operator credential(s) signed it", count.credentials);
        if grant.signatures.is_empty() {
            detail.push_str(" (it carries no signature)");
        }
        for problem in count.problems {
            detail.push_str("; ");
            detail.push_str(&problem);
        }
        Err(detail)
    }

    /// Operator mode, before a spend: the grant the token names must be recorded for a request sealed
    /// under our key whose binding is this call's, and signed by enough operators. Returns that grant.
    fn verified_grant(&self, grant_id: &str, binding: &Binding) -> Result<Option<Box<GrantRecord>>, AdmitError> {
        if self.operators.is_none() {
            return Ok(None);
        }
        let unsigned = |detail: String| {
            tracing::warn!(
                target: "agent_airlock", %grant_id, %detail,
                "a resumed call's grant is not signed by enough operators; it admits nothing"
            );
            AdmitError::UnsignedGrant { grant_id: grant_id.to_owned(), detail }
        };
        let grant = match self.ledger.find_grant(grant_id) {
            Ok(Some(entry)) => entry.grant,
            Ok(None) => return Err(AdmitError::UnknownGrant { grant_id: grant_id.to_owned() }),
            Err(err) => return Err(AdmitError::Ledger(err)),
        };
        let entry = match self.ledger.find_request(&grant.request_id) {
            Ok(Some(entry)) => entry,
            Ok(None) => return Err(unsigned("the grant's request is not in the ledger".to_owned())),
            Err(err) => return Err(AdmitError::Ledger(err)),
        };
        // The number of approvals needed is read from the sealed request, never from the ledger's copy.
        let request = self
            .verify_request(&entry.request.interrupt)
            .map_err(|err| unsigned(format!("the grant's request does not verify: {err}")))?;
        let call_binding = binding.to_hex();
        if request.body.request_id != grant.request_id || request.body.binding != call_binding {
            return Err(unsigned("the grant's request is not this call's".to_owned()));
        }
        self.verify_grant_signatures(&grant, &call_binding, request.body.approvals).map_err(unsigned)?;
        Ok(Some(Box::new(grant)))
    }

    // ---- 3. admit ----

    /// Admits the call now being made if `resume` approves exactly this call and its grant is unspent
    /// and unexpired; the grant is spent (durably) before this returns `Ok`. Run the call only then.
    ///
    /// The spend is sent to the ledger when this is called; dropping the reply does not undo it: the grant
    /// may be spent without the call running (at most once, never twice).
    pub fn admit(&self, call: &BindingInput<'_>, resume: &Value) -> Reply<Admission, AdmitError> {
        match self.prepare_admission(call, resume) {
            Ok(prepared) => self
                .ledger
                .spend(prepared.attempt.clone())
                .then(move |spent| finish_admission(prepared, spent), admit_writer_stopped),
            Err(error) => Reply::ready_or(Err(error), admit_writer_stopped),
        }
    }

    /// Checks that `resume` approves exactly this call (token, key, binding) without spending anything:
    /// the dispatcher verifies first, runs every gate that can still refuse, and only then spends, so a
    /// later refusal leaves the grant live.
    pub(crate) fn verify_resume(
        &self,
        call: &BindingInput<'_>,
        resume: &Value,
    ) -> Result<PreparedAdmission, AdmitError> {
        self.prepare_admission(call, resume)
    }

    fn prepare_admission(&self, call: &BindingInput<'_>, resume: &Value) -> Result<PreparedAdmission, AdmitError> {
        let grant = match resume.as_object().filter(|outer| outer.len() == 1) {
            Some(outer) => {
                if let Some(grant) = outer.get(GRANT_MEMBER) {
                    grant.as_object().ok_or_else(|| malformed("`airlock_grant` is not an object"))?
                } else if let Some(denied) = outer.get(DENIED_MEMBER) {
                    return Err(self.recorded_denial(call, denied));
                } else {
                    return Err(AdmitError::NotAnApproval);
                }
            }
            None => return Err(AdmitError::NotAnApproval),
        };
        if let Some(unknown) = grant.keys().find(|k| !matches!(k.as_str(), "key_id" | "grant_id" | "token")) {
            return Err(malformed(&format!("unknown member `{unknown}`")));
        }
        let member = |name: &str| {
            grant
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(&format!("`{name}` is missing or not a string")))
        };
        let key_id = member("key_id")?;
        let grant_id = member("grant_id")?;
        if decode_lower_hex::<16>(grant_id).is_none() {
            return Err(malformed("`grant_id` is not 32 lowercase hex characters"));
        }
        let token = decode_lower_hex::<MAC_LEN>(member("token")?)
            .ok_or_else(|| malformed("`token` is not 64 lowercase hex characters"))?;
        let key = self.keys.find(key_id).map_err(|err| match err {
            KeyLookupError::Retired { key_id } => AdmitError::RetiredKey { key_id },
            KeyLookupError::Unknown { key_id } => AdmitError::UnknownKey { key_id },
        })?;
        let binding = mac::binding(key, call).map_err(AdmitError::Arguments)?;
        if !mac::verify_token(key, &binding, grant_id, &token) {
            return Err(self.diagnose_token(key, call, grant_id, &token));
        }
        // Operator mode: a token the shared key minted is not enough; the grant must be signed.
        let verified = self.verified_grant(grant_id, &binding)?;
        Ok(PreparedAdmission {
            attempt: SpendAttempt { grant_id: grant_id.to_owned(), binding: binding.to_hex(), now: self.clock.now() },
            key_id: key_id.to_owned(),
            verified,
        })
    }

    /// A resume value that says "denied" is believed only as far as the ledger backs it: the request it
    /// names must be denied there, and bound to the call now being made. The reason is the ledger's.
    fn recorded_denial(&self, call: &BindingInput<'_>, denied: &Value) -> AdmitError {
        let Some(request_id) = denied.get("request_id").and_then(Value::as_str) else {
            return AdmitError::UnverifiedDenial;
        };
        let entry = match self.ledger.find_request(request_id) {
            Ok(Some(entry)) => entry,
            Ok(None) => return AdmitError::UnverifiedDenial,
            Err(err) => return AdmitError::Ledger(err),
        };
        let RequestStatus::Denied(denial) = entry.status else {
            return AdmitError::UnverifiedDenial;
        };
        let Ok(key) = self.keys.find(&entry.request.key_id) else {
            return AdmitError::UnverifiedDenial;
        };
        match mac::binding(key, call) {
            Ok(binding) if binding.to_hex() == entry.request.binding => {
                AdmitError::Denied { request_id: Some(denial.request_id), reason: denial.reason }
            }
            _ => AdmitError::UnverifiedDenial,
        }
    }

    /// The token does not fit this call. Tell a genuine approval for another call (which fields differ)
    /// from a forged or altered token, using only what the ledger recorded.
    fn diagnose_token(&self, key: &ApprovalKey, call: &BindingInput<'_>, grant_id: &str, token: &[u8]) -> AdmitError {
        let grant = match self.ledger.find_grant(grant_id) {
            Ok(Some(entry)) => entry.grant,
            Ok(None) => return AdmitError::InvalidToken,
            Err(err) => return AdmitError::Ledger(err),
        };
        let Some(granted_binding) = decode_lower_hex::<MAC_LEN>(&grant.binding).map(Binding) else {
            return AdmitError::InvalidToken;
        };
        if grant.key_id != key.id() || !mac::verify_token(key, &granted_binding, grant_id, token) {
            return AdmitError::InvalidToken;
        }
        let differs = match self.ledger.find_request(&grant.request_id) {
            Ok(Some(entry)) => entry
                .request
                .interrupt
                .get(REQUEST_MEMBER)
                .and_then(|body| serde_json::from_value::<RequestBody>(body.clone()).ok())
                .map(|body| differing_fields(&body, call))
                .unwrap_or_default(),
            Ok(None) => Vec::new(),
            Err(err) => return AdmitError::Ledger(err),
        };
        AdmitError::DifferentCall { grant_id: grant_id.to_owned(), differs }
    }
}

fn differing_fields(approved: &RequestBody, call: &BindingInput<'_>) -> Vec<BindingField> {
    let mut differs = Vec::new();
    if approved.tool != call.tool {
        differs.push(BindingField::Tool);
    }
    let same_arguments = match (approved.arguments_digest(), canonical::canonical_object_sha256(call.arguments)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same_arguments {
        differs.push(BindingField::Arguments);
    }
    if approved.call.thread_id != call.thread_id {
        differs.push(BindingField::ThreadId);
    }
    if approved.call.checkpoint_ns != call.checkpoint_ns {
        differs.push(BindingField::CheckpointNs);
    }
    if &approved.call.checkpoint != call.checkpoint {
        differs.push(BindingField::Checkpoint);
    }
    if approved.call.tool_call_id != call.tool_call_id {
        differs.push(BindingField::ToolCallId);
    }
    differs
}

fn finish_admission(
    prepared: PreparedAdmission,
    spent: Result<SpentRecord, LedgerError>,
) -> Result<Admission, AdmitError> {
    let grant_id = prepared.attempt.grant_id;
    match spent {
        // The grant spent must be the one whose signatures were checked (not one swapped in since).
        Ok(spent) if prepared.verified.as_deref().is_some_and(|verified| *verified != spent.grant) => {
            tracing::warn!(target: "agent_airlock", %grant_id, "the grant spent differs from the one verified; the call is refused");
            Err(AdmitError::UnsignedGrant { grant_id, detail: "the grant changed while it was being spent".to_owned() })
        }
        Ok(spent) => Ok(Admission {
            request_id: spent.grant.request_id,
            grant_id: spent.grant.grant_id,
            key_id: prepared.key_id,
            approver: spent.grant.approver,
            granted_at: spent.grant.granted_at,
            spent_at: spent.spent_at,
        }),
        Err(LedgerError::AlreadySpent { grant_id, spent_at }) => Err(AdmitError::AlreadySpent { grant_id, spent_at }),
        Err(LedgerError::UnknownGrant { grant_id }) => Err(AdmitError::UnknownGrant { grant_id }),
        Err(LedgerError::GrantRevoked { grant_id }) => Err(AdmitError::Revoked { grant_id }),
        Err(LedgerError::GrantReplaced { grant_id, by_grant }) => Err(AdmitError::Replaced { grant_id, by_grant }),
        Err(LedgerError::GrantExpired { grant_id, expired_at }) => Err(AdmitError::Expired { grant_id, expired_at }),
        // The token matched the binding, so the ledger's binding differs only if the ledger is not the one
        // that recorded this grant's request.
        Err(LedgerError::BindingMismatch { .. }) => Err(AdmitError::DifferentCall { grant_id, differs: Vec::new() }),
        Err(other) => Err(AdmitError::Ledger(other)),
    }
}

/// What a reply of a request answers when polled again after its answer was taken.
fn request_writer_stopped() -> RequestError {
    RequestError::Ledger(LedgerError::WriterStopped)
}

/// What a reply of a decision answers when polled again after its answer was taken.
fn decision_writer_stopped() -> DecisionError {
    DecisionError::Ledger(LedgerError::WriterStopped)
}

/// What a reply of an admission answers when polled again after its answer was taken.
fn admit_writer_stopped() -> AdmitError {
    AdmitError::Ledger(LedgerError::WriterStopped)
}

fn decision_ledger_error(error: LedgerError) -> DecisionError {
    match error {
        LedgerError::UnknownRequest { request_id } => DecisionError::UnknownRequest { request_id },
        LedgerError::AlreadyDenied(denial) => {
            DecisionError::AlreadyDenied { request_id: denial.request_id, denied_by: denial.denied_by }
        }
        LedgerError::AlreadySpent { grant_id, spent_at } => DecisionError::AlreadySpent { grant_id, spent_at },
        other => DecisionError::Ledger(other),
    }
}

fn denied_resume(denial: &DenialRecord) -> ResumeValue {
    ResumeValue(json!({ DENIED_MEMBER: { "request_id": denial.request_id, "reason": denial.reason } }))
}

fn string_member<'a>(object: &'a Map<String, Value>, name: &str) -> Result<&'a str, DecisionError> {
    object
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| DecisionError::Malformed { detail: format!("`{name}` is missing or not a string") })
}

fn malformed(detail: &str) -> AdmitError {
    AdmitError::MalformedGrant { detail: detail.to_owned() }
}

/// The request's members, without `seal`: what the seal covers.
fn unsealed_object(body: &RequestBody) -> Map<String, Value> {
    let call = &body.call;
    let mut object = Map::new();
    object.insert("version".to_owned(), Value::from(body.version));
    object.insert("request_id".to_owned(), Value::from(body.request_id.as_str()));
    object.insert("key_id".to_owned(), Value::from(body.key_id.as_str()));
    object.insert("tool".to_owned(), Value::from(body.tool.as_str()));
    object.insert("rule".to_owned(), Value::from(body.rule.as_str()));
    object.insert("reason".to_owned(), Value::from(body.reason.as_str()));
    match &body.sealed_arguments {
        Some(sealed) => {
            object.insert("sealed_arguments".to_owned(), Value::from(sealed.as_str()));
        }
        None => {
            object.insert("arguments".to_owned(), Value::Object(body.arguments.clone()));
        }
    }
    if let Some(digest) = &body.arguments_sha256 {
        object.insert("arguments_sha256".to_owned(), Value::from(digest.as_str()));
    }
    let checkpoint: Map<String, Value> =
        call.checkpoint.iter().map(|(ns, id)| (ns.clone(), Value::from(id.as_str()))).collect();
    object.insert(
        "call".to_owned(),
        json!({
            "thread_id": call.thread_id,
            "checkpoint_ns": call.checkpoint_ns,
            "checkpoint": checkpoint,
            "tool_call_id": call.tool_call_id,
        }),
    );
    object.insert("requested_at_ms".to_owned(), Value::from(body.requested_at_ms));
    if let Some(expires_at_ms) = body.expires_at_ms {
        object.insert("expires_at_ms".to_owned(), Value::from(expires_at_ms));
    }
    // Sealed only when more than one approver is needed, so a request for one is sealed as before.
    if body.approvals > 1 {
        object.insert("approvals".to_owned(), Value::from(body.approvals));
    }
    object.insert("binding".to_owned(), Value::from(body.binding.as_str()));
    object
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// 128 random bits as 32 lowercase hex characters.
fn random_id() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| err.to_string())?;
    Ok(hex::encode(bytes))
}
