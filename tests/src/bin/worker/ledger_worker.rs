//! A process that uses an approval ledger file, driven by the ledger tests (races between processes,
//! crashes). The approval key comes from the environment variable `AIRLOCK_TEST_APPROVAL_KEY` (hex).
//!
//! ```text
//! ledger_worker admit <ledger> <exclusive|multi> <wait-ms> <barrier-file|-> <call-json> <resume-json>
//!     opens the ledger (waiting up to wait-ms while another process holds it); with a barrier file,
//!     prints `ready` and waits for the file to exist; admits the call, prints `<outcome> <detail>`
//! ledger_worker approve-and-hang <ledger> <call-json>
//!     requests and approves the call, prints the resume value as one JSON line, then hangs
//! ledger_worker admit-and-hang <ledger> <call-json> <resume-json>
//!     admits the call, prints `<outcome>`, then hangs as if the tool were running
//! ledger_worker spend-stream <ledger> <jobs-json>
//!     admits each `{"call", "resume"}` in turn, printing `<outcome> <index>` after each, then hangs
//! ledger_worker hold <ledger> <ms>
//!     opens the ledger, prints `open`, keeps it open for ms milliseconds, exits
//! ledger_worker open <ledger>
//!     opens the ledger once, without waiting; prints `ok` or `error: <message>`
//! ```

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ledger::RedbLedger;
use agent_airlock::store::{ProcessSharing, RedbOpenOptions};
use agent_airlock::{
    ManualClock,
    approval::{InterruptApprovals, KeyRing},
    keys::ApprovalKey,
};
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, KEY_ENV, OwnedCall, START, outcome_word};
use agent_airlock_tests::say;
use serde_json::Value;

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            println!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn approvals(ledger: RedbLedger) -> Result<InterruptApprovals, String> {
    let key = ApprovalKey::from_env("k1", KEY_ENV).map_err(|err| err.to_string())?;
    let clock = Arc::new(ManualClock::new(START + Duration::from_secs(1)));
    Ok(InterruptApprovals::new(KeyRing::new(key), Arc::new(ledger), GRANT_TTL).with_clock(clock))
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|err| format!("bad {what}: {err}"))
}

fn run(args: &[String]) -> Result<(), String> {
    let arg = |i: usize| args.get(i).map(String::as_str).ok_or_else(|| format!("missing argument {i}"));
    match arg(0)? {
        "admit" => {
            let sharing = match arg(2)? {
                "exclusive" => ProcessSharing::Exclusive,
                "multi" => ProcessSharing::MultiProcess,
                other => return Err(format!("unknown sharing `{other}`")),
            };
            let wait = Duration::from_millis(arg(3)?.parse().map_err(|_| "bad wait")?);
            let options = RedbOpenOptions::default().sharing(sharing).wait_if_open(wait);
            let ledger = RedbLedger::open_with(arg(1)?, &options).map_err(|err| err.to_string())?;
            let barrier = arg(4)?;
            if barrier != "-" {
                say("ready");
                while !Path::new(barrier).exists() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let call: OwnedCall = parse("call", arg(5)?)?;
            let resume: Value = parse("resume", arg(6)?)?;
            let approvals = approvals(ledger)?;
            let result = approvals.admit(&call.input(), &resume).wait();
            match &result {
                Ok(admission) => say(&format!("admitted {}", admission.grant_id)),
                Err(err) => say(&format!("{} {err}", outcome_word(&result))),
            }
            Ok(())
        }
        "approve-and-hang" => {
            let ledger = RedbLedger::open(arg(1)?).map_err(|err| err.to_string())?;
            let call: OwnedCall = parse("call", arg(2)?)?;
            let approvals = approvals(ledger)?;
            let request =
                approvals.request(&call.input(), "attribute", "moves money").wait().map_err(|err| err.to_string())?;
            let resume = approvals.approve(request.as_value(), "alice").wait().map_err(|err| err.to_string())?;
            say(&resume.into_value().to_string());
            hang()
        }
        "admit-and-hang" => {
            let ledger = RedbLedger::open(arg(1)?).map_err(|err| err.to_string())?;
            let call: OwnedCall = parse("call", arg(2)?)?;
            let resume: Value = parse("resume", arg(3)?)?;
            let approvals = approvals(ledger)?;
            let result = approvals.admit(&call.input(), &resume).wait();
            say(outcome_word(&result));
            hang()
        }
        "spend-stream" => {
            let ledger = RedbLedger::open(arg(1)?).map_err(|err| err.to_string())?;
            let jobs: Vec<(OwnedCall, Value)> = parse("jobs", arg(2)?)?;
            let approvals = approvals(ledger)?;
            for (index, (call, resume)) in jobs.iter().enumerate() {
                let result = approvals.admit(&call.input(), resume).wait();
                say(&format!("{} {index}", outcome_word(&result)));
            }
            hang()
        }
        "hold" => {
            let ledger = RedbLedger::open(arg(1)?).map_err(|err| err.to_string())?;
            say("open");
            std::thread::sleep(Duration::from_millis(arg(2)?.parse().map_err(|_| "bad ms")?));
            drop(ledger);
            Ok(())
        }
        "open" => {
            match RedbLedger::open(arg(1)?) {
                Ok(_) => say("ok"),
                Err(err) => say(&format!("error: {err}")),
            }
            Ok(())
        }
        other => Err(format!("unknown command `{other}`")),
    }
}
