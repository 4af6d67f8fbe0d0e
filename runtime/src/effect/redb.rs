//! Effect records in a redb file, sharing the database with the approval ledger and the audit log.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::transition::{self, Settle, Step};
use super::{EffectError, EffectFilter, EffectRecord, EffectStore, Reservation, Resolution, StorageId};
use crate::store::redb::{EFFECTS as EFFECTS_TABLE, RedbWriter, WriteTables, opened, opened_mut};
use crate::store::{StoreError, StoreHandle};

/// Effect records in a redb database. Every step is written with [`Durability::Immediate`](redb::Durability)
/// by the database's one writer thread (shared with the approval ledger and the audit log of the same
/// `Arc<Database>`, so concurrent steps share commits): a reservation is on disk before the tool runs, so
/// a crash can never make an effect silently runnable again. The methods wait for the commit; a
/// dispatcher awaits it instead.
pub struct RedbEffectStore {
    db: Arc<Database>,
    writer: Arc<RedbWriter>,
}

impl std::fmt::Debug for RedbEffectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbEffectStore").finish_non_exhaustive()
    }
}

impl RedbEffectStore {
    /// Opens (or creates) the redb file at `path` for the effect records alone. To share the file with the
    /// approval ledger and the audit log, open the [`Database`] once and use [`new`](Self::new). Fails with
    /// [`EffectError::AlreadyOpen`] if another process has the file open.
    pub fn open(path: impl AsRef<Path>) -> Result<RedbEffectStore, EffectError> {
        let db = Database::create(path).map_err(EffectError::storage)?;
        RedbEffectStore::new(Arc::new(db))
    }

    /// The effect records in a shared database (the table is created if missing).
    pub fn new(db: Arc<Database>) -> Result<RedbEffectStore, EffectError> {
        let txn = db.begin_write().map_err(EffectError::storage)?;
        txn.open_table(EFFECTS_TABLE).map_err(EffectError::storage)?;
        txn.commit().map_err(EffectError::storage)?;
        let writer = RedbWriter::for_database(&db).map_err(|err| EffectError::Database(Arc::new(err)))?;
        Ok(RedbEffectStore { db, writer })
    }

    /// The effect records in a database whose schema already has the table (the approval ledger's).
    pub(crate) fn shared(db: Arc<Database>, writer: Arc<RedbWriter>) -> RedbEffectStore {
        RedbEffectStore { db, writer }
    }

    /// The database, e.g. to close it before another process takes its turn.
    pub fn database(&self) -> &Arc<Database> {
        &self.db
    }

    /// Reads `key`'s record, runs `run` on it and writes what it returns, in one write of the shared
    /// writer; waits for the commit.
    fn step<T: Send + 'static>(
        &self,
        key: &str,
        run: impl Fn(Option<EffectRecord>) -> Step<T> + Send + 'static,
    ) -> Result<T, EffectError> {
        let key = key.to_owned();
        self.writer
            .op(move |tables| {
                tables.open_effects()?;
                let step = run(read_in(tables, &key)?);
                if let Some(record) = &step.write {
                    write_in(tables, record)?;
                }
                Ok(step.answer)
            })
            .wait()
            .map_err(fault)?
    }
}

/// A fault of the store's engine, as an effect-store fault.
pub(crate) fn fault(err: StoreError) -> EffectError {
    match err {
        StoreError::Corrupt { key, detail, .. } => EffectError::Corrupt { key, reason: detail },
        StoreError::Storage(source) => EffectError::Database(source),
        other @ StoreError::Stopped => EffectError::Database(Arc::new(other)),
    }
}

/// The record of `key` in a write transaction (its effect records opened).
pub(crate) fn read_in(tables: &WriteTables<'_>, key: &str) -> Result<Option<EffectRecord>, StoreError> {
    match opened(&tables.effects, "effects")?.get(key).map_err(StoreError::storage)? {
        Some(bytes) => decode(key, bytes.value()).map(Some).map_err(|err| StoreError::Corrupt {
            table: "effects",
            key: key.to_owned(),
            detail: err.to_string(),
        }),
        None => Ok(None),
    }
}

