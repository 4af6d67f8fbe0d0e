//! Appends to an append-only audit file until a write fails (the test runs it under a file size limit), then
//! tries once more.
//!
//! Usage: `audit_file_fill <path>`. Prints `acked <seq> <file length>` after each acknowledged append, then
//! `failed <file length> <error>` for the first failure and `again <file length> <error>` for the next
//! append's answer. Keyed with [`agent_airlock_tests::audit_test_key`].

use std::io::Write as _;
use std::process::ExitCode;

use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use serde_json::json;

pub fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(2) else {
        eprintln!("usage: worker audit_file_fill <path>");
        return ExitCode::from(2);
    };
    let config =
        AuditConfig { key: Some(agent_airlock_tests::audit_test_key()), store_raw: true, ..AuditConfig::default() };
    let log = AuditLog::open_append_only(&path, config).expect("the audit file opens");
    let length = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let append = |i: u64| {
        let call_id = format!("call-{i}");
        // Raw values stored: each record is ~1 KiB, so the limit falls inside one.
        let arguments = json!({"i": i, "padding": "p".repeat(900)});
        log.append(AuditEvent::new("fill", &call_id, AuditOutcome::Executed).arguments(&arguments))
    };
    for i in 0u64.. {
        match append(i) {
            Ok(receipt) => writeln!(out, "acked {} {}", receipt.seq, length()).expect("stdout"),
            Err(err) => {
                writeln!(out, "failed {} {err}", length()).expect("stdout");
                let again = append(i + 1).err().map_or_else(|| "appended".to_owned(), |err| err.to_string());
                writeln!(out, "again {} {again}", length()).expect("stdout");
                return ExitCode::SUCCESS;
            }
        }
    }
    ExitCode::FAILURE
}
