//! A cancelled call never runs: a hand-written JSON-RPC session against the guarded MCP server, in
//! process. The client calls an escalated tool, leaves the approval elicitation unanswered, cancels the call
//! (`notifications/cancelled`, as a client whose request timed out does), and only then answers the
//! elicitation with a yes. The tool must not run, the elicitation must be withdrawn, and nothing may be
//! granted or spent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_airlock::integrations::mcp::{GuardedMcpServer, McpApprovals};
use agent_airlock::ledger::{ApprovalLedger, MemoryLedger, RequestStatus};
use agent_airlock::{Dispatcher, ManualClock, airlock_tool, approval::InterruptApprovals, tool};
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use rmcp::ServiceExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf};

/// Every path `purge` really purged: the side effect the tests watch.
static PURGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn purged(path: &str) -> usize {
    PURGED.lock().unwrap().iter().filter(|p| *p == path).count()
}

/// Purges a path.
#[airlock_tool(escalate = "destroys data")]
fn purge(
    /// The path.
    path: String,
) -> String {
    PURGED.lock().unwrap().push(path.clone());
    format!("purged {path}")
}

/// The client's end of a raw JSON-RPC session: one JSON document per line.
struct RawClient {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
}

impl RawClient {
    async fn connect(server: GuardedMcpServer) -> Self {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let (reader, writer) = tokio::io::split(client_io);
        let mut client = RawClient { lines: BufReader::new(reader).lines(), writer };
        client
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "raw-json-rpc", "version": "0"},
            }}))
            .await;
        let answer = client.next().await;
        assert_eq!(answer["id"], 1, "{answer}");
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        client
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("the server answers within 10 s")
            .unwrap()
            .expect("the session is open");
        serde_json::from_str(&line).unwrap()
    }

    async fn call_purge(&mut self, id: u64, path: &str) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "purge", "arguments": {"path": path},
        }}))
        .await;
        let elicitation = self.next().await;
        assert_eq!(elicitation["method"], "elicitation/create", "{elicitation}");
        elicitation
    }

    async fn accept(&mut self, elicitation: &Value) {
        self.send(json!({"jsonrpc": "2.0", "id": elicitation["id"], "result": {
            "action": "accept", "content": {"approve": true},
        }}))
        .await;
    }
}

fn dispatcher(approvals: Option<InterruptApprovals>) -> Arc<Dispatcher> {
    let builder = Dispatcher::builder().tool(tool!(purge)).clock(ManualClock::new(START));
    let builder = match approvals {
        Some(approvals) => builder.interrupt_approvals(approvals),
        None => builder,
    };
    Arc::new(builder.build().unwrap())
}

/// Cancel while the elicitation waits, answer yes afterwards: nothing runs. Then, on the same session, an
/// uncancelled call answered yes runs (so the first one did not run for some other reason).
async fn a_cancelled_call_never_runs(server: GuardedMcpServer, path: &str) {
    let mut client = RawClient::connect(server).await;
    let elicitation = client.call_purge(2, path).await;
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
            "requestId": 2, "reason": "request timed out",
        }}))
        .await;
    // The server withdraws its elicitation.
    let withdrawn = client.next().await;
    assert_eq!(withdrawn["method"], "notifications/cancelled", "{withdrawn}");
    assert_eq!(withdrawn["params"]["requestId"], elicitation["id"]);
    // The human approves two seconds later (in this test, at once).
    client.accept(&elicitation).await;

    let second = client.call_purge(3, &format!("{path}/other")).await;
    client.accept(&second).await;
    let result = client.next().await;
    assert_eq!(result["id"], 3, "no answer to the cancelled request: {result}");
    assert_eq!(result["result"]["content"][0]["text"], format!("purged {path}/other"));
    assert_eq!(purged(path), 0, "the cancelled call ran");
    assert_eq!(purged(&format!("{path}/other")), 1);
}

#[tokio::test]
async fn a_cancelled_call_waiting_for_client_elicitation_never_runs() {
    let server = GuardedMcpServer::new(dispatcher(None), McpApprovals::ClientElicitation);
    a_cancelled_call_never_runs(server, "/srv/a").await;
}

#[tokio::test]
async fn a_cancelled_call_waiting_for_bound_elicitation_never_runs_and_nothing_is_granted() {
    let ledger = Arc::new(MemoryLedger::new());
    let approvals = InterruptApprovals::new(key_ring(), Arc::clone(&ledger), GRANT_TTL)
        .with_clock(Arc::new(ManualClock::new(START)));
    let server = GuardedMcpServer::new(
        dispatcher(Some(approvals.clone())),
        McpApprovals::BoundClientElicitation(Box::new(approvals.clone())),
    );
    a_cancelled_call_never_runs(server, "/srv/b").await;
    let entries = ledger.list_requests().unwrap();
    assert_eq!(entries.len(), 2);
    // The cancelled call's request is closed unanswered: no grant was issued, nothing spent.
    let cancelled = entries
        .iter()
        .find(|e| approvals.verify_request(&e.request.interrupt).unwrap().arguments()["path"] == "/srv/b");
    match &cancelled.unwrap().status {
        RequestStatus::Denied(denial) => {
            assert_eq!(denial.denied_by, "agent-airlock");
            assert_eq!(denial.revoked_grant, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(entries.iter().filter(|e| matches!(e.status, RequestStatus::Spent(_))).count(), 1);
}

/// `McpApprovals::Dispatcher` with an operator's approver callback: the client never sees an elicitation;
/// it cancels while the operator has not answered, the operator then says yes, and nothing runs.
#[tokio::test]
async fn a_cancelled_call_waiting_for_the_dispatchers_approver_never_runs() {
    let (asked, answer_later) = tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
    let asked = Arc::new(tokio::sync::Mutex::new(asked));
    let operator = move |_request: agent_airlock::approval::ApprovalRequest| {
        let asked = Arc::clone(&asked);
        async move {
            let (yes, later) = tokio::sync::oneshot::channel();
            let _ = asked.lock().await.send(yes);
            // The operator answers yes whenever the test says so.
            let _ = later.await;
            agent_airlock::approval::Decision::Approve
        }
    };
    let dispatcher = Dispatcher::builder().tool(tool!(purge)).approver(operator).build().unwrap();
    let server = GuardedMcpServer::new(Arc::new(dispatcher), McpApprovals::Dispatcher);
    let mut operator_answers = answer_later;
    let mut client = RawClient::connect(server).await;
    let path = "/srv/operator-cancelled";
    client
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "purge", "arguments": {"path": path},
        }}))
        .await;
    let mut pending_answer = operator_answers.recv().await.expect("the operator is asked");
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
            "requestId": 2, "reason": "request timed out",
        }}))
        .await;
    // The server stops waiting: the operator's pending question is dropped. Only then the operator says yes.
    tokio::time::timeout(Duration::from_secs(10), pending_answer.closed())
        .await
        .expect("the cancelled call stops waiting for the operator");
    let _ = pending_answer.send(());

    // The session goes on; an uncancelled call the operator approves runs.
    let other = format!("{path}/other");
    client
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "purge", "arguments": {"path": other},
        }}))
        .await;
    let _ = operator_answers.recv().await.expect("the operator is asked again").send(());
    let mut result = client.next().await;
    while result["id"] != 3 {
        result = client.next().await;
    }
    assert_eq!(result["result"]["content"][0]["text"], format!("purged {other}"), "{result}");
    assert_eq!(purged(path), 0, "the cancelled call ran");
    assert_eq!(purged(&other), 1);
}
