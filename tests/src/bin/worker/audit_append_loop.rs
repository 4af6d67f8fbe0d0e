//! Appends to an audit log from several threads until killed (or `count` appends each), printing each
//! acknowledged sequence number.
//!
//! Usage: `audit_append_loop <path> <threads> [redb|file] [count]` (a redb file, or an append-only audit file;
//! redb when not given). The log is keyed with the test key
//! [`agent_airlock_tests::audit_test_key`]. Each line on stdout is a record's `seq` whose append returned:
//! it must survive the kill.

use std::io::Write as _;
use std::sync::Arc;

use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use serde_json::json;

pub fn main() {
    let mut args = std::env::args().skip(2);
    let path = args.next().expect("usage: worker audit_append_loop <db-path> <threads>");
    let threads: usize = args.next().and_then(|n| n.parse().ok()).expect("a thread count");
    let config = AuditConfig { key: Some(agent_airlock_tests::audit_test_key()), ..AuditConfig::default() };
    let store = args.next();
    let count: u64 = args.next().map_or(u64::MAX, |n| n.parse().expect("a count"));
    let log = match store.as_deref() {
        None | Some("redb") => AuditLog::open(&path, config),
        Some("file") => AuditLog::open_append_only(&path, config),
        Some(other) => panic!("`{other}`: the store is `redb` or `file`"),
    };
    let log = Arc::new(log.expect("the audit log opens"));
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for i in 0..count {
                    let call_id = format!("call-{thread}-{i}");
                    let arguments = json!({"payment_id": format!("pi_{i}"), "amount": i});
                    let event = AuditEvent::new("refund", &call_id, AuditOutcome::Executed)
                        .thread_id(Some("crash-test"))
                        .arguments(&arguments)
                        .result(&arguments);
                    let receipt = log.append(event).expect("the append succeeds");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{}", receipt.seq).expect("stdout is open");
                    out.flush().expect("stdout is open");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker ran");
    }
}
