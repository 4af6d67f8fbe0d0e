//! `airlock`: the operator's command line for an agent-airlock database (one redb file holding the
//! approval ledger, the effect records and the audit log).
//!
//! Keys are read from a file or an environment variable, never from the command line (where `ps` and shell
//! history would show them). Output is for a person; `--json` prints one JSON document for a program.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::audit::{Anchor, AuditConfig, AuditKey, AuditLog, verify};
use agent_airlock::effect::{EffectFilter, EffectRecord, EffectStatus, EffectStore, RedbEffectStore, Resolution};
use agent_airlock::ledger::{
    ApprovalLedger, ProcessSharing, RedbLedger, RedbOpenOptions, RequestEntry, RequestStatus, open_database,
};
use agent_airlock::{ApprovalKey, Clock, InterruptApprovals, KeyRing, MaskSet, Masker, SystemClock};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "airlock", version, about = "Operate an agent-airlock database: approvals, effects, audit log")]
struct Cli {
    /// The airlock database (redb file) shared by the ledger, effect records and audit log.
    #[arg(long, env = "AIRLOCK_DB", global = true, default_value = "airlock.redb")]
    db: PathBuf,
    /// Open the file in multi-process mode (every process using the file must).
    #[arg(long, global = true)]
    multi_process: bool,
    /// How long to wait while another process holds the file, in seconds.
    #[arg(long, global = true, default_value_t = 10)]
    wait_secs: u64,
    /// Print JSON for programs instead of text for people.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Approval requests: list them, or show one.
    Requests {
        #[command(subcommand)]
        command: RequestsCommand,
    },
    /// Approve a pending request; prints the resume value the host resumes the call with.
    Approve {
        /// The request id.
        request_id: String,
        /// Who approves (recorded in the ledger and the audit log).
        #[arg(long)]
        approver: String,
        /// How long the grant stays valid, in seconds.
        #[arg(long, default_value_t = 900)]
        ttl_secs: u64,
        #[command(flatten)]
        key: KeySource,
    },
    /// Deny a request; prints the resume value that refuses the call.
    Deny {
        /// The request id.
        request_id: String,
        /// Who denies.
        #[arg(long)]
        by: String,
        /// Why (shown to the model).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        key: KeySource,
    },
    /// Spent grants: approvals that admitted their call.
    Spent,
    /// Remove approval records settled longer ago than a duration: spent, denied and expired requests with
    /// their grants. Pending requests and grants that can still be spent are kept.
    Prune {
        /// How long ago a record must have been settled, e.g. `30d`, `12h`, `2weeks`, `1h 30m`.
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        older_than: Duration,
    },
    /// Effect records: list them, or resolve an ambiguous one.
    Effects {
        #[command(subcommand)]
        command: EffectsCommand,
    },
    /// The audit log: verify it, or export its head to keep elsewhere.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Subcommand)]
enum RequestsCommand {
    /// Every request, oldest first, with its status.
    List {
        /// Only pending requests.
        #[arg(long)]
        pending: bool,
    },
    /// One request in full: the tool, the reason, the arguments (secrets masked).
    Show {
        /// The request id.
        request_id: String,
    },
}

#[derive(Subcommand)]
enum EffectsCommand {
    /// Effect records in key order.
    List {
        /// Only ambiguous ones (what an operator must resolve).
        #[arg(long)]
        ambiguous: bool,
    },
    /// Say whether an ambiguous effect happened.
    Resolve {
        /// The effect key, e.g. `refund:pi_1`.
        key: String,
        /// What really happened.
        #[arg(long, value_enum)]
        outcome: ResolvedAs,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ResolvedAs {
    /// The effect happened: later calls are duplicates.
    Committed,
    /// The effect did not happen: a retry may run.
    Failed,
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check the hash chain, the signatures and the head; report the first bad record.
    Verify {
        /// A head exported earlier (`airlock audit export-head`), to detect truncation and rollback.
        #[arg(long)]
        anchor: Option<PathBuf>,
        #[command(flatten)]
        key: AuditKeySource,
    },
    /// Write the current head to a file, to be kept apart from the database.
    ExportHead {
        /// Where to write it.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        key: AuditKeySource,
    },
}

/// Where the approval key comes from (hex). Never the command line.
#[derive(Args)]
struct KeySource {
    /// A file holding the key's secret as hex.
    #[arg(long, conflicts_with = "key_env")]
    key_file: Option<PathBuf>,
    /// An environment variable holding the key's secret as hex.
    #[arg(long, default_value = "AIRLOCK_APPROVAL_KEY")]
    key_env: String,
}

/// Where the audit key comes from (hex), if the log is keyed.
#[derive(Args)]
struct AuditKeySource {
    /// The audit key's id.
    #[arg(long, default_value = "audit-1")]
    audit_key_id: String,
    /// A file holding the audit key's secret as hex.
    #[arg(long)]
    audit_key_file: Option<PathBuf>,
    /// An environment variable holding the audit key's secret as hex.
    #[arg(long)]
    audit_key_env: Option<String>,
}

type Failure = String;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("airlock: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let options = RedbOpenOptions::default()
        .sharing(if cli.multi_process { ProcessSharing::MultiProcess } else { ProcessSharing::Exclusive })
        .wait_if_open(Duration::from_secs(cli.wait_secs));
    let database = Arc::new(open_database(&cli.db, &options).map_err(|e| format!("{}: {e}", cli.db.display()))?);
    let now = SystemClock.now();
    match &cli.command {
        Command::Requests { command } => {
            let ledger = RedbLedger::from_database(database).map_err(|e| e.to_string())?;
            match command {
                RequestsCommand::List { pending } => {
                    let entries = ledger.list_requests().map_err(|e| e.to_string())?;
                    let entries: Vec<&RequestEntry> =
                        entries.iter().filter(|e| !pending || e.status == RequestStatus::Pending).collect();
                    if cli.json {
                        print_json(&Value::Array(entries.iter().map(|e| entry_json(e, now)).collect()));
                    } else if entries.is_empty() {
                        println!("no approval requests");
                    } else {
                        println!("{:<32}  {:<8}  {:<20}  reason", "request", "status", "tool");
                        for e in entries {
                            let r = &e.request;
                            println!("{:<32}  {:<8}  {:<20}  {}", r.request_id, e.status.label(now), r.tool, r.reason);
                        }
                    }
                }
                RequestsCommand::Show { request_id } => {
                    let entry = find(&ledger, request_id)?;
                    if cli.json {
                        print_json(&entry_json(&entry, now));
                    } else {
                        let r = &entry.request;
                        println!("request   {}", r.request_id);
                        println!("status    {}", entry.status.label(now));
                        println!("tool      {}", r.tool);
                        println!("rule      {}", r.rule);
                        println!("reason    {}", r.reason);
                        println!("arguments {}", pretty(&shown_arguments(&r.interrupt)));
                        println!("call      {}", r.interrupt["airlock_approval"]["call"]);
                        println!("key       {}", r.key_id);
                        println!("requested {} s since the Unix epoch", r.requested_at.as_secs());
                    }
                }
            }
        }
        Command::Approve { request_id, approver, ttl_secs, key } => {
            let ledger = Arc::new(RedbLedger::from_database(database).map_err(|e| e.to_string())?);
            let entry = find(&*ledger, request_id)?;
            let approvals = approvals(ledger, key, &entry.request.key_id, Duration::from_secs(*ttl_secs))?;
            let resume = approvals.approve_blocking(&entry.request.interrupt, approver).map_err(|e| e.to_string())?;
            print_resume(cli, resume.as_value(), "approved");
        }
        Command::Deny { request_id, by, reason, key } => {
            let ledger = Arc::new(RedbLedger::from_database(database).map_err(|e| e.to_string())?);
            let entry = find(&*ledger, request_id)?;
            let approvals = approvals(ledger, key, &entry.request.key_id, Duration::from_secs(60))?;
            let resume =
                approvals.deny_blocking(&entry.request.interrupt, by, reason.as_deref()).map_err(|e| e.to_string())?;
            print_resume(cli, resume.as_value(), "denied");
        }
        Command::Spent => {
            let ledger = RedbLedger::from_database(database).map_err(|e| e.to_string())?;
            let spent: Vec<Value> = ledger
                .list_requests()
                .map_err(|e| e.to_string())?
                .iter()
                .filter_map(|e| match &e.status {
                    RequestStatus::Spent(record) => Some(json!({
                        "request_id": e.request.request_id,
                        "tool": e.request.tool,
                        "grant_id": record.grant.grant_id,
                        "approver": record.grant.approver,
                        "spent_at_ms": millis(record.spent_at),
                    })),
                    _ => None,
                })
                .collect();
            if cli.json {
                print_json(&Value::Array(spent));
            } else if spent.is_empty() {
                println!("no spent grants");
            } else {
                for s in spent {
                    println!(
                        "{}  {}  approved by {}  spent at {} ms",
                        s["grant_id"].as_str().unwrap_or(""),
                        s["tool"].as_str().unwrap_or(""),
                        s["approver"].as_str().unwrap_or(""),
                        s["spent_at_ms"]
                    );
                }
            }
        }
        Command::Prune { older_than } => {
            let ledger = RedbLedger::from_database(database).map_err(|e| e.to_string())?;
            let cutoff = now.saturating_sub(*older_than);
            let report = ledger.prune(cutoff, now).wait().map_err(|e| e.to_string())?;
            if cli.json {
                print_json(&json!({
                    "cutoff_ms": millis(cutoff),
                    "requests": report.requests,
                    "grants": report.grants,
                }));
            } else {
                println!(
                    "pruned {} requests and {} grants settled before {} ms since the Unix epoch",
                    report.requests.len(),
                    report.grants.len(),
                    millis(cutoff)
                );
            }
        }
        Command::Effects { command } => {
            let store = RedbEffectStore::new(database).map_err(|e| e.to_string())?;
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
                            println!("{:<10}  {}  (attempt {})", status_word(r.status_at(now)), r.key, r.attempt);
                        }
                    }
                }
                EffectsCommand::Resolve { key, outcome } => {
                    let resolution = match outcome {
                        ResolvedAs::Committed => Resolution::Committed,
                        ResolvedAs::Failed => Resolution::Failed,
                    };
                    let record = store.resolve(key, resolution, now).map_err(|e| e.to_string())?;
                    if cli.json {
                        print_json(&effect_json(&record, now));
                    } else {
                        println!("{} is now {}", record.key, status_word(record.status_at(now)));
                    }
                }
            }
        }
        Command::Audit { command } => {
            let (key, anchor_path) = match command {
                AuditCommand::Verify { key, anchor } => (key, anchor.as_ref()),
                AuditCommand::ExportHead { key, .. } => (key, None),
            };
            let config = AuditConfig { key: audit_key(key)?, ..AuditConfig::default() };
            let log = AuditLog::with_database(database, config).map_err(|e| e.to_string())?;
            match command {
                AuditCommand::Verify { .. } => {
                    let anchor = anchor_path
                        .map(|p| Anchor::read_from(p).map_err(|e| format!("{}: {e}", p.display())))
                        .transpose()?;
                    let report = verify(&log, anchor.as_ref()).map_err(|e| e.to_string())?;
                    if cli.json {
                        print_json(&json!({
                            "ok": true,
                            "records": report.records,
                            "head_seq": report.head.seq,
                            "head_signed": report.head_signed,
                            "anchor_seq": report.anchor_seq,
                        }));
                    } else {
                        println!("{report}");
                    }
                }
                AuditCommand::ExportHead { to, .. } => {
                    let anchor = log.export_head_to(to).map_err(|e| e.to_string())?;
                    if cli.json {
                        print_json(&json!({"seq": anchor.seq, "path": to}));
                    } else {
                        println!("head #{} written to {}", anchor.seq, to.display());
                    }
                }
            }
        }
    }
    Ok(())
}

