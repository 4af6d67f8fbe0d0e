//! `airlock mcp`: the guard in front of an MCP server nobody here wrote.
//!
//! `airlock mcp --policy airlock.toml -- <command> [args…]` starts the upstream server as a child process,
//! speaks MCP to the client on stdin and stdout (nothing else is written to stdout; logs go to stderr), and
//! runs every `tools/call` through the gates of the policy file before forwarding it. Approvals are asked
//! of the client's human by elicitation, or, for tools the policy routes to an operator, wait for
//! `airlock approve` in the shared store; either way bound to the exact call and spent once through the
//! ledger in `--db` (a redb file or a PostgreSQL URL). Resource reads and prompt gets go through the
//! policy's resource and prompt rules, rate limits, masking and the audit log too. The child is shut
//! down when the client goes away or on SIGTERM/SIGINT. `--upstream-url` reaches a Streamable HTTP upstream
//! instead of starting one; `--listen` serves clients over Streamable HTTP (bearer token required).
//!
//! `airlock mcp scan -- <command> [args…]` prints a starter policy for that server: deny by default, every
//! tool listed with its definition pin and its tool-poisoning findings; it reports the findings on standard
//! error too, and exits non-zero when there are any.

use std::ffi::OsString;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::approval::display::escape;
use agent_airlock::approval::operators::Operators;
use agent_airlock::approval::{InterruptApprovals, KeyRing};
use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::effect::EffectStore;
use agent_airlock::integrations::mcp::{McpApprovals, RoutedApprovals};
use agent_airlock::integrations::mcp_gateway::{
    AllowedFindings, HttpAuth, McpGateway, ToolPins, Upstream, UpstreamCommand, UpstreamEnvironment,
};
use agent_airlock::keys::ApprovalKey;
use agent_airlock::ledger::ApprovalLedger;
use agent_airlock::policy::{ApprovalRoute, PolicyMode};
use agent_airlock::{Dispatcher, Policy, SystemClock};

use crate::{Cli, Storage};

mod args;
mod inspect;
mod listen;
mod sandbox;

use self::args::{GatewayArgs, McpCommand};
pub(crate) use self::args::{McpArgs, OtlpEndpoint, otlp_endpoint};
pub(crate) use self::inspect::check_against;
use self::inspect::{kinds_of, scan};
use self::listen::listener;

/// The approval key's id in the gateway's ledger.
const KEY_ID: &str = "airlock-mcp";

/// How long a grant stays valid: the gateway spends it right after the human's yes.
const GRANT_TTL: Duration = Duration::from_secs(600);

/// Runs `airlock mcp …`.
pub(crate) fn run(args: &McpArgs, cli: &Cli) -> Result<(), String> {
    // The launcher must stay one thread (no async runtime): a process with threads cannot enter a user namespace.
    if let Some(McpCommand::SandboxExec { plan, command }) = &args.command {
        return sandbox::launch(plan, command);
    }
    // The database is opened outside the async runtime: PostgreSQL's connection blocks while it connects.
    let prepared = match &args.command {
        Some(McpCommand::Scan { .. } | McpCommand::SandboxExec { .. }) => None,
        None => Some(prepare(&args.run, cli)?),
    };
    // One client on stdio is served on one thread: a call's tasks (the client's transport, the call, the
    // upstream's transport) then never wait for another worker to wake and take them over, which is most of
    // what the gateway adds to a call on a busy machine (BENCHMARKS.md §8). A lone call's durable write is
    // committed on that thread too (`prepare`); concurrent ones go to the store's writer thread, which shares
    // their commits. Clients over HTTP may be many: two workers.
    let mut builder = match args.run.listen {
        Some(_) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(2);
            builder
        }
        None => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = builder.enable_all().build().map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = match (&args.command, prepared) {
        (Some(McpCommand::Scan { env, upstream }), _) => runtime.block_on(scan(env, upstream)),
        (None, Some(prepared)) => runtime.block_on(gateway(&args.run, prepared)),
        (Some(McpCommand::SandboxExec { .. }), _) | (None, None) => Err("the gateway was not prepared".to_owned()),
    };
    // Standard input that is not a pipe (a terminal, a file) is read by a blocking thread that nothing but
    // input ends; do not wait for it.
    runtime.shutdown_background();
    result
}

