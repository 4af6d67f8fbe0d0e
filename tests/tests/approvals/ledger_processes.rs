//! Real OS processes against one ledger file: races for one grant, a second opener, and processes
//! killed (SIGKILL) between approve and resume, between spend and completion, and in a stream of spends.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ledger::{ApprovalLedger, GrantState, RedbLedger, RequestStatus};
use agent_airlock::store::OpenError;
use agent_airlock::{
    ManualClock,
    approval::{AdmitError, InterruptApprovals},
};
use agent_airlock_tests::ledger_fixtures::{KEY_ENV, OwnedCall, SECRET_HEX, START, approvals};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

fn worker(args: &[&str]) -> Child {
    Command::new(WORKER)
        .arg("ledger_worker")
        .args(args)
        .env(KEY_ENV, SECRET_HEX)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the worker starts")
}

fn lines(child: &mut Child) -> Lines<BufReader<ChildStdout>> {
    BufReader::new(child.stdout.take().expect("piped stdout")).lines()
}

fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    lines.next().expect("the worker printed a line").expect("readable output")
}

fn with_ledger<T>(path: &Path, f: impl FnOnce(&InterruptApprovals) -> T) -> T {
    let ledger = RedbLedger::open(path).expect("the ledger opens cleanly");
    let approvals = approvals(Arc::new(ledger), Arc::new(ManualClock::new(START)));
    f(&approvals)
}

fn approve(approvals: &InterruptApprovals, call: &OwnedCall) -> Value {
    let request = approvals.request(&call.input(), "attribute", "moves money").wait().unwrap();
    approvals.approve(request.as_value(), "alice").wait().unwrap().into_value()
}

fn race(sharing: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let call = OwnedCall::refund(500);
    let resume = with_ledger(&path, |approvals| approve(approvals, &call));
    let call_json = serde_json::to_string(&call).unwrap();
    let resume_json = resume.to_string();
    let barrier = dir.path().join("go");
    let barrier_arg = if sharing == "multi" { barrier.to_str().unwrap() } else { "-" };
    let path_arg = path.to_str().unwrap();
    let mut children: Vec<Child> =
        (0..8).map(|_| worker(&["admit", path_arg, sharing, "60000", barrier_arg, &call_json, &resume_json])).collect();
    let mut outputs: Vec<_> = children.iter_mut().map(lines).collect();
    if sharing == "multi" {
        // Every process has the file open before any spends.
        for output in &mut outputs {
            assert_eq!(next_line(output), "ready");
        }
        std::fs::write(&barrier, b"").unwrap();
    }
    let results: Vec<String> = outputs.iter_mut().map(next_line).collect();
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    let admitted = results.iter().filter(|line| line.starts_with("admitted ")).count();
    assert_eq!(admitted, 1, "{results:#?}");
    assert!(
        results.iter().filter(|l| !l.starts_with("admitted ")).all(|l| l.starts_with("already_spent ")),
        "{results:#?}"
    );
    with_ledger(&path, |approvals| {
        assert!(matches!(approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::AlreadySpent { .. })));
    });
}

#[test]
fn eight_processes_taking_turns_with_the_file_admit_one() {
    race("exclusive");
}

#[test]
fn eight_processes_sharing_the_file_admit_one() {
    race("multi");
}

#[test]
fn a_second_process_gets_a_clear_error_or_waits_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    drop(RedbLedger::open(&path).unwrap());
    let mut holder = worker(&["hold", path.to_str().unwrap(), "1500"]);
    let mut output = lines(&mut holder);
    assert_eq!(next_line(&mut output), "open");
    let err = RedbLedger::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err}");
    assert!(err.to_string().contains("is open in another process"), "{err}");
    let mut other = worker(&["open", path.to_str().unwrap()]);
    let said = next_line(&mut lines(&mut other));
    assert!(said.starts_with("error: ledger file") && said.contains("is open in another process"), "{said}");
    other.wait().unwrap();
    // A bounded wait: too short fails with the same clear error, long enough gets the file.
    let err = RedbLedger::open_with_retry(&path, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { waited, .. } if waited >= Duration::from_millis(40)), "{err}");
    let ledger = RedbLedger::open_with_retry(&path, Duration::from_secs(30)).unwrap();
    assert!(holder.wait().unwrap().success());
    drop(ledger);
}

