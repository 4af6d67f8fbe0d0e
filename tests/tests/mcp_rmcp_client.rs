//! The guarded MCP server in process, driven by rmcp's own client over an in-memory pipe: what the call
//! context carries (connection id as thread, JSON-RPC id as tool call id) and who decides escalations.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_airlock::integrations::mcp::{CALL_META_KEY, GuardedMcpServer, McpApprovals};
use agent_airlock::{ApprovalRequest, CallContext, Decision, Dispatcher, ToolCallId, airlock_tool, tool};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ErrorData, ServiceExt as _};
use serde_json::{Value, json};

/// Tells who is calling.
#[airlock_tool]
fn whoami(#[inject] context: CallContext, #[inject] call: ToolCallId) -> Value {
    json!({"thread": context.thread_id(), "call": call.0})
}

/// Deletes a path.
#[airlock_tool(escalate = "deletes data")]
fn delete(
    /// The path.
    path: String,
) -> String {
    format!("deleted {path}")
}

/// A client whose human approves every elicitation, counting them.
#[derive(Clone, Default)]
struct ApprovingClient {
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for ApprovingClient {
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true})))
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("airlock-test", "0"),
        )
    }
}

struct Setup {
    server: GuardedMcpServer,
    operator_asked: Arc<Mutex<Vec<ApprovalRequest>>>,
}

fn setup() -> Setup {
    let operator_asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&operator_asked);
    let dispatcher = Dispatcher::builder()
        .tool(tool!(whoami))
        .tool(tool!(delete))
        .approver(move |request: ApprovalRequest| {
            log.lock().unwrap().push(request);
            async { Decision::Approve }
        })
        .build()
        .unwrap();
    Setup {
        server: GuardedMcpServer::new(Arc::new(dispatcher))
            .with_context(CallContext::new().with_thread("replaced by the connection id")),
        operator_asked,
    }
}

async fn connect(server: GuardedMcpServer, client: ApprovingClient) -> RunningService<RoleClient, ApprovingClient> {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.expect("the server starts");
        running.waiting().await.expect("the server ends cleanly");
    });
    client.serve(client_io).await.expect("the client connects")
}

async fn call(
    client: &RunningService<RoleClient, ApprovingClient>,
    name: &'static str,
    arguments: Value,
) -> CallToolResult {
    let Value::Object(arguments) = arguments else { panic!("arguments are an object") };
    client.call_tool(CallToolRequestParams::new(name).with_arguments(arguments)).await.expect("a tool result")
}

fn text(result: &CallToolResult) -> String {
    result.content[0].as_text().expect("a text block").text.clone()
}

#[tokio::test]
async fn the_thread_is_the_connection_and_the_call_id_is_the_json_rpc_id() {
    let setup = setup();
    let first_id = setup.server.connection_id().to_owned();
    let second = setup.server.for_new_connection();
    let second_id = second.connection_id().to_owned();
    assert_ne!(first_id, second_id);
    assert!(first_id.starts_with("mcp-") && second_id.starts_with("mcp-"));

    for (server, connection_id) in [(setup.server, first_id), (second, second_id)] {
        let client = connect(server, ApprovingClient::default()).await;
        let result = call(&client, "whoami", json!({})).await;
        let who: Value = serde_json::from_str(&text(&result)).unwrap();
        assert_eq!(who["thread"], connection_id.as_str());
        // rmcp's client numbers its requests: the id is JSON text of a number, and the report carries it.
        let call_id = who["call"].as_str().unwrap();
        assert!(call_id.parse::<u64>().is_ok(), "{call_id}");
        let report = &result.meta.as_ref().unwrap()[CALL_META_KEY];
        assert_eq!(report["tool_call_id"], call_id);
        let again = call(&client, "whoami", json!({})).await;
        let who_again: Value = serde_json::from_str(&text(&again)).unwrap();
        assert_ne!(who_again["call"], who["call"], "each request has its own id");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn elicitation_asks_the_clients_human_and_not_the_operator() {
    let setup = setup();
    let client = ApprovingClient::default();
    let asked = Arc::clone(&client.asked);
    let client = connect(setup.server, client).await;
    let result = call(&client, "delete", json!({"path": "/tmp/x"})).await;
    assert_eq!(text(&result), "deleted /tmp/x");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(setup.operator_asked.lock().unwrap().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn dispatcher_approvals_ask_the_operator_and_never_the_client() {
    let setup = setup();
    let server = setup.server.with_approvals(McpApprovals::Dispatcher);
    let connection_id = server.connection_id().to_owned();
    let client = ApprovingClient::default();
    let asked = Arc::clone(&client.asked);
    let client = connect(server, client).await;
    let result = call(&client, "delete", json!({"path": "/tmp/y", "ghost": 1})).await;
    assert_eq!(result.is_error, Some(false));
    assert_eq!(text(&result), "deleted /tmp/y");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the client was not asked");
    let operator_asked = setup.operator_asked.lock().unwrap().clone();
    assert_eq!(operator_asked.len(), 1);
    assert_eq!(operator_asked[0].arguments, json!({"path": "/tmp/y"}));
    assert_eq!(operator_asked[0].thread_id.as_deref(), Some(connection_id.as_str()));
    let report = &result.meta.as_ref().unwrap()[CALL_META_KEY];
    assert_eq!(report["stripped_arguments"], json!(["ghost"]));
    assert_eq!(report["tool_call_id"], operator_asked[0].tool_call_id.as_str());
    client.cancel().await.unwrap();
}