fn find(ledger: &dyn ApprovalLedger, request_id: &str) -> Result<RequestEntry, Failure> {
    ledger
        .find_request(request_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no approval request `{request_id}`"))
}

fn approvals(
    ledger: Arc<RedbLedger>,
    source: &KeySource,
    key_id: &str,
    ttl: Duration,
) -> Result<InterruptApprovals, Failure> {
    let key = match &source.key_file {
        Some(path) => {
            warn_if_others_can_read(path);
            ApprovalKey::from_file(key_id, path)
        }
        None => ApprovalKey::from_env(key_id, &source.key_env),
    }
    .map_err(|e| e.to_string())?;
    Ok(InterruptApprovals::new(KeyRing::new(key), ledger, Arc::new(SystemClock), ttl))
}

fn audit_key(source: &AuditKeySource) -> Result<Option<AuditKey>, Failure> {
    let id = source.audit_key_id.as_str();
    let key = match (&source.audit_key_file, &source.audit_key_env) {
        (Some(path), _) => {
            warn_if_others_can_read(path);
            AuditKey::from_file(id, path)
        }
        (None, Some(var)) => AuditKey::from_env(id, var),
        (None, None) => return Ok(None),
    };
    key.map(Some).map_err(|e| e.to_string())
}

/// Warns on stderr when the group or everyone may read a key file: anyone who can read it can forge
/// approvals (or audit entries).
fn warn_if_others_can_read(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            eprintln!(
                "airlock: warning: the key file `{0}` can be read by other users (mode {1:o}); restrict it with \
                 `chmod 600 {0}`",
                path.display(),
                meta.permissions().mode() & 0o777,
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

fn print_resume(cli: &Cli, resume: &Value, what: &str) {
    if cli.json {
        print_json(resume);
    } else {
        eprintln!("{what}; resume the call with this value:");
        println!("{resume}");
    }
}

fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn entry_json(entry: &RequestEntry, now: Duration) -> Value {
    let r = &entry.request;
    json!({
        "request_id": r.request_id,
        "status": entry.status.label(now),
        "tool": r.tool,
        "rule": r.rule,
        "reason": r.reason,
        "key_id": r.key_id,
        "requested_at_ms": millis(r.requested_at),
        "arguments": shown_arguments(&r.interrupt),
        "call": r.interrupt["airlock_approval"]["call"],
        "decision": serde_json::to_value(&entry.status).unwrap_or(Value::Null),
    })
}

fn status_word(status: EffectStatus) -> &'static str {
    match status {
        EffectStatus::Reserved => "reserved",
        EffectStatus::Committed => "committed",
        EffectStatus::Failed => "failed",
        EffectStatus::Ambiguous => "ambiguous",
    }
}

fn effect_json(record: &EffectRecord, now: Duration) -> Value {
    json!({
        "key": record.key,
        "status": status_word(record.status_at(now)),
        "attempt": record.attempt,
        "record": serde_json::to_value(record).unwrap_or(Value::Null),
    })
}

/// A request's arguments as shown to an operator. Requests recorded since arguments are masked in the
/// request itself are shown as stored; older ones (request version 1) held the exact arguments, so secrets
/// are masked here too (masking masked text changes nothing).
fn shown_arguments(interrupt: &Value) -> Value {
    let mut arguments = interrupt["airlock_approval"]["arguments"].clone();
    Masker::default().mask_value(&mut arguments, MaskSet::SECRETS);
    arguments
}

/// A duration in humantime's grammar: `30d`, `12h`, `2weeks`, `1h 30m` (`0s`: every settled record).
fn parse_age(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}` is not a duration ({e}), e.g. `30d`, `12h`"))
}
