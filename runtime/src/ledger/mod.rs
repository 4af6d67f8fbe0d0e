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

mod error;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod records;
#[cfg(test)]
pub(crate) use self::records::test_grant;
mod redb;
mod transitions;

use std::sync::Arc;
use std::time::Duration;

use crate::effect::{EffectError, EffectStore};
use crate::store::{Reply, StoreHandle};

pub use self::error::LedgerError;
pub use self::memory::MemoryLedger;
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresLedger;
pub use self::records::{
    Approved, DenialRecord, EffectClaim, GrantEntry, GrantRecord, GrantState, PartialApproval, PruneReport,
    RequestEntry, RequestRecord, RequestStatus, SpendAttempt, SpendReserved, SpentRecord,
};
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
    /// approver who already approved counts once. Approving such a request whose grant expired unspent
    /// begins a new round: the new grant needs as many distinct approvers again, and replaces the expired
    /// one when it is issued.
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

    /// The requests whose status [is unresolved](RequestStatus::is_unresolved), oldest first: what
    /// [`list_requests`](Self::list_requests) lists of them. The redb and PostgreSQL ledgers read a settled
    /// request's status only, not its record, so a host asking on every resume pays for the requests still
    /// open rather than for every request kept.
    fn unresolved_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        let mut entries = self.list_requests()?;
        entries.retain(|entry| entry.status.is_unresolved());
        Ok(entries)
    }

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

/// Sorts requests oldest first (by when they were requested, then by id), as the listings answer them.
pub(crate) fn oldest_first(entries: &mut [RequestEntry]) {
    entries.sort_by(|a, b| {
        (a.request.requested_at, &a.request.request_id).cmp(&(b.request.requested_at, &b.request.request_id))
    });
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
    fn unresolved_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        (**self).unresolved_requests()
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
