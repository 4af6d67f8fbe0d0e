//! The approval ledger and the effect records on a PostgreSQL server, for several hosts sharing one
//! deployment's approvals (feature `postgres`).
//!
//! **One state machine.** Every write runs the same transitions as the memory and redb ledgers
//! (`transitions`, `effect::transition`) inside one PostgreSQL transaction. The transitions are
//! synchronous, so each write runs on a blocking thread of the ledger's own tokio runtime, and every row
//! a transition reads is read with `SELECT … FOR UPDATE`: the row stays locked until `COMMIT`, so a
//! second spender of the same grant waits and then reads the spent grant. A row that does not exist yet
//! cannot be locked; two writers inserting the same id meet on the primary key, and the loser's
//! transaction is rolled back and run again from the start (as are deadlocks and serialization
//! failures), where it reads the winner's row. A refusal by the rules writes nothing and rolls back.
//!
//! **Lock order.** Reading a grant first locks its request's row, then the grant's: every transition
//! locks a request before its grants, so a spend and a denial of one request do not deadlock. Recording
//! a request under a pending limit counts rows that concurrent recorders are about to insert, so the
//! recorders of one tool and thread take turns on a transaction-scoped advisory lock.
//!
//! The pool, the runtime, the schema and the retries are the engine's ([`crate::store`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;

use crate::effect::{self, EffectError, EffectRecord, EffectStore, PostgresEffectStore};
use crate::store::StoreHandle;
use crate::store::postgres::{self, PgTables, PostgresOpenError, PostgresOptions, Shared};

use super::records::SETTLED_STATUS_PREFIXES;
use super::transitions::{self, LedgerTables};
use super::{
    ApprovalLedger, Approved, DenialRecord, EffectClaim, GrantEntry, GrantRecord, LedgerError, LedgerReply,
    PruneReport, RequestEntry, RequestRecord, RequestStatus, SpendAttempt, SpendReserved, SpentRecord, oldest_first,
};

/// The approval ledger in a PostgreSQL database, shared by every host that connects to it: a grant is
/// spent once across all of them. Its effect records ([`ApprovalLedger::effects`]) live in the same
/// database, so [`ApprovalLedger::spend_and_reserve`] is one transaction.
///
/// Each ledger value owns a connection pool and a small tokio runtime (one worker thread and a blocking
/// pool) that runs its transactions. Open one per process and share it (it is `Send + Sync`).
pub struct PostgresLedger {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLedger").field("pool", &self.shared.pool.status()).finish_non_exhaustive()
    }
}

impl PostgresLedger {
    /// Connects to `url` (a `postgresql://…` URL or a `key=value` connection string; a Unix socket is
    /// `host=/run/postgresql`) with the default options, and creates or upgrades the tables.
    ///
    /// Blocks the calling thread until the database answered; from async code, call it in
    /// `spawn_blocking`.
    pub fn connect(url: &str) -> Result<Self, PostgresOpenError> {
        Self::connect_with(url, &PostgresOptions::default())
    }

    /// Connects to `url` with `options`. See [`connect`](Self::connect).
    pub fn connect_with(url: &str, options: &PostgresOptions) -> Result<Self, PostgresOpenError> {
        Ok(PostgresLedger { shared: postgres::connect(url, options)? })
    }

    /// The pool and runtime this ledger writes through, shared with its effect records and an audit log.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Rate buckets in this ledger's database, shared by every host that connects to it (policy rules marked
    /// shared), on the database's clock: give them to
    /// [`DispatcherBuilder::shared_rates`](crate::DispatcherBuilder::shared_rates). A dispatcher whose ledger is
    /// this one finds them without being told.
    pub fn shared_rate_buckets(&self) -> crate::store::SharedRateBuckets {
        crate::store::SharedRateBuckets::postgres(self.shared())
    }

    /// The effect records in this ledger's database (the same store [`ApprovalLedger::effects`] returns).
    pub fn effect_store(&self) -> PostgresEffectStore {
        PostgresEffectStore::new(self.shared.clone())
    }

