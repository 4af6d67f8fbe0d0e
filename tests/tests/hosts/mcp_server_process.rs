//! The example MCP server as an MCP client starts it: from a folder that is not the repository (Claude
//! Desktop starts servers in `/`), speaking hand-written JSON-RPC over stdio, until the client closes stdin.
//! It must answer the handshake, leave nothing behind in the temporary directory, and say clearly why it
//! cannot start when that directory is unusable. The README's `mcpServers` configurations must not depend
//! on the folder they are started from either.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, RequestStatus};
use agent_airlock_tests::pg_server;
use serde_json::{Value, json};

const SERVER: &str = env!("CARGO_BIN_EXE_example_mcp_server");
const README: &str = include_str!("../../../README.md");
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const DEADLINE: Duration = Duration::from_secs(60);

/// A server process and the lines it writes to stdout.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Session {
    fn start(folder: &Path, tmpdir: &Path) -> Self {
        Self::start_with_ledger(folder, tmpdir, None)
    }

    /// Starts the server with `$AIRLOCK_MCP_LEDGER` set to `ledger`, or unset.
    fn start_with_ledger(folder: &Path, tmpdir: &Path, ledger: Option<&str>) -> Self {
        let mut command = Command::new(SERVER);
        match ledger {
            Some(ledger) => command.env("AIRLOCK_MCP_LEDGER", ledger),
            None => command.env_remove("AIRLOCK_MCP_LEDGER"),
        };
        let mut child = command
            .current_dir(folder)
            .env("TMPDIR", tmpdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, stdin, lines }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").expect("the server reads its stdin");
        stdin.flush().expect("flushed");
    }

    /// The response to request `id`, skipping notifications and anything else the server sends first.
    fn response(&self, id: u64) -> Value {
        let until = Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("no response to request {id}"));
            let message: Value = serde_json::from_str(&line).expect("every stdout line is JSON-RPC");
            if message["id"] == id {
                return message;
            }
        }
    }

    /// The next request the server sends with `method` (an elicitation, say), skipping everything else.
    fn request_from_server(&self, method: &str) -> Value {
        let until = Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("no `{method}` request"));
            let message: Value = serde_json::from_str(&line).expect("every stdout line is JSON-RPC");
            if message["method"] == method && message.get("id").is_some() {
                return message;
            }
        }
    }

    /// Closes stdin, as a client does when it is done, and waits for the server to exit.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("the server can be waited for") {
                return status;
            }
            if Instant::now() > until {
                self.child.kill().expect("the hung server can be killed");
                panic!("the server did not exit within {DEADLINE:?} of stdin closing");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn handshake_and_list_tools(session: &mut Session) -> Vec<String> {
    session.send(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "hand-written", "version": "0"},
        },
    }));
    let initialized = session.response(1);
    assert_eq!(initialized["result"]["serverInfo"]["name"], "agent-airlock-example", "{initialized}");
    session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    session.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    let listed = session.response(2);
    let tools = listed["result"]["tools"].as_array().unwrap_or_else(|| panic!("a tool list: {listed}"));
    let mut names: Vec<String> = tools.iter().map(|tool| tool["name"].as_str().expect("a name").to_owned()).collect();
    names.sort();
    names
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the directory is readable")
        .map(|entry| entry.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn started_from_another_folder_the_server_answers_and_leaves_nothing_behind() {
    let elsewhere = tempfile::tempdir().expect("a folder outside the repository");
    let tmpdir = tempfile::tempdir().expect("the server's temporary directory");
    for folder in [elsewhere.path(), Path::new("/")] {
        let mut session = Session::start(folder, tmpdir.path());
        assert_eq!(handshake_and_list_tools(&mut session), ["delete_file", "echo", "list_files"]);
        // While it runs, its ledger lives in one directory of its own.
        let during = entries(tmpdir.path());
        assert!(during.len() == 1 && during[0].starts_with("airlock-mcp-"), "{during:?}");

        let status = session.finish();
        assert!(status.success(), "the server exits cleanly when stdin closes: {status}");
        assert_eq!(entries(tmpdir.path()), Vec::<String>::new(), "the server removed what it created");
    }
}

/// Stopped by a signal instead of a closed stdin (a client that gives up, a user's Ctrl-C), the server
/// still removes what it created.
#[cfg(unix)]
#[test]
fn stopped_by_a_signal_the_server_leaves_nothing_behind() {
    let tmpdir = tempfile::tempdir().expect("the server's temporary directory");
    for signal in ["-TERM", "-INT"] {
        let mut session = Session::start(Path::new("/"), tmpdir.path());
        assert_eq!(handshake_and_list_tools(&mut session), ["delete_file", "echo", "list_files"]);
        assert_eq!(entries(tmpdir.path()).len(), 1);
        let sent = Command::new("kill").arg(signal).arg(session.child.id().to_string()).status().expect("kill runs");
        assert!(sent.success());
        let until = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = session.child.try_wait().expect("the server can be waited for") {
                break status;
            }
            assert!(Instant::now() < until, "the server did not stop on {signal}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "a clean shutdown on {signal}: {status}");
        assert_eq!(entries(tmpdir.path()), Vec::<String>::new(), "the server removed what it created on {signal}");
    }
}

#[test]
fn a_missing_temporary_directory_is_a_clear_error() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let missing = scratch.path().join("no-such-dir");
    let mut child = Command::new(SERVER)
        .env("TMPDIR", &missing)
        .env_remove("AIRLOCK_MCP_LEDGER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut stderr = String::new();
    child.stderr.take().expect("stderr is piped").read_to_string(&mut stderr).expect("stderr is UTF-8");
    let status = child.wait().expect("the server exits by itself");
    assert!(!status.success(), "{status}");
    assert!(stderr.contains(&format!("`{}`", missing.display())), "the error names the directory: {stderr}");
    assert!(stderr.contains("`TMPDIR`"), "the error names the variable: {stderr}");
    assert!(!missing.exists());
}

/// Each server of every `mcpServers` block in the README, as (command, args).
fn readme_servers() -> Vec<(String, Vec<String>)> {
    let blocks: Vec<&str> =
        README.split("```json").skip(1).filter_map(|rest| rest.split("```").next()).collect::<Vec<_>>();
    let mut servers = Vec::new();
    for block in blocks.into_iter().filter(|block| block.contains("mcpServers")) {
        let config: Value = serde_json::from_str(block).unwrap_or_else(|e| panic!("invalid JSON ({e}): {block}"));
        for server in config["mcpServers"].as_object().expect("servers by name").values() {
            let command = server["command"].as_str().expect("a command").to_owned();
            let args = server["args"].as_array().map_or_else(Vec::new, |args| {
                args.iter().map(|arg| arg.as_str().expect("string arguments").to_owned()).collect()
            });
            servers.push((command, args));
        }
    }
    servers
}

#[test]
fn the_readme_mcp_configurations_do_not_depend_on_the_folder() {
    let servers = readme_servers();
    assert!(!servers.is_empty(), "the README shows an `mcpServers` configuration");
    for (command, args) in servers {
        if command != "cargo" {
            assert!(Path::new(&command).is_absolute(), "`{command}` must be a full path: clients differ in PATH");
            continue;
        }
        // `cargo run` finds the workspace from the current folder unless told where it is.
        let manifest = args
            .iter()
            .position(|arg| arg == "--manifest-path")
            .and_then(|at| args.get(at + 1))
            .unwrap_or_else(|| panic!("`cargo {}` needs `--manifest-path`", args.join(" ")));
        assert!(Path::new(manifest).is_absolute(), "the manifest path `{manifest}` must be absolute");
        assert!(manifest.ends_with("/Cargo.toml"), "`{manifest}` must name the workspace's `Cargo.toml`");
        let named = |flag: &str| args.iter().position(|arg| arg == flag).and_then(|at| args.get(at + 1));
        let (package, bin) = (named("-p").expect("`-p`"), named("--bin").expect("`--bin`"));

        // With the placeholder replaced by this checkout, cargo finds that package and binary from `/`.
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .current_dir("/")
            .args(["metadata", "--no-deps", "--format-version", "1", "--offline", "--manifest-path"])
            .arg(Path::new(WORKSPACE).join("Cargo.toml"))
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
        let found = metadata["packages"].as_array().expect("packages").iter().any(|p| {
            p["name"] == package.as_str()
                && p["targets"].as_array().expect("targets").iter().any(|t| t["name"] == bin.as_str())
        });
        assert!(found, "the workspace has no package `{package}` with a binary `{bin}`");
    }
}

#[test]
fn with_its_ledger_in_postgres_an_approved_delete_is_recorded_and_spent_in_the_database() {
    // The form a deployment passes: a URL (the socket directory percent-encoded as the host).
    let connection = pg_server::shared().fresh_database();
    let url = pg_server::as_url(&connection);
    let folder = tempfile::tempdir().unwrap();
    let tmpdir = tempfile::tempdir().unwrap();
    let mut session = Session::start_with_ledger(folder.path(), tmpdir.path(), Some(&url));
    session.send(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "hand-written", "version": "0"},
        },
    }));
    let initialized = session.response(1);
    assert_eq!(initialized["result"]["serverInfo"]["name"], "agent-airlock-example", "{initialized}");
    session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    session.send(&json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "delete_file", "arguments": {"path": "notes.txt"}},
    }));
    let asked = session.request_from_server("elicitation/create");
    session.send(&json!({
        "jsonrpc": "2.0", "id": asked["id"].clone(),
        "result": {"action": "accept", "content": {"approve": true}},
    }));
    let called = session.response(2);
    assert_eq!(called["result"]["isError"], false, "{called}");
    assert_eq!(called["result"]["content"][0]["text"], "deleted notes.txt", "{called}");
    assert!(session.finish().success());

    // The host's ledger is the database: the request, its grant, and the grant spent once.
    let ledger = PostgresLedger::connect(&connection).unwrap();
    let requests = ledger.list_requests().unwrap();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].request.tool, "delete_file");
    assert!(matches!(requests[0].status, RequestStatus::Spent(_)), "{:?}", requests[0].status);
    assert_eq!(entries(tmpdir.path()), Vec::<String>::new(), "nothing is left in the temporary directory");
}