/// The upstream's command line, started with the scrubbed environment `--env` adds to; `withheld` are the
/// variables the gateway reads its own secrets from.
fn upstream_command(parts: &[OsString], env: &[String], withheld: &[&str]) -> Result<UpstreamCommand, String> {
    let (program, args) = parts.split_first().ok_or("give the upstream server's command after `--`")?;
    let mut environment = UpstreamEnvironment::new();
    for name in withheld {
        environment.withhold(*name);
    }
    for arg in env {
        environment.parse_arg(arg).map_err(|e| format!("`--env {}`: {e}", escape(arg)))?;
    }
    Ok(UpstreamCommand::new(program.clone(), args.iter().cloned()).environment(environment))
}

/// What the gateway runs with, read and opened before it starts: the policy, then the stores.
struct Prepared {
    policy: Policy,
    ledger: Arc<dyn ApprovalLedger>,
    effects: Arc<dyn EffectStore>,
    audit: Arc<AuditLog>,
    key: ApprovalKey,
    /// The key was made for this run: no other process can check or decide its requests.
    key_generated: bool,
    /// Another process (`airlock approve`) can open the store while the gateway runs.
    store_shared: bool,
}

fn prepare(args: &GatewayArgs, cli: &Cli) -> Result<Prepared, String> {
    let policy_path = args.policy.as_deref().ok_or("`--policy` is required")?;
    // A `--env` naming one of the gateway's secrets is refused before anything is opened.
    if args.upstream_url.is_none() {
        upstream_command(&args.upstream, &args.env, &withheld(args))?;
    }
    let text = std::fs::read_to_string(policy_path).map_err(|e| format!("{}: {e}", policy_path.display()))?;
    let policy = Policy::from_toml(&text).map_err(|e| format!("{}: {e}", policy_path.display()))?;
    let (key, key_generated) = approval_key(args)?;
    // The store is the one every other command opens with the same `--db`.
    let storage = Storage::open(cli)?;
    let audit_key = crate::audit_key(&args.audit_key)?;
    let audit_signed = audit_key.is_some();
    let audit_config = AuditConfig { key: audit_key, ..AuditConfig::default() };
    let audit = match (&args.audit_file, &args.audit, &storage) {
        (Some(path), _, _) => {
            AuditLog::open_append_only(path, audit_config).map_err(|e| format!("--audit-file: {e}"))?
        }
        (None, Some(path), _) => Storage::audit_database(cli, path, audit_config)?,
        (None, None, Storage::Redb(_)) => storage.audit(audit_config)?,
        (None, None, Storage::Postgres(_)) => {
            return Err("the gateway audits every call, and PostgreSQL holds only the ledger and the effect records: \
                        give the audit log's file with `--audit-file` (append-only) or `--audit` (redb)"
                .to_owned());
        }
    };
    let head = audit.head().map_err(|e| format!("the audit log: {e}"))?;
    if let (Some(key_id), false) = (&head.key_id, audit_signed) {
        return Err(format!(
            "the audit log is keyed (key `{}`): give its key (`--audit-key-file` or `--audit-key-env`) so the \
             gateway's records are keyed too",
            agent_airlock::approval::display::escape(key_id)
        ));
    }
    let store_shared = matches!(storage, Storage::Postgres(_)) || cli.multi_process;
    // One client on stdio, served on one thread that has nothing else to run while its call's record is
    // committed: a lone write is committed on that thread rather than handed to the writer thread and back
    // (two wake-ups, BENCHMARKS.md §8). Not where another process may hold the file's write lock.
    if args.listen.is_none() && !cli.multi_process {
        audit.commit_on_caller_when_idle();
    }
    Ok(Prepared {
        policy,
        ledger: storage.ledger()?,
        effects: storage.effects()?,
        audit: Arc::new(audit),
        key,
        key_generated,
        store_shared,
    })
}

