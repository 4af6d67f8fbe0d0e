//! `airlock effects list | resolve`: effect records, and an ambiguous one resolved by an operator with
//! the resolution in the audit log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_airlock::approval::display::escape;
use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use agent_airlock::effect::{
    EffectError, EffectFilter, EffectRecord, EffectState, EffectStatus, EffectStore, Resolution,
};
use agent_airlock::{Clock, SystemClock};
use clap::{Subcommand, ValueEnum};

use serde_json::{Value, json};

use crate::keys::{AuditKeySource, audit_key};
use crate::output::{print_json, when};
use crate::{Cli, Failure, Storage};

#[derive(Subcommand)]
pub(crate) enum EffectsCommand {
    /// Effect records in key order.
    List {
        /// Only ambiguous ones (what an operator must resolve).
        #[arg(long)]
        ambiguous: bool,
    },
    /// Say whether an ambiguous effect happened; recorded in the effect record and the audit log under
    /// the operator's name. A reservation whose call may still be running (its lease, renewed while the
    /// call runs, has not lapsed) cannot be resolved.
    Resolve {
        /// The effect key, e.g. `refund:pi_1`.
        key: String,
        /// What really happened.
        #[arg(long, value_enum)]
        outcome: ResolvedAs,
        /// Who resolves it (recorded in the effect record and the audit log).
        #[arg(long, visible_alias = "by", env = "AIRLOCK_OPERATOR", value_name = "NAME")]
        operator: String,
        /// Record the resolution in this append-only audit file (the gateway's `airlock mcp --audit-file`)
        /// instead of `--db`'s log: it must exist, and the gateway may be writing it.
        #[arg(long, value_name = "PATH")]
        audit_file: Option<PathBuf>,
        /// Record the resolution in this redb file's audit log (the gateway's `airlock mcp --audit`) instead
        /// of `--db`'s: it must exist, and is opened as `--db` is (`--multi-process` beside a running gateway).
        #[arg(long, value_name = "PATH", conflicts_with = "audit_file")]
        audit: Option<PathBuf>,
        #[command(flatten)]
        audit_key: AuditKeySource,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ResolvedAs {
    /// The effect happened: later calls are duplicates.
    Committed,
    /// The effect did not happen: a retry may run.
    Failed,
}

/// `airlock effects list | resolve`.
pub(crate) fn run(cli: &Cli, command: &EffectsCommand) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let now = SystemClock.now();
    let store = storage.effects()?;
    match command {
        EffectsCommand::List { ambiguous } => {
            let filter = if *ambiguous { EffectFilter::ambiguous() } else { EffectFilter::all() };
            let records = store.list(&filter, now).map_err(|e| e.to_string())?;
            if cli.json {
                print_json(&Value::Array(records.iter().map(|r| effect_json(r, now)).collect()));
            } else if records.is_empty() {
                println!("no effect records");
            } else {
                for r in &records {
                    println!("{}", effect_line(r, now));
                }
            }
        }
        EffectsCommand::Resolve { key, outcome, operator, audit_file, audit, audit_key: key_source } => {
            let resolution = match outcome {
                ResolvedAs::Committed => Resolution::Committed,
                ResolvedAs::Failed => Resolution::Failed,
            };
            // The log is opened (and its key checked) before anything changes.
            let target = match (audit_file, audit) {
                (Some(path), _) => AuditTarget::File(path),
                (None, Some(path)) => AuditTarget::Redb(path),
                (None, None) => AuditTarget::Storage,
            };
            let log = resolution_log(cli, &storage, target, key_source)?;
            let record = resolve_effect(&*store, &log, key, resolution, operator, now)?;
            if cli.json {
                print_json(&effect_json(&record, now));
            } else {
                println!(
                    "{} is now {}, resolved by {}",
                    escape(&record.key),
                    status_word(record.status_at(now)),
                    escape(operator)
                );
            }
        }
    }
    Ok(())
}

pub(crate) fn status_word(status: EffectStatus) -> &'static str {
    match status {
        EffectStatus::Reserved => "reserved",
        EffectStatus::Committed => "committed",
        EffectStatus::Failed => "failed",
        EffectStatus::Ambiguous => "ambiguous",
    }
}

/// One effect record for a person: its status, key, attempt, when it last changed, and who resolved it.
pub(crate) fn effect_line(record: &EffectRecord, now: Duration) -> String {
    let mut line = format!(
        "{:<10}  {}  (attempt {})  updated {}",
        status_word(record.status_at(now)),
        escape(&record.key),
        record.attempt,
        when(now, record.updated_at)
    );
    if let EffectState::Reserved { lease_until } = record.state
        && record.status_at(now) == EffectStatus::Reserved
    {
        line.push_str(&format!("  lease until {}", when(now, lease_until)));
    }
    if let Some(operator) = &record.resolved_by {
        line.push_str(&format!("  resolved by {}", escape(operator)));
    }
    line
}

