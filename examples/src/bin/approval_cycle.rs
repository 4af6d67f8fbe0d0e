//! Approvals across an interrupt, in separate processes, as a real host would run them:
//!
//! ```sh
//! cargo run -p agent-airlock-examples --bin approval_cycle -- start  --dir demo   # interrupts, saves a checkpoint
//! cargo run -p agent-airlock-cli -- --db demo/airlock.redb requests list --key-file demo/approval.key
//! cargo run -p agent-airlock-cli -- operators add alice --key-out demo/alice.key --operators demo/operators.toml
//! cargo run -p agent-airlock-cli -- --db demo/airlock.redb approve <request-id> --signing-key demo/alice.key \
//!     --key-file demo/approval.key --yes > demo/resume.json
//! cargo run -p agent-airlock-examples --bin approval_cycle -- resume --dir demo   # runs the refund once
//! cargo run -p agent-airlock-examples --bin approval_cycle -- resume --dir demo   # a replay: refused
//! ```
//!
//! The checkpoint file stands for the host's checkpoint store (untrusted: it holds the call and the
//! interrupt); the approval key and the ledger (`airlock.redb`) live apart from it. With
//! `--db postgresql://…` (on both steps, and to the CLI) the ledger and the audit log live in a
//! PostgreSQL database that hosts share.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, RedbLedger};
use agent_airlock::{
    CallContext, Dispatcher, Outcome, State, SystemClock, ToolCall, ToolError, airlock_tool,
    approval::{InterruptApprovals, KeyRing},
    keys::ApprovalKey,
    tool,
};
use serde_json::{Value, json};

/// Where refunds are "sent": a file, so the runs can be counted.
struct PaymentProvider {
    log: PathBuf,
}

