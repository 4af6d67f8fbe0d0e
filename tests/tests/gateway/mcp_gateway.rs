//! `airlock mcp`, the gateway, with real parts on both sides: upstream, an MCP server written with the
//! official Python SDK (`tests/mcp/upstream_server.py`, which logs every call it receives); downstream, the
//! official Python SDK as the client (`tests/mcp/gateway_client.py`). Every claim is read from the upstream's
//! own log or side effects: a denied tool never reaches it, a ghost argument never reaches it, an approved
//! call runs once, a replayed approval does not, a rug-pulled tool is refused.
//!
//! The policy is the one `airlock mcp scan` writes for the upstream (deny by default, every tool pinned),
//! with tools allowed and rules added as an operator would. The SDK runs from the virtual environment of
//! `tests/mcp/requirements.txt`, provisioned by the test itself (see `python_env`).

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_airlock::Policy;
use agent_airlock_tests::mcp_stdio::StdioSession;
use agent_airlock_tests::python_env::Venv;
use serde_json::{Value, json};

use crate::gateway;
use agent_airlock_tests::checks_script::wait_with_deadline;
use gateway::{AIRLOCK, UPSTREAM, airlock, run_client, scan, venv};

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/gateway_client.py");

/// The scratch files of one upstream: its call log and its notes directory.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch { dir: tempfile::tempdir().expect("a temporary directory") }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn upstream(&self, venv: &Venv) -> Vec<String> {
        vec![
            venv.python().display().to_string(),
            UPSTREAM.to_owned(),
            self.path("calls.log").display().to_string(),
            self.path("notes").display().to_string(),
        ]
    }

    /// `airlock --db <scratch>/airlock.redb mcp --policy <policy> -- <upstream>`, its stdin and stdout piped.
    fn gateway(&self, policy: &Path, venv: &Venv) -> Command {
        let mut command = Command::new(AIRLOCK);
        command
            .arg("--db")
            .arg(self.path("airlock.redb"))
            .args(["mcp", "--policy"])
            .arg(policy)
            .arg("--")
            .args(self.upstream(venv))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        command
    }

    /// A gateway allowing every tool, in front of an upstream holding one note, `a.txt` ("a note"), started
    /// on stdio with its standard error inherited.
    fn allow_all_session(&self, venv: &Venv) -> StdioSession {
        self.session("version = 1\ndefault = \"allow\"\n", &[], &[], venv)
    }

    /// A gateway under `policy`, `global` arguments before `mcp` and `extra` after its policy, in front of an
    /// upstream holding one note, `a.txt` ("a note"), started on stdio with its standard error inherited.
    fn session(&self, policy: &str, global: &[&OsStr], extra: &[&OsStr], venv: &Venv) -> StdioSession {
        let policy_path = self.path("airlock.toml");
        std::fs::create_dir_all(self.path("notes")).expect("notes");
        std::fs::write(self.path("notes/a.txt"), "a note").expect("a note");
        std::fs::write(&policy_path, policy).expect("the policy is written");
        let mut command = Command::new(AIRLOCK);
        command
            .arg("--db")
            .arg(self.path("airlock.redb"))
            .args(global)
            .args(["mcp", "--policy"])
            .arg(&policy_path)
            .args(extra)
            .arg("--")
            .args(self.upstream(venv))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        StdioSession::start(&mut command)
    }

    /// Every upstream process started so far.
    fn upstream_pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path("calls.pids"))
            .unwrap_or_default()
            .lines()
            .map(|line| line.trim().parse().expect("a pid"))
            .collect()
    }
}

