//! Effect records: idempotency keys for tools with side effects outside our control
//! (`effect = "refund:{payment_id}"`).
//!
//! A key moves through `reserved → committed | failed | ambiguous`:
//!
//! - [`reserve`](EffectStore::reserve) before the tool runs, atomically: a new or `failed` key becomes
//!   `reserved` with a lease; a `committed` key is a [`Duplicate`](EffectError::Duplicate); an `ambiguous`
//!   one is refused until an operator resolves it; a `reserved` one is [`InFlight`](EffectError::InFlight)
//!   while its lease runs, and becomes `ambiguous` once the lease has lapsed (the process holding it
//!   died: nobody knows whether the effect happened).
//! - After the tool: [`commit`](EffectStore::commit) on success, [`fail`](EffectStore::fail) only for an
//!   explicit "not executed" error (a retry is then safe), [`mark_ambiguous`](EffectStore::mark_ambiguous)
//!   for any other error, a panic or a cancellation. Each checks the [`Reservation`], so a holder whose
//!   reservation was superseded cannot overwrite the record.
//! - While the tool runs, the dispatcher [`renew`](EffectStore::renew)s the lease (every third of it), so
//!   a call that runs longer than its lease is never presumed dead while its process is alive.
//! - An operator lists records and [`resolve`](EffectStore::resolve)s ambiguous ones, under their name
//!   (kept in the record). A reservation whose lease is still running cannot be resolved: its call may
//!   still be running.
//!
//! Time is passed in (`now`, since the Unix epoch), so callers use their [`Clock`](crate::Clock) and tests
//! never sleep. [`RedbEffectStore`] and [`MemoryEffectStore`] implement the same transitions (one function
//! each, shared) and pass the same test suite.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod redb;
mod renewal;
mod transition;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use memory::MemoryEffectStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresEffectStore;
#[cfg(feature = "postgres")]
pub(crate) use postgres::{read_locked as read_locked_postgres, write as write_postgres};
pub use redb::RedbEffectStore;
pub(crate) use redb::{fault as store_fault, read_in, write_in};
pub(crate) use renewal::{LeaseKeeper, LeaseTicket};
pub(crate) use transition::{Settle, reserve as reserve_step, settle as settle_step};

/// How long a reserved effect may run before a crash is presumed and the key becomes ambiguous (the
/// dispatcher's default, [`DispatcherBuilder::effect_lease`](crate::DispatcherBuilder::effect_lease)).
pub const DEFAULT_EFFECT_LEASE: Duration = Duration::from_secs(600);

use crate::store::StoreHandle;

/// Which storage an effect store writes to. A dispatcher with interrupt approvals checks that the
/// ledger's atomic spend-and-reserve writes the same records it settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageId(usize);

impl StorageId {
    /// The identity of the shared state behind `shared` (a database, a map).
    pub fn of<T: ?Sized>(shared: &Arc<T>) -> Self {
        StorageId(Arc::as_ptr(shared).cast::<()>() as usize)
    }

    pub(crate) fn of_ref<T>(shared: &T) -> Self {
        StorageId(std::ptr::from_ref(shared) as usize)
    }
}

