//! One durable write per decision: where a dispatch writes what it decided.
//!
//! A dispatch writes durably at most twice:
//!
//! - **admit**: spend the grant (a resumed, approved call), reserve the effect key (a tool with
//!   `effect = "..."`) and append the "approved" audit record, atomically: if the grant or the key
//!   refuses, nothing is spent, reserved or recorded;
//! - **settle**: the effect's outcome (committed, failed, ambiguous) and the call's audit record.
//!
//! A `DurableWrite` holds the parts of one such write; `decide` is the one state machine that applies
//! it, over any backend's tables (`DurableWriteTables`): the redb writer's transaction, a PostgreSQL
//! transaction. Every part that the backend of a dispatcher's stores shares is written in one
//! transaction; a [`StoreHandle`] names that backend, and two parts with equal handles are written
//! together.
//!
//! On redb, the handle is the database's one writer thread ([`RedbLedger`](crate::ledger::RedbLedger),
//! [`RedbEffectStore`](crate::effect::RedbEffectStore) and [`AuditLog::with_database`](crate::audit::AuditLog::with_database)
//! on one `Arc<Database>` share it): decisions of concurrent dispatches share commits, and the
//! dispatch future awaits its answer instead of blocking. On PostgreSQL (feature `postgres`), the
//! ledger's spend and effect steps and the audit log's records ([`AuditLog::with_postgres`](crate::audit::AuditLog::with_postgres))
//! are one transaction on the ledger's own runtime, the chain's head advanced in it. Stores in memory, and custom stores,
//! have no handle: the dispatcher runs each part through the store's own methods, in the same order and
//! with the same rules (a memory ledger spends and reserves under one lock).
//!
//! **Shared rate limits.** Policy rules marked shared keep their buckets in a [`SharedRateBuckets`]: the
//! PostgreSQL database (one statement per bucket, on the database's clock), or memory for the dispatchers
//! of one process. A redb file belongs to one process, so it holds no buckets; see `store::rate_buckets`.
//!
//! **Layers.** This module is the engine under the ledger, the effect records and the audit log, and
//! knows none of them: the redb file (its tables, the one writer thread per database that group-commits
//! every write, [`Reply`]), and the PostgreSQL pool, schema and transactions. Each subsystem reads and
//! writes its own rows through the engine's transaction (the ledger's transitions, the effect steps, the
//! audit chain's append); the dispatcher's `DurableWrite` (in `dispatch/durable_write.rs`) puts the three together
//! in one write. Dependencies point one way: `store` ← `effect` ← `ledger` ← `approval` ← `message`
//! ← `audit` ← the dispatcher (`audit` reads `store` and `effect` directly too).
pub(crate) mod closing;
mod error;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod rate_buckets;
pub(crate) mod redb;
mod reply;

use std::sync::Arc;

pub(crate) use self::error::{Fault, StoreError};
#[cfg(feature = "postgres")]
use self::postgres::Shared as PostgresShared;
pub use self::rate_buckets::SharedRateBuckets;
use self::redb::RedbWriter;
pub use self::reply::{Reply, ReplySender};
// Opening the database a ledger, its effect stores and its audit log share: one home for the options and
// errors of each backend, whichever of them is opened first.
#[cfg(feature = "postgres")]
pub use self::postgres::{POSTGRES_SCHEMA_VERSION, PostgresOpenError, PostgresOptions};
pub use self::redb::{
    APPROVALS_SCHEMA_VERSION, OpenError, ProcessSharing, RedbOpenOptions, WriterStats, open_database,
};

/// The durable store a ledger, an effect store or an audit log writes through: parts of a decision whose
/// stores have the same handle are written in one transaction. Opaque; compare with [`same_store`](Self::same_store).
#[derive(Clone)]
pub struct StoreHandle(Backend);

#[derive(Clone)]
enum Backend {
    Redb(Arc<RedbWriter>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PostgresShared>),
}

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = match &self.0 {
            Backend::Redb(_) => "redb",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
        };
        f.debug_tuple("StoreHandle").field(&backend).finish()
    }
}

impl StoreHandle {
    pub(crate) fn redb(writer: Arc<RedbWriter>) -> Self {
        StoreHandle(Backend::Redb(writer))
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(shared: Arc<PostgresShared>) -> Self {
        StoreHandle(Backend::Postgres(shared))
    }

    /// The redb database's writer, if this is a redb store.
    pub(crate) fn redb_writer(&self) -> Option<&Arc<RedbWriter>> {
        match &self.0 {
            Backend::Redb(writer) => Some(writer),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    /// The PostgreSQL pool and runtime, if this is a PostgreSQL store.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_shared(&self) -> Option<&Arc<PostgresShared>> {
        match &self.0 {
            Backend::Postgres(shared) => Some(shared),
            Backend::Redb(_) => None,
        }
    }

    /// Whether both write through the same store (one redb database, one PostgreSQL pool).
    pub fn same_store(&self, other: &StoreHandle) -> bool {
        match (&self.0, &other.0) {
            (Backend::Redb(a), Backend::Redb(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "postgres")]
            (Backend::Postgres(a), Backend::Postgres(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "postgres")]
            _ => false,
        }
    }
}

/// `first` and whatever else is already queued behind it, up to `max` in all, without waiting: what a writer
/// thread commits together.
pub(crate) fn take_queued<T>(queue: &std::sync::mpsc::Receiver<T>, first: T, max: usize) -> Vec<T> {
    let mut taken = vec![first];
    while taken.len() < max {
        match queue.try_recv() {
            Ok(next) => taken.push(next),
            Err(_) => break,
        }
    }
    taken
}
