//! The README's approval cycle, run as the README runs it, in separate processes: `start` interrupts and
//! saves a checkpoint, an operator approves the sealed request with the key file (as `airlock approve`
//! does), the first `resume` runs the refund once, and a second `resume` with the same value is refused.
//! Once with the ledger in `DIR/airlock.redb`, once in a PostgreSQL database (`--db`).

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::SystemClock;
use agent_airlock::approval::{InterruptApprovals, KeyRing};
use agent_airlock::keys::ApprovalKey;
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, RedbLedger};
use agent_airlock_tests::pg_server;
use serde_json::Value;

fn example(step: &str, dir: &Path, db: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_approval_cycle"));
    command.arg(step).arg("--dir").arg(dir);
    if let Some(db) = db {
        command.args(["--db", db]);
    }
    command.output().expect("the example runs")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Approves the checkpointed request as an operator would: the key from its file, the ledger the host
/// uses; writes the resume value where `resume` reads it.
fn approve(dir: &Path, ledger: Arc<dyn ApprovalLedger>) {
    let key = ApprovalKey::from_file("k1", dir.join("approval.key")).unwrap();
    let approvals =
        InterruptApprovals::new(KeyRing::new(key), ledger, Duration::from_secs(600)).with_clock(Arc::new(SystemClock));
    let checkpoint: Value = serde_json::from_slice(&std::fs::read(dir.join("checkpoint.json")).unwrap()).unwrap();
    let resume = approvals.approve(&checkpoint["interrupt"], "alice").wait().unwrap();
    std::fs::write(dir.join("resume.json"), resume.as_value().to_string()).unwrap();
}

fn the_cycle(db: Option<&str>, ledger: impl Fn(&Path) -> Arc<dyn ApprovalLedger>) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("demo");

    let started = stdout(&example("start", &dir, db));
    assert!(started.contains("interrupted: `refund` needs approval"), "{started}");
    assert!(!dir.join("refunds.log").exists(), "nothing runs before the approval");

    approve(&dir, ledger(&dir));

    let first = stdout(&example("resume", &dir, db));
    assert!(first.contains("Success: refunded 2500 cents on pi_3MtwBw"), "{first}");
    assert!(first.contains("refunds sent so far: 1"), "{first}");

    let replay = stdout(&example("resume", &dir, db));
    assert!(
        replay.contains("Error: this call to `refund` was not admitted: the approval was already used"),
        "{replay}"
    );
    assert!(replay.contains("refunds sent so far: 1"), "{replay}");
    assert_eq!(std::fs::read_to_string(dir.join("refunds.log")).unwrap().lines().count(), 1);
}

#[test]
fn the_cycle_runs_the_refund_once_with_the_ledger_in_redb() {
    the_cycle(None, |dir| Arc::new(RedbLedger::open(dir.join("airlock.redb")).unwrap()));
}

#[test]
fn the_cycle_runs_the_refund_once_with_the_ledger_in_postgres() {
    let url = pg_server::shared().fresh_database();
    the_cycle(Some(&url), |_| Arc::new(PostgresLedger::connect(&url).unwrap()));
    // The audit log is in the same database: the interrupt, the approved and executed call, the replay.
    let log = agent_airlock::audit::AuditLog::with_postgres(
        &PostgresLedger::connect(&url).unwrap(),
        agent_airlock::audit::AuditConfig::default(),
    );
    let report = agent_airlock::audit::verify(&log, None).expect("the chain verifies");
    assert!(report.records >= 3, "{report:?}");
}
