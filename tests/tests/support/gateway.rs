//! What the gateway tests share: the `airlock` binary, the Python upstream and a scratch directory laid out
//! for it, a Python client run to its summary line within a deadline, `airlock mcp scan`, a gateway started
//! with `--listen` (its URL read from what it prints), and an MCP session over Streamable HTTP.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agent_airlock::audit::{AuditConfig, AuditLog, AuditRecord};
use agent_airlock_tests::checks_script::{run_checks, wait_with_deadline};
use agent_airlock_tests::python_env::{PythonEnv, Venv};
use serde_json::{Value, json};

pub const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
/// The Python SDK server the gateway guards: `upstream_server.py CALLS_LOG NOTES_DIR`.
pub const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements.txt");
/// A hung gateway, upstream or client must fail the test, not hang CI.
const DEADLINE: Duration = Duration::from_secs(240);

/// The virtual environment with the official Python MCP SDK, provisioned from the pinned requirements.
pub fn venv() -> Venv {
    PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("the Python MCP SDK cannot be provisioned: {why}"))
}

/// Runs `airlock` with `args` to completion.
pub fn airlock(args: &[&str]) -> Output {
    Command::new(AIRLOCK).args(args).stdin(Stdio::null()).output().expect("airlock runs")
}

/// `airlock mcp scan -- <upstream>`'s starter policy.
pub fn scan(upstream: &[String]) -> String {
    let mut args = vec!["mcp", "scan", "--"];
    args.extend(upstream.iter().map(String::as_str));
    let scan = airlock(&args);
    assert!(scan.status.success(), "scan failed: {}", String::from_utf8_lossy(&scan.stderr));
    String::from_utf8(scan.stdout).expect("UTF-8")
}

/// Runs the Python client `script` with `config` (written next to it as JSON) and asserts it passed
/// exactly `checks` checks and failed none.
pub fn run_client(venv: &Venv, script: &str, config: &Value, scratch: &Path, checks: u32) {
    let config_path = scratch.join("config.json");
    std::fs::write(&config_path, config.to_string()).expect("the config is written");
    let mut command = venv.command();
    command.arg(script).arg(&config_path);
    assert_eq!(run_checks(command, DEADLINE), checks, "not every check of the client ran");
}

/// A gateway test's scratch directory: the policy (`airlock.toml`), the gateway's database (`airlock.redb`),
/// and the upstream's notes (`notes/`) and log of the calls that reached it (`calls.log`).
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh directory with `policy` written as `airlock.toml`.
    pub fn with_policy(policy: &str) -> Scratch {
        let scratch = Scratch { dir: tempfile::tempdir().expect("a temporary directory") };
        std::fs::write(scratch.path("airlock.toml"), policy).expect("the policy is written");
        scratch
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes the upstream's notes: `(file name, text)`.
    pub fn notes(&self, notes: &[(&str, &str)]) {
        std::fs::create_dir_all(self.path("notes")).expect("the notes directory");
        for (name, text) in notes {
            std::fs::write(self.path("notes").join(name), text).expect("a note");
        }
    }

    /// The command line of the Python upstream over these notes and this call log.
    pub fn upstream(&self, venv: &Venv) -> Vec<String> {
        [venv.python().to_owned(), PathBuf::from(UPSTREAM), self.path("calls.log"), self.path("notes")]
            .iter()
            .map(|part| part.display().to_string())
            .collect()
    }

    /// What a Python client that starts the gateway over stdio reads: the binary, the policy, the database,
    /// the upstream's command line and its call log.
    pub fn stdio_client_config(&self, venv: &Venv) -> Value {
        json!({
            "airlock": AIRLOCK,
            "policy": self.path("airlock.toml"),
            "db": self.path("airlock.redb"),
            "upstream": self.upstream(venv),
            "log": self.path("calls.log"),
        })
    }

    /// `airlock --db airlock.redb mcp --policy airlock.toml`: the start of every gateway command here, the
    /// environment's gateway token removed (a test that wants one sets it).
    pub fn gateway(&self) -> Command {
        let mut command = Command::new(AIRLOCK);
        command
            .arg("--db")
            .arg(self.path("airlock.redb"))
            .args(["mcp", "--policy"])
            .arg(self.path("airlock.toml"))
            .env_remove("AIRLOCK_GATEWAY_TOKEN")
            .stdin(Stdio::null());
        command
    }

    /// The gateway's audit records, once it has stopped.
    pub fn audit_records(&self) -> Vec<AuditRecord> {
        let log = AuditLog::open(self.path("airlock.redb"), AuditConfig::default()).expect("the audit log opens");
        log.records(0, 10_000).expect("the records are read")
    }

    /// The records of a gateway's `--audit-file FILE` (read while it runs, or after).
    pub fn audit_file_records(&self, file: &str) -> Vec<AuditRecord> {
        let log = AuditLog::read_append_only(self.path(file), AuditConfig::default()).expect("the audit file opens");
        log.records(0, 10_000).expect("the records are read")
    }

    /// What reached the upstream (its call log), or nothing.
    pub fn upstream_calls(&self) -> String {
        std::fs::read_to_string(self.path("calls.log")).unwrap_or_default()
    }
}