#[test]
fn killed_between_approve_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let call = OwnedCall::refund(500);
    let mut child = worker(&["approve-and-hang", path.to_str().unwrap(), &serde_json::to_string(&call).unwrap()]);
    let resume: Value = serde_json::from_str(&next_line(&mut lines(&mut child))).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    with_ledger(&path, |approvals| {
        let entries = approvals.ledger().list_requests().unwrap();
        assert_eq!(entries.len(), 1);
        assert!(matches!(entries[0].status, RequestStatus::Granted(_)));
        // A host that lost the resume value gets the same one by approving again: still one grant.
        let again = approvals.approve(&entries[0].request.interrupt, "alice").wait().unwrap();
        assert_eq!(again.as_value(), &resume);
        approvals.admit(&call.input(), &resume).wait().unwrap();
        assert!(matches!(approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::AlreadySpent { .. })));
    });
}

/// At most once: a process that spent the grant and died before the tool finished leaves the grant
/// spent. The same resume admits nothing on restart; a human must approve the call again.
#[test]
fn killed_between_spend_and_completion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let call = OwnedCall::refund(500);
    let resume = with_ledger(&path, |approvals| approve(approvals, &call));
    let mut child = worker(&[
        "admit-and-hang",
        path.to_str().unwrap(),
        &serde_json::to_string(&call).unwrap(),
        &resume.to_string(),
    ]);
    assert_eq!(next_line(&mut lines(&mut child)), "admitted");
    child.kill().unwrap();
    child.wait().unwrap();
    with_ledger(&path, |approvals| {
        let entries = approvals.ledger().list_requests().unwrap();
        assert!(matches!(entries[0].status, RequestStatus::Spent(_)));
        assert!(matches!(approvals.admit(&call.input(), &resume).wait(), Err(AdmitError::AlreadySpent { .. })));
    });
}

/// Killed at an arbitrary point of a stream of spends: every spend it reported is recorded, the spends
/// recorded are a prefix of those attempted, and every other grant is still live and admits once.
#[test]
fn killed_during_a_stream_of_spends() {
    const GRANTS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let calls: Vec<OwnedCall> =
        (0..GRANTS).map(|i| OwnedCall::refund(500).with_tool_call_id(&format!("call_{i}"))).collect();
    let jobs: Vec<(OwnedCall, Value)> =
        with_ledger(&path, |approvals| calls.iter().map(|call| (call.clone(), approve(approvals, call))).collect());
    let mut child = worker(&["spend-stream", path.to_str().unwrap(), &serde_json::to_string(&jobs).unwrap()]);
    let mut output = lines(&mut child);
    let reported = 20;
    for index in 0..reported {
        assert_eq!(next_line(&mut output), format!("admitted {index}"));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    with_ledger(&path, |approvals| {
        let grants: Vec<GrantState> = jobs
            .iter()
            .map(|(_, resume)| {
                let grant_id = resume["airlock_grant"]["grant_id"].as_str().unwrap();
                approvals.ledger().find_grant(grant_id).unwrap().unwrap().state
            })
            .collect();
        let spent = grants.iter().take_while(|s| matches!(s, GrantState::Spent { .. })).count();
        assert!(spent >= reported, "only {spent} spends recorded, {reported} reported");
        assert!(grants[spent..].iter().all(|s| *s == GrantState::Live), "{grants:?}");
        for (index, (call, resume)) in jobs.iter().enumerate() {
            let result = approvals.admit(&call.input(), resume).wait();
            if index < spent {
                assert!(matches!(result, Err(AdmitError::AlreadySpent { .. })), "{index}: {result:?}");
            } else {
                assert!(result.is_ok(), "{index}: {result:?}");
            }
        }
    });
}
