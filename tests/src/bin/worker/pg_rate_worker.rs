//! One host dispatching calls under a shared rate rule over PostgreSQL, driven by `tests/tests/dispatch/shared_rates.rs`
//! (processes racing one `10/minute` rule):
//!
//! ```text
//! pg_rate_worker URL CALLS START_MS
//! ```
//!
//! Connects (its own pool), waits until `START_MS` since the Unix epoch (wall clock, the same instant for
//! every racer), dispatches `CALLS` calls one after another, and prints `done EXECUTED RATE_LIMITED`, or
//! `unexpected …` for any other outcome.

use std::process::ExitCode;
use std::time::Duration;

use agent_airlock::ledger::PostgresLedger;
use agent_airlock::{CallContext, Dispatcher, Outcome, Policy, RefusalKind, Status, ToolCall, airlock_tool, tool};
use agent_airlock_tests::block_on;
use agent_airlock_tests::say;
use serde_json::json;

/// The rule every racer enforces, from a policy file.
const POLICY: &str = "version = 1\ndefault = \"allow\"\n[tools.ping]\nrate = \"10/minute\"\nrate_shared = true\n";

/// Answer.
#[airlock_tool]
fn ping() -> String {
    "pong".to_owned()
}

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let [url, calls, start_ms] = args.as_slice() else {
        eprintln!("usage: worker pg_rate_worker URL CALLS START_MS");
        return ExitCode::from(2);
    };
    let ledger = match PostgresLedger::connect(url) {
        Ok(ledger) => ledger,
        Err(err) => {
            say(&format!("error {err}"));
            return ExitCode::FAILURE;
        }
    };
    let dispatcher = match Policy::from_toml(POLICY).map_err(|err| err.to_string()).and_then(|policy| {
        Dispatcher::builder()
            .tool(tool!(ping))
            .policy(policy)
            .shared_rates(ledger.shared_rate_buckets())
            .build()
            .map_err(|err| err.to_string())
    }) {
        Ok(dispatcher) => dispatcher,
        Err(err) => {
            say(&format!("error {err}"));
            return ExitCode::FAILURE;
        }
    };
    let start = Duration::from_millis(start_ms.parse().unwrap_or(0));
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    if let Some(wait) = start.checked_sub(wall) {
        std::thread::sleep(wait);
    }
    let (mut executed, mut limited) = (0, 0);
    for n in 0..calls.parse().unwrap_or(0) {
        let call = ToolCall::new(format!("c{n}"), "ping", json!({}));
        match block_on(dispatcher.dispatch(call, &CallContext::new())) {
            Outcome::Message(m) if m.status == Status::Success => executed += 1,
            Outcome::Message(m) if m.refusal.as_ref().is_some_and(|r| r.kind == RefusalKind::RateLimited) => {
                limited += 1;
            }
            other => say(&format!("unexpected {other:?}")),
        }
    }
    say(&format!("done {executed} {limited}"));
    ExitCode::SUCCESS
}
