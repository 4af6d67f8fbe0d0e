//! A hand-written MCP client on a server process's standard input and output: one JSON-RPC document per
//! line, read on a thread of its own so that every wait has a deadline. For tests that need to see the
//! exact messages (a cancellation, a notification, what a gateway writes on stdout) rather than an SDK's view.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::checks_script::wait_with_deadline;

/// A running server and an initialized MCP session with it on its stdio.
pub struct StdioSession {
    server: Child,
    stdin: ChildStdin,
    messages: mpsc::Receiver<Value>,
}

impl StdioSession {
    /// Starts `command` with its stdin and stdout piped (stderr as the command says) and completes the
    /// MCP handshake. Panics if it does not start, writes anything but JSON on stdout, or does not answer
    /// `initialize` within 60 s.
    pub fn start(command: &mut Command) -> StdioSession {
        Self::start_with_capabilities(command, json!({}))
    }

    /// [`start`](Self::start), the client declaring `capabilities` (e.g. `{"elicitation": {}}` to be asked
    /// for approvals).
    pub fn start_with_capabilities(command: &mut Command, capabilities: Value) -> StdioSession {
        let mut server = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the server starts");
        let stdin = server.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(server.stdout.take().expect("stdout is piped"));
        let (sender, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                let message = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON-RPC on stdout: {line}"));
                if sender.send(message).is_err() {
                    return;
                }
            }
        });
        let mut session = StdioSession { server, stdin, messages };
        session.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "hand-written", "version": "0"}}}));
        assert!(session.response(0, Duration::from_secs(60))["result"].is_object(), "the handshake completes");
        session.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.server.id()
    }

    /// Writes one message, a line.
    pub fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").and_then(|()| self.stdin.flush()).expect("the server reads its stdin");
    }

    /// Writes `line` as it is (it need not be JSON), and a newline.
    pub fn send_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush()).expect("the server reads its stdin");
    }

    /// The next message that `wanted` accepts, skipping others, if one comes within `within`.
    pub fn message_where(&mut self, within: Duration, wanted: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let message = self.messages.recv_timeout(left).ok()?;
            if wanted(&message) {
                return Some(message);
            }
        }
    }

    /// Sends `tools/call` of `tool` with `arguments` as request `id`.
    pub fn call(&mut self, id: u64, tool: &str, arguments: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
    }

    /// Cancels request `id` (`notifications/cancelled`).
    pub fn cancel(&mut self, id: u64) {
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "the user gave up"}}));
    }

    /// The response to request `id`, skipping notifications; panics after `within`.
    pub fn response(&mut self, id: u64, within: Duration) -> Value {
        self.try_response(id, within).unwrap_or_else(|| panic!("no response to request {id} within {within:?}"))
    }

    /// The response to request `id`, skipping notifications, if one comes within `within`.
    pub fn try_response(&mut self, id: u64, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let message = self.messages.recv_timeout(left).ok()?;
            if message["id"] == id && (message.get("result").is_some() || message.get("error").is_some()) {
                return Some(message);
            }
        }
    }

    /// Waits, with the client's side still open, for the server to close its stdout and exit on its own (what
    /// it wrote before is skipped); its exit status. Panics after `within`.
    pub fn wait_for_exit(self, within: Duration) -> ExitStatus {
        let StdioSession { mut server, stdin, messages } = self;
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now()).expect("the server closes its stdout in time");
            match messages.recv_timeout(left) {
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the server did not close its stdout within {within:?}"),
            }
        }
        let status = wait_with_deadline(&mut server, within).expect("the server exits");
        drop(stdin);
        status
    }

    /// Closes the client's side and waits for the server to exit, successfully, within 30 s.
    pub fn close(self) {
        let StdioSession { mut server, stdin, .. } = self;
        drop(stdin);
        let status = wait_with_deadline(&mut server, Duration::from_secs(30)).expect("the server exits");
        assert!(status.success(), "{status}");
    }
}