/// Storage for effect records. Every method is one atomic step; implementations are shared between
/// threads (and, for redb, between processes taking turns on the file).
pub trait EffectStore: Send + Sync + 'static {
    /// Reserves `key` for one execution, with a lease until `now + lease`.
    fn reserve(&self, key: &str, lease: Duration, now: Duration) -> Result<Reservation, EffectError>;

    /// The tool succeeded: the key is committed, and later calls with it are duplicates.
    fn commit(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError>;

    /// The tool said its effect certainly did not happen: the key may be reserved again.
    fn fail(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError>;

    /// The outcome is unknown (an error that is not "not executed", a panic, a cancellation): the key is
    /// blocked until an operator resolves it.
    fn mark_ambiguous(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError>;

    /// The call holding `reservation` is still running: its lease now runs until `now + lease` (never
    /// shortened). [`Stale`](EffectError::Stale) if the reservation was settled or superseded, or its
    /// lease already lapsed.
    fn renew(&self, reservation: &Reservation, lease: Duration, now: Duration) -> Result<Reservation, EffectError>;

    /// The record of `key`, if any.
    fn get(&self, key: &str) -> Result<Option<EffectRecord>, EffectError>;

    /// Records matching `filter`, in key order. A reservation whose lease lapsed before `now` counts as
    /// [`EffectStatus::Ambiguous`].
    fn list(&self, filter: &EffectFilter, now: Duration) -> Result<Vec<EffectRecord>, EffectError>;

    /// `operator`'s answer for an ambiguous key (or a reservation whose lease lapsed before `now`): the
    /// effect happened ([`Resolution::Committed`]) or did not ([`Resolution::Failed`], a retry is allowed).
    /// The record keeps who resolved it. A reservation whose lease still runs is
    /// [`StillRunning`](EffectError::StillRunning): its call may be running.
    fn resolve(
        &self,
        key: &str,
        resolution: Resolution,
        operator: &str,
        now: Duration,
    ) -> Result<EffectRecord, EffectError>;

    /// Which storage the records live in, if the store can tell (custom stores need not).
    fn storage_id(&self) -> Option<StorageId> {
        None
    }

    /// The durable store these records are written through, if a dispatcher can write an effect step
    /// together with the call's audit record there, awaiting it (redb, PostgreSQL). Custom stores keep
    /// the default, `None`: a dispatcher then calls the methods above.
    fn store_handle(&self) -> Option<StoreHandle> {
        None
    }
}

impl<S: EffectStore + ?Sized> EffectStore for std::sync::Arc<S> {
    fn reserve(&self, key: &str, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        (**self).reserve(key, lease, now)
    }
    fn commit(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        (**self).commit(reservation, now)
    }
    fn fail(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        (**self).fail(reservation, now)
    }
    fn mark_ambiguous(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        (**self).mark_ambiguous(reservation, now)
    }
    fn renew(&self, reservation: &Reservation, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        (**self).renew(reservation, lease, now)
    }
    fn get(&self, key: &str) -> Result<Option<EffectRecord>, EffectError> {
        (**self).get(key)
    }
    fn list(&self, filter: &EffectFilter, now: Duration) -> Result<Vec<EffectRecord>, EffectError> {
        (**self).list(filter, now)
    }
    fn resolve(
        &self,
        key: &str,
        resolution: Resolution,
        operator: &str,
        now: Duration,
    ) -> Result<EffectRecord, EffectError> {
        (**self).resolve(key, resolution, operator, now)
    }
    fn storage_id(&self) -> Option<StorageId> {
        (**self).storage_id()
    }
    fn store_handle(&self) -> Option<StoreHandle> {
        (**self).store_handle()
    }
}

/// The right to run an effect once: returned by [`EffectStore::reserve`], handed back to settle it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    key: String,
    attempt: u64,
    reserved_at: Duration,
    lease_until: Duration,
}

impl Reservation {
    /// The effect key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Which reservation of the key this is (1 for the first; a retry after `failed` increments it). With
    /// `reserved_at` it identifies the reservation: a fencing token.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// When it was made.
    pub fn reserved_at(&self) -> Duration {
        self.reserved_at
    }

    /// When its lease lapses: after that, the key is ambiguous unless settled.
    pub fn lease_until(&self) -> Duration {
        self.lease_until
    }
}

/// The stored record of one effect key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectRecord {
    /// The effect key.
    pub key: String,
    /// Where it stands.
    pub state: EffectState,
    /// How many times it was reserved.
    pub attempt: u64,
    /// When the latest reservation was made.
    #[serde(rename = "reserved_at_ns", with = "duration_nanos")]
    pub reserved_at: Duration,
    /// When the record last changed.
    #[serde(rename = "updated_at_ns", with = "duration_nanos")]
    pub updated_at: Duration,
    /// Set when an operator resolved the record.
    #[serde(default)]
    pub resolution: Option<Resolution>,
    /// The operator who resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
}

impl EffectRecord {
    /// The record's status at `now`: a reservation whose lease lapsed is ambiguous.
    pub fn status_at(&self, now: Duration) -> EffectStatus {
        match self.state {
            EffectState::Reserved { lease_until } if now >= lease_until => EffectStatus::Ambiguous,
            EffectState::Reserved { .. } => EffectStatus::Reserved,
            EffectState::Committed { .. } => EffectStatus::Committed,
            EffectState::Failed { .. } => EffectStatus::Failed,
            EffectState::Ambiguous { .. } => EffectStatus::Ambiguous,
        }
    }
}

/// Where an effect key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EffectState {
    /// A call holds the key and is running the tool.
    Reserved {
        /// When the lease lapses.
        #[serde(rename = "lease_until_ns", with = "duration_nanos")]
        lease_until: Duration,
    },
    /// The effect happened.
    Committed {
        /// When it was committed.
        #[serde(rename = "at_ns", with = "duration_nanos")]
        at: Duration,
    },
    /// The effect did not happen; the key may be reserved again.
    Failed {
        /// When it failed.
        #[serde(rename = "at_ns", with = "duration_nanos")]
        at: Duration,
    },
    /// Nobody knows whether the effect happened; blocked until an operator resolves it.
    Ambiguous {
        /// Since when.
        #[serde(rename = "since_ns", with = "duration_nanos")]
        since: Duration,
        /// Why.
        cause: AmbiguityCause,
    },
}

