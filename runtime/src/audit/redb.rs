//! The audit log in a redb file, sharing the database with the approval ledger and the effect records.

use std::ops::ControlFlow;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::store::{AuditStore, Batch};
use super::{Anchor, AuditError};

/// The records: sequence number → stored record (see the [module docs](super) for the format).
pub const RECORDS_TABLE: TableDefinition<'static, u64, &'static [u8]> =
    TableDefinition::new("agent_airlock_audit_records");

/// The head: one row under [`HEAD_KEY`], the JSON of an [`Anchor`].
pub const HEAD_TABLE: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("agent_airlock_audit_head");

/// The key of the one row of [`HEAD_TABLE`].
pub const HEAD_KEY: &str = "head";

pub(super) struct RedbAuditStore {
    db: Arc<Database>,
}

impl RedbAuditStore {
    /// Creates the tables if they do not exist yet, so readers never meet a missing table.
    pub(super) fn new(db: Arc<Database>) -> Result<RedbAuditStore, AuditError> {
        let txn = db.begin_write().map_err(AuditError::storage)?;
        txn.open_table(RECORDS_TABLE).map_err(AuditError::storage)?;
        txn.open_table(HEAD_TABLE).map_err(AuditError::storage)?;
        txn.commit().map_err(AuditError::storage)?;
        Ok(RedbAuditStore { db })
    }
}

impl AuditStore for RedbAuditStore {
    fn append(&self, build: &mut dyn FnMut(Option<Anchor>) -> Result<Batch, AuditError>) -> Result<(), AuditError> {
        // Durability::Immediate is redb's default and is never lowered: an acknowledged record survives a crash.
        let txn = self.db.begin_write().map_err(AuditError::storage)?;
        {
            let mut heads = txn.open_table(HEAD_TABLE).map_err(AuditError::storage)?;
            let head = match heads.get(HEAD_KEY).map_err(AuditError::storage)? {
                Some(bytes) => Some(Anchor::decode_stored(bytes.value())?),
                None => None,
            };
            let batch = build(head)?;
            let mut records = txn.open_table(RECORDS_TABLE).map_err(AuditError::storage)?;
            for (seq, bytes) in &batch.records {
                records.insert(*seq, bytes.as_slice()).map_err(AuditError::storage)?;
            }
            heads.insert(HEAD_KEY, batch.head.encode_stored().as_slice()).map_err(AuditError::storage)?;
        }
        txn.commit().map_err(AuditError::storage)
    }

    fn head(&self) -> Result<Option<Anchor>, AuditError> {
        let txn = self.db.begin_read().map_err(AuditError::storage)?;
        let heads = txn.open_table(HEAD_TABLE).map_err(AuditError::storage)?;
        match heads.get(HEAD_KEY).map_err(AuditError::storage)? {
            Some(bytes) => Ok(Some(Anchor::decode_stored(bytes.value())?)),
            None => Ok(None),
        }
    }

    fn scan(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<Option<Vec<u8>>, AuditError> {
        let txn = self.db.begin_read().map_err(AuditError::storage)?;
        let records = txn.open_table(RECORDS_TABLE).map_err(AuditError::storage)?;
        for entry in records.range(from..).map_err(AuditError::storage)? {
            let (seq, bytes) = entry.map_err(AuditError::storage)?;
            if visit(seq.value(), bytes.value()).is_break() {
                break;
            }
        }
        let heads = txn.open_table(HEAD_TABLE).map_err(AuditError::storage)?;
        let head = heads.get(HEAD_KEY).map_err(AuditError::storage)?.map(|bytes| bytes.value().to_vec());
        Ok(head)
    }
}
