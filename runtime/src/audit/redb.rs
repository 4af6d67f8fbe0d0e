//! The audit log in a redb file, sharing the database with the approval ledger and the effect records.

use std::ops::ControlFlow;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::append::AuditAppend;
use super::store::{AuditStore, Batch};
use super::{Anchor, AuditError, AuditReceipt};
use crate::store::StoreError;
use crate::store::redb::{HEAD_KEY, HEAD_TABLE, RECORDS_TABLE, WriteTables, opened_mut};

/// Appends prepared audit records after the stored head, and the new head, in a write transaction of the
/// database's writer (shared with the ledger and the effect records).
pub(crate) fn append_in(tables: &mut WriteTables<'_>, append: &AuditAppend) -> Result<Vec<AuditReceipt>, StoreError> {
    tables.open_audit()?;
    let heads = opened_mut(&mut tables.audit_head, "audit head")?;
    let head = match heads.get(HEAD_KEY).map_err(StoreError::storage)? {
        Some(bytes) => Some(Anchor::decode_stored(bytes.value()).map_err(StoreError::storage)?),
        None => None,
    };
    let (batch, receipts) = append.link(head).map_err(StoreError::storage)?;
    heads.insert(HEAD_KEY, batch.head.encode_stored().as_slice()).map_err(StoreError::storage)?;
    let records = opened_mut(&mut tables.audit_records, "audit records")?;
    for (seq, bytes) in &batch.records {
        records.insert(*seq, bytes.as_slice()).map_err(StoreError::storage)?;
    }
    tables.wrote = true;
    Ok(receipts)
}

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
