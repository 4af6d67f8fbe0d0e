//! `airlock`: the operator's command line for an agent-airlock database: one redb file holding the
//! approval ledger, the effect records and the audit log, or a PostgreSQL database that several hosts
//! share (`--db postgres://…`), holding the ledger and the effect records.
//!
//! Keys are read from a file or an environment variable, never from the command line (where `ps` and shell
//! history would show them). Output is for a person; `--json` prints one JSON document for a program.
//!
//! What a request says (tool, rule, reason, arguments) is shown only from its sealed value, after the seal
//! is checked with the approval key: a record whose seal fails is shown as `TAMPERED`, and without a key as
//! `unverified`, never with its labels. Everything shown is escaped (`agent_airlock::approval::display`), so no value
//! can display as another. `approve` shows the sealed call in full and asks for confirmation (`--yes` for
//! scripts).

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::approval::display::{escape, value_text};
use agent_airlock::audit::{Anchor, AuditConfig, AuditEvent, AuditKey, AuditLog, AuditOutcome, verify};
use agent_airlock::effect::{
    EffectError, EffectFilter, EffectRecord, EffectState, EffectStatus, EffectStore, RedbEffectStore, Resolution,
};
use agent_airlock::ledger::{
    ApprovalLedger, PostgresLedger, ProcessSharing, RedbLedger, RedbOpenOptions, RequestEntry, RequestStatus,
    open_database,
};
use agent_airlock::{
    Clock, SystemClock,
    approval::{
        DecisionError, DecisionSigner, InterruptApprovals, InterruptRequest, KeyRing, OperatorEntry, OperatorKey,
        OperatorRole, Operators, ResumeValue,
    },
    keys::ApprovalKey,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use redb::Database;

mod console;
mod mcp;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "airlock", version, about = "Operate an agent-airlock database: approvals, effects, audit log")]
struct Cli {
    /// The airlock database: a redb file shared by the ledger, effect records and audit log, or a
    /// PostgreSQL URL (`postgres://…` or `postgresql://…`) for the ledger and effect records of many hosts.
    #[arg(long, env = "AIRLOCK_DB", global = true, default_value = "airlock.redb", value_name = "PATH|URL")]
    db: String,
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
    /// Approve a pending request after showing it in full and asking for confirmation; prints the resume
    /// value the host resumes the call with.
    Approve {
        /// The request id.
        request_id: String,
        /// Approve without asking (for scripts that have shown the request themselves). Without it, and
        /// without a terminal to ask on, nothing is approved.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        signing: SigningKeySource,
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
        #[command(flatten)]
        signing: SigningKeySource,
        /// Why (shown to the model).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        key: KeySource,
    },
    /// Operators' signing keys: add one (the private key to a new file, the public key to the operators
    /// file hosts check decisions against), list them, revoke one.
    Operators {
        #[command(subcommand)]
        command: OperatorsCommand,
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
    /// Guard an MCP server: `airlock mcp --policy airlock.toml -- <command> [args…]` serves its tools on
    /// stdio through the gates; `airlock mcp scan -- <command>` prints a starter policy for it.
    Mcp(mcp::McpArgs),
    /// Serve the operator's console: a web page listing pending requests, each shown in full with its seal
    /// checked, to approve or deny after signing in; recent decisions, ambiguous effects, the audit log.
    Console(Box<console::ConsoleArgs>),
    /// Deployment policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Subcommand)]
enum OperatorsCommand {
    /// Make a signing key for NAME: the private key goes to a new file readable by its owner only (never
    /// overwritten), the public key is appended to the operators file.
    Add {
        /// The operator's name (or the console's, with `--console`).
        name: String,
        /// Where to write the private key (a new file, mode 0600).
        #[arg(long, value_name = "FILE")]
        key_out: PathBuf,
        /// The key is a console's: it attests the operators signed in to that console.
        #[arg(long)]
        console: bool,
        #[command(flatten)]
        file: OperatorsFileArg,
    },
    /// The operators file's entries.
    List {
        #[command(flatten)]
        file: OperatorsFileArg,
    },
    /// Revoke every key listed under NAME: its signatures, past and future, count for nothing.
    Revoke {
        /// The operator's name.
        name: String,
        #[command(flatten)]
        file: OperatorsFileArg,
    },
}

/// The operators file (TOML, `[[operator]] name = … key = "ed25519:…"`).
#[derive(Args, Clone)]
struct OperatorsFileArg {
    /// The operators file.
    #[arg(long = "operators", env = "AIRLOCK_OPERATORS", default_value = "operators.toml", value_name = "FILE")]
    operators: PathBuf,
}

/// The operator's own signing key (from `airlock operators add`), which signs the decision.
#[derive(Args, Clone)]
struct SigningKeySource {
    /// The operator's signing key file; the decision is recorded under the name it holds.
    #[arg(long, env = "AIRLOCK_SIGNING_KEY", value_name = "FILE")]
    signing_key: PathBuf,
}

impl SigningKeySource {
    fn load(&self) -> Result<OperatorKey, Failure> {
        warn_if_others_can_read(&self.signing_key);
        OperatorKey::from_file(&self.signing_key).map_err(|e| e.to_string())
    }
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate a policy file: print its rules, or the first error with its line and column (exit 1).
    Check {
        /// The policy file (TOML).
        file: PathBuf,
        /// Also start the MCP server given after `--`, list its tools and report every `[tools.…]` table
        /// that names none of them, with the closest name (exit 1).
        #[arg(long, requires = "server")]
        against: bool,
        /// The server's command line, after `--` (with `--against`).
        #[arg(last = true, value_name = "COMMAND")]
        server: Vec<std::ffi::OsString>,
    },
}

#[derive(Subcommand)]
enum RequestsCommand {
    /// Every request, oldest first, with its status; tool and reason only where the seal verifies.
    List {
        /// Only pending requests.
        #[arg(long)]
        pending: bool,
        #[command(flatten)]
        key: KeySource,
    },
    /// One request in full, if its seal verifies: the tool, the reason, every argument (secrets masked).
    Show {
        /// The request id.
        request_id: String,
        #[command(flatten)]
        key: KeySource,
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
        #[command(flatten)]
        audit_key: AuditKeySource,
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
#[derive(Args, Clone)]
struct KeySource {
    /// A file holding the key's secret as hex.
    #[arg(long, conflicts_with = "key_env")]
    key_file: Option<PathBuf>,
    /// An environment variable holding the key's secret as hex.
    #[arg(long, default_value = "AIRLOCK_APPROVAL_KEY")]
    key_env: String,
}

/// Where the audit key comes from (hex), if the log is keyed.
#[derive(Args, Clone)]
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

/// `airlock policy check FILE`: the summary, or `FILE:LINE:COLUMN: message` as the failure.
fn check_policy(file: &std::path::Path, server: &[std::ffi::OsString], json: bool) -> Result<(), Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let policy = agent_airlock::Policy::from_toml(&text);
    if let (Ok(policy), false) = (&policy, server.is_empty()) {
        mcp::check_against(policy, server).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    match policy {
        Ok(policy) if json => {
            print_json(
                &json!({"valid": true, "mode": format!("{:?}", policy.mode()).to_lowercase(), "summary": policy.summary()}),
            );
            Ok(())
        }
        Ok(policy) => {
            println!("{}: valid policy", file.display());
            println!("{}", policy.summary());
            Ok(())
        }
        Err(err) => Err(format!("{}:{}:{}: {}", file.display(), err.line, err.column, err.message)),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("airlock: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Diagnostics the runtime reports through `tracing` (a ledger write that failed, a call cancelled while its
/// effect ran, a gateway's upstream gone) go to standard error, never to standard output (which carries
/// MCP for `airlock mcp`). `AIRLOCK_LOG` sets the filter (`RUST_LOG` syntax, e.g. `agent_airlock=info`);
/// warnings and errors by default.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AIRLOCK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A second initialisation (never in this binary) would fail harmlessly.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true)
        .with_env_filter(filter)
        .try_init();
}

impl Cli {
    /// How a redb file given with `--db` (or another the command names) is opened.
    fn redb_options(&self) -> RedbOpenOptions {
        RedbOpenOptions::default()
            .sharing(if self.multi_process { ProcessSharing::MultiProcess } else { ProcessSharing::Exclusive })
            .wait_if_open(Duration::from_secs(self.wait_secs))
    }
}

/// Where the records are.
enum Storage {
    /// A redb file.
    Redb(Arc<Database>),
    /// A PostgreSQL database.
    Postgres(Arc<PostgresLedger>),
}

impl Storage {
    fn open(cli: &Cli) -> Result<Storage, Failure> {
        if cli.db.starts_with("postgres://") || cli.db.starts_with("postgresql://") {
            // The URL may hold a password: errors name the database by its kind only.
            let ledger = PostgresLedger::connect(&cli.db).map_err(|e| format!("the PostgreSQL database: {e}"))?;
            return Ok(Storage::Postgres(Arc::new(ledger)));
        }
        Ok(Storage::Redb(Arc::new(
            open_database(&cli.db, &cli.redb_options()).map_err(|e| format!("{}: {e}", cli.db))?,
        )))
    }

    fn ledger(&self) -> Result<Arc<dyn ApprovalLedger>, Failure> {
        Ok(match self {
            Storage::Redb(database) => {
                Arc::new(RedbLedger::from_database(Arc::clone(database)).map_err(|e| e.to_string())?)
            }
            Storage::Postgres(ledger) => Arc::clone(ledger) as Arc<dyn ApprovalLedger>,
        })
    }

    fn effects(&self) -> Result<Arc<dyn EffectStore>, Failure> {
        Ok(match self {
            Storage::Redb(database) => Arc::new(RedbEffectStore::new(Arc::clone(database)).map_err(|e| e.to_string())?),
            Storage::Postgres(ledger) => Arc::new(ledger.effect_store()),
        })
    }

    fn audit(&self, config: AuditConfig) -> Result<AuditLog, Failure> {
        match self {
            Storage::Redb(database) => AuditLog::with_database(Arc::clone(database), config).map_err(|e| e.to_string()),
            Storage::Postgres(ledger) => Ok(AuditLog::with_postgres(ledger, config)),
        }
    }
}

fn run(cli: &Cli) -> Result<(), Failure> {
    // A policy file needs no database.
    if let Command::Policy { command: PolicyCommand::Check { file, server, .. } } = &cli.command {
        return check_policy(file, server, cli.json);
    }
    if let Command::Mcp(args) = &cli.command {
        // The gateway opens the database itself, once it knows the policy is good; `scan` needs none.
        return mcp::run(args, cli);
    }
    if let Command::Console(args) = &cli.command {
        // `hash-password` needs no database.
        return console::run(cli, args);
    }
    if let Command::Operators { command } = &cli.command {
        // The operators file needs no database.
        return operators_command(command, cli.json);
    }
    let storage = Storage::open(cli)?;
    let now = SystemClock.now();
    match &cli.command {
        Command::Requests { command } => {
            let ledger = storage.ledger()?;
            match command {
                RequestsCommand::List { pending, key } => {
                    let entries = list_requests(&*ledger, *pending)?;
                    let verifier = Verifier::new(Arc::clone(&ledger), key)?;
                    if cli.json {
                        let listed = entries.iter().map(|e| entry_json(e, &verifier.check(e), now)).collect();
                        print_json(&Value::Array(listed));
                    } else if entries.is_empty() {
                        println!("no approval requests");
                    } else {
                        if verifier.is_none() {
                            eprintln!("{NO_KEY}");
                        }
                        println!("{:<32}  {:<8}  {:<34}  {:<20}  reason", "request", "status", "requested", "tool");
                        for e in &entries {
                            let (tool, reason) = match verifier.check(e) {
                                Sealed::Verified(request) => {
                                    (escape(request.tool()).into_owned(), escape(request.reason()).into_owned())
                                }
                                Sealed::Unverified => ("UNVERIFIED".to_owned(), "(no key: not shown)".to_owned()),
                                Sealed::Tampered(why) => ("TAMPERED".to_owned(), format!("(not shown: {why})")),
                            };
                            let status = e.status.label(now);
                            let requested = when(now, e.request.requested_at);
                            println!(
                                "{:<32}  {status:<8}  {requested:<34}  {tool:<20}  {reason}",
                                escape(&e.request.request_id)
                            );
                        }
                    }
                }
                RequestsCommand::Show { request_id, key } => {
                    let entry = find(&*ledger, request_id)?;
                    let sealed = Verifier::new(Arc::clone(&ledger), key)?.check(&entry);
                    if cli.json {
                        print_json(&entry_json(&entry, &sealed, now));
                    } else {
                        println!("request   {}", escape(&entry.request.request_id));
                        println!("status    {}", entry.status.label(now));
                        if let Some(decision) = decision_text(&entry.status) {
                            println!("decision  {decision}");
                        }
                        match &sealed {
                            Sealed::Verified(request) => {
                                println!("seal      verified (key `{}`)", escape(request.key_id()));
                                println!("call      {}", call_site(request));
                                println!("requested {}", when(now, request.requested_at()));
                                print!("{}", render_request(request)?);
                            }
                            Sealed::Unverified => println!("seal      UNVERIFIED: {NO_KEY}"),
                            Sealed::Tampered(why) => {
                                println!(
                                    "seal      TAMPERED: {why}; the record's tool, reason and arguments are not shown"
                                );
                            }
                        }
                    }
                }
            }
        }
        Command::Approve { request_id, yes, signing, ttl_secs, key } => {
            let ttl = Duration::from_secs(*ttl_secs);
            let signing_key = signing.load()?;
            let signer = DecisionSigner::Operator(&signing_key);
            let approved =
                approve_request(storage.ledger()?, key, request_id, Some(signer), "", ttl, |request, entry| {
                    if *yes { Ok(()) } else { confirm(request, entry.status.label(now)) }
                })?;
            match approved {
                Approval::Granted(resume) => print_resume(cli, resume.as_value(), "approved"),
                Approval::Waiting { approvers, required } if cli.json => {
                    print_json(&json!({ "status": "approving", "approvers": approvers, "required": required }));
                }
                Approval::Waiting { approvers, required } => {
                    eprintln!("{}", Approval::waiting_text(&approvers, required));
                }
            }
        }
        Command::Deny { request_id, signing, reason, key } => {
            let signing_key = signing.load()?;
            let signer = DecisionSigner::Operator(&signing_key);
            let resume = deny_request(storage.ledger()?, key, request_id, Some(signer), "", reason.as_deref())?;
            print_resume(cli, resume.as_value(), "denied");
        }
        Command::Spent => {
            let ledger = storage.ledger()?;
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
                    let spent_at = Duration::from_millis(s["spent_at_ms"].as_u64().unwrap_or(0));
                    println!(
                        "{}  {}  approved by {}  spent {}",
                        escape(s["grant_id"].as_str().unwrap_or("")),
                        escape(s["tool"].as_str().unwrap_or("")),
                        escape(s["approver"].as_str().unwrap_or("")),
                        when(now, spent_at)
                    );
                }
            }
        }
        Command::Prune { older_than } => {
            let ledger = storage.ledger()?;
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
                    "pruned {} requests and {} grants settled before {}",
                    report.requests.len(),
                    report.grants.len(),
                    when(now, cutoff)
                );
            }
        }
        Command::Effects { command } => {
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
                EffectsCommand::Resolve { key, outcome, operator, audit_key: key_source } => {
                    let resolution = match outcome {
                        ResolvedAs::Committed => Resolution::Committed,
                        ResolvedAs::Failed => Resolution::Failed,
                    };
                    // The log is opened (and its key checked) before anything changes.
                    let log = resolution_log(&storage, key_source)?;
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
        }
        // Handled before the database is opened.
        Command::Mcp(_) | Command::Console(_) => {}
        Command::Audit { command } => {
            let (key, anchor_path) = match command {
                AuditCommand::Verify { key, anchor } => (key, anchor.as_ref()),
                AuditCommand::ExportHead { key, .. } => (key, None),
            };
            let config = AuditConfig { key: audit_key(key)?, ..AuditConfig::default() };
            let log = storage.audit(config)?;
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
        Command::Policy { command: PolicyCommand::Check { file, server, .. } } => {
            return check_policy(file, server, cli.json);
        }
        Command::Operators { command } => return operators_command(command, cli.json),
    }
    Ok(())
}

const NO_KEY: &str = "no approval key given (`--key-file`, or `--key-env`, default `AIRLOCK_APPROVAL_KEY`): requests \
                      cannot be verified, so their tool, reason and arguments are not shown";

/// A stored request after its seal was checked.
enum Sealed {
    /// Sealed under the given key: its content is what the guard issued.
    Verified(Box<InterruptRequest>),
    /// No key was given to check it with.
    Unverified,
    /// The seal does not verify (altered in storage, or under another key): nothing in it is shown.
    Tampered(String),
}

/// Checks seals with the operator's key, if one was given.
struct Verifier {
    source: Option<(Arc<dyn ApprovalLedger>, ApprovalKeySecret)>,
}

/// Where the key's secret is, to be loaded under the key id a request names.
enum ApprovalKeySecret {
    File(PathBuf),
    Env(String),
}

impl Verifier {
    fn new(ledger: Arc<dyn ApprovalLedger>, source: &KeySource) -> Result<Self, Failure> {
        let secret = match &source.key_file {
            Some(path) => Some(ApprovalKeySecret::File(path.clone())),
            None if std::env::var_os(&source.key_env).is_some() => Some(ApprovalKeySecret::Env(source.key_env.clone())),
            None => None,
        };
        let verifier = Verifier { source: secret.map(|secret| (ledger, secret)) };
        // A key given but unreadable is the operator's error, not the records'.
        verifier.load("any").transpose()?;
        Ok(verifier)
    }

    fn load(&self, key_id: &str) -> Option<Result<ApprovalKey, Failure>> {
        let (_, secret) = self.source.as_ref()?;
        let key = match secret {
            ApprovalKeySecret::File(path) => ApprovalKey::from_file(key_id, path),
            ApprovalKeySecret::Env(var) => ApprovalKey::from_env(key_id, var),
        };
        Some(key.map_err(|e| e.to_string()))
    }

    fn is_none(&self) -> bool {
        self.source.is_none()
    }

    fn check(&self, entry: &RequestEntry) -> Sealed {
        let Some((ledger, _)) = &self.source else { return Sealed::Unverified };
        // The key is named by the sealed value; a copy altered to name another key fails its seal anyway.
        let key_id = entry.request.interrupt["airlock_approval"]["key_id"].as_str().unwrap_or(&entry.request.key_id);
        let key = match self.load(key_id) {
            Some(Ok(key)) => key,
            Some(Err(error)) => return Sealed::Tampered(format!("the key could not be loaded: {error}")),
            None => return Sealed::Unverified,
        };
        let approvals = InterruptApprovals::new(KeyRing::new(key), Arc::clone(ledger), Duration::ZERO)
            .with_clock(Arc::new(SystemClock));
        match approvals.verify_request(&entry.request.interrupt) {
            // The ledger's copies must agree with the sealed value, or the record was edited.
            Ok(request) if request.request_id() == entry.request.request_id => Sealed::Verified(Box::new(request)),
            Ok(_) => Sealed::Tampered("the record's id differs from its sealed request's".to_owned()),
            Err(error) => Sealed::Tampered(error.to_string()),
        }
    }
}

/// The sealed call, as the human must see it to decide: every exact argument (the digest of what is shown
/// checked against the binding's), secrets flagged, never hidden. An error says why it cannot be shown,
/// and so cannot be approved.
fn render_request(request: &InterruptRequest) -> Result<String, Failure> {
    request.render().map_err(|e| format!("{e}; it cannot be approved"))
}

fn call_site(request: &InterruptRequest) -> String {
    let call = request.call();
    format!(
        "thread {}, tool call {}, checkpoint {}",
        escape(&call.thread_id),
        escape(&call.tool_call_id),
        value_text(&json!(call.checkpoint))
    )
}

/// Shows the sealed call in full on standard error and asks on the terminal; anything but yes approves
/// nothing.
fn confirm(request: &InterruptRequest, status: &str) -> Result<(), Failure> {
    let shown = render_request(request)?;
    if !std::io::stdin().is_terminal() {
        return Err("refusing to approve without confirmation: standard input is not a terminal; pass `--yes` to \
                    approve from a script"
            .to_owned());
    }
    eprintln!("request {} ({status}), seal verified", escape(request.request_id()));
    eprintln!("call    {}", call_site(request));
    eprint!("{shown}");
    eprint!("Approve this call? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer).map_err(|e| format!("reading the answer failed: {e}"))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err("not approved".to_owned()),
    }
}

/// Who decided a request, and how, for an operator (escaped); `None` while it is pending.
fn decision_text(status: &RequestStatus) -> Option<String> {
    Some(match status {
        RequestStatus::Pending => return None,
        RequestStatus::Approving { approvals } => {
            let names: Vec<String> = approvals.iter().map(|a| escape(&a.approver).into_owned()).collect();
            format!("approved so far by {}", names.join(", "))
        }
        RequestStatus::Granted(grant) => format!("approved by {}", approvers_text(&grant.approvers())),
        RequestStatus::Spent(spent) => format!("approved by {}, spent", approvers_text(&spent.grant.approvers())),
        RequestStatus::Denied(denial) => match &denial.reason {
            Some(reason) => format!("denied by {}: {}", escape(&denial.denied_by), escape(reason)),
            None => format!("denied by {}", escape(&denial.denied_by)),
        },
    })
}

/// The approvers of a grant, escaped, `and`-joined.
fn approvers_text(approvers: &[&str]) -> String {
    approvers.iter().map(|name| escape(name)).collect::<Vec<_>>().join(" and ")
}

/// Every request, oldest first, or only the ones still waiting for a decision.
fn list_requests(ledger: &dyn ApprovalLedger, pending_only: bool) -> Result<Vec<RequestEntry>, Failure> {
    let mut entries = ledger.list_requests().map_err(|e| e.to_string())?;
    entries.retain(|e| !pending_only || e.status.is_waiting());
    Ok(entries)
}

/// Approves `request_id`, signed by `signer` (or, from a console without a key of its own, unsigned as
/// `operator`) (`airlock approve` and the console): the seal is checked first (a
/// tampered request is approved by no one), then `confirm` is shown the verified request and may refuse;
/// only then is the approval recorded. Returns the resume value the host resumes the call with, or, for a
/// request that needs more distinct approvers, who approved so far.
fn approve_request(
    ledger: Arc<dyn ApprovalLedger>,
    key: &KeySource,
    request_id: &str,
    signer: Option<DecisionSigner<'_>>,
    operator: &str,
    ttl: Duration,
    confirm: impl FnOnce(&InterruptRequest, &RequestEntry) -> Result<(), Failure>,
) -> Result<Approval, Failure> {
    let entry = find(&*ledger, request_id)?;
    let approvals = approvals(ledger, key, &entry.request.key_id, ttl)?;
    let request = approvals
        .verify_request(&entry.request.interrupt)
        .map_err(|e| format!("request `{}` is TAMPERED: {e}; nothing was approved", escape(request_id)))?;
    // The record found under this id must hold the sealed request of this id, or it is another request's.
    if request.request_id() != request_id {
        return Err(format!(
            "request `{}` is TAMPERED: it holds the sealed request `{}`; nothing was approved",
            escape(request_id),
            escape(request.request_id())
        ));
    }
    confirm(&request, &entry)?;
    let approved = match signer {
        Some(signer) => approvals.approve_signed_blocking(&entry.request.interrupt, signer),
        None => approvals.approve_blocking(&entry.request.interrupt, operator),
    };
    match approved {
        Ok(resume) => Ok(Approval::Granted(resume)),
        Err(DecisionError::MoreApproversNeeded { approvers, required }) => {
            Ok(Approval::Waiting { approvers, required })
        }
        Err(err) => Err(err.to_string()),
    }
}

/// What an operator's approval did.
enum Approval {
    /// The grant is issued: the host resumes the call with this value.
    Granted(ResumeValue),
    /// Recorded; the request needs more distinct approvers.
    Waiting { approvers: Vec<String>, required: u32 },
}

impl Approval {
    /// For an operator: who approved so far, and how many approvals the request needs.
    fn waiting_text(approvers: &[String], required: u32) -> String {
        let names: Vec<String> = approvers.iter().map(|name| escape(name).into_owned()).collect();
        format!(
            "approval recorded ({} of {required}: {}); the request waits for {} more distinct approver(s)",
            approvers.len(),
            names.join(", "),
            (required as usize).saturating_sub(approvers.len())
        )
    }
}

/// Denies `request_id`, signed by `signer` (or, from a console without a key of its own, unsigned as
/// `operator`), after checking its seal; `reason` reaches the model. Returns the resume value that refuses
/// the call.
fn deny_request(
    ledger: Arc<dyn ApprovalLedger>,
    key: &KeySource,
    request_id: &str,
    signer: Option<DecisionSigner<'_>>,
    operator: &str,
    reason: Option<&str>,
) -> Result<ResumeValue, Failure> {
    let entry = find(&*ledger, request_id)?;
    let approvals = approvals(ledger, key, &entry.request.key_id, Duration::from_secs(60))?;
    match signer {
        Some(signer) => approvals.deny_signed_blocking(&entry.request.interrupt, signer, reason),
        None => approvals.deny_blocking(&entry.request.interrupt, operator, reason),
    }
    .map_err(|e| e.to_string())
}

/// `airlock operators add | list | revoke`.
fn operators_command(command: &OperatorsCommand, json: bool) -> Result<(), Failure> {
    match command {
        OperatorsCommand::Add { name, key_out, console, file } => {
            let mut operators = Operators::load_or_empty(&file.operators).map_err(|e| e.to_string())?;
            let key = OperatorKey::generate(name).map_err(|e| e.to_string())?;
            let role = if *console { OperatorRole::Console } else { OperatorRole::Operator };
            // Checked before the private key is written, so a refused name leaves no stray key behind.
            operators
                .add(OperatorEntry { name: name.clone(), key: key.key_id(), role, revoked: false })
                .map_err(|e| e.to_string())?;
            key.write_new(key_out).map_err(|e| e.to_string())?;
            write_operators(&file.operators, &operators)?;
            if json {
                print_json(&json!({"name": name, "key": key.key_id(), "role": role, "key_file": key_out}));
            } else {
                println!(
                    "{} `{}` added to {}: key {}; its private key is in {} (give it to them only)",
                    if *console { "console" } else { "operator" },
                    escape(name),
                    file.operators.display(),
                    key.key_id(),
                    key_out.display()
                );
            }
        }
        OperatorsCommand::List { file } => {
            let operators = Operators::load(&file.operators).map_err(|e| e.to_string())?;
            if json {
                print_json(&serde_json::to_value(operators.entries()).unwrap_or(Value::Null));
            } else if operators.entries().is_empty() {
                println!("no operators");
            } else {
                for entry in operators.entries() {
                    let role = match entry.role {
                        OperatorRole::Operator => "operator",
                        OperatorRole::Console => "console",
                    };
                    let state = if entry.revoked { "REVOKED" } else { "active" };
                    println!("{:<20}  {role:<8}  {state:<7}  {}", escape(&entry.name), entry.key);
                }
            }
        }
        OperatorsCommand::Revoke { name, file } => {
            let mut operators = Operators::load(&file.operators).map_err(|e| e.to_string())?;
            if operators.revoke(name) == 0 {
                return Err(format!("no active key listed under `{}` in {}", escape(name), file.operators.display()));
            }
            write_operators(&file.operators, &operators)?;
            if json {
                print_json(&json!({"revoked": name}));
            } else {
                println!(
                    "`{}` revoked in {}: its signatures, past and future, count for nothing once hosts re-read the file",
                    escape(name),
                    file.operators.display()
                );
            }
        }
    }
    Ok(())
}

/// Replaces the operators file (through a temporary file in the same directory, renamed over it).
fn write_operators(path: &std::path::Path, operators: &Operators) -> Result<(), Failure> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let mut temp = path.as_os_str().to_owned();
    temp.push(".new");
    let temp = PathBuf::from(temp);
    let text = format!(
        "# agent-airlock operators: the public keys whose signed decisions hosts count
{}",
        operators.to_toml()
    );
    std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|e| format!("writing {} (in {}): {e}", path.display(), dir.display()))
}

fn find(ledger: &dyn ApprovalLedger, request_id: &str) -> Result<RequestEntry, Failure> {
    ledger
        .find_request(request_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no approval request `{request_id}`"))
}

fn approvals(
    ledger: Arc<dyn ApprovalLedger>,
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
    Ok(InterruptApprovals::new(KeyRing::new(key), ledger, ttl).with_clock(Arc::new(SystemClock)))
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

/// A time for a person to read: RFC 3339 in UTC and how long ago (or how far ahead) it is, e.g.
/// `2026-12-01T19:40:12Z, 3 min ago`. `--json` keeps the numbers.
fn when(now: Duration, at: Duration) -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + at);
    let (span, ahead) = match now.checked_sub(at) {
        Some(past) => (past, false),
        None => (at.saturating_sub(now), true),
    };
    let secs = span.as_secs();
    let age = match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    };
    if ahead { format!("{stamp}, in {age}") } else { format!("{stamp}, {age} ago") }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn entry_json(entry: &RequestEntry, sealed: &Sealed, now: Duration) -> Value {
    let r = &entry.request;
    let mut out = json!({
        "request_id": r.request_id,
        "status": entry.status.label(now),
        "requested_at_ms": millis(r.requested_at),
        "decision": serde_json::to_value(&entry.status).unwrap_or(Value::Null),
    });
    match sealed {
        Sealed::Verified(request) => {
            out["seal"] = json!("verified");
            out["tool"] = json!(request.tool());
            out["rule"] = json!(request.rule());
            out["reason"] = json!(request.reason());
            out["key_id"] = json!(request.key_id());
            // The exact arguments (opened with the key); whether a human can be shown them whole.
            out["arguments"] = Value::Object(request.arguments().clone());
            out["approvable"] = json!(request.render().is_ok());
            out["call"] = serde_json::to_value(request.call()).unwrap_or(Value::Null);
        }
        Sealed::Unverified => out["seal"] = json!("unverified"),
        Sealed::Tampered(why) => {
            out["seal"] = json!("tampered");
            out["seal_error"] = json!(why);
        }
    }
    out
}

fn status_word(status: EffectStatus) -> &'static str {
    match status {
        EffectStatus::Reserved => "reserved",
        EffectStatus::Committed => "committed",
        EffectStatus::Failed => "failed",
        EffectStatus::Ambiguous => "ambiguous",
    }
}

/// One effect record for a person: its status, key, attempt, when it last changed, and who resolved it.
fn effect_line(record: &EffectRecord, now: Duration) -> String {
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

/// The audit log a resolution is recorded in, refused when it cannot be signed as the log's records
/// are (an unsigned record in a signed log reads as tampering).
fn resolution_log(storage: &Storage, source: &AuditKeySource) -> Result<AuditLog, Failure> {
    let key = audit_key(source)?;
    let signed = key.is_some();
    let log = storage.audit(AuditConfig { key, ..AuditConfig::default() })?;
    ensure_signable(&log, signed)?;
    Ok(log)
}

/// Refuses an unkeyed log whose head is signed: its next record must be signed too.
fn ensure_signable(log: &AuditLog, signed: bool) -> Result<(), Failure> {
    let head = log.head().map_err(|e| format!("the audit log: {e}"))?;
    if let (Some(key_id), false) = (&head.key_id, signed) {
        return Err(format!(
            "the audit log is signed (key `{}`): give its key (`--audit-key-file` or `--audit-key-env`) so the \
             resolution's record is signed too; nothing was resolved",
            escape(key_id)
        ));
    }
    Ok(())
}

/// Resolves `key` as `operator` (`airlock effects resolve` and the console), then records who resolved
/// it, and how, in the audit log.
fn resolve_effect(
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
fn resolve_failure(err: &EffectError, now: Duration) -> Failure {
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

fn effect_json(record: &EffectRecord, now: Duration) -> Value {
    json!({
        "key": record.key,
        "status": status_word(record.status_at(now)),
        "attempt": record.attempt,
        "record": serde_json::to_value(record).unwrap_or(Value::Null),
    })
}

/// A duration in humantime's grammar: `30d`, `12h`, `2weeks`, `1h 30m` (`0s`: every settled record).
fn parse_age(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}` is not a duration ({e}), e.g. `30d`, `12h`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc_3339_in_utc_with_their_age() {
        let at = Duration::from_secs(1_796_153_379);
        assert_eq!(when(at + Duration::from_secs(200), at), "2026-12-01T19:29:39Z, 3 min ago");
        assert_eq!(when(at, at), "2026-12-01T19:29:39Z, 0 s ago");
        assert_eq!(when(at + Duration::from_secs(7200), at), "2026-12-01T19:29:39Z, 2 h ago");
        assert_eq!(when(at + Duration::from_secs(3 * 86_400), at), "2026-12-01T19:29:39Z, 3 days ago");
        assert_eq!(when(at, at + Duration::from_secs(90)), "2026-12-01T19:31:09Z, in 1 min");
    }
}
