//! What the log needs from a storage backend: an atomic read-head-then-append, and a consistent scan.

use std::ops::ControlFlow;

use super::spends::Closed;
use super::{Anchor, AuditError};

/// Records to write in one transaction, and the head after them.
pub(crate) struct Batch {
    pub(crate) records: Vec<(u64, Vec<u8>)>,
    pub(crate) head: Anchor,
}

/// A storage backend of the audit log. Implementations write a batch and its head atomically, and scan
/// records and the head from one snapshot.
pub(super) trait AuditStore: Send + Sync {
    /// In one write transaction: reads the stored head, calls `build` with it, writes the records and the
    /// head `build` returns. Nothing is written if `build` fails.
    fn append(&self, build: &mut dyn FnMut(Option<Anchor>) -> Result<Batch, AuditError>) -> Result<(), AuditError>;

    /// The stored head, if any record was ever appended.
    fn head(&self) -> Result<Option<Anchor>, AuditError>;

    /// From one snapshot: visits the stored records with `seq >= from` in ascending order until `visit`
    /// breaks, and returns the head stored in that same snapshot (undecoded, so the verifier can report a
    /// bad one).
    fn scan(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<Option<Vec<u8>>, AuditError>;

    /// Whether an append waits for a disk (a file of its own): an async caller then hands it to a thread
    /// instead of blocking its executor, unless the log was told to commit on the caller.
    fn waits_for_disk(&self) -> bool {
        false
    }

    /// How and when a record before `seq` recorded the spend or revocation of `grant_id` (the first such
    /// record): an append-only file, which hosts share and a database holder cannot rewrite, says so; a store
    /// the ledger's database holds (which its holder can rewrite with the ledger) does not.
    fn closed_before(&self, _grant_id: &str, _seq: u64) -> Option<Closed> {
        None
    }

    /// Whether [`closed_before`](Self::closed_before) answers for this store: an admission that could not
    /// append its record to it cannot be checked.
    fn knows_closings(&self) -> bool {
        false
    }
}
