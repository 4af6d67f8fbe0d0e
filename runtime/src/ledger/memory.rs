//! A ledger in memory: the same rules as the redb ledger, nothing survives the process.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::transitions::{self, LedgerTables};
use super::{
    ApprovalLedger, DenialRecord, GrantEntry, GrantRecord, LedgerError, LedgerReply, RequestEntry, RequestRecord,
    RequestStatus, SpendAttempt, SpentRecord,
};

/// A ledger held in memory, for tests and for hosts that accept losing approvals (and spends) on
/// restart. Every operation runs under one lock, so it is atomic, and exactly-once holds within the
/// process.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    tables: Mutex<MemoryTables>,
}

#[derive(Debug, Default)]
struct MemoryTables {
    requests: BTreeMap<String, RequestRecord>,
    status: BTreeMap<String, RequestStatus>,
    grants: BTreeMap<String, GrantEntry>,
    /// Pending requests by scope, then id: their expiry.
    pending: BTreeMap<String, BTreeMap<String, Option<Duration>>>,
}

impl LedgerTables for MemoryTables {
    fn request(&self, request_id: &str) -> Result<Option<RequestRecord>, LedgerError> {
        Ok(self.requests.get(request_id).cloned())
    }
    fn insert_request(&mut self, request: &RequestRecord) -> Result<(), LedgerError> {
        self.requests.insert(request.request_id.clone(), request.clone());
        Ok(())
    }
    fn status(&self, request_id: &str) -> Result<Option<RequestStatus>, LedgerError> {
        Ok(self.status.get(request_id).cloned())
    }
    fn set_status(&mut self, request_id: &str, status: &RequestStatus) -> Result<(), LedgerError> {
        self.status.insert(request_id.to_owned(), status.clone());
        Ok(())
    }
    fn grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        Ok(self.grants.get(grant_id).cloned())
    }
    fn set_grant(&mut self, entry: &GrantEntry) -> Result<(), LedgerError> {
        self.grants.insert(entry.grant.grant_id.clone(), entry.clone());
        Ok(())
    }
    fn pending_in(&self, scope: &str) -> Result<Vec<(String, Option<Duration>)>, LedgerError> {
        Ok(self
            .pending
            .get(scope)
            .map(|ids| ids.iter().map(|(id, at)| (id.clone(), *at)).collect())
            .unwrap_or_default())
    }
    fn add_pending(&mut self, scope: &str, request_id: &str, expires_at: Option<Duration>) -> Result<(), LedgerError> {
        self.pending.entry(scope.to_owned()).or_default().insert(request_id.to_owned(), expires_at);
        Ok(())
    }
    fn remove_pending(&mut self, scope: &str, request_id: &str) -> Result<(), LedgerError> {
        if let Some(ids) = self.pending.get_mut(scope) {
            ids.remove(request_id);
            if ids.is_empty() {
                self.pending.remove(scope);
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
}

impl ApprovalLedger for MemoryLedger {
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()> {
        LedgerReply::ready(transitions::record_request(&mut *self.lock(), request, max_pending))
    }

    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<GrantRecord> {
        LedgerReply::ready(transitions::grant(&mut *self.lock(), grant, now))
    }

    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        LedgerReply::ready(transitions::deny(&mut *self.lock(), denial))
    }

    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        LedgerReply::ready(transitions::spend(&mut *self.lock(), attempt))
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
        entries.sort_by(|a, b| {
            (a.request.requested_at, &a.request.request_id).cmp(&(b.request.requested_at, &b.request.request_id))
        });
        Ok(entries)
    }

    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        Ok(self.lock().grants.get(grant_id).cloned())
    }
}
