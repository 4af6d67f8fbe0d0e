//! Where the records are: a redb file or a PostgreSQL database, opened as `--db` says.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::effect::{EffectStore, RedbEffectStore};
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, RedbLedger};
use agent_airlock::store::{ProcessSharing, RedbOpenOptions, open_database};
use redb::Database;

use crate::{Cli, Failure};

impl Cli {
    /// How a redb file given with `--db` (or another the command names) is opened.
    pub(crate) fn redb_options(&self) -> RedbOpenOptions {
        RedbOpenOptions::default()
            .sharing(if self.multi_process { ProcessSharing::MultiProcess } else { ProcessSharing::Exclusive })
            .wait_if_open(Duration::from_secs(self.wait_secs))
    }
}

/// Where the records are.
pub(crate) enum Storage {
    /// A redb file.
    Redb(Arc<Database>),
    /// A PostgreSQL database.
    Postgres(Arc<PostgresLedger>),
}

impl Storage {
    pub(crate) fn open(cli: &Cli) -> Result<Storage, Failure> {
        if cli.db.starts_with("postgres://") || cli.db.starts_with("postgresql://") {
            // The URL may hold a password: errors name the database by its kind only.
            let ledger = PostgresLedger::connect(&cli.db).map_err(|e| format!("the PostgreSQL database: {e}"))?;
            return Ok(Storage::Postgres(Arc::new(ledger)));
        }
        Ok(Storage::Redb(Arc::new(
            open_database(&cli.db, &cli.redb_options()).map_err(|e| format!("{}: {e}", cli.db))?,
        )))
    }

    pub(crate) fn ledger(&self) -> Result<Arc<dyn ApprovalLedger>, Failure> {
        Ok(match self {
            Storage::Redb(database) => {
                Arc::new(RedbLedger::from_database(Arc::clone(database)).map_err(|e| e.to_string())?)
            }
            Storage::Postgres(ledger) => Arc::clone(ledger) as Arc<dyn ApprovalLedger>,
        })
    }

    pub(crate) fn effects(&self) -> Result<Arc<dyn EffectStore>, Failure> {
        Ok(match self {
            Storage::Redb(database) => Arc::new(RedbEffectStore::new(Arc::clone(database)).map_err(|e| e.to_string())?),
            Storage::Postgres(ledger) => Arc::new(ledger.effect_store()),
        })
    }

    /// The audit log of the redb file at `path` (a gateway's `--audit`), opened as `--db` is; created if missing.
    pub(crate) fn audit_database(cli: &Cli, path: &Path, config: AuditConfig) -> Result<AuditLog, Failure> {
        let database = open_database(path, &cli.redb_options()).map_err(|e| format!("{}: {e}", path.display()))?;
        AuditLog::with_database(Arc::new(database), config).map_err(|e| e.to_string())
    }

    pub(crate) fn audit(&self, config: AuditConfig) -> Result<AuditLog, Failure> {
        match self {
            Storage::Redb(database) => AuditLog::with_database(Arc::clone(database), config).map_err(|e| e.to_string()),
            Storage::Postgres(ledger) => Ok(AuditLog::with_postgres(ledger, config)),
        }
    }
}
