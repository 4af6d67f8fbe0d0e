//! One host resuming an approved `pay_invoice` call through the real dispatcher over a PostgreSQL ledger,
//! driven by `tests/tests/postgres/pg_faults.rs` (races between hosts, a host killed mid-call):
//!
//! ```text
//! pg_dispatch_worker URL CALL_ID INVOICE RESUME_JSON START_MS EXECUTIONS_FILE [hang]
//! ```
//!
//! Connects (its own pool), prints `ready`, waits until `START_MS` since the Unix epoch (wall clock, the
//! same instant for every racer), dispatches, and prints `executed`, `refused <kind>` or
//! `unexpected <outcome>`. With `hang`, the tool hangs after recording its execution (to be killed).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ledger::PostgresLedger;
use agent_airlock::{CallContext, ManualClock, Outcome, Status};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::START;
use agent_airlock_tests::payments::{ExecutionLog, invoice_dispatcher, pay_call};
use agent_airlock_tests::say;

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let [url, call_id, invoice, resume, start_ms, executions, rest @ ..] = args.as_slice() else {
        eprintln!("usage: worker pg_dispatch_worker URL CALL_ID INVOICE RESUME_JSON START_MS EXECUTIONS_FILE [hang]");
        return ExitCode::from(2);
    };
    let ledger = match PostgresLedger::connect(url) {
        Ok(ledger) => ledger,
        Err(err) => {
            say(&format!("error {err}"));
            return ExitCode::FAILURE;
        }
    };
    // Open the pool's connection first, so the race is between dispatches, not between connects.
    if let Err(err) = agent_airlock::ledger::ApprovalLedger::find_grant(&ledger, "warm-up") {
        say(&format!("error {err}"));
        return ExitCode::FAILURE;
    }
    let Ok(resume) = serde_json::from_str::<serde_json::Value>(resume) else {
        say("error RESUME_JSON is not JSON");
        return ExitCode::FAILURE;
    };
    let clock = Arc::new(ManualClock::new(START + Duration::from_secs(2)));
    let dispatcher = invoice_dispatcher(Arc::new(ledger), clock);
    let log =
        ExecutionLog { path: PathBuf::from(executions), hang_after_start: rest.first().is_some_and(|a| a == "hang") };
    let context = CallContext::new().with_thread("t1").with_state(log).with_resume(resume);
    say("ready");
    let start = Duration::from_millis(start_ms.parse().unwrap_or(0));
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    if let Some(wait) = start.checked_sub(wall) {
        std::thread::sleep(wait);
    }
    match block_on(dispatcher.dispatch(pay_call(call_id, invoice), &context)) {
        Outcome::Message(m) if m.status == Status::Success => say("executed"),
        Outcome::Message(m) => say(&format!("refused {:?} {}", m.refusal.map(|r| r.kind), m.content)),
        other => say(&format!("unexpected {other:?}")),
    }
    ExitCode::SUCCESS
}
