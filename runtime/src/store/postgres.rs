//! The PostgreSQL engine (feature `postgres`): a pool and the small runtime that drives it, the schema and
//! its migrations, and one transaction per write, run again after a conflict.
//!
//! **Retries.** A transaction that meets another on a primary key, a deadlock or a serialization failure
//! is rolled back and run again from the start (at most 16 times): nothing of it was committed. A refusal
//! by a subsystem's rules writes nothing and rolls back; a fault rolls back too.
//!
//! **Async.** A write answers through a [`Reply`] filled by the store's runtime: awaiting it never
//! blocks the caller's executor. The effect-store methods and the ledger's reads are synchronous in their
//! traits, so they wait for the runtime like the redb stores wait for their file.
//!
//! **Schema.** The tables are created and upgraded at open by embedded, numbered migrations, applied in
//! one transaction under `pg_advisory_xact_lock`; the versions applied are rows of
//! `airlock_schema_version`. A database with a version newer than this build knows is refused
//! ([`PostgresOpenError::SchemaTooNew`]), never used.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use tokio::runtime::Handle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

mod tls;

use super::{Fault, Reply, StoreError};

/// The newest schema version this build knows (the number of its last migration).
pub const POSTGRES_SCHEMA_VERSION: i64 = 5;

/// The embedded migrations, in order: `(version, SQL)`. A released migration is never edited; a change
/// is a new one.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        r#"
CREATE TABLE airlock_requests (
    request_id text COLLATE "C" PRIMARY KEY,
    record     text NOT NULL,
    status     text
);
CREATE TABLE airlock_grants (
    grant_id   text COLLATE "C" PRIMARY KEY,
    request_id text COLLATE "C" NOT NULL,
    entry      text NOT NULL
);
CREATE INDEX airlock_grants_by_request ON airlock_grants (request_id);
CREATE TABLE airlock_effects (
    effect_key text COLLATE "C" PRIMARY KEY,
    record     text NOT NULL
);
"#,
    ),
    (
        2,
        r#"
-- Pending requests by tool and thread, for the pending limit (`max_pending`). The scope is hex: it holds a
-- NUL, which a text column cannot.
CREATE TABLE airlock_pending (
    scope         text COLLATE "C" NOT NULL,
    request_id    text COLLATE "C" NOT NULL,
    expires_at_ms bigint,
    PRIMARY KEY (scope, request_id)
);
"#,
    ),
    (
        3,
        r#"
-- The audit log: its records by position, and its one head (the last record's position and hash,
-- signed), advanced in the same transaction as the records.
CREATE TABLE airlock_audit_records (
    seq    bigint PRIMARY KEY,
    record bytea NOT NULL
);
CREATE TABLE airlock_audit_head (
    id   smallint PRIMARY KEY CHECK (id = 1),
    head bytea NOT NULL
);
"#,
    ),
    (
        4,
        r#"
-- Rate buckets shared by every host (policy rules marked shared): when each bucket is full again, in
-- nanoseconds since the Unix epoch on the database's clock. A missing row is a full bucket, so rows whose
-- `full_at` has passed can be deleted at any time.
CREATE TABLE airlock_rate_buckets (
    bucket_key text COLLATE "C" PRIMARY KEY,
    full_at    bigint NOT NULL
);
"#,
    ),
    (
        5,
        r#"
-- Checkpoint commitments (the `checkpoint` module): each checkpoint's latest commitment under
-- `<scope>#<checkpoint id>`, and each scope's head under the scope itself; the value is the commitment's JSON.
CREATE TABLE airlock_checkpoint_commitments (
    commitment_key text COLLATE "C" PRIMARY KEY,
    commitment     text NOT NULL
);
"#,
    ),
];

/// The advisory lock taken while migrations run (any 64-bit number unlikely to be used by others).
const MIGRATION_LOCK: i64 = 0x6169_726c_6f63_6b31; // "airlock1"

/// How often a write is run again after a unique violation, a deadlock or a serialization failure.
const MAX_ATTEMPTS: usize = 16;

/// How to connect.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Most connections the pool keeps open.
    pub pool_size: usize,
    /// How long a write waits for a connection (pool exhausted, or the server is unreachable) before it
    /// is refused with a storage error.
    pub connect_timeout: Duration,
    /// The CA certificates (a PEM file) that a TLS connection trusts when the connection string asks for
    /// TLS (`sslmode=require`, `verify-ca` or `verify-full`) without naming its own (`sslrootcert=FILE`).
    /// `None`: the system's root certificates. Giving a CA file with a connection string that does not ask
    /// for TLS is refused at open ([`PostgresOpenError::Tls`]).
    pub tls_root_cert: Option<std::path::PathBuf>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions { pool_size: 16, connect_timeout: Duration::from_secs(10), tls_root_cert: None }
    }
}

