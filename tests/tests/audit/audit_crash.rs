//! A process appending from several threads is SIGKILLed at a random moment, several times over the
//! same file: each time the log must open, verify, and hold every append that was acknowledged. For the
//! redb log and the append-only audit file.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_airlock::audit::{self, AuditConfig, AuditLog};
use agent_airlock_tests::audit_test_key;

const ROUNDS: usize = 4;

/// A pseudo-random delay (no RNG crate needed): the low bits of the clock, stirred.
fn random_millis(bound: u64) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("after the epoch").subsec_nanos() as u64;
    let mut x = nanos ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x % bound
}

/// A worker appending to the log at `path` (`store`: `redb` or `file`) from `threads` threads until killed; the
/// sequence numbers it acknowledges arrive on the receiver, read from its stdout by the thread returned.
fn start_appender(
    path: &std::path::Path,
    threads: usize,
    store: &str,
) -> (std::process::Child, mpsc::Receiver<u64>, std::thread::JoinHandle<()>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_worker"))
        .arg("audit_append_loop")
        .arg(path)
        .args([threads.to_string().as_str(), store])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the helper starts");
    let stdout = child.stdout.take().expect("piped");
    let (lines, acks) = mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line.trim().parse().expect("a sequence number")).is_err() {
                break;
            }
        }
    });
    (child, acks, reader)
}

#[test]
fn a_log_killed_mid_append_opens_and_verifies() {
    killed_mid_append("redb");
}

#[test]
fn an_append_only_file_killed_mid_append_opens_and_verifies() {
    killed_mid_append("file");
}

fn killed_mid_append(store: &str) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join(format!("audit.{store}"));
    let open = |path: &std::path::Path, config: AuditConfig| match store {
        "file" => AuditLog::open_append_only(path, config),
        _ => AuditLog::open(path, config),
    };
    let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
    let mut previous_records = 0;
    for round in 0..ROUNDS {
        let (mut child, acks, reader) = start_appender(&path, 4, store);
        // Let it get going, then kill it at a random moment while appends are in flight.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = 0;
        while seen < 20 {
            acks.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("the helper appends");
            seen += 1;
        }
        std::thread::sleep(Duration::from_millis(random_millis(150)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        reader.join().expect("the reader ends at EOF");
        let max_acked = acks.try_iter().max().unwrap_or(0);

        let log = open(&path, config.clone()).expect("the log opens after a crash");
        let report = audit::verify(&log, None)
            .unwrap_or_else(|err| panic!("round {round}: the log verifies after a crash: {err}"));
        assert!(
            report.records >= max_acked,
            "round {round}: {} records, but #{max_acked} was acknowledged",
            report.records
        );
        assert!(report.records > previous_records, "round {round}: the log grew");
        assert_eq!(report.signed_records, report.records);
        previous_records = report.records;
    }
}

/// Two processes append to one append-only file; one is SIGKILLed at a random moment, mid-append or not. The
/// other goes on appending: its next append under the file's lock cuts off what the killed one's write left
/// cut short (kept aside), and the chain goes on from the last whole batch. Killed in turn and reopened, the
/// file verifies and holds every append either acknowledged. Several rounds over the same file.
#[test]
fn a_writer_killed_mid_append_is_cut_off_by_the_writer_still_appending() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("audit.log");
    let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
    let start = || start_appender(&path, 3, "file");
    let wait_for = |acks: &mpsc::Receiver<u64>, n: usize, seen: &mut Vec<u64>| {
        let deadline = Instant::now() + Duration::from_secs(60);
        for _ in 0..n {
            seen.push(acks.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("it appends"));
        }
    };
    let mut previous = 0;
    for round in 0..ROUNDS {
        let (mut first, first_acks, first_reader) = start();
        let (mut second, second_acks, second_reader) = start();
        let mut acked = Vec::new();
        wait_for(&first_acks, 20, &mut acked);
        wait_for(&second_acks, 20, &mut acked);
        std::thread::sleep(Duration::from_millis(random_millis(100)));
        first.kill().expect("SIGKILL");
        first.wait().expect("reaped");
        first_reader.join().expect("the reader ends at EOF");
        acked.extend(first_acks.try_iter());
        // A SIGKILL seldom lands inside a `write`, so the killed writer's write cut short is also made by hand,
        // under the file's lock as a writer would: a record frame whose length runs past the end.
        let torn: Vec<u8> = [&64u32.to_le_bytes()[..], &[1], &(u64::MAX).to_le_bytes(), &[0x5a; 20]].concat();
        {
            let file = std::fs::OpenOptions::new().append(true).open(&path).expect("opens");
            file.lock().expect("the file's lock");
            (&file).write_all(&torn).expect("written");
            file.unlock().expect("let go");
        }
        // The one left goes on, past what the killed one left behind: its next append cuts it off (kept aside
        // beside the file before the survivor is killed), then it appends on.
        let kept = || {
            std::fs::read_dir(dir.path())
                .expect("listed")
                .filter_map(|e| e.ok().filter(|e| e.file_name().to_string_lossy().contains(".torn-")))
                .map(|e| std::fs::read(e.path()).expect("readable"))
                .collect::<Vec<Vec<u8>>>()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while kept().len() <= round {
            assert!(Instant::now() < deadline, "round {round}: the writer still appending never cut the torn write");
            acked.extend(second_acks.try_iter());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(kept().iter().any(|tail| tail.ends_with(&torn)), "round {round}: {:?}", kept());
        acked.extend(second_acks.try_iter());
        wait_for(&second_acks, 10, &mut acked);
        second.kill().expect("SIGKILL");
        second.wait().expect("reaped");
        second_reader.join().expect("the reader ends at EOF");
        acked.extend(second_acks.try_iter());

        let log = AuditLog::open_append_only(&path, config.clone()).expect("the log opens after the crashes");
        let report = audit::verify(&log, None).unwrap_or_else(|err| panic!("round {round}: {err}"));
        let records: std::collections::HashSet<u64> =
            log.records(1, usize::MAX).expect("readable").iter().map(|r| r.seq).collect();
        let lost: Vec<u64> = acked.iter().copied().filter(|seq| !records.contains(seq)).collect();
        assert!(lost.is_empty(), "round {round}: acknowledged but not in the log: {lost:?}");
        let mut distinct = acked.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), acked.len(), "round {round}: a sequence number acknowledged twice");
        assert!(report.records > previous, "round {round}: the log grew");
        assert_eq!(report.signed_records, report.records);
        previous = report.records;
    }
}