/// Why an effect is ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AmbiguityCause {
    /// The tool failed without saying its effect did not happen, panicked or was cancelled.
    OutcomeUnknown,
    /// The reservation's lease lapsed before it was settled (the process holding it died or hung).
    LeaseLapsed,
}

/// An [`EffectState`] without its data, for filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectStatus {
    /// Reserved, lease running.
    Reserved,
    /// Committed.
    Committed,
    /// Failed (retry allowed).
    Failed,
    /// Ambiguous, or reserved with a lapsed lease.
    Ambiguous,
}

impl fmt::Display for EffectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EffectStatus::Reserved => "reserved",
            EffectStatus::Committed => "committed",
            EffectStatus::Failed => "failed",
            EffectStatus::Ambiguous => "ambiguous",
        })
    }
}

/// An operator's answer for an ambiguous effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The effect happened: later calls are duplicates.
    Committed,
    /// The effect did not happen: the key may be reserved again.
    Failed,
}

/// Which records [`EffectStore::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EffectFilter {
    /// Only records with this status (at the `now` given to `list`).
    pub status: Option<EffectStatus>,
    /// Only keys starting with this.
    pub key_prefix: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl EffectFilter {
    /// Everything.
    pub fn all() -> Self {
        EffectFilter::default()
    }

    /// Ambiguous records (and reservations whose lease lapsed): what an operator must resolve.
    pub fn ambiguous() -> Self {
        EffectFilter { status: Some(EffectStatus::Ambiguous), ..EffectFilter::default() }
    }

    pub(crate) fn matches(&self, record: &EffectRecord, now: Duration) -> bool {
        self.status.is_none_or(|status| record.status_at(now) == status)
            && self.key_prefix.as_deref().is_none_or(|prefix| record.key.starts_with(prefix))
    }
}

/// Why an effect operation did not go through.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EffectError {
    /// The effect already happened: the call is a duplicate.
    #[error("effect `{key}` was already committed")]
    Duplicate {
        /// The key.
        key: String,
        /// When it was committed.
        committed_at: Duration,
    },
    /// Whether the effect happened is unknown: an operator must resolve it before it can run again.
    #[error("effect `{key}` is ambiguous: it may or may not have happened, and an operator must resolve it")]
    Ambiguous {
        /// The key.
        key: String,
        /// Since when.
        since: Duration,
    },
    /// Another call holds the key and is running the tool.
    #[error("effect `{key}` is in flight in another call")]
    InFlight {
        /// The key.
        key: String,
        /// When that call's lease lapses.
        lease_until: Duration,
    },
    /// The reservation is no longer the key's current one (its lease lapsed and the key moved on, or it was
    /// settled already): it cannot change the record.
    #[error("the reservation of effect `{key}` is no longer current")]
    Stale {
        /// The key.
        key: String,
    },
    /// No record for the key.
    #[error("there is no record of effect `{key}`")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The key is reserved by a call whose lease still runs (renewed while it runs): it may be running,
    /// so no one can say yet whether its effect happened.
    #[error(
        "effect `{key}` is reserved by a call that may still be running (its lease, renewed while it runs, has not \
         lapsed): it cannot be resolved until that call ends or its lease lapses"
    )]
    StillRunning {
        /// The key.
        key: String,
        /// When the lease lapses unless renewed.
        lease_until: Duration,
    },
    /// A resolution must name the operator who makes it.
    #[error("an effect is resolved by a named operator, and none was given")]
    NoOperator,
    /// Only ambiguous records (or lapsed reservations) can be resolved.
    #[error("effect `{key}` is {status}, not ambiguous: only an ambiguous effect can be resolved")]
    NotAmbiguous {
        /// The key.
        key: String,
        /// Its status.
        status: EffectStatus,
    },
    /// The key is empty.
    #[error("an effect key cannot be empty")]
    EmptyKey,
    /// Another process has the database file open.
    #[error("the effect database is already open in another process")]
    AlreadyOpen,
    /// The storage failed.
    #[error("effect storage failed: {0}")]
    Storage(std::sync::Arc<::redb::Error>),
    /// A database server (PostgreSQL) failed or could not be reached; the step may not have happened.
    #[error("effect database failed: {0}")]
    Database(std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// A stored record cannot be decoded.
    #[error("the record of effect `{key}` cannot be decoded: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

impl EffectError {
    pub(crate) fn storage(err: impl Into<::redb::Error>) -> EffectError {
        match err.into() {
            ::redb::Error::DatabaseAlreadyOpen => EffectError::AlreadyOpen,
            other => EffectError::Storage(std::sync::Arc::new(other)),
        }
    }
}

/// `Duration` as integer nanoseconds since the epoch (saturating at `u64::MAX`, about year 2554).
pub(crate) mod duration_nanos {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(crate::clock::duration_nanos(*value))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_nanos(u64::deserialize(d)?))
    }
}
