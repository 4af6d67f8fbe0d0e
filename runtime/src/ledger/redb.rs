//! The durable ledger in a redb file: the approval tables of the file's engine ([`crate::store`]), every
//! write group-committed by the database's one writer thread.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ::redb::{Database, ReadableDatabase, ReadableTable};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::effect::{self, EffectError, EffectRecord, EffectStore, RedbEffectStore};
use crate::store::StoreHandle;
use crate::store::redb::{
    GRANTS, OpenError, REQUESTS, RedbOpenOptions, RedbWriter, STATUS, WriteTables, WriterStats, open_database, opened,
    opened_mut, prepare_schema,
};

use super::transitions::{self, LedgerTables};
use super::{
    ApprovalLedger, Approved, DenialRecord, EffectClaim, GrantEntry, GrantRecord, LedgerError, LedgerReply,
    PruneReport, RequestEntry, RequestRecord, RequestStatus, SpendAttempt, SpendReserved, SpentRecord, oldest_first,
};

/// The durable ledger, in a redb file. Writes are grouped into shared commits by a writer thread; reads
/// run on the caller's thread. Dropping the ledger lets queued writes finish, then stops the writer.
pub struct RedbLedger {
    database: Arc<Database>,
    writer: Arc<RedbWriter>,
}

impl std::fmt::Debug for RedbLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbLedger").field("stats", &self.writer_stats()).finish_non_exhaustive()
    }
}

impl RedbLedger {
    /// Opens (or creates) the ledger file for this process alone, verifying it, without waiting.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, &RedbOpenOptions::default())
    }

    /// Opens (or creates) the ledger file, waiting up to `wait` while another process has it open: for
    /// short-lived processes that take turns with the file.
    pub fn open_with_retry(path: impl AsRef<Path>, wait: Duration) -> Result<Self, OpenError> {
        Self::open_with(path, &RedbOpenOptions::default().wait_if_open(wait))
    }

    /// Opens (or creates) the ledger file with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: &RedbOpenOptions) -> Result<Self, OpenError> {
        Self::from_database(Arc::new(open_database(path, options)?))
    }

    /// A ledger in a database that other stores (audit log, effect records) share. Creates the approval
    /// tables if they are missing.
    ///
    /// The ledger writes through the database's one writer thread, which the effect records and the
    /// audit log of the same `Arc<Database>` share.
    pub fn from_database(database: Arc<Database>) -> Result<Self, OpenError> {
        prepare_schema(&database)?;
        let writer = RedbWriter::for_database(&database).map_err(OpenError::WriterThread)?;
        Ok(RedbLedger { database, writer })
    }

    /// The database, to share with other stores.
    pub fn database(&self) -> &Arc<Database> {
        &self.database
    }

    /// How many commits carried how many writes so far: the database's writer, so the writes of effect
    /// stores and audit logs sharing the database count too.
    pub fn writer_stats(&self) -> WriterStats {
        self.writer.stats()
    }

    fn submit<T: Send + 'static>(
        &self,
        mut run: impl FnMut(&mut WriteTables<'_>) -> Result<T, LedgerError> + Send + 'static,
    ) -> LedgerReply<T> {
        self.writer.op(move |tables| {
            tables.open_ledger()?;
            run(tables)
        })
    }

    fn read<T>(&self, read: impl FnOnce(&ReadTables) -> Result<T, LedgerError>) -> Result<T, LedgerError> {
        let txn = self.database.begin_read().map_err(LedgerError::storage)?;
        let tables = ReadTables {
            requests: txn.open_table(REQUESTS).map_err(LedgerError::storage)?,
            status: txn.open_table(STATUS).map_err(LedgerError::storage)?,
            grants: txn.open_table(GRANTS).map_err(LedgerError::storage)?,
        };
        read(&tables)
    }
}

