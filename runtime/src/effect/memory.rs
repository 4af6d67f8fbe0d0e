//! Effect records in memory, for tests and single-process hosts that accept losing them on restart.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::transition::{self, Settle, Step};
use super::{EffectError, EffectFilter, EffectRecord, EffectStore, Reservation, Resolution, StorageId};

/// Effect records in a map behind a mutex: each operation is atomic, records are lost on drop.
#[derive(Debug, Default)]
pub struct MemoryEffectStore {
    records: Mutex<BTreeMap<String, EffectRecord>>,
}

impl MemoryEffectStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryEffectStore::default()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<String, EffectRecord>> {
        // Steps are computed before the map is touched and applied with one insert: a poisoned map is whole.
        self.records.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn step<T>(&self, key: &str, run: impl FnOnce(Option<EffectRecord>) -> Step<T>) -> Result<T, EffectError> {
        let mut records = self.lock();
        let step = run(records.get(key).cloned());
        if let Some(record) = step.write {
            records.insert(record.key.clone(), record);
        }
        step.answer
    }
}

impl EffectStore for MemoryEffectStore {
    fn reserve(&self, key: &str, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        self.step(key, |current| transition::reserve(current, key, lease, now))
    }

    fn commit(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        self.step(reservation.key(), |current| transition::settle(current, reservation, Settle::Commit, now))
    }

    fn fail(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        self.step(reservation.key(), |current| transition::settle(current, reservation, Settle::Fail, now))
    }

    fn mark_ambiguous(&self, reservation: &Reservation, now: Duration) -> Result<EffectRecord, EffectError> {
        self.step(reservation.key(), |current| transition::settle(current, reservation, Settle::Ambiguous, now))
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>, EffectError> {
        Ok(self.lock().get(key).cloned())
    }

    fn list(&self, filter: &EffectFilter, now: Duration) -> Result<Vec<EffectRecord>, EffectError> {
        let records = self.lock();
        let start = filter.key_prefix.clone().unwrap_or_default();
        Ok(records
            .range(start..)
            .take_while(|(key, _)| filter.key_prefix.as_deref().is_none_or(|prefix| key.starts_with(prefix)))
            .map(|(_, record)| record)
            .filter(|record| filter.matches(record, now))
            .take(filter.limit.unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    fn renew(&self, reservation: &Reservation, lease: Duration, now: Duration) -> Result<Reservation, EffectError> {
        self.step(reservation.key(), |current| transition::renew(current, reservation, lease, now))
    }

    fn resolve(
        &self,
        key: &str,
        resolution: Resolution,
        operator: &str,
        now: Duration,
    ) -> Result<EffectRecord, EffectError> {
        self.step(key, |current| transition::resolve(current, key, resolution, operator, now))
    }

    fn storage_id(&self) -> Option<StorageId> {
        Some(StorageId::of_ref(self))
    }
}