async fn gateway(args: &GatewayArgs, prepared: Prepared) -> Result<(), String> {
    let stop = termination("airlock mcp");
    let Prepared { policy, ledger, effects, audit, key, key_generated, store_shared } = prepared;
    let pins: ToolPins = policy.pins().iter().map(|(tool, pin)| (tool.clone(), pin.clone())).collect();
    let allowed = AllowedFindings::from_policy(&policy);
    let observe = policy.mode() == PolicyMode::Observe;
    let mut approvals = InterruptApprovals::new(KeyRing::new(key), ledger, GRANT_TTL).with_clock(Arc::new(SystemClock));
    if args.audit_file.is_some() {
        // A request the gateway closes (its call cancelled, its answer lost) revokes a grant an operator issued
        // meanwhile: recorded in the append-only file first, so every host writing it refuses that grant.
        approvals = approvals.with_revocation_log(Arc::clone(&audit));
    }
    if let Some(path) = &args.operators {
        let operators = Operators::load(path).map_err(|e| e.to_string())?;
        approvals = approvals.with_operators(operators);
    }

    let listen = match args.listen {
        Some(addr) => Some(listener(args, addr).await?),
        None => None,
    };
    let (upstream, shown) = match &args.upstream_url {
        Some(url) => {
            let bearer = match &args.upstream_token_env {
                Some(var) => {
                    Some(std::env::var(var).map_err(|_| format!("`--upstream-token-env`: `{var}` is not set"))?)
                }
                None => None,
            };
            (Upstream::connect(url, bearer).await.map_err(|e| e.to_string())?, url.clone())
        }
        None => {
            let command =
                upstream_command(&args.upstream, &args.env, &withheld(args))?.max_message_bytes(args.max_result_bytes);
            let command = args.sandbox.apply(command)?;
            (Upstream::spawn(&command).await.map_err(|e| e.to_string())?, command.display())
        }
    };
    let setup = {
        let approvals = approvals.clone();
        let policy = policy.clone();
        move || {
            Dispatcher::builder()
                .policy(policy.clone())
                .interrupt_approvals(approvals.clone())
                .effects(Arc::clone(&effects))
                .audit(Arc::clone(&audit))
        }
    };
    let gateway = match McpGateway::start_allowing(upstream, pins, allowed, setup).await {
        Ok(gateway) => {
            gateway.with_approval_timeout(Duration::from_secs(args.approval_timeout_secs)).with_policy(policy.clone())
        }
        Err(error) => return Err(error.to_string()),
    };
    let tools = gateway.tools();
    let unmatched = policy.tables_naming_no_tool(tools.listed.iter().map(String::as_str));
    if !unmatched.is_empty() {
        let report = unmatched.iter().map(|table| escape(&table.to_string()).into_owned()).collect::<Vec<_>>();
        if !args.allow_unmatched_tables {
            gateway.shutdown().await;
            return Err(format!(
                "the policy's rules would apply to nothing: {} (fix the names, or pass `--allow-unmatched-tables`)",
                report.join("; ")
            ));
        }
        for line in report {
            eprintln!("airlock mcp: warning: {line}");
        }
    }
    let operator_tools: Vec<&String> =
        tools.offered.iter().filter(|tool| policy.for_tool(tool).approver == ApprovalRoute::Operator).collect();
    let unusable_operator = if operator_tools.is_empty() {
        None
    } else if key_generated {
        Some(
            "an operator checks and decides requests with the gateway's approval key: give it with `--key-file` or in `--key-env`'s variable",
        )
    } else if !store_shared {
        Some(
            "an operator decides in the store the gateway holds: open the redb file with `--multi-process` (every process using it must), or use a PostgreSQL `--db`",
        )
    } else {
        None
    };
    if let Some(why) = unusable_operator {
        let names = operator_tools.iter().map(|tool| escape(tool).into_owned()).collect::<Vec<_>>().join(", ");
        gateway.shutdown().await;
        return Err(format!("the policy routes the approvals of {names} to an operator, but {why}"));
    }
    if !operator_tools.is_empty() && args.operators.is_none() {
        eprintln!(
            "airlock mcp: warning: without `--operators FILE` any holder of the approval key, or anyone who can \
             write the store, can approve; pass the operators file to count only operators' signed approvals"
        );
    }
    eprintln!(
        "airlock mcp: guarding `{}`; offering {} tool(s): {}",
        escape(&shown),
        tools.offered.len(),
        escape(&tools.offered.join(", "))
    );
    for name in &tools.changed_pins {
        eprintln!("airlock mcp: `{}` changed since it was pinned: hidden, its calls refused", escape(name));
    }
    for (name, why) in &tools.unusable {
        eprintln!("airlock mcp: `{}` cannot be guarded ({}): hidden", escape(name), escape(why));
    }
    for (name, findings) in &tools.flagged {
        eprintln!(
            "airlock mcp: `{}` is hidden, its calls refused: its definition has {} (read it with `airlock mcp scan`; \
             accept with `allow_findings = [{}]` in `[tools.{}]`)",
            escape(name),
            findings.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
            kinds_of(findings),
            escape(name),
        );
    }
    for (name, findings) in &tools.accepted {
        eprintln!(
            "airlock mcp: `{}` is offered with findings the policy allows: {}",
            escape(name),
            findings.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
        );
    }
    if !operator_tools.is_empty() {
        eprintln!(
            "airlock mcp: an operator approves the escalated calls of {} (`airlock requests list --pending`, then \
             `airlock approve`); each waits up to {} s",
            escape(&operator_tools.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")),
            args.approval_timeout_secs
        );
    }
    if observe {
        eprintln!("airlock mcp: OBSERVE MODE: the policy refuses nothing; what it would refuse is audited and logged");
    }
    let routed = RoutedApprovals::new(approvals, move |tool| policy.for_tool(tool).approver)
        .with_poll_interval(Duration::from_millis(args.operator_poll_ms));
    let routes = McpApprovals::Routed(Box::new(routed));
    match listen {
        Some((listener, auth)) => {
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            match &auth {
                HttpAuth::OAuth(server) => eprintln!(
                    "airlock mcp: serving MCP over Streamable HTTP on http://{addr}/mcp (OAuth access tokens of `{}` \
                     required; metadata at {})",
                    server.config().issuer,
                    server.metadata_url()
                ),
                _ => eprintln!(
                    "airlock mcp: serving MCP over Streamable HTTP on http://{addr}/mcp (bearer token required)"
                ),
            }
            gateway.serve_http(routes, listener, auth, stop).await.map_err(|e| e.to_string())
        }
        None => gateway.serve_stdio(routes, stop).await.map_err(|e| e.to_string()),
    }
}

/// The variables the gateway reads a secret from, never given to the upstream (besides every `AIRLOCK_*`).
fn withheld(args: &GatewayArgs) -> Vec<&str> {
    let mut names = vec![args.key_env.as_str(), args.token_env.as_str()];
    names.extend(args.upstream_token_env.as_deref());
    names.extend(args.audit_key.audit_key_env.as_deref());
    names
}

/// The approval key, and whether it was made for this run.
fn approval_key(args: &GatewayArgs) -> Result<(ApprovalKey, bool), String> {
    if let Some(path) = &args.key_file {
        crate::warn_if_others_can_read(path);
        return ApprovalKey::from_file(KEY_ID, path).map(|key| (key, false)).map_err(|e| e.to_string());
    }
    if std::env::var_os(&args.key_env).is_some() {
        return ApprovalKey::from_env(KEY_ID, &args.key_env).map(|key| (key, false)).map_err(|e| e.to_string());
    }
    let (key, _) = ApprovalKey::generate(KEY_ID).map_err(|e| e.to_string())?;
    Ok((key, true))
}

/// Resolves when the process is asked to stop (SIGTERM or SIGINT; Ctrl-C elsewhere). The handlers are
/// installed when this is called, so a signal that arrives before the future is first polled still counts.
/// `who` names the command in the message on standard error.
pub(crate) fn termination(who: &'static str) -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let handlers = signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::interrupt())?)));
        async move {
            match handlers {
                Ok((mut terminate, mut interrupt)) => {
                    let name = tokio::select! {
                        _ = terminate.recv() => "SIGTERM",
                        _ = interrupt.recv() => "SIGINT",
                    };
                    eprintln!("{who}: {name}, shutting down");
                }
                // Without signal handlers the gateway still stops when the client goes.
                Err(_) => std::future::pending().await,
            }
        }
    }
    #[cfg(not(unix))]
    {
        async move {
            match tokio::signal::ctrl_c().await {
                Ok(()) => eprintln!("{who}: interrupted, shutting down"),
                Err(_) => std::future::pending().await,
            }
        }
    }
}