impl ApprovalLedger for RedbLedger {
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()> {
        self.submit(move |tables| transitions::record_request(tables, request.clone(), max_pending))
    }

    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<Approved> {
        self.submit(move |tables| transitions::grant(tables, grant.clone(), now))
    }

    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        self.submit(move |tables| transitions::deny(tables, denial.clone()))
    }

    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        self.submit(move |tables| transitions::spend(tables, attempt.clone()))
    }

    fn spend_and_reserve(
        &self,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        self.submit(move |tables| transitions::spend_and_reserve(tables, attempt.clone(), &claim))
    }

    fn effects(&self) -> Arc<dyn EffectStore> {
        Arc::new(RedbEffectStore::shared(Arc::clone(&self.database), Arc::clone(&self.writer)))
    }

    fn store_handle(&self) -> Option<StoreHandle> {
        Some(StoreHandle::redb(Arc::clone(&self.writer)))
    }

    fn find_request(&self, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        self.read(|tables| {
            let Some(request) = get::<RequestRecord>(&tables.requests, "requests", request_id)? else {
                return Ok(None);
            };
            let status = get::<RequestStatus>(&tables.status, "status", request_id)?.unwrap_or(RequestStatus::Pending);
            Ok(Some(RequestEntry { request, status }))
        })
    }

    fn list_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        self.read(|tables| {
            let mut entries = Vec::new();
            for item in tables.requests.iter().map_err(LedgerError::storage)? {
                let (key, value) = item.map_err(LedgerError::storage)?;
                let request: RequestRecord = decode("requests", key.value(), value.value())?;
                let status =
                    get::<RequestStatus>(&tables.status, "status", key.value())?.unwrap_or(RequestStatus::Pending);
                entries.push(RequestEntry { request, status });
            }
            oldest_first(&mut entries);
            Ok(entries)
        })
    }

    fn unresolved_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        self.read(|tables| {
            let mut entries = Vec::new();
            // The requests and their statuses read side by side in key order (both tables are keyed by
            // request id), a settled status recognised by its tag without being decoded, and only an
            // unresolved request's status and record decoded.
            let mut statuses = tables.status.iter().map_err(LedgerError::storage)?.peekable();
            for item in tables.requests.iter().map_err(LedgerError::storage)? {
                let (key, value) = item.map_err(LedgerError::storage)?;
                let request_id = key.value();
                let mut found = None;
                while let Some(next) = statuses.peek() {
                    // (An error is taken and reported below.)
                    let order =
                        next.as_ref().map_or(Ordering::Equal, |(status_key, _)| status_key.value().cmp(request_id));
                    if order == Ordering::Greater {
                        break;
                    }
                    let Some(item) = statuses.next() else { break };
                    let (_, bytes) = item.map_err(LedgerError::storage)?;
                    if order == Ordering::Equal {
                        found = Some(bytes);
                        break;
                    }
                }
                let status = match found.as_ref().map(|bytes| bytes.value()) {
                    Some(bytes) if is_settled(bytes) => continue,
                    Some(bytes) => decode::<RequestStatus>("status", request_id, bytes)?,
                    None => RequestStatus::Pending,
                };
                if status.is_unresolved() {
                    let request: RequestRecord = decode("requests", request_id, value.value())?;
                    entries.push(RequestEntry { request, status });
                }
            }
            oldest_first(&mut entries);
            Ok(entries)
        })
    }

    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        self.read(|tables| get::<GrantEntry>(&tables.grants, "grants", grant_id))
    }

    fn prune(&self, cutoff: Duration, now: Duration) -> LedgerReply<PruneReport> {
        self.submit(move |tables| transitions::prune(tables, cutoff, now))
    }
}

// ---- records as JSON bytes ----

fn encode(table: &'static str, key: &str, record: &impl Serialize) -> Result<Vec<u8>, LedgerError> {
    serde_json::to_vec(record).map_err(|err| LedgerError::CorruptRecord {
        table,
        key: key.to_owned(),
        detail: format!("cannot encode: {err}"),
    })
}

/// Whether a status as this ledger writes it is denied or spent, read from its tag
/// ([`SETTLED_STATUS_PREFIXES`](super::records::SETTLED_STATUS_PREFIXES)). Anything else, a status written
/// another way included, is decoded.
fn is_settled(status: &[u8]) -> bool {
    super::records::SETTLED_STATUS_PREFIXES.iter().any(|prefix| status.starts_with(prefix.as_bytes()))
}

fn decode<T: DeserializeOwned>(table: &'static str, key: &str, bytes: &[u8]) -> Result<T, LedgerError> {
    serde_json::from_slice(bytes).map_err(|err| LedgerError::CorruptRecord {
        table,
        key: key.to_owned(),
        detail: err.to_string(),
    })
}

fn get<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &'static str,
    key: &str,
) -> Result<Option<T>, LedgerError> {
    match table.get(key).map_err(LedgerError::storage)? {
        Some(bytes) => decode(name, key, bytes.value()).map(Some),
        None => Ok(None),
    }
}

struct ReadTables {
    requests: ::redb::ReadOnlyTable<&'static str, &'static [u8]>,
    status: ::redb::ReadOnlyTable<&'static str, &'static [u8]>,
    grants: ::redb::ReadOnlyTable<&'static str, &'static [u8]>,
}

