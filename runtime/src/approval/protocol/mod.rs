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

mod admit;
mod closing;
mod decide;
mod error;
mod key_ring;
mod mac;
mod message;
mod request;
mod revocation;
mod sealed_arguments;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

pub(crate) use self::admit::{PreparedAdmission, REMEMBER_AT_MOST};
#[cfg(feature = "mcp")]
pub(crate) use self::closing::CLOSED_BY;
pub(crate) use self::closing::IssuedRequest;
pub use self::error::{AdmitError, BindingField, DecisionError, RequestError, ShowError};
pub use self::key_ring::{KeyLookupError, KeyRing, RetiredKeys};
pub use self::mac::{Binding, BindingInput};
use self::message::RequestBody;
pub use self::message::{Admission, CallSite, InterruptRequest, ResumeValue};
use crate::approval::operators::{DecisionSignature, DecisionSubject, OperatorKey, Operators};
use crate::audit::AuditLog;
use crate::clock::{Clock, SystemClock};
use crate::ledger::ApprovalLedger;
pub use crate::store::closing::DEFAULT_CLOSING_PATIENCE;

/// The approval protocol: binds, seals and records requests, records decisions, admits resumed calls.
///
/// Cheap to clone (shared ledger and clock). Each step that writes to the ledger answers a [`Reply`](crate::store::Reply): await
/// it from async code, or [`wait`](crate::store::Reply::wait) for it from a thread that may block (command-line tools).
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
    /// The grants spent through these approvals (and their clones) in this process.
    spent: Arc<admit::SpentGrants>,
    /// Where a denial records the grant it revokes before the ledger's write
    /// ([`with_revocation_log`](Self::with_revocation_log)).
    revocations: Option<Arc<AuditLog>>,
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

    /// Signs `subject` at `signed_at`; an approval's signature also covers when its grant `expires_at`.
    fn sign(
        &self,
        subject: &DecisionSubject<'_>,
        signed_at: Duration,
        expires_at: Option<Duration>,
    ) -> Result<DecisionSignature, DecisionError> {
        let (at, until) = (millis(signed_at), expires_at.map(millis));
        match self {
            DecisionSigner::Operator(key) => key.sign_until(subject, key.name(), false, at, until),
            DecisionSigner::Console { key, account } => key.sign_until(subject, account, true, at, until),
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
            spent: Arc::new(admit::SpentGrants::new(grant_ttl)),
            revocations: None,
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
