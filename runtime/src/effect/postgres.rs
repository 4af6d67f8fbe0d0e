//! Effect records on a PostgreSQL server (feature `postgres`): the store of a
//! [`PostgresLedger`](crate::ledger::PostgresLedger), in the same database as its approvals so a spend and
//! a reservation are one transaction. The transitions are the memory and redb stores' (`transition`); the
//! pool, the runtime, the schema and the retries are the engine's ([`crate::store`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use super::redb::{decode, encode, fault};
use super::transition::{self, Settle, Step};
use super::{EffectError, EffectFilter, EffectRecord, EffectStore, Reservation, Resolution, StorageId};
use crate::store::postgres::{self, PgTables, Shared};
use crate::store::{Reply, StoreError, StoreHandle};

/// Effect records in a PostgreSQL database: the store of a [`PostgresLedger`](crate::ledger::PostgresLedger) (its
/// [`effect_store`](crate::ledger::PostgresLedger::effect_store)), sharing the ledger's pool and runtime. Every step is
/// one transaction that locks the key's row (`SELECT … FOR UPDATE`), so a key is reserved once across
/// every host. The methods are synchronous (the trait's): they wait for the database.
#[derive(Clone)]
pub struct PostgresEffectStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PostgresEffectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresEffectStore").finish_non_exhaustive()
    }
}

impl PostgresEffectStore {
    /// The effect records of the database behind `shared`.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        PostgresEffectStore { shared }
    }

    fn step<T: Send + 'static>(
        &self,
        key: &str,
        run: impl Fn(Option<EffectRecord>) -> Step<T> + Send + 'static,
    ) -> Result<T, EffectError> {
        let key = key.to_owned();
        postgres::write(&self.shared, move |tables| -> Result<Result<T, EffectError>, StoreError> {
            let current = read_locked(tables, &key)?;
            let step = run(current);
            if let Some(record) = &step.write {
                write(tables, record)?;
            }
            Ok(step.answer)
        })
        .wait()
        .map_err(fault)?
    }

    fn read<T: Send + 'static, F>(&self, read: impl FnOnce(Pool) -> F) -> Result<T, EffectError>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (sender, reply) = Reply::<T, StoreError>::fault_channel();
        let future = read(self.shared.pool.clone());
        self.shared.handle.spawn(async move { sender.send(future.await) });
        reply.wait().map_err(fault)
    }
}

/// The record of `key` in a write transaction, its row locked until `COMMIT` (`SELECT … FOR UPDATE`).
pub(crate) fn read_locked(tables: &PgTables<'_, '_>, key: &str) -> Result<Option<EffectRecord>, StoreError> {
    match tables.text("SELECT record FROM airlock_effects WHERE effect_key = $1 FOR UPDATE", key)? {
        Some(Some(record)) => {
            tables.existing_effects.borrow_mut().insert(key.to_owned());
            decode_text(key, &record).map(Some)
        }
        _ => Ok(None),
    }
}

/// Writes `record` in a write transaction: `UPDATE` for a row read (and locked) in it, `INSERT` otherwise.
pub(crate) fn write(tables: &mut PgTables<'_, '_>, record: &EffectRecord) -> Result<(), StoreError> {
    if tables.existing_effects.borrow().contains(&record.key) {
        tables.execute(
            "UPDATE airlock_effects SET record = $2 WHERE effect_key = $1",
            &[&record.key, &encode_text(record)],
        )?;
    } else {
        tables.execute(
            "INSERT INTO airlock_effects (effect_key, record) VALUES ($1, $2)",
            &[&record.key, &encode_text(record)],
        )?;
        tables.existing_effects.borrow_mut().insert(record.key.clone());
    }
    Ok(())
}

fn encode_text(record: &EffectRecord) -> String {
    String::from_utf8(encode(record)).unwrap_or_default()
}

fn decode_text(key: &str, text: &str) -> Result<EffectRecord, StoreError> {
    decode(key, text.as_bytes()).map_err(|err| StoreError::Corrupt {
        table: "effects",
        key: key.to_owned(),
        detail: err.to_string(),
    })
}

impl EffectStore for PostgresEffectStore {
    fn reserve(&self, key: &str, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        let owned = key.to_owned();
        self.step(key, move |current| transition::reserve(current, &owned, lease, now))
    }

    fn commit(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        let (key, reservation) = (reservation.key().to_owned(), reservation.clone());
        self.step(&key, move |current| transition::settle(current, &reservation, Settle::Commit, now))
    }

    fn fail(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        let (key, reservation) = (reservation.key().to_owned(), reservation.clone());
        self.step(&key, move |current| transition::settle(current, &reservation, Settle::Fail, now))
    }

    fn mark_ambiguous(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        let (key, reservation) = (reservation.key().to_owned(), reservation.clone());
        self.step(&key, move |current| transition::settle(current, &reservation, Settle::Ambiguous, now))
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>, EffectError> {
        let key = key.to_owned();
        self.read(|pool| async move {
            let client = postgres::client(&pool).await?;
            let row = client
                .query_opt("SELECT record FROM airlock_effects WHERE effect_key = $1", &[&key])
                .await
                .map_err(StoreError::storage)?;
            row.map(|row| decode_text(&key, row.get::<_, &str>(0))).transpose()
        })
    }

    fn list(&self, filter: &EffectFilter, now: Duration) -> Result<Vec<EffectRecord>, EffectError> {
        let filter = filter.clone();
        self.read(|pool| async move {
            let client = postgres::client(&pool).await?;
            let rows = client
                .query(
                    "SELECT effect_key, record FROM airlock_effects
                     WHERE $1::text IS NULL OR starts_with(effect_key, $1)
                     ORDER BY effect_key",
                    &[&filter.key_prefix],
                )
                .await
                .map_err(StoreError::storage)?;
            let mut out = Vec::new();
            for row in &rows {
                if out.len() >= filter.limit.unwrap_or(usize::MAX) {
                    break;
                }
                let record = decode_text(row.get::<_, &str>(0), row.get::<_, &str>(1))?;
                if filter.matches(&record, now) {
                    out.push(record);
                }
            }
            Ok(out)
        })
    }

    fn renew(&self, reservation: &Reservation, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        let (key, reservation) = (reservation.key().to_owned(), reservation.clone());
        self.step(&key, move |current| transition::renew(current, &reservation, lease, now))
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
        Some(StorageId::of(&self.shared))
    }

    fn store_handle(&self) -> Option<StoreHandle> {
        Some(StoreHandle::postgres(Arc::clone(&self.shared)))
    }
}
