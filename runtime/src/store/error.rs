//! What a store's engine can say went wrong, and how each subsystem's error carries it.

use std::sync::Arc;

/// A fault of the storage engine: the write or read did not happen (or, for `Stopped`, may not have).
/// Each subsystem's error type carries it as its own fault variants ([`Fault`]).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum StoreError {
    /// A stored record could not be decoded (or a table was used before it was opened).
    #[error("record `{key}` in `{table}` is unreadable: {detail}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// The record's key.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// The storage failed; nothing was written.
    #[error("storage failed: {0}")]
    Storage(Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The writer stopped before answering (the store was closed, or its thread died).
    #[error("the store's writer stopped before answering; the write may not have happened")]
    Stopped,
}

impl StoreError {
    pub(crate) fn storage(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Storage(Arc::new(error))
    }
}

/// An error type a store's writer can answer with: a subsystem's refusals (kept as a write's outcome)
/// and its faults (which abort the write's transaction), and the engine's faults carried both ways.
pub(crate) trait Fault: Send + 'static {
    /// Whether this is a fault of the storage, as opposed to a refusal by the subsystem's rules.
    fn is_fault(&self) -> bool;
    /// A fault as the engine's fault (called only when [`is_fault`](Self::is_fault) holds; a refusal
    /// given anyway becomes a storage fault carrying it).
    fn into_store(self) -> StoreError;
    /// The engine's fault as this error.
    fn from_store(error: StoreError) -> Self;
}

impl Fault for StoreError {
    fn is_fault(&self) -> bool {
        true
    }
    fn into_store(self) -> StoreError {
        self
    }
    fn from_store(error: StoreError) -> Self {
        error
    }
}
