//! The audit log in memory: the same format and checks, for tests and hosts without a disk.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Mutex;

use super::store::{AuditStore, Batch};
use super::{Anchor, AuditError};

#[derive(Default)]
pub(super) struct MemoryAuditStore {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    records: BTreeMap<u64, Vec<u8>>,
    head: Option<Vec<u8>>,
}

impl MemoryAuditStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written batch: the batch is built first and
        // inserted with infallible operations, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl AuditStore for MemoryAuditStore {
    fn append(&self, build: &mut dyn FnMut(Option<Anchor>) -> Result<Batch, AuditError>) -> Result<(), AuditError> {
        let mut state = self.lock();
        let head = state.head.as_deref().map(Anchor::decode_stored).transpose()?;
        let batch = build(head)?;
        let head = batch.head.encode_stored();
        state.records.extend(batch.records);
        state.head = Some(head);
        Ok(())
    }

    fn head(&self) -> Result<Option<Anchor>, AuditError> {
        self.lock().head.as_deref().map(Anchor::decode_stored).transpose()
    }

    fn scan(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<Option<Vec<u8>>, AuditError> {
        let state = self.lock();
        for (seq, bytes) in state.records.range(from..) {
            if visit(*seq, bytes).is_break() {
                break;
            }
        }
        Ok(state.head.clone())
    }
}