/// A process killed and reaped when the test ends, however it ends.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The word after `marker` on the first line of `reader` that holds it (`what` names the process, for the
/// failure if it stops first).
pub fn word_after(reader: &mut impl BufRead, marker: &str, what: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).expect("readable") > 0, "{what} stopped before saying `{marker}`");
        if let Some(rest) = line.split(marker).nth(1) {
            return rest.split_whitespace().next().expect("a value").to_owned();
        }
    }
}

/// `airlock mcp --listen …`, serving: the URL it printed, the process killed when this is dropped.
pub struct Listening {
    pub url: String,
    process: Reaped,
}

impl Listening {
    /// Starts `command` (a gateway with `--listen`), and waits until it says where it serves.
    pub fn start(command: &mut Command) -> Listening {
        Listening::start_watching(command, |_| {})
    }

    /// As [`Listening::start`], and hands each later line of the gateway's standard error to `on_line`.
    pub fn start_watching(command: &mut Command, mut on_line: impl FnMut(String) + Send + 'static) -> Listening {
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("the gateway starts");
        let mut stderr = BufReader::new(child.stderr.take().expect("standard error is piped"));
        let process = Reaped(child);
        let url = word_after(&mut stderr, "Streamable HTTP on ", "the gateway");
        std::thread::spawn(move || stderr.lines().map_while(Result::ok).for_each(&mut on_line));
        Listening { url, process }
    }

    /// Stops the gateway as a service manager does (SIGTERM), and asserts it exits cleanly within 20 s.
    pub fn terminate(self) {
        self.terminate_within(Duration::from_secs(20));
    }

    /// As [`Listening::terminate`], within `deadline`.
    pub fn terminate_within(mut self, deadline: Duration) {
        let pid = self.process.0.id().to_string();
        let kill = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(kill.success());
        let status = wait_with_deadline(&mut self.process.0, deadline)
            .unwrap_or_else(|| panic!("the gateway does not exit within {deadline:?} of SIGTERM"));
        assert!(status.success(), "{status}");
    }
}

/// An MCP `initialize` request over Streamable HTTP with `token`, as the client `client` (its response).
pub async fn initialize(http: &reqwest::Client, url: &str, token: &str, client: &str) -> reqwest::Response {
    http.post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": client, "version": "0"}}})
            .to_string(),
        )
        .send()
        .await
        .expect("the gateway answers")
}

/// One MCP session over Streamable HTTP with `token`: initialized, then `tools/call`s, each answered on its
/// own event stream.
#[derive(Clone)]
pub struct HttpSession {
    http: reqwest::Client,
    url: String,
    token: String,
    session: String,
}

impl HttpSession {
    pub async fn open(url: &str, token: &str) -> HttpSession {
        let http = reqwest::Client::new();
        let opened = initialize(&http, url, token, "airlock-gateway-test").await;
        assert!(opened.status().is_success(), "{}", opened.status());
        let session = opened.headers()["mcp-session-id"].to_str().expect("ASCII").to_owned();
        let session = HttpSession { http, url: url.to_owned(), token: token.to_owned(), session };
        session.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        session
    }

    pub async fn post(&self, body: Value) -> String {
        let response = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.session)
            .body(body.to_string())
            .send()
            .await
            .expect("the gateway answers");
        assert!(response.status().is_success(), "{}", response.status());
        response.text().await.expect("a body")
    }

    /// Calls `write_note`; the text of its result.
    pub async fn write_note(&self, id: u64) -> String {
        self.call(id, "write_note", json!({"name": format!("n{id}.txt"), "text": "x"})).await
    }

    /// Calls `tool`; the text of its result.
    pub async fn call(&self, id: u64, tool: &str, arguments: Value) -> String {
        let body = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": tool, "arguments": arguments}}))
            .await;
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == id)
            .map(|message| message["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("no answer to call {id}: {body}"))
    }
}