/// A write that fails halfway (the file size limit reached inside a batch, `EFBIG`): the append reports it, the
/// file is cut back to its last whole batch at once, the next append fails cleanly too, and the file opens
/// afterwards with every acknowledged record, nothing to cut.
#[cfg(target_os = "linux")]
#[test]
fn a_failed_write_to_an_append_only_file_is_cut_back_and_reported() {
    const LIMIT: u64 = 20_000;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("audit.log");
    // The limit is set, and SIGXFSZ ignored (so the write fails instead of killing the process), by Python's
    // standard library before it becomes the worker: both survive `exec`.
    let limited = "import os, resource, signal, sys\n\
                   signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n\
                   resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))\n\
                   os.execv(sys.argv[2], sys.argv[2:])\n";
    let python = std::env::var_os("PYTHON").filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into());
    let output = Command::new(python)
        .args(["-c", limited, &LIMIT.to_string(), env!("CARGO_BIN_EXE_worker"), "audit_file_fill"])
        .arg(&path)
        .output()
        .expect("the worker runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let acked: Vec<(u64, u64)> = lines
        .iter()
        .filter_map(|line| line.strip_prefix("acked "))
        .map(|rest| {
            let (seq, length) = rest.split_once(' ').expect("seq and length");
            (seq.parse().expect("a seq"), length.parse().expect("a length"))
        })
        .collect();
    let (last_seq, last_length) = *acked.last().expect("appends before the limit");
    assert!(last_length < LIMIT && acked.len() > 5, "{stdout}");
    let failed = lines.iter().find_map(|line| line.strip_prefix("failed ")).expect("a failed append");
    assert!(failed.contains("cannot be written"), "{failed}");
    assert!(failed.starts_with(&format!("{last_length} ")), "cut back to the last whole batch: {failed}");
    let again = lines.iter().find_map(|line| line.strip_prefix("again ")).expect("a second attempt");
    assert!(again.starts_with(&format!("{last_length} ")) && again.contains("cannot be written"), "{again}");

    let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
    let log = AuditLog::open_append_only(&path, config).expect("the file opens");
    let report = audit::verify(&log, None).expect("it verifies");
    assert_eq!(report.records, last_seq, "every acknowledged record, and nothing else");
    let torn = std::fs::read_dir(dir.path())
        .expect("listed")
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().contains(".torn-")));
    assert_eq!(torn.count(), 0, "nothing was left to cut at open");
}
