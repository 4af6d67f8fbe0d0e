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

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agent_airlock::otel::OtlpExport;
use clap::{Parser, Subcommand};

mod audit;
mod console;
mod effects;
mod keys;
mod mcp;
mod operators;
mod output;
mod policy;
mod requests;
mod storage;

use audit::AuditCommand;
use effects::EffectsCommand;
use keys::{KeySource, SigningKeySource};
// `mcp` reaches these through the crate root.
use keys::{AuditKeySource, audit_key, warn_if_others_can_read};
use operators::OperatorsCommand;
use policy::PolicyCommand;
use requests::{RequestsCommand, parse_age};
use storage::Storage;

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
        /// The hosts' append-only audit file (`airlock mcp --audit-file`): an approved grant the denial revokes
        /// is recorded revoked in it first, so every host writing that file refuses the grant from then on,
        /// even if the database's row is later set back to live. It must exist.
        #[arg(long, value_name = "PATH")]
        audit_file: Option<PathBuf>,
        #[command(flatten)]
        audit_key: AuditKeySource,
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

/// What a command that failed says, printed after `airlock: `.
type Failure = String;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let export = match init_logging(&cli) {
        Ok(export) => export,
        Err(message) => {
            eprintln!("airlock: {message}");
            return ExitCode::FAILURE;
        }
    };
    let result = run(&cli);
    // What is still queued goes to the collector now, within the export's timeout; a collector that is down
    // is reported, never a failure of the command.
    if let Some(export) = export
        && let Err(error) = export.shutdown()
    {
        eprintln!("airlock: warning: {error}");
    }
    match result {
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
///
/// With `airlock mcp --otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`), each decision of the gateway is also
/// exported over OTLP, whatever `AIRLOCK_LOG` says: each layer has its own filter.
fn init_logging(cli: &Cli) -> Result<Option<OtlpExport>, Failure> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = tracing_subscriber::EnvFilter::try_from_env("AIRLOCK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true)
        .with_filter(filter);
    let build = |endpoint: &str| OtlpExport::http(endpoint).service_name("airlock-mcp-gateway").build();
    let export = match &cli.command {
        Command::Mcp(args) => match mcp::otlp_endpoint(args) {
            Some(mcp::OtlpEndpoint::Flag(endpoint)) => {
                Some(build(&endpoint).map_err(|error| format!("--otlp-endpoint: {error}"))?)
            }
            // Set for everything in this environment, not asked of the gateway: it runs without the export.
            Some(mcp::OtlpEndpoint::Environment(endpoint)) => match build(&endpoint) {
                Ok(export) => Some(export),
                Err(error) => {
                    eprintln!(
                        "airlock: warning: OTEL_EXPORTER_OTLP_ENDPOINT: {error}; decisions are not exported (give \
                         --otlp-endpoint to make the export a condition of starting)"
                    );
                    None
                }
            },
            None => None,
        },
        _ => None,
    };
    let decisions = export.as_ref().map(|export| export.layer());
    // A second initialisation (never in this binary) would fail harmlessly.
    let _ = tracing_subscriber::registry().with(log).with(decisions).try_init();
    Ok(export)
}

fn run(cli: &Cli) -> Result<(), Failure> {
    match &cli.command {
        Command::Requests { command } => requests::requests(cli, command),
        Command::Approve { request_id, yes, signing, ttl_secs, key } => {
            requests::approve(cli, request_id, *yes, signing, *ttl_secs, key)
        }
        Command::Deny { request_id, signing, reason, key, audit_file, audit_key } => {
            let revocations = audit_file.as_deref().map(|path| (path, audit_key));
            requests::deny(cli, request_id, signing, reason.as_deref(), key, revocations)
        }
        Command::Operators { command } => operators::run(command, cli.json),
        Command::Spent => requests::spent(cli),
        Command::Prune { older_than } => requests::prune(cli, *older_than),
        Command::Effects { command } => effects::run(cli, command),
        Command::Audit { command } => audit::run(cli, command),
        // Opens the database itself, once it knows the policy is good; `scan` needs none.
        Command::Mcp(args) => mcp::run(args, cli),
        // `hash-password` needs no database.
        Command::Console(args) => console::run(cli, args),
        Command::Policy { command: PolicyCommand::Check { file, server, .. } } => policy::check(file, server, cli.json),
    }
}