/// `airlock mcp scan`'s starter policy, as an operator edits it: five tools allowed, transfers escalated, the
/// flaky tool given an effect key.
fn operator_policy(scratch: &Scratch, venv: &Venv) -> String {
    let starter = scan(&scratch.upstream(venv));

    let pinned = Policy::from_toml(&starter).unwrap_or_else(|e| panic!("the starter policy parses: {e}\n{starter}"));
    let mut tools: Vec<&String> = pinned.pins().keys().collect();
    tools.sort();
    assert_eq!(tools, ["delete_everything", "die", "flaky", "read_note", "rug_pull", "slow", "transfer", "write_note"]);
    assert!(pinned.pins().values().all(|pin| pin.starts_with("sha256:") && pin.len() == 71));
    assert!(pinned.for_tool("write_note").denied_by.is_some(), "the starter denies by default");
    assert!(std::fs::read_to_string(scratch.path("calls.log")).unwrap_or_default().is_empty(), "scan calls nothing");

    let policy = starter
        .replace("allow = []", r#"allow = ["read_note", "write_note", "transfer", "flaky", "rug_pull"]"#)
        .replace("[tools.transfer]\n", "[tools.transfer]\nescalate = \"moves money\"\n")
        .replace("[tools.flaky]\n", "[tools.flaky]\neffect = \"flaky:{name}\"\n");
    Policy::from_toml(&policy).unwrap_or_else(|e| panic!("the edited policy parses: {e}\n{policy}"));
    policy
}

fn is_running(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would, but the gateway waits for its child.
    Path::new(&format!("/proc/{pid}")).exists()
}

fn assert_all_exited(pids: &[u32]) {
    let started = Instant::now();
    while pids.iter().any(|&pid| is_running(pid)) && started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let running: Vec<_> = pids.iter().filter(|&&pid| is_running(pid)).collect();
    assert!(running.is_empty(), "upstream processes outlived their gateway: {running:?}");
}

#[test]
fn the_gateway_guards_a_python_sdk_server_for_a_python_sdk_client() {
    let venv = venv();
    let scratch = Scratch::new();
    let policy = scratch.path("airlock.toml");
    std::fs::write(&policy, operator_policy(&scratch, &venv)).expect("the policy is written");
    let db = scratch.path("airlock.redb");
    let config = json!({
        "airlock": AIRLOCK,
        "policy": policy,
        "db": db,
        "upstream": scratch.upstream(&venv),
        "log": scratch.path("calls.log"),
        "notes": scratch.path("notes"),
    });
    run_client(&venv, CLIENT, &config, scratch.dir.path(), 10);

    // Each client closed its connection: each gateway stopped its upstream.
    let pids = scratch.upstream_pids();
    assert_eq!(pids.len(), 4, "scan, two client sessions and the replay each started one upstream: {pids:?}");
    assert_all_exited(&pids);

    // The approval was recorded in the redb ledger of `--db` and spent exactly once.
    let spent = airlock(&["--db", db.to_str().expect("UTF-8 path"), "--json", "spent"]);
    assert!(spent.status.success(), "{}", String::from_utf8_lossy(&spent.stderr));
    let spent: Value = serde_json::from_slice(&spent.stdout).expect("JSON");
    let spent = spent.as_array().expect("a list");
    assert_eq!(spent.len(), 1, "{spent:?}");
    assert_eq!(spent[0]["tool"], "transfer");
    // The failed upstream call left its effect ambiguous, for an operator to resolve.
    let effects = airlock(&["--db", db.to_str().expect("UTF-8 path"), "--json", "effects", "list", "--ambiguous"]);
    let effects: Value = serde_json::from_slice(&effects.stdout).expect("JSON");
    assert_eq!(
        effects.as_array().map(|e| e.iter().map(|r| r["key"].clone()).collect::<Vec<_>>()),
        Some(vec![json!("flaky:c.txt")])
    );
}

#[test]
fn sigterm_stops_the_gateway_and_its_upstream() {
    let venv = venv();
    let scratch = Scratch::new();
    let policy = scratch.path("airlock.toml");
    std::fs::write(&policy, "version = 1\ndefault = \"allow\"\n").expect("the policy is written");
    let mut gateway = scratch.gateway(&policy, &venv).stderr(Stdio::piped()).spawn().expect("the gateway starts");
    let mut stderr = BufReader::new(gateway.stderr.take().expect("stderr is piped"));
    let mut line = String::new();
    while !line.contains("offering") {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("stderr is readable") > 0, "the gateway stopped before serving");
    }
    let pids = scratch.upstream_pids();
    assert_eq!(pids.len(), 1);
    assert!(is_running(pids[0]));

    let kill = Command::new("kill").arg("-TERM").arg(gateway.id().to_string()).status().expect("kill runs");
    assert!(kill.success());
    let status = wait_with_deadline(&mut gateway, Duration::from_secs(20)).expect("the gateway exits on SIGTERM");
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).expect("stderr is readable");
    assert!(rest.contains("SIGTERM, shutting down"), "{rest}");
    assert_all_exited(&pids);
    // Nothing but MCP on stdout: the gateway wrote nothing to a client that never spoke.
    let mut stdout = String::new();
    gateway.stdout.take().expect("stdout is piped").read_to_string(&mut stdout).expect("readable");
    assert_eq!(stdout, "");
}