/// Which audit log a resolution goes to.
pub(crate) enum AuditTarget<'a> {
    /// `--db`'s.
    Storage,
    /// A gateway's append-only audit file (`airlock mcp --audit-file`).
    File(&'a Path),
    /// A gateway's separate redb audit file (`airlock mcp --audit`).
    Redb(&'a Path),
}

/// The audit log a resolution is recorded in, refused when it cannot be signed as the log's records are (an
/// unsigned record in a signed log reads as tampering).
pub(crate) fn resolution_log(
    cli: &Cli,
    storage: &Storage,
    target: AuditTarget<'_>,
    source: &AuditKeySource,
) -> Result<AuditLog, Failure> {
    let key = audit_key(source)?;
    let signed = key.is_some();
    let config = AuditConfig { key, ..AuditConfig::default() };
    let log = match target {
        AuditTarget::Storage => storage.audit(config)?,
        AuditTarget::File(path) => open_audit_file(path, config).map_err(|e| format!("{e}; nothing was resolved"))?,
        AuditTarget::Redb(path) => {
            open_audit_redb(cli, path, config).map_err(|e| format!("{e}; nothing was resolved"))?
        }
    };
    ensure_signable(&log, signed)?;
    Ok(log)
}

/// An existing redb file's audit log (a gateway's `--audit`), opened as `--db` is: a path mistyped is refused
/// rather than starting a new log nobody reads.
pub(crate) fn open_audit_redb(cli: &Cli, path: &Path, config: AuditConfig) -> Result<AuditLog, Failure> {
    if !path.is_file() {
        return Err(format!(
            "the audit file {} does not exist (it is the redb file `airlock mcp --audit` writes)",
            path.display()
        ));
    }
    Storage::audit_database(cli, path, config)
}

/// An existing append-only audit file (a gateway's), opened to append to it beside the gateway: a path
/// mistyped is refused rather than starting a new log nobody reads.
pub(crate) fn open_audit_file(path: &Path, config: AuditConfig) -> Result<AuditLog, Failure> {
    if !path.is_file() {
        return Err(format!(
            "the audit file {} does not exist (it is the file `airlock mcp --audit-file` writes)",
            path.display()
        ));
    }
    AuditLog::open_append_only(path, config).map_err(|e| e.to_string())
}

/// Refuses an unkeyed log whose head is signed: its next record must be signed too.
pub(crate) fn ensure_signable(log: &AuditLog, signed: bool) -> Result<(), Failure> {
    ensure_signable_for(log, signed, "resolution", "resolved")
}

/// [`ensure_signable`] for a record of `what`, refused with "nothing was `done`".
pub(crate) fn ensure_signable_for(log: &AuditLog, signed: bool, what: &str, done: &str) -> Result<(), Failure> {
    let head = log.head().map_err(|e| format!("the audit log: {e}"))?;
    if let (Some(key_id), false) = (&head.key_id, signed) {
        return Err(format!(
            "the audit log is signed (key `{}`): give its key (`--audit-key-file` or `--audit-key-env`) so the \
             {what}'s record is signed too; nothing was {done}",
            escape(key_id)
        ));
    }
    Ok(())
}

/// Resolves `key` as `operator` (`airlock effects resolve` and the console), then records who resolved
/// it, and how, in the audit log.
pub(crate) fn resolve_effect(
    store: &dyn EffectStore,
    log: &AuditLog,
    key: &str,
    resolution: Resolution,
    operator: &str,
    now: Duration,
) -> Result<EffectRecord, Failure> {
    let record = store.resolve(key, resolution, operator, now).map_err(|e| resolve_failure(&e, now))?;
    let word = match resolution {
        Resolution::Committed => "committed (it happened)",
        Resolution::Failed => "failed (it did not happen; a retry may run)",
    };
    // Escaped: the name is the operator's to type, and the log is read as text.
    let detail = format!("resolved as {word} by operator `{}`", escape(operator));
    let event = AuditEvent::new("", key, AuditOutcome::EffectResolved { resolution }).detail(Some(&detail));
    log.append(event)
        .map_err(|e| format!("`{}` was resolved, but its audit record could not be written: {e}", escape(key)))?;
    Ok(record)
}

/// Why a resolution was refused, with the lease's time for a person to read.
pub(crate) fn resolve_failure(err: &EffectError, now: Duration) -> Failure {
    match err {
        EffectError::StillRunning { key, lease_until } => format!(
            "effect `{}` is reserved by a call that may still be running: its lease, renewed while the call runs, \
             lapses {} at the earliest; it cannot be resolved before, and nothing was changed",
            escape(key),
            when(now, *lease_until)
        ),
        other => other.to_string(),
    }
}

pub(crate) fn effect_json(record: &EffectRecord, now: Duration) -> Value {
    json!({
        "key": record.key,
        "status": status_word(record.status_at(now)),
        "attempt": record.attempt,
        "record": serde_json::to_value(record).unwrap_or(Value::Null),
    })
}
