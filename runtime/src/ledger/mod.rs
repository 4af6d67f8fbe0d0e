//! The approval ledger: where requests, grants, denials and spends are recorded, so that one approval
//! runs one call, once.
//!
//! A request is `pending` until a human decides. Approving it issues one *grant* (with an expiry);
//! denying it records the denial (and revokes an unspent grant). Spending a grant is the step that lets
//! a call run: it succeeds exactly once, atomically, and is durable before the caller hears "spent".
//!
//! ```text
//!             grant            spend
//!  pending ───────────▶ granted ───────▶ spent
//!     │                  │   ▲ (expired, approved again: the old grant is replaced)
//!     │ deny             │ deny (revokes the grant)
//!     ▼                  ▼
//!   denied ◀─────────────┘
//! ```
//!
//! Two implementations enforce the same rules (they run one state machine, `transitions`):
//! [`RedbLedger`], the default, durable, one file; [`MemoryLedger`], for tests and hosts that accept
//! losing approvals on restart; and `PostgresLedger` (feature `postgres`), one database shared by
//! several hosts.
//!
//! The ledger is not the host's checkpoint store, and nothing in it comes from a checkpoint: the
//! checkpoint is untrusted input.
//!
//! **Retention.** [`ApprovalLedger::prune`] removes requests that were settled before a cutoff (spent,
//! denied, or granted with a grant that expired unspent) together with every grant issued for them, so
//! the file stops growing forever (`airlock prune --older-than 30d`). A pending request and a grant that
//! can still be spent are never removed. Pruning cannot make a replay succeed: a resume value names its
//! grant, and a grant the ledger does not know admits nothing ([`LedgerError::UnknownGrant`]); the
//! request is gone too, so its stored interrupt value cannot be approved again either
//! ([`LedgerError::UnknownRequest`]).

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod redb;
mod transitions;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::operators::DecisionSignature;
use crate::effect::{EffectError, EffectStore, Reservation};
use crate::store::{Fault, Reply, StoreError, StoreHandle};

pub use self::memory::MemoryLedger;
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresLedger;
pub use self::redb::RedbLedger;
pub(crate) use self::transitions::{LedgerTables, spend as spend_in, spend_and_reserve as spend_and_reserve_in};

/// The answer to a ledger write, available once the write is durable (or refused).
///
/// Await it from async code, or call [`wait`](Reply::wait) from a thread that may block. Dropping it does
/// not cancel the write: a write that was sent is applied (or refused) whether anyone listens or not.
pub type LedgerReply<T> = Reply<T, LedgerError>;

/// Fills in a [`LedgerReply`]. Dropping it unfilled answers [`LedgerError::WriterStopped`].
pub type LedgerReplySender<T> = crate::store::ReplySender<T, LedgerError>;

impl<T> Reply<T, LedgerError> {
    /// A reply that is already known (ledgers that answer synchronously).
    pub fn ready(result: Result<T, LedgerError>) -> Self {
        Reply::ready_or(result, || LedgerError::WriterStopped)
    }

    /// A reply to be filled in later by the returned sender. If the sender is dropped unfilled, the reply
    /// is [`LedgerError::WriterStopped`].
    pub fn channel() -> (LedgerReplySender<T>, LedgerReply<T>) {
        Reply::channel_or(|| LedgerError::WriterStopped)
    }
}