#[test]
fn an_upstream_that_dies_mid_call_leaves_the_effect_ambiguous_and_stops_the_gateway() {
    let venv = venv();
    let scratch = Scratch::new();
    let policy = scratch.path("airlock.toml");
    std::fs::write(&policy, "version = 1\ndefault = \"allow\"\n\n[tools.die]\neffect = \"die:{reason}\"\n")
        .expect("the policy is written");
    let db = scratch.path("airlock.redb");
    let mut session = StdioSession::start(scratch.gateway(&policy, &venv).stderr(Stdio::inherit()));
    session.call(2, "die", json!({"reason": "now"}));
    let answer = session.response(2, Duration::from_secs(60));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().expect("a text");
    assert!(text.contains("whether it ran is unknown"), "{text}");
    assert_eq!(std::fs::read_to_string(scratch.path("notes/died.log")).expect("the side effect happened"), "now\n");

    // With its upstream gone the gateway ends the session and exits.
    let status = session.wait_for_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}");
    let effects = airlock(&["--db", db.to_str().expect("UTF-8 path"), "--json", "effects", "list", "--ambiguous"]);
    let effects: Value = serde_json::from_slice(&effects.stdout).expect("JSON");
    let keys: Vec<&Value> = effects.as_array().expect("a list").iter().map(|record| &record["key"]).collect();
    assert_eq!(keys, [&json!("die:now")]);
}

/// The open flags of the gateway's descriptor `fd`, from `/proc/<pid>/fdinfo` (octal).
#[cfg(target_os = "linux")]
fn fd_flags(pid: u32, fd: &str) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).expect("the descriptor's info");
    let flags = info.lines().find_map(|line| line.strip_prefix("flags:")).expect("a flags line");
    u32::from_str_radix(flags.trim(), 8).expect("octal flags")
}

