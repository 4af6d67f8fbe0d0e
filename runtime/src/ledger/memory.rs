//! A ledger in memory: the same rules as the redb ledger, nothing survives the process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::effect::{EffectError, EffectRecord, EffectStore, MemoryEffectStore};

use super::transitions::{self, LedgerTables};
use super::{
    ApprovalLedger, Approved, DenialRecord, EffectClaim, GrantEntry, GrantRecord, LedgerError, LedgerReply,
    PruneReport, RequestEntry, RequestRecord, RequestStatus, SpendAttempt, SpendReserved, SpentRecord, oldest_first,
};

/// A ledger held in memory, for tests and for hosts that accept losing approvals (and spends) on
/// restart. Every operation runs under one lock, so it is atomic, and exactly-once holds within the
/// process. Its effect records ([`ApprovalLedger::effects`]) live beside the tables, so a spend and a
/// reservation happen under one lock.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    tables: Mutex<MemoryTables>,
    effects: Arc<MemoryEffectStore>,
}

#[derive(Debug, Default)]
struct MemoryTables {
    requests: BTreeMap<String, RequestRecord>,
    status: BTreeMap<String, RequestStatus>,
    grants: BTreeMap<String, GrantEntry>,
    /// Pending requests by scope, then id: their expiry.
    pending: BTreeMap<String, BTreeMap<String, Option<Duration>>>,
}

/// The ledger's tables and its effect records, both locked: one atomic unit.
struct Locked<'a> {
    tables: MutexGuard<'a, MemoryTables>,
    effects: Option<MutexGuard<'a, BTreeMap<String, EffectRecord>>>,
}

impl LedgerTables for Locked<'_> {
    fn request(&self, request_id: &str) -> Result<Option<RequestRecord>, LedgerError> {
        Ok(self.tables.requests.get(request_id).cloned())
    }
    fn insert_request(&mut self, request: &RequestRecord) -> Result<(), LedgerError> {
        self.tables.requests.insert(request.request_id.clone(), request.clone());
        Ok(())
    }
    fn status(&self, request_id: &str) -> Result<Option<RequestStatus>, LedgerError> {
        Ok(self.tables.status.get(request_id).cloned())
    }
    fn set_status(&mut self, request_id: &str, status: &RequestStatus) -> Result<(), LedgerError> {
        self.tables.status.insert(request_id.to_owned(), status.clone());
        Ok(())
    }
    fn grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        Ok(self.tables.grants.get(grant_id).cloned())
    }
    fn set_grant(&mut self, entry: &GrantEntry) -> Result<(), LedgerError> {
        self.tables.grants.insert(entry.grant.grant_id.clone(), entry.clone());
        Ok(())
    }
    fn effect(&self, key: &str) -> Result<Option<EffectRecord>, LedgerError> {
        Ok(self.effects.as_ref().and_then(|effects| effects.get(key).cloned()))
    }
    fn set_effect(&mut self, record: &EffectRecord) -> Result<(), LedgerError> {
        if let Some(effects) = &mut self.effects {
            effects.insert(record.key.clone(), record.clone());
        }
        Ok(())
    }
    fn statuses(&self) -> Result<Vec<(String, RequestStatus)>, LedgerError> {
        Ok(self.tables.status.iter().map(|(id, status)| (id.clone(), status.clone())).collect())
    }
    fn grants(&self) -> Result<Vec<GrantEntry>, LedgerError> {
        Ok(self.tables.grants.values().cloned().collect())
    }
    fn remove_request(&mut self, request_id: &str) -> Result<(), LedgerError> {
        self.tables.requests.remove(request_id);
        self.tables.status.remove(request_id);
        Ok(())
    }
    fn remove_grant(&mut self, grant_id: &str) -> Result<(), LedgerError> {
        self.tables.grants.remove(grant_id);
        Ok(())
    }
    fn pending_in(&self, scope: &str) -> Result<Vec<(String, Option<Duration>)>, LedgerError> {
        Ok(self
            .tables
            .pending
            .get(scope)
            .map(|ids| ids.iter().map(|(id, at)| (id.clone(), *at)).collect())
            .unwrap_or_default())
    }
    fn add_pending(&mut self, scope: &str, request_id: &str, expires_at: Option<Duration>) -> Result<(), LedgerError> {
        self.tables.pending.entry(scope.to_owned()).or_default().insert(request_id.to_owned(), expires_at);
        Ok(())
    }
    fn remove_pending(&mut self, scope: &str, request_id: &str) -> Result<(), LedgerError> {
        if let Some(ids) = self.tables.pending.get_mut(scope) {
            ids.remove(request_id);
            if ids.is_empty() {
                self.tables.pending.remove(scope);
            }
        }
        Ok(())
    }
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemoryTables> {
        // Transitions decide before they write and the maps' operations do not panic, so a poisoned lock
        // still guards consistent tables.
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tables alone, for the transitions that touch no effect record.
    fn locked(&self) -> Locked<'_> {
        Locked { tables: self.lock(), effects: None }
    }

    /// The tables and then the effect records (always in this order, so no two callers deadlock).
    fn locked_with_effects(&self) -> Locked<'_> {
        let tables = self.lock();
        Locked { tables, effects: Some(self.effects.lock()) }
    }
}

impl ApprovalLedger for MemoryLedger {
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()> {
        LedgerReply::ready(transitions::record_request(&mut self.locked(), request, max_pending))
    }

    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<Approved> {
        LedgerReply::ready(transitions::grant(&mut self.locked(), grant, now))
    }

    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        LedgerReply::ready(transitions::deny(&mut self.locked(), denial))
    }

    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        LedgerReply::ready(transitions::spend(&mut self.locked(), attempt))
    }

    fn spend_and_reserve(
        &self,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        LedgerReply::ready(transitions::spend_and_reserve(&mut self.locked_with_effects(), attempt, &claim))
    }

    fn effects(&self) -> Arc<dyn EffectStore> {
        self.effects.clone()
    }

    fn find_request(&self, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        let tables = self.lock();
        Ok(tables.requests.get(request_id).map(|request| RequestEntry {
            request: request.clone(),
            status: tables.status.get(request_id).cloned().unwrap_or(RequestStatus::Pending),
        }))
    }

    fn list_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        let tables = self.lock();
        let mut entries: Vec<RequestEntry> = tables
            .requests
            .iter()
            .map(|(id, request)| RequestEntry {
                request: request.clone(),
                status: tables.status.get(id).cloned().unwrap_or(RequestStatus::Pending),
            })
            .collect();
        oldest_first(&mut entries);
        Ok(entries)
    }

    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        Ok(self.lock().grants.get(grant_id).cloned())
    }

    fn prune(&self, cutoff: Duration, now: Duration) -> LedgerReply<PruneReport> {
        LedgerReply::ready(transitions::prune(&mut self.locked(), cutoff, now))
    }
}