/// Stores approvals. Every write is atomic; [`ApprovalLedger::spend`] succeeds at most once per grant.
///
/// Writes answer through a [`LedgerReply`] (await it, or `wait()` for it), so a ledger may group
/// concurrent writes into shared commits. Reads answer directly.
pub trait ApprovalLedger: Send + Sync + 'static {
    /// Records a new pending request. Recording the same request again is a no-op; another request under
    /// an existing id is [`LedgerError::DuplicateRequest`].
    ///
    /// With `max_pending`, the request is refused ([`LedgerError::TooManyPending`]) if as many requests of
    /// the same tool and caller (without a caller, the same tool and thread) are already pending and unexpired
    /// ([`RequestRecord::pending_scope`]); the count and the insert are one atomic write, so racing recorders
    /// cannot overshoot.
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()>;

    /// Approves `grant`'s request, which must be pending (or granted under a grant that expired unspent,
    /// which `grant` replaces). If the request already holds a live grant, that grant is the answer:
    /// approving twice issues one grant.
    ///
    /// A request that needs several distinct approvers ([`RequestRecord::approvals_required`]) records
    /// each one's approval ([`RequestStatus::Approving`]) and answers [`Approved::Waiting`]; the approval
    /// of the last one needed issues the grant, naming the others in [`GrantRecord::co_approvers`]. An
    /// approver who already approved counts once.
    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<Approved>;

    /// Records a human's no. An unspent grant of the request is revoked. Denying a denied request answers
    /// the first denial.
    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord>;

    /// Spends a live, unexpired grant whose binding is `attempt.binding`, exactly once.
    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord>;

    /// Spends like [`spend`](Self::spend) and reserves `claim` in [`effects`](Self::effects) in the same
    /// atomic write: both happen or neither. The outer `Err` is the spend's refusal (nothing reserved); the
    /// inner `Err` is the reservation's refusal (the grant stays live).
    fn spend_and_reserve(
        &self,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>>;

    /// The effect records kept in this ledger's own storage, which [`spend_and_reserve`](Self::spend_and_reserve)
    /// writes together with the spend. A dispatcher with interrupt approvals settles effects there.
    fn effects(&self) -> Arc<dyn EffectStore>;

    /// One request and its status.
    fn find_request(&self, request_id: &str) -> Result<Option<RequestEntry>, LedgerError>;

    /// Every request and its status, oldest first.
    fn list_requests(&self) -> Result<Vec<RequestEntry>, LedgerError>;

    /// One grant and what became of it.
    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError>;

    /// Removes, in one atomic write, every request settled before `cutoff` and every grant issued for
    /// it: spent (by when it was spent), denied (by when it was denied), or granted under a grant that
    /// expired unspent (by when it expired, which must be before `now` too). Never a pending request, and
    /// never a request with a grant that could still be spent. Afterwards the removed ids are unknown: a
    /// removed grant admits nothing.
    fn prune(&self, cutoff: Duration, now: Duration) -> LedgerReply<PruneReport>;

    /// The durable store this ledger writes through, if a dispatcher can write a call's spend together
    /// with its effect step and audit record there (redb, PostgreSQL). Custom ledgers keep the default,
    /// `None`: a dispatcher then writes each part on its own.
    fn store_handle(&self) -> Option<StoreHandle> {
        None
    }
}

impl<L: ApprovalLedger + ?Sized> ApprovalLedger for Arc<L> {
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()> {
        (**self).record_request(request, max_pending)
    }
    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<Approved> {
        (**self).grant(grant, now)
    }
    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        (**self).deny(denial)
    }
    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        (**self).spend(attempt)
    }
    fn spend_and_reserve(
        &self,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        (**self).spend_and_reserve(attempt, claim)
    }
    fn effects(&self) -> Arc<dyn EffectStore> {
        (**self).effects()
    }
    fn find_request(&self, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        (**self).find_request(request_id)
    }
    fn list_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        (**self).list_requests()
    }
    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        (**self).find_grant(grant_id)
    }
    fn prune(&self, cutoff: Duration, now: Duration) -> LedgerReply<PruneReport> {
        (**self).prune(cutoff, now)
    }
    fn store_handle(&self) -> Option<StoreHandle> {
        (**self).store_handle()
    }
}

/// What [`ApprovalLedger::prune`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PruneReport {
    /// The requests removed (each with its status), in id order.
    pub requests: Vec<String>,
    /// The grants removed (spent, revoked, replaced or expired), in id order.
    pub grants: Vec<String>,
}

/// An effect key to reserve in the same write as a spend ([`ApprovalLedger::spend_and_reserve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectClaim {
    /// The rendered effect key.
    pub key: String,
    /// How long the reservation may run before a crash is presumed.
    pub lease: Duration,
}

/// A grant spent and an effect reserved by one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendReserved {
    /// The spend.
    pub spent: SpentRecord,
    /// The reservation, to settle after the tool ran.
    pub reservation: Reservation,
}

