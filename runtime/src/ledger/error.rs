//! Why a ledger write was refused or failed, as the host and the model read it.

use std::sync::Arc;
use std::time::Duration;

use super::DenialRecord;
use crate::store::{Fault, StoreError};

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