/// Writes `record` in a write transaction (its effect records opened).
pub(crate) fn write_in(tables: &mut WriteTables<'_>, record: &EffectRecord) -> Result<(), StoreError> {
    tables.wrote = true;
    opened_mut(&mut tables.effects, "effects")?
        .insert(record.key.as_str(), encode(record).as_slice())
        .map_err(StoreError::storage)?;
    Ok(())
}

pub(crate) fn encode(record: &EffectRecord) -> Vec<u8> {
    // Strings, integers and unit-like enums: serialization cannot fail.
    serde_json::to_vec(record).unwrap_or_default()
}

pub(crate) fn decode(key: &str, bytes: &[u8]) -> Result<EffectRecord, EffectError> {
    let record: EffectRecord = serde_json::from_slice(bytes)
        .map_err(|err| EffectError::Corrupt { key: key.to_owned(), reason: err.to_string() })?;
    if record.key != key {
        return Err(EffectError::Corrupt {
            key: key.to_owned(),
            reason: format!("the record is stored under another key (`{}`)", record.key),
        });
    }
    Ok(record)
}

impl EffectStore for RedbEffectStore {
    fn reserve(&self, key: &str, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        let owned = key.to_owned();
        self.step(key, move |current| transition::reserve(current, &owned, lease, now))
    }

    fn commit(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        let held = reservation.clone();
        self.step(reservation.key(), move |current| transition::settle(current, &held, Settle::Commit, now))
    }

    fn fail(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        let held = reservation.clone();
        self.step(reservation.key(), move |current| transition::settle(current, &held, Settle::Fail, now))
    }

    fn mark_ambiguous(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        let held = reservation.clone();
        self.step(reservation.key(), move |current| transition::settle(current, &held, Settle::Ambiguous, now))
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>, EffectError> {
        let txn = self.db.begin_read().map_err(EffectError::storage)?;
        let table = txn.open_table(EFFECTS_TABLE).map_err(EffectError::storage)?;
        match table.get(key).map_err(EffectError::storage)? {
            Some(bytes) => Ok(Some(decode(key, bytes.value())?)),
            None => Ok(None),
        }
    }

    fn list(&self, filter: &EffectFilter, now: Duration) -> Result<Vec<EffectRecord>, EffectError> {
        let txn = self.db.begin_read().map_err(EffectError::storage)?;
        let table = txn.open_table(EFFECTS_TABLE).map_err(EffectError::storage)?;
        let limit = filter.limit.unwrap_or(usize::MAX);
        let start = filter.key_prefix.as_deref().unwrap_or_default();
        let mut out = Vec::new();
        for entry in table.range(start..).map_err(EffectError::storage)? {
            if out.len() >= limit {
                break;
            }
            let (key, bytes) = entry.map_err(EffectError::storage)?;
            let key = key.value();
            if filter.key_prefix.as_deref().is_some_and(|prefix| !key.starts_with(prefix)) {
                break;
            }
            let record = decode(key, bytes.value())?;
            if filter.matches(&record, now) {
                out.push(record);
            }
        }
        Ok(out)
    }

    fn renew(&self, reservation: &Reservation, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        let held = reservation.clone();
        self.step(reservation.key(), move |current| transition::renew(current, &held, lease, now))
    }

    fn resolve(
        &self,
        key: &str,
        resolution: Resolution,
        operator: &str,
        now: Duration,
    ) -> Result<EffectRecord, EffectError> {
        let (owned, operator) = (key.to_owned(), operator.to_owned());
        self.step(key, move |current| transition::resolve(current, &owned, resolution, &operator, now))
    }

    fn storage_id(&self) -> Option<StorageId> {
        Some(StorageId::of(&self.db))
    }

    fn store_handle(&self) -> Option<StoreHandle> {
        Some(StoreHandle::redb(Arc::clone(&self.writer)))
    }
}