/// A request for approval, as issued (immutable once recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Random id, 32 lowercase hex characters.
    pub request_id: String,
    /// The key that bound and sealed it.
    pub key_id: String,
    /// The registered tool name.
    pub tool: String,
    /// The rule that asked for approval.
    pub rule: String,
    /// The reason given.
    pub reason: String,
    /// The binding, lowercase hex.
    pub binding: String,
    /// When it was issued.
    #[serde(with = "millis")]
    pub requested_at: Duration,
    /// The sealed interrupt value the host was given, `{"airlock_approval": {...}}`, arguments included.
    pub interrupt: Value,
    /// Who asked, as the host authenticated them ([`CallContext::with_caller`](crate::CallContext::with_caller)):
    /// the holder of a gateway's bearer token, an OAuth token's subject. When named, the pending limit counts
    /// this caller's requests across all their threads ([`pending_scope`](Self::pending_scope)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

impl RequestRecord {
    /// The thread the request's call belongs to, as sealed in its interrupt value (`""` for none).
    pub fn thread_id(&self) -> &str {
        self.interrupt["airlock_approval"]["call"]["thread_id"].as_str().unwrap_or("")
    }

    /// When the request stops being approvable, as sealed in its interrupt value (`None`: never).
    pub fn expires_at(&self) -> Option<Duration> {
        self.interrupt["airlock_approval"]["expires_at_ms"].as_u64().map(Duration::from_millis)
    }

    /// How many distinct approvers the request needs before a grant is issued, as sealed in its interrupt
    /// value (1 unless the policy asked for more).
    pub fn approvals_required(&self) -> u32 {
        self.interrupt["airlock_approval"]["approvals"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(1).max(1)
    }

    /// What pending requests are counted under for the pending limit: the tool and the caller when one is
    /// named, so a caller's new thread (a new MCP session) is no fresh budget; else the tool and the thread.
    pub fn pending_scope(&self) -> String {
        // NUL cannot occur in a tool name; the thread id, or the caller, comes last. NUL leads no thread id a
        // host uses (as for the per-caller rate buckets): a caller's scope is never a thread's.
        match &self.caller {
            Some(caller) => format!("{}\u{0}\u{0}caller\u{0}{caller}", self.tool),
            None => format!("{}\u{0}{}", self.tool, self.thread_id()),
        }
    }
}

/// One approval: permission to run the bound call once, before `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// Random id, 32 lowercase hex characters.
    pub grant_id: String,
    /// The request approved.
    pub request_id: String,
    /// The key of the request (and of the grant's token).
    pub key_id: String,
    /// The request's binding, lowercase hex.
    pub binding: String,
    /// Who approved (for a request that needed several approvers, the last of them).
    pub approver: String,
    /// The other distinct approvers of a request that needed several, in the order they approved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub co_approvers: Vec<String>,
    /// The approvers' signatures (operator mode: [`Operators`](crate::approval::operators::Operators)), in the
    /// order they approved; empty for unsigned approvals, which admit nothing in operator mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<DecisionSignature>,
    /// When.
    #[serde(with = "millis")]
    pub granted_at: Duration,
    /// The first instant at which the grant no longer admits.
    #[serde(with = "millis")]
    pub expires_at: Duration,
}

impl GrantRecord {
    /// Everyone who approved, in order: the co-approvers, then the approver.
    pub fn approvers(&self) -> Vec<&str> {
        self.co_approvers.iter().map(String::as_str).chain([self.approver.as_str()]).collect()
    }
}

/// One approver's yes to a request that needs several distinct approvers, before the last of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialApproval {
    /// Who approved.
    pub approver: String,
    /// When.
    #[serde(with = "millis")]
    pub approved_at: Duration,
    /// The approver's signature, if they signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<DecisionSignature>,
}

/// What an approval did ([`ApprovalLedger::grant`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approved {
    /// The request holds a live grant: this approval issued it (the last one needed), or the request held
    /// one already.
    Granted(GrantRecord),
    /// The approval is recorded, and the request needs more distinct approvers before a grant is issued.
    Waiting {
        /// Who approved so far, in order.
        approvers: Vec<String>,
        /// How many distinct approvers the request needs.
        required: u32,
    },
}

impl Approved {
    /// The grant, if the request holds one now.
    pub fn into_grant(self) -> Option<GrantRecord> {
        match self {
            Approved::Granted(grant) => Some(grant),
            Approved::Waiting { .. } => None,
        }
    }
}