/// Refund a payment to the customer's card.
#[airlock_tool(escalate = "moves money")]
fn refund(
    /// The payment to refund.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
    #[inject] provider: State<PaymentProvider>,
) -> Result<String, ToolError> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&provider.log)
        .map_err(|e| ToolError::not_executed(e.to_string()))?;
    writeln!(file, "refunded {amount} on {payment_id}").map_err(|e| ToolError::new(e.to_string()))?;
    Ok(format!("refunded {amount} cents on {payment_id}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let option = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let dir = option("--dir").map_or_else(|| PathBuf::from("demo"), PathBuf::from);
    let result =
        stores(&dir, option("--db").map(String::as_str)).and_then(|stores| match args.first().map(String::as_str) {
            Some("start") => start(&dir, stores),
            Some("resume") => resume(&dir, stores),
            _ => Err("usage: approval_cycle start|resume [--dir DIR] [--db postgresql://…]".to_owned()),
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("approval_cycle: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The key lives outside the checkpoint store: created once, read by the host and the operator's CLI.
fn key(dir: &Path) -> Result<ApprovalKey, String> {
    let path = dir.join("approval.key");
    if !path.exists() {
        let (_, hex) = ApprovalKey::generate("k1").map_err(|e| e.to_string())?;
        write_key_file(&path, &hex).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    ApprovalKey::from_file("k1", &path).map_err(|e| e.to_string())
}

/// Writes a new key file only its owner can read (mode 0600 on unix), never over an existing file.
fn write_key_file(path: &Path, hex: &str) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(hex.as_bytes())
}

/// The ledger and the audit log: both in `DIR/airlock.redb`, or both in PostgreSQL (`--db URL`). Opened
/// before the async runtime starts (connecting blocks).
struct Stores {
    ledger: Arc<dyn ApprovalLedger>,
    audit: AuditLog,
}

fn stores(dir: &Path, db: Option<&str>) -> Result<Stores, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match db {
        Some(url) => {
            // The URL may hold a password: the error does not repeat it.
            let ledger = PostgresLedger::connect(url).map_err(|e| format!("the PostgreSQL database: {e}"))?;
            let audit = AuditLog::with_postgres(&ledger, AuditConfig::default());
            Ok(Stores { ledger: Arc::new(ledger), audit })
        }
        None => {
            let database = Arc::new(redb::Database::create(dir.join("airlock.redb")).map_err(|e| e.to_string())?);
            let ledger = Arc::new(RedbLedger::from_database(Arc::clone(&database)).map_err(|e| e.to_string())?);
            let audit = AuditLog::with_database(database, AuditConfig::default()).map_err(|e| e.to_string())?;
            Ok(Stores { ledger, audit })
        }
    }
}

fn host(dir: &Path, stores: Stores) -> Result<Dispatcher, String> {
    let approvals = InterruptApprovals::new(KeyRing::new(key(dir)?), stores.ledger, Duration::from_secs(3_600))
        .with_clock(Arc::new(SystemClock));
    Dispatcher::builder()
        .tool(tool!(refund))
        .interrupt_approvals(approvals)
        .audit(Arc::new(stores.audit))
        .build()
        .map_err(|e| e.to_string())
}

/// The model's call, as the host's checkpoint recorded it.
fn the_call() -> ToolCall {
    ToolCall::new("call_7", "refund", json!({"payment_id": "pi_3MtwBw", "amount": 2500}))
}

fn context(dir: &Path, resume: Option<Value>) -> CallContext {
    let context = CallContext::new()
        .with_thread("support-thread-42")
        .with_checkpoint("", [(String::new(), "checkpoint-3".to_owned())].into())
        .with_state(PaymentProvider { log: dir.join("refunds.log") });
    match resume {
        Some(value) => context.with_resume(value),
        None => context,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn start(dir: &Path, stores: Stores) -> Result<(), String> {
    let dispatcher = host(dir, stores)?;
    match dispatcher.dispatch(the_call(), &context(dir, None)).await {
        Outcome::Interrupt { request, .. } => {
            // What a human is shown: the exact arguments (the interrupt value holds them only encrypted).
            let shown = request.render().map_err(|e| e.to_string())?;
            let value = request.into_value();
            let checkpoint = json!({"call": the_call(), "interrupt": value});
            std::fs::write(dir.join("checkpoint.json"), serde_json::to_vec_pretty(&checkpoint).unwrap_or_default())
                .map_err(|e| e.to_string())?;
            let request = &value["airlock_approval"];
            println!(
                "interrupted: `{}` needs approval ({})",
                request["tool"].as_str().unwrap_or(""),
                request["reason"]
            );
            print!("{shown}");
            println!("request id:  {}", request["request_id"].as_str().unwrap_or(""));
            println!("saved {}", dir.join("checkpoint.json").display());
            Ok(())
        }
        other => Err(format!("expected an interrupt, got {other:?}")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn resume(dir: &Path, stores: Stores) -> Result<(), String> {
    let checkpoint: Value = serde_json::from_slice(
        &std::fs::read(dir.join("checkpoint.json")).map_err(|e| format!("no checkpoint: run `start` first ({e})"))?,
    )
    .map_err(|e| e.to_string())?;
    let call: ToolCall = serde_json::from_value(checkpoint["call"].clone()).map_err(|e| e.to_string())?;
    let resume_text = std::fs::read_to_string(dir.join("resume.json"))
        .map_err(|e| format!("no resume value: approve with the `airlock` CLI into resume.json ({e})"))?;
    let resume: Value = serde_json::from_str(&resume_text).map_err(|e| e.to_string())?;
    let dispatcher = host(dir, stores)?;
    match dispatcher.dispatch(call, &context(dir, Some(resume))).await {
        Outcome::Message(message) => {
            println!("{:?}: {}", message.status, message.content);
            let runs = std::fs::read_to_string(dir.join("refunds.log")).unwrap_or_default().lines().count();
            println!("refunds sent so far: {runs}");
            Ok(())
        }
        other => Err(format!("unexpected outcome {other:?}")),
    }
}