/// The voluntary context switches of the gateway's store writer thread (`airlock-redb-writer`).
#[cfg(target_os = "linux")]
fn writer_thread_switches(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the gateway's threads");
    let writer = tasks
        .filter_map(|task| task.ok().map(|task| task.path()))
        .find(|task| {
            std::fs::read_to_string(task.join("comm")).is_ok_and(|name| name.trim().starts_with("airlock-redb"))
        })
        .expect("the store's writer thread");
    let status = std::fs::read_to_string(writer.join("status")).expect("the writer's status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("a count of voluntary switches")
}

/// One client on stdio, one call at a time: each call's audit record is committed on the gateway's serving
/// thread, not handed to the store's writer thread and back (two wake-ups per call, BENCHMARKS.md §8), so the
/// writer thread sleeps through the calls. Every call is still audited, durably, before it is answered.
#[cfg(target_os = "linux")]
#[test]
fn the_stdio_gateway_commits_a_lone_calls_record_without_waking_the_writer_thread() {
    const CALLS: u64 = 10;
    let venv = venv();
    let scratch = Scratch::new();
    let mut session = scratch.allow_all_session(&venv);
    let pid = session.pid();
    session.call(1, "read_note", json!({"name": "a.txt"}));
    assert_eq!(session.response(1, Duration::from_secs(60))["result"]["content"][0]["text"], "a note");
    let before = writer_thread_switches(pid);
    for id in 2..2 + CALLS {
        session.call(id, "read_note", json!({"name": "a.txt"}));
        let answer = session.response(id, Duration::from_secs(60));
        assert_eq!(answer["result"]["content"][0]["text"], "a note", "{answer}");
    }
    let woken = writer_thread_switches(pid) - before;
    assert!(woken < CALLS / 2, "the writer thread was woken {woken} times for {CALLS} calls");
    session.close();

    let db = scratch.path("airlock.redb");
    let report = audit_report(&[OsStr::new("--db"), db.as_os_str(), OsStr::new("audit"), OsStr::new("verify")]);
    assert_eq!(report["records"], 1 + CALLS, "every call audited: {report}");
}

/// `airlock audit [--file PATH] verify --json`'s report.
fn audit_report(args: &[&OsStr]) -> Value {
    let verified = Command::new(AIRLOCK).arg("--json").args(args).output().expect("airlock runs");
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stderr));
    serde_json::from_slice(&verified.stdout).expect("a JSON report")
}

/// `--audit-file`: every call's record goes to an append-only file instead of the redb file (none there),
/// readable and verifiable while the gateway writes it, each record written before its call is answered.
#[test]
fn the_gateway_audits_to_an_append_only_file() {
    let venv = venv();
    let scratch = Scratch::new();
    let log = scratch.path("audit.log");
    let policy = "version = 1\ndefault = \"allow\"\ndeny = [\"delete_everything\"]\n";
    let mut session = scratch.session(policy, &[], &[OsStr::new("--audit-file"), log.as_os_str()], &venv);
    let verify_file = [OsStr::new("audit"), OsStr::new("verify"), OsStr::new("--file"), log.as_os_str()];
    for (id, tool) in [(2, "read_note"), (3, "delete_everything"), (4, "read_note")] {
        session.call(id, tool, json!({"name": "a.txt"}));
        let answer = session.response(id, Duration::from_secs(60));
        assert!(answer.get("result").is_some(), "{answer}");
        // Read while the gateway holds the file: the call's record is there before its answer.
        assert_eq!(audit_report(&verify_file)["records"], id - 1, "after call {id}");
    }
    session.close();
    let in_db = audit_report(&[
        OsStr::new("--db"),
        scratch.path("airlock.redb").as_os_str(),
        OsStr::new("audit"),
        OsStr::new("verify"),
    ]);
    assert_eq!(in_db["records"], 0, "nothing audited in the redb file: {in_db}");
    let head = scratch.path("head.json");
    let exported = Command::new(AIRLOCK)
        .args(["audit", "export-head", "--file"])
        .arg(&log)
        .arg("--to")
        .arg(&head)
        .output()
        .expect("airlock runs");
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let anchored = audit_report(&[verify_file.as_slice(), &[OsStr::new("--anchor"), head.as_os_str()]].concat());
    assert_eq!((anchored["records"].clone(), anchored["anchor_seq"].clone()), (json!(3), json!(3)), "{anchored}");
}