/// Why a PostgreSQL ledger could not be opened. Nothing was changed in the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresOpenError {
    /// The connection string could not be parsed.
    #[error("invalid PostgreSQL connection string: {0}")]
    Config(#[source] tokio_postgres::Error),
    /// The connection string's TLS settings (`sslmode`, `sslrootcert`) or the CA file cannot be used.
    #[error("cannot set up TLS to PostgreSQL: {0}")]
    Tls(String),
    /// The pool could not be built.
    #[error("cannot build the PostgreSQL connection pool: {0}")]
    Pool(String),
    /// The server could not be reached, or refused the connection.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(String),
    /// Creating or upgrading the tables failed.
    #[error("cannot apply the ledger's schema migrations: {0}")]
    Migration(#[source] tokio_postgres::Error),
    /// The database holds a schema newer than this build knows: a newer version of agent-airlock
    /// migrated it.
    #[error(
        "the database holds agent-airlock schema version {found}, newer than version {POSTGRES_SCHEMA_VERSION} that this build knows: upgrade agent-airlock, or use another database"
    )]
    SchemaTooNew {
        /// The version found in `airlock_schema_version`.
        found: i64,
    },
    /// The ledger's runtime could not be started.
    #[error("cannot start the PostgreSQL ledger's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The runtime stopped before the open finished.
    #[error("the PostgreSQL ledger's runtime stopped while opening")]
    Stopped,
}

/// What the ledger and its effect store share: the pool and the runtime that drives it.
pub(crate) struct Shared {
    pub(crate) pool: Pool,
    pub(crate) handle: Handle,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // May run inside another runtime (an async test): do not wait for the blocking pool.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Connects to `url` with `options`, and creates or upgrades the tables. Blocks until the database
/// answered.
pub(crate) fn connect(url: &str, options: &PostgresOptions) -> Result<Arc<Shared>, PostgresOpenError> {
    let settings = tls::settings(url, options)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("airlock-postgres")
        .enable_all()
        .build()
        .map_err(PostgresOpenError::Runtime)?;
    let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
    let manager = match settings.tls {
        Some(tls) => Manager::from_config(settings.config, tls, manager_config),
        None => Manager::from_config(settings.config, NoTls, manager_config),
    };
    let pool = Pool::builder(manager)
        .max_size(options.pool_size.max(1))
        .wait_timeout(Some(options.connect_timeout))
        .create_timeout(Some(options.connect_timeout))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|err| PostgresOpenError::Pool(err.to_string()))?;
    let shared = Arc::new(Shared { pool, handle: runtime.handle().clone(), runtime: Some(runtime) });
    let (answer, migrated) = std::sync::mpsc::channel();
    let pool = shared.pool.clone();
    shared.handle.spawn(async move {
        let _ = answer.send(migrate(&pool).await);
    });
    migrated.recv().map_err(|_| PostgresOpenError::Stopped)??;
    Ok(shared)
}

/// Runs `op` in one transaction on a blocking thread of the store's runtime, retrying it from the start
/// after a unique violation, a deadlock or a serialization failure.
pub(crate) fn write<T: Send + 'static, E: Fault>(
    shared: &Shared,
    op: impl Fn(&mut PgTables<'_, '_>) -> Result<T, E> + Send + 'static,
) -> Reply<T, E> {
    let (sender, reply) = Reply::fault_channel();
    let pool = shared.pool.clone();
    let handle = shared.handle.clone();
    // If the runtime is shut down, the closure and its sender are dropped: the reply says the writer stopped.
    drop(shared.handle.spawn_blocking(move || sender.send(run_transaction(&handle, &pool, &op))));
    reply
}

/// Like [`write`], for an `op` that can be written any number of times with the same result: after a
/// fault (the server unreachable, a connection lost, even during `COMMIT`), it is run again, with pauses
/// from 50 ms doubling to 1 s, until it is written or `patience` has passed.
pub(crate) fn write_patiently<T: Send + 'static, E: Fault>(
    shared: &Shared,
    op: impl Fn(&mut PgTables<'_, '_>) -> Result<T, E> + Send + 'static,
    patience: Duration,
) -> Reply<T, E> {
    let (sender, reply) = Reply::fault_channel();
    let pool = shared.pool.clone();
    let handle = shared.handle.clone();
    drop(shared.handle.spawn_blocking(move || {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            match run_transaction(&handle, &pool, &op) {
                Err(fault) if fault.is_fault() && started.elapsed() + pause < patience => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                answer => return sender.send(answer),
            }
        }
    }));
    reply
}