/// A human's no.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenialRecord {
    /// The request denied.
    pub request_id: String,
    /// Who denied it.
    pub denied_by: String,
    /// Why, in their words.
    pub reason: Option<String>,
    /// When.
    #[serde(with = "millis")]
    pub denied_at: Duration,
    /// The unspent grant this denial revoked, if there was one (filled in by the ledger).
    pub revoked_grant: Option<String>,
    /// The denier's signature, if they signed (a denial by the host closing a request is unsigned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<DecisionSignature>,
}

/// A grant that was spent: its call was admitted to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpentRecord {
    /// The grant.
    pub grant: GrantRecord,
    /// When it was spent.
    #[serde(with = "millis")]
    pub spent_at: Duration,
}

/// An attempt to spend a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendAttempt {
    /// The grant.
    pub grant_id: String,
    /// The binding of the call being admitted, lowercase hex; must equal the grant's.
    pub binding: String,
    /// Now, for the expiry check.
    pub now: Duration,
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RequestStatus {
    /// Waiting for a human.
    Pending,
    /// Approved by some of the distinct approvers the request needs, waiting for the others.
    Approving {
        /// The approvals so far, in order.
        approvals: Vec<PartialApproval>,
    },
    /// Approved; the grant may have expired (compare `expires_at` with now).
    Granted(GrantRecord),
    /// Refused by a human.
    Denied(DenialRecord),
    /// Approved and spent: the call was admitted.
    Spent(SpentRecord),
}

impl RequestStatus {
    /// Whether the request still waits for a human's decision (pending, or approved by fewer approvers than
    /// it needs).
    pub fn is_waiting(&self) -> bool {
        matches!(self, RequestStatus::Pending | RequestStatus::Approving { .. })
    }

    /// A one-word label for operators: `pending`, `approving`, `granted`, `expired`, `denied` or `spent`.
    pub fn label(&self, now: Duration) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Approving { .. } => "approving",
            RequestStatus::Granted(grant) if now >= grant.expires_at => "expired",
            RequestStatus::Granted(_) => "granted",
            RequestStatus::Denied(_) => "denied",
            RequestStatus::Spent(_) => "spent",
        }
    }
}

/// A request and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestEntry {
    /// The request as issued.
    pub request: RequestRecord,
    /// Its status.
    pub status: RequestStatus,
}

/// What became of a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GrantState {
    /// Not spent, not revoked (it may have expired).
    Live,
    /// Spent.
    Spent {
        /// When.
        #[serde(with = "millis")]
        spent_at: Duration,
    },
    /// Revoked by a denial before it was spent.
    Revoked {
        /// When.
        #[serde(with = "millis")]
        revoked_at: Duration,
    },
    /// Expired unspent and replaced when the request was approved again.
    Replaced {
        /// When.
        #[serde(with = "millis")]
        replaced_at: Duration,
        /// The grant that replaced it.
        by_grant: String,
    },
}

/// A grant and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantEntry {
    /// The grant as issued.
    pub grant: GrantRecord,
    /// Its state.
    pub state: GrantState,
}

