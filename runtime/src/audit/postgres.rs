//! The audit log in a PostgreSQL database (feature `postgres`), sharing the database with the approval
//! ledger and the effect records of a [`PostgresLedger`](crate::ledger::PostgresLedger).
//!
//! The chain has one head row. An append locks it (`SELECT … FOR UPDATE`), links its records after it,
//! inserts them and rewrites the head, all in the transaction of the write it belongs to: a dispatcher's
//! admission (spend, reservation, "approved" record) or settlement is one transaction, and every host
//! appends to the one chain in turn. The first append of an empty log inserts the head; two hosts doing
//! that at once meet on its primary key, and the loser runs again from the start, after the winner's head.
//!
//! Reads run on the store's runtime; a scan reads the records and the head from one snapshot
//! (`REPEATABLE READ`), so the verifier never sees records past the head it checks them against.

use std::ops::ControlFlow;
use std::sync::Arc;

use tokio_postgres::IsolationLevel;

use super::append::AuditAppend;
use super::store::{AuditStore, Batch};
use super::{Anchor, AuditError, AuditReceipt};
use crate::store::postgres::{PgTables, Shared, client};
use crate::store::{Reply, StoreError};

/// The records' position as a column value (PostgreSQL has no unsigned 64-bit integer).
fn position(seq: u64) -> Result<i64, StoreError> {
    i64::try_from(seq).map_err(|_| StoreError::storage(AuditError::Exhausted))
}

/// Appends prepared audit records after the stored head, and the new head, in the write's transaction.
pub(crate) fn append_in(tables: &mut PgTables<'_, '_>, append: &AuditAppend) -> Result<Vec<AuditReceipt>, StoreError> {
    let rows = tables.query("SELECT head FROM airlock_audit_head WHERE id = 1 FOR UPDATE", &[])?;
    let head = match rows.first() {
        Some(row) => Some(Anchor::decode_stored(row.get::<_, &[u8]>(0)).map_err(StoreError::storage)?),
        None => None,
    };
    let (batch, receipts) = append.link(head.clone()).map_err(StoreError::storage)?;
    write_batch(tables, &batch, head.is_some())?;
    Ok(receipts)
}

fn write_batch(tables: &mut PgTables<'_, '_>, batch: &Batch, had_head: bool) -> Result<(), StoreError> {
    for (seq, bytes) in &batch.records {
        tables
            .execute("INSERT INTO airlock_audit_records (seq, record) VALUES ($1, $2)", &[&position(*seq)?, bytes])?;
    }
    let head = batch.head.encode_stored();
    if had_head {
        tables.execute("UPDATE airlock_audit_head SET head = $1 WHERE id = 1", &[&head])?;
    } else {
        // A concurrent first append inserts it too: the loser's transaction is run again.
        tables.execute("INSERT INTO airlock_audit_head (id, head) VALUES (1, $1)", &[&head])?;
    }
    Ok(())
}

pub(super) struct PostgresAuditStore {
    shared: Arc<Shared>,
}

impl PostgresAuditStore {
    pub(super) fn new(shared: Arc<Shared>) -> PostgresAuditStore {
        PostgresAuditStore { shared }
    }

    /// Runs `read` on the store's runtime and waits for it.
    fn read<T: Send + 'static>(
        &self,
        read: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, AuditError> {
        let (sender, reply) = Reply::<T, StoreError>::fault_channel();
        self.shared.handle.spawn(async move { sender.send(read.await) });
        reply.wait().map_err(AuditError::from_store)
    }
}

impl AuditStore for PostgresAuditStore {
    fn append(&self, build: &mut dyn FnMut(Option<Anchor>) -> Result<Batch, AuditError>) -> Result<(), AuditError> {
        // Not the dispatcher's path (it appends through `append_in`, awaited): a caller's blocking append.
        let handle = &self.shared.handle;
        let storage = |err: tokio_postgres::Error| AuditError::from_store(StoreError::storage(err));
        let mut client = handle.block_on(client(&self.shared.pool)).map_err(AuditError::from_store)?;
        let txn = handle.block_on(client.transaction()).map_err(storage)?;
        let row = handle
            .block_on(txn.query_opt("SELECT head FROM airlock_audit_head WHERE id = 1 FOR UPDATE", &[]))
            .map_err(storage)?;
        let head = row.map(|row| Anchor::decode_stored(row.get::<_, &[u8]>(0))).transpose()?;
        let had_head = head.is_some();
        let batch = build(head)?;
        for (seq, bytes) in &batch.records {
            let seq = position(*seq).map_err(AuditError::from_store)?;
            handle
                .block_on(
                    txn.execute("INSERT INTO airlock_audit_records (seq, record) VALUES ($1, $2)", &[&seq, bytes]),
                )
                .map_err(storage)?;
        }
        let encoded = batch.head.encode_stored();
        let sql = if had_head {
            "UPDATE airlock_audit_head SET head = $1 WHERE id = 1"
        } else {
            "INSERT INTO airlock_audit_head (id, head) VALUES (1, $1)"
        };
        handle.block_on(txn.execute(sql, &[&encoded])).map_err(storage)?;
        handle.block_on(txn.commit()).map_err(storage)
    }

    fn head(&self) -> Result<Option<Anchor>, AuditError> {
        let pool = self.shared.pool.clone();
        let stored = self.read(async move {
            let client = client(&pool).await?;
            let row = client
                .query_opt("SELECT head FROM airlock_audit_head WHERE id = 1", &[])
                .await
                .map_err(StoreError::storage)?;
            Ok(row.map(|row| row.get::<_, Vec<u8>>(0)))
        })?;
        stored.as_deref().map(Anchor::decode_stored).transpose()
    }

    fn scan(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<Option<Vec<u8>>, AuditError> {
        let Ok(from) = i64::try_from(from) else {
            // No record is stored that far: only the head.
            return self.head().map(|head| head.map(|head| head.encode_stored()));
        };
        let pool = self.shared.pool.clone();
        let (records, head) = self.read(async move {
            let mut client = client(&pool).await?;
            let txn = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(StoreError::storage)?;
            let rows = txn
                .query("SELECT seq, record FROM airlock_audit_records WHERE seq >= $1 ORDER BY seq", &[&from])
                .await
                .map_err(StoreError::storage)?;
            let head = txn
                .query_opt("SELECT head FROM airlock_audit_head WHERE id = 1", &[])
                .await
                .map_err(StoreError::storage)?
                .map(|row| row.get::<_, Vec<u8>>(0));
            txn.commit().await.map_err(StoreError::storage)?;
            let records: Vec<(i64, Vec<u8>)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            Ok((records, head))
        })?;
        for (seq, bytes) in records {
            // Positions are stored from non-negative `u64`s.
            let seq = u64::try_from(seq).unwrap_or(0);
            if visit(seq, &bytes).is_break() {
                break;
            }
        }
        Ok(head)
    }
}