fn run_transaction<T, E: Fault>(
    handle: &Handle,
    pool: &Pool,
    op: &impl Fn(&mut PgTables<'_, '_>) -> Result<T, E>,
) -> Result<T, E> {
    let mut client = handle.block_on(pool.get()).map_err(|err| E::from_store(pool_error(&err)))?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let txn = handle.block_on(client.transaction()).map_err(|err| E::from_store(StoreError::storage(err)))?;
        let mut tables =
            PgTables { txn, handle, existing_grants: RefCell::default(), existing_effects: RefCell::default() };
        let outcome = op(&mut tables);
        let PgTables { txn, .. } = tables;
        let result = match outcome {
            Ok(value) => handle.block_on(txn.commit()).map(|()| value).map_err(StoreError::storage),
            // A refusal wrote nothing: nothing to keep, nothing to retry.
            Err(refusal) if !refusal.is_fault() => {
                let _ = handle.block_on(txn.rollback());
                return Err(refusal);
            }
            // A fault may have written: nothing is kept.
            Err(fault) => {
                let _ = handle.block_on(txn.rollback());
                Err(fault.into_store())
            }
        };
        match result {
            Err(err) if attempt < MAX_ATTEMPTS && retryable(&err) => {}
            other => return other.map_err(E::from_store),
        }
    }
}

/// Whether the transaction was aborted by a conflict with another one, so that running it again is safe
/// and may succeed (nothing of it was committed).
fn retryable(err: &StoreError) -> bool {
    let StoreError::Storage(source) = err else { return false };
    let Some(code) = source.downcast_ref::<tokio_postgres::Error>().and_then(tokio_postgres::Error::code) else {
        return false;
    };
    [SqlState::UNIQUE_VIOLATION, SqlState::T_R_DEADLOCK_DETECTED, SqlState::T_R_SERIALIZATION_FAILURE].contains(code)
}

/// A connection from the pool, for a read outside a write's transaction.
pub(crate) async fn client(pool: &Pool) -> Result<deadpool_postgres::Object, StoreError> {
    pool.get().await.map_err(|err| pool_error(&err))
}

fn pool_error(err: &(impl std::error::Error + 'static)) -> StoreError {
    StoreError::storage(PoolError(with_causes(err)))
}

/// `err` and its causes, as one line: deadpool and tokio-postgres show a TLS or I/O failure's reason
/// (an untrusted certificate, a refused connection) only as a cause.
fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        let shown = next.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        cause = next.source();
    }
    text
}

/// A pool error, as text (deadpool's error is generic over the manager's).
#[derive(Debug, thiserror::Error)]
#[error("no PostgreSQL connection: {0}")]
struct PoolError(String);

async fn migrate(pool: &Pool) -> Result<(), PostgresOpenError> {
    let mut client = pool.get().await.map_err(|err| PostgresOpenError::Connect(with_causes(&err)))?;
    let txn = client.transaction().await.map_err(PostgresOpenError::Migration)?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(PostgresOpenError::Migration)?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS airlock_schema_version (
            version    bigint PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(PostgresOpenError::Migration)?;
    let found: i64 = txn
        .query_one("SELECT coalesce(max(version), 0) FROM airlock_schema_version", &[])
        .await
        .map_err(PostgresOpenError::Migration)?
        .get(0);
    if found > POSTGRES_SCHEMA_VERSION {
        return Err(PostgresOpenError::SchemaTooNew { found });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(version, _)| *version > found) {
        txn.batch_execute(sql).await.map_err(PostgresOpenError::Migration)?;
        txn.execute("INSERT INTO airlock_schema_version (version) VALUES ($1)", &[version])
            .await
            .map_err(PostgresOpenError::Migration)?;
    }
    txn.commit().await.map_err(PostgresOpenError::Migration)
}

/// One write's transaction: the ledger's and the effect records' tables. Every read locks the rows it
/// returns.
pub(crate) struct PgTables<'h, 'c> {
    txn: Transaction<'c>,
    handle: &'h Handle,
    /// Grants and effects read in this transaction (and so locked): written with `UPDATE`; others are new
    /// and written with `INSERT`, which a concurrent insert of the same id makes fail (and retry).
    pub(crate) existing_grants: RefCell<HashSet<String>>,
    pub(crate) existing_effects: RefCell<HashSet<String>>,
}

impl PgTables<'_, '_> {
    /// The rows `sql` selects.
    pub(crate) fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        self.handle
            .block_on(async {
                let statement = self.txn.prepare_cached(sql).await?;
                self.txn.query(&statement, params).await
            })
            .map_err(StoreError::storage)
    }

    /// Runs `sql`; the number of rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        self.handle
            .block_on(async {
                let statement = self.txn.prepare_cached(sql).await?;
                self.txn.execute(&statement, params).await
            })
            .map_err(StoreError::storage)
    }

    /// The one text column of the one row `sql` selects, if any.
    pub(crate) fn text(&self, sql: &str, key: &str) -> Result<Option<Option<String>>, StoreError> {
        Ok(self.query(sql, &[&key])?.first().map(|row| row.get(0)))
    }
}