/// `airlock effects resolve --audit-file` while the gateway writes that file: the resolution's record lands
/// in the gateway's chain, between its calls' records (each append takes the file's lock for its write
/// only), and the whole file verifies with the key. A file that does not exist is refused, nothing resolved.
#[test]
fn an_operators_resolution_goes_into_the_audit_file_the_gateway_is_writing() {
    use agent_airlock::effect::{EffectStore as _, RedbEffectStore};
    use agent_airlock::{Clock as _, SystemClock};

    let venv = venv();
    let scratch = Scratch::new();
    let (db, log, key) = (scratch.path("airlock.redb"), scratch.path("audit.log"), scratch.path("audit.key"));
    std::fs::write(&key, "cd".repeat(32)).expect("the audit key");
    #[cfg(unix)]
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("private");
    {
        // An effect a crash left ambiguous, in the store the gateway will share.
        let store = RedbEffectStore::open(&db).expect("the effect store");
        let now = SystemClock.now();
        let reserved = store.reserve("refund:pi_7", Duration::from_secs(60), now).expect("reserved");
        store.mark_ambiguous(&reserved, now).expect("ambiguous");
    }
    let audit_args = [OsStr::new("--audit-file"), log.as_os_str(), OsStr::new("--audit-key-file"), key.as_os_str()];
    let policy = "version = 1\ndefault = \"allow\"\n";
    let mut session = scratch.session(policy, &[OsStr::new("--multi-process")], &audit_args, &venv);
    session.call(2, "read_note", json!({"name": "a.txt"}));
    assert!(session.response(2, Duration::from_secs(60)).get("result").is_some());

    let resolve = |audit_file: &Path| {
        Command::new(AIRLOCK)
            .arg("--db")
            .arg(&db)
            .args(["--multi-process", "effects", "resolve", "refund:pi_7", "--outcome", "failed", "--operator"])
            .arg("alice")
            .arg("--audit-file")
            .arg(audit_file)
            .arg("--audit-key-file")
            .arg(&key)
            .output()
            .expect("airlock runs")
    };
    let refused = resolve(&scratch.path("typo.log"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains("nothing was resolved"), "{stderr}");
    assert!(!scratch.path("typo.log").exists(), "no new log was started");

    let resolved = resolve(&log);
    assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
    session.call(3, "read_note", json!({"name": "a.txt"}));
    assert!(session.response(3, Duration::from_secs(60)).get("result").is_some());
    session.close();

    let config = agent_airlock::audit::AuditConfig {
        key: Some(agent_airlock::keys::AuditKey::new("audit-1", &[0xcd; 32]).expect("a key")),
        ..Default::default()
    };
    let file = agent_airlock::audit::AuditLog::read_append_only(&log, config).expect("the file opens");
    let report = agent_airlock::audit::verify(&file, None).expect("one chain, every record signed");
    assert_eq!((report.records, report.signed_records), (3, 3), "{report}");
    let records = file.records(1, 10).expect("readable");
    let calls: Vec<&str> = records.iter().map(|r| r.tool_call_id.as_str()).collect();
    assert_eq!(calls[1], "refund:pi_7", "{records:?}");
    assert!(records[1].detail.as_deref().is_some_and(|d| d.contains("by operator `alice`")), "{records:?}");
    let in_db = audit_report(&[OsStr::new("--db"), db.as_os_str(), OsStr::new("audit"), OsStr::new("verify")]);
    assert_eq!(in_db["records"], 0, "nothing audited in the redb file: {in_db}");
}

/// The gateway speaks to its client through non-blocking descriptors of its own on the client's pipes, so
/// every message is read and written on the async reactor rather than handed to a blocking thread; its
/// standard streams, which it shares with whatever else holds those pipes, stay blocking. And it serves
/// its one stdio client on one thread (the store's writer aside), so no part of a call waits for another
/// worker to be woken. Those hand-offs were most of the gateway's own latency per call (BENCHMARKS.md §8).
/// The call through it is still guarded: an undeclared argument is stripped before the upstream sees it.
#[cfg(target_os = "linux")]
#[test]
fn the_gateway_serves_its_client_pipes_on_the_reactor_of_one_thread() {
    const O_NONBLOCK: u32 = 0o4000;
    let venv = venv();
    let scratch = Scratch::new();
    let mut session = scratch.allow_all_session(&venv);
    let pid = session.pid();
    session.call(2, "read_note", json!({"name": "a.txt", "ghost": "x"}));
    let answer = session.response(2, Duration::from_secs(60));
    assert_eq!(answer["result"]["content"][0]["text"], "a note", "{answer}");
    let logged = std::fs::read_to_string(scratch.path("calls.log")).expect("the upstream's log");
    assert_eq!(logged.trim(), r#"{"arguments": {"name": "a.txt"}, "tool": "read_note"}"#);

    let descriptors: Vec<(String, PathBuf)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the gateway's descriptors")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            Some((entry.file_name().to_string_lossy().into_owned(), std::fs::read_link(entry.path()).ok()?))
        })
        .collect();
    for standard in ["0", "1"] {
        let (_, pipe) = descriptors.iter().find(|(fd, _)| fd == standard).expect("a standard stream");
        assert!(pipe.to_string_lossy().starts_with("pipe:"), "{pipe:?}");
        assert_eq!(fd_flags(pid, standard) & O_NONBLOCK, 0, "fd {standard} was made non-blocking");
        let own = descriptors
            .iter()
            .filter(|(fd, target)| fd != standard && target == pipe)
            .any(|(fd, _)| fd_flags(pid, fd) & O_NONBLOCK != 0);
        assert!(own, "no non-blocking descriptor of the gateway's own on fd {standard}'s pipe: {descriptors:?}");
    }
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the gateway's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    let serving: Vec<&String> = threads.iter().filter(|name| !name.starts_with("airlock-redb")).collect();
    assert_eq!(serving.len(), 1, "the gateway serves on more than one thread: {threads:?}");

    // The client goes away: the gateway ends with it.
    session.close();
}

