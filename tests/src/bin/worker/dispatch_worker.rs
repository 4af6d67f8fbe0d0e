//! A host process that resumes an interrupted call through the real dispatcher, driven by the
//! approval tests (races between processes, crashes). The approval key comes from the environment
//! variable `AIRLOCK_TEST_APPROVAL_KEY` (hex), like a deployment's would.
//!
//! ```text
//! dispatch_worker resume <ledger> <executions-file> <barrier-file|-> <resume-json> [hang]
//!     opens the ledger in multi-process mode; with a barrier file, prints `ready` and waits for the file to
//!     exist; dispatches the refund call with the resume value; prints `executed`, `refused <kind>` or
//!     `error <message>`. With `hang`, the tool hangs after recording its execution.
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ledger::RedbLedger;
use agent_airlock::store::{ProcessSharing, RedbOpenOptions};
use agent_airlock::{ManualClock, Outcome, Policy, Status, keys::ApprovalKey};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::{KEY_ENV, SECRET_HEX, START};
use agent_airlock_tests::payments::{ExecutionLog, context, dispatcher, refund_call};
use agent_airlock_tests::say;

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            say(&format!("error {message}"));
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let arg = |i: usize| args.get(i).map(String::as_str).ok_or_else(|| format!("missing argument {i}"));
    if arg(0)? != "resume" {
        return Err(format!("unknown command `{}`", arg(0)?));
    }
    // The deployment's key arrives through the environment; it must match the fixtures' key.
    let key = ApprovalKey::from_env("k1", KEY_ENV).map_err(|e| e.to_string())?;
    if std::env::var(KEY_ENV).as_deref() != Ok(SECRET_HEX) || key.id() != "k1" {
        return Err("the worker expects the fixtures' key".into());
    }
    let options =
        RedbOpenOptions::default().sharing(ProcessSharing::MultiProcess).wait_if_open(Duration::from_secs(30));
    let ledger = RedbLedger::open_with(arg(1)?, &options).map_err(|e| e.to_string())?;
    let log = ExecutionLog { path: PathBuf::from(arg(2)?), hang_after_start: args.get(5).is_some_and(|a| a == "hang") };
    let barrier = arg(3)?;
    let resume: serde_json::Value = serde_json::from_str(arg(4)?).map_err(|e| e.to_string())?;
    let clock = Arc::new(ManualClock::new(START + Duration::from_secs(2)));
    let dispatcher = dispatcher(Arc::new(ledger), clock, Policy::new());
    if barrier != "-" {
        say("ready");
        while !Path::new(barrier).exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let outcome = block_on(dispatcher.dispatch(refund_call(500), &context(log, "c1", Some(resume))));
    match outcome {
        Outcome::Message(m) if m.status == Status::Success => say("executed"),
        Outcome::Message(m) => say(&format!("refused {:?}", m.refusal.map(|r| r.kind))),
        other => say(&format!("unexpected {other:?}")),
    }
    Ok(())
}