    fn write<T: Send + 'static>(
        &self,
        op: impl Fn(&mut PgTables<'_, '_>) -> Result<T, LedgerError> + Send + 'static,
    ) -> LedgerReply<T> {
        postgres::write(&self.shared, op)
    }

    fn read<T, F>(&self, read: impl FnOnce(Pool) -> F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, LedgerError>> + Send + 'static,
    {
        let (sender, reply) = LedgerReply::channel();
        let future = read(self.shared.pool.clone());
        self.shared.handle.spawn(async move { sender.send(future.await) });
        reply.wait()
    }
}

fn encode<T: Serialize>(value: &T) -> String {
    // Strings, integers and plain enums: serialization cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

fn decode<T: DeserializeOwned>(table: &'static str, key: &str, text: &str) -> Result<T, LedgerError> {
    serde_json::from_str(text).map_err(|err| LedgerError::CorruptRecord {
        table,
        key: key.to_owned(),
        detail: err.to_string(),
    })
}

impl LedgerTables for PgTables<'_, '_> {
    fn request(&self, request_id: &str) -> Result<Option<RequestRecord>, LedgerError> {
        match self.text("SELECT record FROM airlock_requests WHERE request_id = $1 FOR UPDATE", request_id)? {
            Some(Some(record)) => decode("requests", request_id, &record).map(Some),
            _ => Ok(None),
        }
    }

    fn insert_request(&mut self, request: &RequestRecord) -> Result<(), LedgerError> {
        self.execute(
            "INSERT INTO airlock_requests (request_id, record) VALUES ($1, $2)",
            &[&request.request_id, &encode(request)],
        )?;
        Ok(())
    }

    fn status(&self, request_id: &str) -> Result<Option<RequestStatus>, LedgerError> {
        match self.text("SELECT status FROM airlock_requests WHERE request_id = $1 FOR UPDATE", request_id)? {
            Some(Some(status)) => decode("status", request_id, &status).map(Some),
            _ => Ok(None),
        }
    }

    fn set_status(&mut self, request_id: &str, status: &RequestStatus) -> Result<(), LedgerError> {
        let changed = self.execute(
            "UPDATE airlock_requests SET status = $2 WHERE request_id = $1",
            &[&request_id, &encode(status)],
        )?;
        if changed == 1 {
            Ok(())
        } else {
            Err(LedgerError::CorruptRecord {
                table: "status",
                key: request_id.to_owned(),
                detail: "a status for a request that is not recorded".to_owned(),
            })
        }
    }

    fn grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        // Lock the request first (the order every transition follows), then the grant.
        let Some(Some(request_id)) =
            self.text("SELECT request_id FROM airlock_grants WHERE grant_id = $1", grant_id)?
        else {
            return Ok(None);
        };
        self.query("SELECT 1 FROM airlock_requests WHERE request_id = $1 FOR UPDATE", &[&request_id])?;
        match self.text("SELECT entry FROM airlock_grants WHERE grant_id = $1 FOR UPDATE", grant_id)? {
            Some(Some(entry)) => {
                self.existing_grants.borrow_mut().insert(grant_id.to_owned());
                decode::<GrantEntry>("grants", grant_id, &entry).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn set_grant(&mut self, entry: &GrantEntry) -> Result<(), LedgerError> {
        let grant_id = &entry.grant.grant_id;
        if self.existing_grants.borrow().contains(grant_id) {
            self.execute("UPDATE airlock_grants SET entry = $2 WHERE grant_id = $1", &[grant_id, &encode(entry)])?;
        } else {
            self.execute(
                "INSERT INTO airlock_grants (grant_id, request_id, entry) VALUES ($1, $2, $3)",
                &[grant_id, &entry.grant.request_id, &encode(entry)],
            )?;
            self.existing_grants.borrow_mut().insert(grant_id.clone());
        }
        Ok(())
    }

    fn pending_in(&self, scope: &str) -> Result<Vec<(String, Option<Duration>)>, LedgerError> {
        // Rows not inserted yet cannot be locked: recorders of one scope take turns on an advisory lock
        // (held to the end of the transaction), so the count and the insert are one step.
        let scope = hex::encode(scope);
        self.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&scope])?;
        let rows = self.query(
            "SELECT request_id, expires_at_ms FROM airlock_pending WHERE scope = $1 ORDER BY request_id FOR UPDATE",
            &[&scope],
        )?;
        Ok(rows
            .iter()
            .map(|row| {
                let expires_at: Option<i64> = row.get(1);
                (row.get(0), expires_at.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
            })
            .collect())
    }

    fn add_pending(&mut self, scope: &str, request_id: &str, expires_at: Option<Duration>) -> Result<(), LedgerError> {
        let ms = expires_at.map(|at| i64::try_from(at.as_millis()).unwrap_or(i64::MAX));
        self.execute(
            "INSERT INTO airlock_pending (scope, request_id, expires_at_ms) VALUES ($1, $2, $3)",
            &[&hex::encode(scope), &request_id, &ms],
        )?;
        Ok(())
    }

    fn remove_pending(&mut self, scope: &str, request_id: &str) -> Result<(), LedgerError> {
        self.execute(
            "DELETE FROM airlock_pending WHERE scope = $1 AND request_id = $2",
            &[&hex::encode(scope), &request_id],
        )?;
        Ok(())
    }

    fn effect(&self, key: &str) -> Result<Option<EffectRecord>, LedgerError> {
        Ok(effect::read_locked_postgres(self, key)?)
    }

    fn set_effect(&mut self, record: &EffectRecord) -> Result<(), LedgerError> {
        Ok(effect::write_postgres(self, record)?)
    }

    fn statuses(&self) -> Result<Vec<(String, RequestStatus)>, LedgerError> {
        let rows = self.query(
            "SELECT request_id, status FROM airlock_requests WHERE status IS NOT NULL ORDER BY request_id FOR UPDATE",
            &[],
        )?;
        rows.iter()
            .map(|row| {
                let request_id: String = row.get(0);
                let status: String = row.get(1);
                decode("status", &request_id, &status).map(|status| (request_id, status))
            })
            .collect()
    }

    fn grants(&self) -> Result<Vec<GrantEntry>, LedgerError> {
        let rows = self.query("SELECT grant_id, entry FROM airlock_grants ORDER BY grant_id FOR UPDATE", &[])?;
        rows.iter()
            .map(|row| {
                let grant_id: String = row.get(0);
                let entry: String = row.get(1);
                decode("grants", &grant_id, &entry)
            })
            .collect()
    }

    fn remove_request(&mut self, request_id: &str) -> Result<(), LedgerError> {
        self.execute("DELETE FROM airlock_requests WHERE request_id = $1", &[&request_id])?;
        Ok(())
    }

    fn remove_grant(&mut self, grant_id: &str) -> Result<(), LedgerError> {
        self.execute("DELETE FROM airlock_grants WHERE grant_id = $1", &[&grant_id])?;
        self.existing_grants.borrow_mut().remove(grant_id);
        Ok(())
    }
}

impl ApprovalLedger for PostgresLedger {
    fn record_request(&self, request: RequestRecord, max_pending: Option<u32>) -> LedgerReply<()> {
        self.write(move |tables| transitions::record_request(tables, request.clone(), max_pending))
    }

    fn grant(&self, grant: GrantRecord, now: Duration) -> LedgerReply<Approved> {
        self.write(move |tables| transitions::grant(tables, grant.clone(), now))
    }

    fn deny(&self, denial: DenialRecord) -> LedgerReply<DenialRecord> {
        self.write(move |tables| transitions::deny(tables, denial.clone()))
    }

    fn spend(&self, attempt: SpendAttempt) -> LedgerReply<SpentRecord> {
        self.write(move |tables| transitions::spend(tables, attempt.clone()))
    }

    fn spend_and_reserve(
        &self,
        attempt: SpendAttempt,
        claim: EffectClaim,
    ) -> LedgerReply<Result<SpendReserved, EffectError>> {
        self.write(move |tables| transitions::spend_and_reserve(tables, attempt.clone(), &claim))
    }

    fn effects(&self) -> Arc<dyn EffectStore> {
        Arc::new(self.effect_store())
    }

    fn store_handle(&self) -> Option<StoreHandle> {
        Some(StoreHandle::postgres(Arc::clone(&self.shared)))
    }

    fn find_request(&self, request_id: &str) -> Result<Option<RequestEntry>, LedgerError> {
        let request_id = request_id.to_owned();
        self.read(|pool| async move {
            let client = get_client(&pool).await?;
            let row = client
                .query_opt("SELECT record, status FROM airlock_requests WHERE request_id = $1", &[&request_id])
                .await
                .map_err(LedgerError::storage)?;
            row.map(|row| entry_of(&request_id, &row)).transpose()
        })
    }

    fn list_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        self.read(|pool| async move {
            let client = get_client(&pool).await?;
            let rows = client
                .query("SELECT request_id, record, status FROM airlock_requests", &[])
                .await
                .map_err(LedgerError::storage)?;
            let mut entries = rows
                .iter()
                .map(|row| {
                    let request_id: String = row.get(0);
                    let record: String = row.get(1);
                    let status: Option<String> = row.get(2);
                    entry_from(&request_id, &record, status.as_deref())
                })
                .collect::<Result<Vec<_>, _>>()?;
            oldest_first(&mut entries);
            Ok(entries)
        })
    }

    fn unresolved_requests(&self) -> Result<Vec<RequestEntry>, LedgerError> {
        self.read(|pool| async move {
            let client = get_client(&pool).await?;
            // The statuses of the requests not settled (a denied or spent status, as this ledger writes it, is
            // recognised by its tag where the rows are, as the redb ledger does), then the records of the
            // unresolved ones only.
            let rows = client
                .query(
                    "SELECT request_id, status FROM airlock_requests \
                     WHERE status IS NULL OR NOT (starts_with(status, $1) OR starts_with(status, $2))",
                    &[&SETTLED_STATUS_PREFIXES[0], &SETTLED_STATUS_PREFIXES[1]],
                )
                .await
                .map_err(LedgerError::storage)?;
            let mut statuses = std::collections::HashMap::new();
            for row in &rows {
                let request_id: String = row.get(0);
                let status: Option<&str> = row.get(1);
                let status = match status {
                    Some(status) => decode("status", &request_id, status)?,
                    None => RequestStatus::Pending,
                };
                if status.is_unresolved() {
                    statuses.insert(request_id, status);
                }
            }
            if statuses.is_empty() {
                return Ok(Vec::new());
            }
            let ids: Vec<&str> = statuses.keys().map(String::as_str).collect();
            let rows = client
                .query("SELECT request_id, record FROM airlock_requests WHERE request_id = ANY($1)", &[&ids])
                .await
                .map_err(LedgerError::storage)?;
            let mut entries = Vec::with_capacity(rows.len());
            for row in &rows {
                let request_id: &str = row.get(0);
                let record: &str = row.get(1);
                // A status read by the first query: a request decided in between keeps the status it had then.
                let Some(status) = statuses.get(request_id) else { continue };
                entries.push(RequestEntry { request: decode("requests", request_id, record)?, status: status.clone() });
            }
            oldest_first(&mut entries);
            Ok(entries)
        })
    }

    fn find_grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError> {
        let grant_id = grant_id.to_owned();
        self.read(|pool| async move {
            let client = get_client(&pool).await?;
            let row = client
                .query_opt("SELECT entry FROM airlock_grants WHERE grant_id = $1", &[&grant_id])
                .await
                .map_err(LedgerError::storage)?;
            row.map(|row| decode("grants", &grant_id, row.get::<_, &str>(0))).transpose()
        })
    }

    fn prune(&self, cutoff: Duration, now: Duration) -> LedgerReply<PruneReport> {
        self.write(move |tables| transitions::prune(tables, cutoff, now))
    }
}

async fn get_client(pool: &Pool) -> Result<deadpool_postgres::Object, LedgerError> {
    Ok(postgres::client(pool).await?)
}

fn entry_of(request_id: &str, row: &Row) -> Result<RequestEntry, LedgerError> {
    let record: &str = row.get(0);
    let status: Option<&str> = row.get(1);
    entry_from(request_id, record, status)
}

fn entry_from(request_id: &str, record: &str, status: Option<&str>) -> Result<RequestEntry, LedgerError> {
    Ok(RequestEntry {
        request: decode("requests", request_id, record)?,
        status: match status {
            Some(status) => decode("status", request_id, status)?,
            None => RequestStatus::Pending,
        },
    })
}
