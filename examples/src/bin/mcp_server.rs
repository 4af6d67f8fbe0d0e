//! A guarded MCP server over stdio. Its tools: `list_files` (allowed), `echo` (allowed; it returns the
//! arguments it received, so stripped ghost arguments can be seen missing), `delete_file` (escalated: the
//! client's human is asked through MCP elicitation) and `admin_shell` (denied by the policy, so not listed).
//!
//! Every approval is bound with HMAC to the exact call (thread = this connection, tool call id = the
//! JSON-RPC request id) and recorded in an approval ledger: `$AIRLOCK_MCP_LEDGER` (a redb file, or a
//! `postgresql://…` URL for a PostgreSQL database that hosts share), or a fresh file in a
//! directory of its own under the temporary directory (`$TMPDIR`), removed when the server exits (the client
//! closed stdin, or the session ended) or is stopped by SIGTERM or SIGINT. The key is minted per process:
//! approvals are given in-band, within one request, so that ledger is worth nothing after the process.
//!
//! Run: `cargo run -p agent-airlock-examples --bin mcp_server` and connect an MCP client to its stdin and
//! stdout (nothing else is written to stdout). For a client that starts it from another folder, install it
//! (`cargo install --path examples --bin mcp_server`) and give the client the installed binary's full path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use agent_airlock::integrations::mcp::{GuardedMcpServer, McpApprovals};
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, RedbLedger};
use agent_airlock::{
    CallContext, Dispatcher, Policy, State, SystemClock, ToolError, airlock_tool,
    approval::{InterruptApprovals, KeyRing},
    keys::ApprovalKey,
    tool,
};
use serde_json::{Value, json};

/// The files of a toy workspace.
struct Workspace {
    files: Mutex<BTreeMap<String, String>>,
}

/// List the files in the workspace.
#[airlock_tool]
fn list_files(#[inject] ws: State<Workspace>) -> Result<Vec<String>, ToolError> {
    let files = ws.files.lock().map_err(|_| ToolError::new("workspace unavailable"))?;
    Ok(files.keys().cloned().collect())
}

/// Echo the arguments back, as the tool received them.
#[airlock_tool]
fn echo(
    /// The text to echo.
    text: String,
    /// How many times to repeat it.
    times: Option<u8>,
) -> Value {
    json!({"text": text, "times": times})
}

/// Delete a file in the workspace.
#[airlock_tool(escalate = "deletes a file")]
fn delete_file(
    /// Path relative to the workspace root.
    path: String,
    #[inject] ws: State<Workspace>,
) -> Result<String, ToolError> {
    let mut files = ws.files.lock().map_err(|_| ToolError::new("workspace unavailable"))?;
    match files.remove(&path) {
        Some(_) => Ok(format!("deleted {path}")),
        None => Err(ToolError::not_executed(format!("no file `{path}`"))),
    }
}

/// Run a shell command on the host.
#[airlock_tool(name = "admin_shell")]
fn shell(
    /// The command line.
    command: String,
) -> String {
    format!("would run {command}")
}

/// The variable that names the temporary directory on this platform.
const TEMP_DIR_VAR: &str = if cfg!(windows) { "TMP" } else { "TMPDIR" };

/// Where the approval ledger lives; a directory this process created is removed when it is dropped.
struct LedgerPlace {
    path: PathBuf,
    _scratch: Option<tempfile::TempDir>,
}

impl LedgerPlace {
    fn choose() -> Result<Self, String> {
        if let Some(path) = std::env::var_os("AIRLOCK_MCP_LEDGER") {
            return Ok(Self { path: path.into(), _scratch: None });
        }
        let temp = std::env::temp_dir();
        let scratch = tempfile::Builder::new().prefix("airlock-mcp-").tempdir_in(&temp).map_err(|error| {
            format!(
                "cannot create the approval ledger in the temporary directory `{}`: {error}; set `{TEMP_DIR_VAR}` \
                 to a writable directory, or `AIRLOCK_MCP_LEDGER` to a ledger file",
                temp.display()
            )
        })?;
        Ok(Self { path: scratch.path().join("approvals.redb"), _scratch: Some(scratch) })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let place = match LedgerPlace::choose() {
        Ok(place) => place,
        Err(message) => {
            eprintln!("mcp_server: {message}");
            return ExitCode::FAILURE;
        }
    };
    // A client that is done closes stdin; one that is impatient (or a user's Ctrl-C) sends a signal. Either
    // way the server stops serving first, so nothing holds the ledger when its directory goes.
    let served = tokio::select! {
        served = serve(&place.path) => served,
        signal = termination() => {
            eprintln!("mcp_server: {signal}, shutting down");
            drop(place);
            // The runtime would wait for its blocking read of stdin, which a signal does not end.
            std::process::exit(0);
        }
    };
    // Everything that used the ledger is gone once `serve` returns: its directory can go too.
    drop(place);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mcp_server: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The ledger at `place`: a PostgreSQL database for a `postgres://` or `postgresql://` URL, else a redb file.
async fn open_ledger(place: &Path) -> Result<Arc<dyn ApprovalLedger>, String> {
    match place.to_str().filter(|p| p.starts_with("postgres://") || p.starts_with("postgresql://")) {
        Some(url) => {
            let url = url.to_owned();
            // Connecting blocks; the URL may hold a password, so the error does not repeat it.
            let connected = tokio::task::spawn_blocking(move || PostgresLedger::connect(&url))
                .await
                .map_err(|error| error.to_string())?
                .map_err(|error| format!("cannot open the approval ledger in PostgreSQL: {error}"))?;
            Ok(Arc::new(connected))
        }
        None => Ok(Arc::new(
            RedbLedger::open(place)
                .map_err(|error| format!("cannot open the approval ledger `{}`: {error}", place.display()))?,
        )),
    }
}

/// Resolves when the process is asked to stop (SIGTERM or SIGINT; Ctrl-C elsewhere), naming the signal.
async fn termination() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut terminate), Ok(mut interrupt)) => tokio::select! {
                _ = terminate.recv() => "terminated",
                _ = interrupt.recv() => "interrupted",
            },
            // Without signal handlers the server still stops when stdin closes.
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "interrupted",
            Err(_) => std::future::pending().await,
        }
    }
}

async fn serve(ledger_path: &Path) -> Result<(), String> {
    let ledger = open_ledger(ledger_path).await?;
    let (key, _) = ApprovalKey::generate("mcp-session").map_err(|error| error.to_string())?;
    let approvals = InterruptApprovals::new(KeyRing::new(key), ledger, std::time::Duration::from_secs(600))
        .with_clock(Arc::new(SystemClock));
    let dispatcher = Dispatcher::builder()
        .tool(tool!(list_files))
        .tool(tool!(echo))
        .tool(tool!(delete_file))
        .tool(tool!(shell))
        .policy(Policy::builder().deny("admin_*").build().expect("the policy is valid"))
        .interrupt_approvals(approvals.clone())
        .build()
        .map_err(|error| error.to_string())?;
    let files =
        ["notes.txt", "report.md", "todo.txt"].into_iter().map(|name| (name.to_owned(), String::new())).collect();
    let context = CallContext::new().with_state(Workspace { files: Mutex::new(files) });
    GuardedMcpServer::new(Arc::new(dispatcher), McpApprovals::BoundClientElicitation(Box::new(approvals)))
        .with_context(context)
        .with_server_info("agent-airlock-example", env!("CARGO_PKG_VERSION"))
        .with_instructions("Files in a toy workspace. Deleting one asks the user; admin tools are not available.")
        .serve_stdio()
        .await
        .map_err(|error| error.to_string())
}