impl LedgerTables for WriteTables<'_> {
    fn request(&self, request_id: &str) -> Result<Option<RequestRecord>, LedgerError> {
        get(opened(&self.requests, "requests")?, "requests", request_id)
    }
    fn insert_request(&mut self, request: &RequestRecord) -> Result<(), LedgerError> {
        let bytes = encode("requests", &request.request_id, request)?;
        self.wrote = true;
        opened_mut(&mut self.requests, "requests")?
            .insert(request.request_id.as_str(), bytes.as_slice())
            .map_err(LedgerError::storage)?;
        Ok(())
    }
    fn status(&self, request_id: &str) -> Result<Option<RequestStatus>, LedgerError> {
        get(opened(&self.status, "status")?, "status", request_id)
    }
    fn set_status(&mut self, request_id: &str, status: &RequestStatus) -> Result<(), LedgerError> {
        let bytes = encode("status", request_id, status)?;
        self.wrote = true;
        opened_mut(&mut self.status, "status")?.insert(request_id, bytes.as_slice()).map_err(LedgerError::storage)?;
        Ok(())
    }
    fn grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        get(opened(&self.grants, "grants")?, "grants", grant_id)
    }
    fn set_grant(&mut self, entry: &GrantEntry) -> Result<(), LedgerError> {
        let bytes = encode("grants", &entry.grant.grant_id, entry)?;
        self.wrote = true;
        opened_mut(&mut self.grants, "grants")?
            .insert(entry.grant.grant_id.as_str(), bytes.as_slice())
            .map_err(LedgerError::storage)?;
        Ok(())
    }
    fn pending_in(&self, scope: &str) -> Result<Vec<(String, Option<Duration>)>, LedgerError> {
        let (start, end) = (format!("{scope}\u{0}"), format!("{scope}\u{1}"));
        let mut found = Vec::new();
        for item in
            opened(&self.pending, "pending")?.range(start.as_str()..end.as_str()).map_err(LedgerError::storage)?
        {
            let (key, expires_at) = item.map_err(LedgerError::storage)?;
            let request_id = key.value()[start.len()..].to_owned();
            let expires_at = Some(expires_at.value()).filter(|ms| *ms != u64::MAX).map(Duration::from_millis);
            found.push((request_id, expires_at));
        }
        Ok(found)
    }
    fn add_pending(&mut self, scope: &str, request_id: &str, expires_at: Option<Duration>) -> Result<(), LedgerError> {
        let ms = expires_at.map_or(u64::MAX, |at| u64::try_from(at.as_millis()).unwrap_or(u64::MAX - 1));
        self.wrote = true;
        opened_mut(&mut self.pending, "pending")?
            .insert(format!("{scope}\u{0}{request_id}").as_str(), ms)
            .map_err(LedgerError::storage)?;
        Ok(())
    }
    fn remove_pending(&mut self, scope: &str, request_id: &str) -> Result<(), LedgerError> {
        self.wrote = true;
        opened_mut(&mut self.pending, "pending")?
            .remove(format!("{scope}\u{0}{request_id}").as_str())
            .map_err(LedgerError::storage)?;
        Ok(())
    }
    fn effect(&self, key: &str) -> Result<Option<EffectRecord>, LedgerError> {
        Ok(effect::read_in(self, key)?)
    }
    fn set_effect(&mut self, record: &EffectRecord) -> Result<(), LedgerError> {
        Ok(effect::write_in(self, record)?)
    }
    fn statuses(&self) -> Result<Vec<(String, RequestStatus)>, LedgerError> {
        let mut statuses = Vec::new();
        for item in opened(&self.status, "status")?.iter().map_err(LedgerError::storage)? {
            let (key, value) = item.map_err(LedgerError::storage)?;
            statuses.push((key.value().to_owned(), decode("status", key.value(), value.value())?));
        }
        Ok(statuses)
    }
    fn grants(&self) -> Result<Vec<GrantEntry>, LedgerError> {
        let mut grants = Vec::new();
        for item in opened(&self.grants, "grants")?.iter().map_err(LedgerError::storage)? {
            let (key, value) = item.map_err(LedgerError::storage)?;
            grants.push(decode("grants", key.value(), value.value())?);
        }
        Ok(grants)
    }
    fn remove_request(&mut self, request_id: &str) -> Result<(), LedgerError> {
        self.wrote = true;
        opened_mut(&mut self.requests, "requests")?.remove(request_id).map_err(LedgerError::storage)?;
        opened_mut(&mut self.status, "status")?.remove(request_id).map_err(LedgerError::storage)?;
        Ok(())
    }
    fn remove_grant(&mut self, grant_id: &str) -> Result<(), LedgerError> {
        self.wrote = true;
        opened_mut(&mut self.grants, "grants")?.remove(grant_id).map_err(LedgerError::storage)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tag read without decoding names exactly the statuses that are not unresolved, as this ledger
    /// encodes them; a status written another way (its tag not first) is decoded, so still read right.
    #[test]
    fn a_settled_status_is_recognised_by_its_tag() {
        let grant = crate::ledger::test_grant("g", Duration::from_secs(1), Duration::from_secs(2));
        let denial = DenialRecord {
            request_id: "r".into(),
            denied_by: "bob".into(),
            reason: Some("status\":\"spent".into()),
            denied_at: Duration::from_secs(1),
            revoked_grant: None,
            signature: None,
        };
        let statuses = [
            RequestStatus::Pending,
            RequestStatus::Approving { approvals: Vec::new(), replaces: None },
            RequestStatus::Granted(grant.clone()),
            RequestStatus::Denied(denial),
            RequestStatus::Spent(SpentRecord { grant, spent_at: Duration::from_secs(2) }),
        ];
        for status in statuses {
            let bytes = encode("status", "r", &status).unwrap();
            assert_eq!(is_settled(&bytes), !status.is_unresolved(), "{}", String::from_utf8_lossy(&bytes));
        }
        assert!(!is_settled(br#"{"spent_at":{"secs":2,"nanos":0},"status":"spent"}"#));
    }
}