/// Why a ledger operation did not happen. The first group are the ledger's rules; the rest are faults.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// No request with this id was recorded.
    #[error("no approval request `{request_id}` in the ledger")]
    UnknownRequest {
        /// The id.
        request_id: String,
    },
    /// A different request was already recorded under this id.
    #[error("another approval request is already recorded under id `{request_id}`")]
    DuplicateRequest {
        /// The id.
        request_id: String,
    },
    /// A grant or denial names a request whose recorded key or binding differ from the one presented.
    #[error("approval request `{request_id}` does not match the request recorded under that id")]
    RequestMismatch {
        /// The id.
        request_id: String,
    },
    /// As many requests of this tool from this caller (or, naming none, in this thread) are already pending as
    /// the limit allows.
    #[error(
        "{pending} approval requests for `{tool}` are already waiting from this caller or thread (at most {max}); {}",
        retry_text(.oldest_expires_at)
    )]
    TooManyPending {
        /// The tool.
        tool: String,
        /// How many are pending (and unexpired).
        pending: u32,
        /// The limit.
        max: u32,
        /// When the first of them expires, if they expire: a new request can be recorded then.
        oldest_expires_at: Option<Duration>,
    },
    /// A grant with this id was already issued.
    #[error("an approval grant with id `{grant_id}` was already issued")]
    DuplicateGrant {
        /// The id.
        grant_id: String,
    },
    /// The request was denied.
    #[error("approval request `{}` was denied by `{}`{}", .0.request_id, .0.denied_by, reason_suffix(&.0.reason))]
    AlreadyDenied(Box<DenialRecord>),
    /// The grant (or the request's grant) was spent.
    #[error("approval grant `{grant_id}` was already spent (at {} ms since the epoch)", spent_at.as_millis())]
    AlreadySpent {
        /// The grant.
        grant_id: String,
        /// When it was spent.
        spent_at: Duration,
    },
    /// No grant with this id was issued.
    #[error("no approval grant `{grant_id}` in the ledger")]
    UnknownGrant {
        /// The id.
        grant_id: String,
    },
    /// The grant was revoked by a denial.
    #[error("approval grant `{grant_id}` was revoked by a denial")]
    GrantRevoked {
        /// The id.
        grant_id: String,
    },
    /// The grant expired and was replaced by a newer approval.
    #[error("approval grant `{grant_id}` expired and was replaced by grant `{by_grant}`")]
    GrantReplaced {
        /// The id.
        grant_id: String,
        /// The newer grant.
        by_grant: String,
    },
    /// The grant expired unspent.
    #[error("approval grant `{grant_id}` expired (at {} ms since the epoch)", expired_at.as_millis())]
    GrantExpired {
        /// The id.
        grant_id: String,
        /// When it expired.
        expired_at: Duration,
    },
    /// The grant was issued for another call.
    #[error("approval grant `{grant_id}` was issued for another call")]
    BindingMismatch {
        /// The id.
        grant_id: String,
    },
    /// A stored record could not be decoded.
    #[error("ledger record `{key}` in `{table}` is unreadable: {detail}")]
    CorruptRecord {
        /// The table.
        table: &'static str,
        /// The record's key.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// The storage failed; nothing was recorded.
    #[error("ledger storage failed: {0}")]
    Storage(Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The ledger's writer stopped before answering (the ledger was closed, or its thread died).
    #[error("the ledger's writer stopped before answering; the write may not have happened")]
    WriterStopped,
}

fn retry_text(oldest_expires_at: &Option<Duration>) -> String {
    match oldest_expires_at {
        Some(at) => {
            format!("retry once one is decided or after the oldest expires (at {} ms since the epoch)", at.as_millis())
        }
        None => "retry once one of them is decided".to_owned(),
    }
}

fn reason_suffix(reason: &Option<String>) -> String {
    match reason {
        Some(reason) => format!(": {reason}"),
        None => String::new(),
    }
}

impl LedgerError {
    /// Whether this is a fault of the storage (as opposed to a refusal by the ledger's rules).
    pub fn is_fault(&self) -> bool {
        matches!(self, LedgerError::CorruptRecord { .. } | LedgerError::Storage(_) | LedgerError::WriterStopped)
    }

    pub(crate) fn storage(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        LedgerError::Storage(Arc::new(error))
    }
}

impl From<StoreError> for LedgerError {
    fn from(error: StoreError) -> Self {
        LedgerError::from_store(error)
    }
}

impl From<LedgerError> for StoreError {
    fn from(error: LedgerError) -> Self {
        error.into_store()
    }
}

impl Fault for LedgerError {
    fn is_fault(&self) -> bool {
        LedgerError::is_fault(self)
    }

    fn into_store(self) -> StoreError {
        match self {
            LedgerError::CorruptRecord { table, key, detail } => StoreError::Corrupt { table, key, detail },
            LedgerError::Storage(source) => StoreError::Storage(source),
            LedgerError::WriterStopped => StoreError::Stopped,
            refusal => StoreError::storage(refusal),
        }
    }

    fn from_store(error: StoreError) -> Self {
        match error {
            StoreError::Corrupt { table, key, detail } => LedgerError::CorruptRecord { table, key, detail },
            StoreError::Storage(source) => LedgerError::Storage(source),
            StoreError::Stopped => LedgerError::WriterStopped,
        }
    }
}

/// Durations as whole milliseconds since the epoch, so records read well as JSON.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