/// A re-list is no fresh rate budget: the upstream can announce `tools/list_changed` whenever it likes (here
/// `rug_pull`), and the gateway builds a new dispatcher each time; a tool out of budget before stays out
/// after, and the upstream never sees the call.
#[test]
fn a_relisted_tool_keeps_its_rate_limit() {
    let venv = venv();
    let scratch = Scratch::new();
    let policy = scratch.path("airlock.toml");
    std::fs::create_dir_all(scratch.path("notes")).expect("notes");
    std::fs::write(&policy, "version = 1\ndefault = \"allow\"\n\n[tools.write_note]\nrate = \"1/hour\"\n")
        .expect("the policy is written");
    let mut session = StdioSession::start(scratch.gateway(&policy, &venv).stderr(Stdio::inherit()));
    let write = |session: &mut StdioSession, id: u64| {
        session.call(id, "write_note", json!({"name": "n.txt", "text": format!("call {id}")}));
        session.response(id, Duration::from_secs(60))
    };
    let first = write(&mut session, 2);
    assert_ne!(first["result"]["isError"], true, "{first}");
    let refused = write(&mut session, 3);
    assert!(refused.to_string().contains("rate limited"), "{refused}");

    session.call(4, "rug_pull", json!({}));
    let mut pending = (true, true);
    while pending != (false, false) {
        let message = session
            .message_where(Duration::from_secs(60), |message| {
                message["id"] == 4 || message["method"] == "notifications/tools/list_changed"
            })
            .unwrap_or_else(|| panic!("no re-list within a minute (still waiting: {pending:?})"));
        if message["id"] == 4 {
            assert_eq!(message["result"]["content"][0]["text"], "read_note changed", "{message}");
            pending.0 = false;
        } else {
            pending.1 = false;
        }
    }

    let after = write(&mut session, 5);
    assert!(after.to_string().contains("rate limited"), "the re-list reset the rate limit: {after}");
    session.close();
    let writes = std::fs::read_to_string(scratch.path("calls.log")).unwrap_or_default();
    assert_eq!(writes.matches("\"write_note\"").count(), 1, "{writes}");
}
