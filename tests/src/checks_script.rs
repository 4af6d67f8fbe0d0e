//! A checks script run to its end: a Python client that prints one line per check and a last summary line
//! `N passed, N failed`, killed if it outlives its deadline, its output echoed into the test's.

use std::io::Read as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Waits for `child`, killing it after `deadline`; `None` if it had to be killed.
pub fn wait_with_deadline(child: &mut Child, deadline: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return Some(status);
        }
        if started.elapsed() > deadline {
            child.kill().expect("the hung child can be killed");
            child.wait().expect("the killed child is reaped");
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `command` (stdin closed, stdout and stderr captured and echoed) until it exits or `deadline`
/// passes; asserts that it exited successfully and that its summary line says no check failed. Returns
/// how many checks passed.
pub fn run_checks(mut command: Command, deadline: Duration) -> u32 {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the checks script starts");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).map(|_| text)
    });
    let status = wait_with_deadline(&mut child, deadline);
    let stdout = out.join().expect("reader thread").expect("stdout is UTF-8");
    let stderr = err.join().expect("reader thread").expect("stderr is UTF-8");
    println!("{stdout}");
    eprintln!("{stderr}");
    let status = status.unwrap_or_else(|| panic!("the checks script did not finish within {deadline:?}"));
    let summary = stdout
        .lines()
        .rev()
        .find(|line| line.ends_with(" failed"))
        .expect("the checks script prints `N passed, N failed`");
    assert!(status.success(), "the checks script reported failures: {summary}");
    let (passed, failed) = summary.split_once(" passed, ").expect("`N passed, N failed`");
    assert_eq!(failed, "0 failed", "{summary}");
    passed.parse().expect("a count of passed checks")
}
