//! A full rig agent loop (rig-agent 0.44, rig's OpenAI chat-completions wire over its reqwest transport)
//! against a scripted fake model: an HTTP server on 127.0.0.1 that speaks the chat-completions protocol,
//! answers each request with the next scripted tool call, and records every request it receives. The
//! assertions are on what the "model" was sent back: results, stripped arguments and refusal texts.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_airlock::integrations::rig::{GuardReport, GuardedRigTools, RigThreadId};
use agent_airlock::{
    CallContext, Dispatcher, Policy, RefusalKind, State, ToolError, airlock_tool,
    approval::{ApprovalRequest, Decision},
    tool,
};
use agent_airlock_tests::loopback_http::{self, Response};
use rig_agent::AgentBuilder;
use rig_agent::agent::{AgentHook, HookContext};
use rig_agent::run::policy::{InvalidToolCallAction, InvalidToolCallContext, InvalidToolCallReason};
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::{ToolContext, ToolErrorKind};
use serde_json::{Value, json};

/// Orders the tools act on; counts cancellations that really ran.
#[derive(Default)]
struct Shop {
    cancelled: Mutex<Vec<String>>,
}

/// Look up an order's status.
#[airlock_tool(mask = "secrets,pii")]
fn lookup_order(
    /// The order id.
    order_id: String,
) -> String {
    format!("order {order_id}: shipped to jane.doe@example.com")
}

/// Echo the arguments back, as the tool received them.
#[airlock_tool]
fn echo(
    /// The text to echo.
    text: String,
) -> Value {
    json!({ "text": text })
}

/// Cancel an order.
#[airlock_tool(escalate = "cancels a customer's order")]
fn cancel_order(
    /// The order id.
    order_id: String,
    #[inject] shop: State<Shop>,
) -> Result<String, ToolError> {
    shop.cancelled.lock().map_err(|_| ToolError::new("shop unavailable"))?.push(order_id.clone());
    Ok(format!("cancelled {order_id}"))
}

/// Refund an order without limits.
#[airlock_tool(name = "admin_refund")]
fn refund(
    /// The order id.
    order_id: String,
    #[inject] shop: State<Shop>,
) -> String {
    shop.cancelled.lock().map(|mut c| c.push(format!("refund {order_id}"))).ok();
    format!("refunded {order_id}")
}

/// One scripted model turn: tool calls (id, name, arguments) or, when empty, a final answer.
struct Turn {
    calls: Vec<(&'static str, &'static str, Value)>,
    answer: &'static str,
}

fn chat_completion(turn: &Turn, index: usize) -> Value {
    let message = if turn.calls.is_empty() {
        json!({"role": "assistant", "content": turn.answer})
    } else {
        let calls = turn
            .calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function",
                       "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect::<Vec<_>>();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    };
    let finish = if turn.calls.is_empty() { "stop" } else { "tool_calls" };
    json!({
        "id": format!("chatcmpl-{index}"),
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    })
}

/// A chat-completions server on 127.0.0.1 that plays `script` in order and records each request body.
struct FakeModel {
    base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeModel {
    fn start(script: Vec<Turn>) -> FakeModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("bound"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        std::thread::spawn(move || {
            let script = Arc::new(script);
            let served = Arc::new(AtomicUsize::new(0));
            // Bounded: the server stops accepting once the script is played.
            while served.load(Ordering::SeqCst) < script.len() {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let (script, served, recorded) = (Arc::clone(&script), Arc::clone(&served), Arc::clone(&recorded));
                std::thread::spawn(move || serve(stream, &script, &served, &recorded));
            }
        });
        FakeModel { base_url, requests }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("not poisoned").clone()
    }
}

/// Serves the chat completions requests of one keep-alive connection until the client closes it.
fn serve(stream: TcpStream, script: &[Turn], served: &AtomicUsize, recorded: &Mutex<Vec<Value>>) {
    loopback_http::serve_connection(stream, |request| {
        assert!(request.line.starts_with("POST /v1/chat/completions "), "unexpected request: {}", request.line);
        let body: Value = serde_json::from_slice(&request.body).expect("a JSON request");
        let index = {
            let mut recorded = recorded.lock().expect("not poisoned");
            recorded.push(body);
            recorded.len() - 1
        };
        served.fetch_add(1, Ordering::SeqCst);
        let (status, reply) = match script.get(index) {
            Some(turn) => ("200 OK", chat_completion(turn, index)),
            None => (
                "500 Internal Server Error",
                json!({"error": {"message": "the script is over", "type": "server_error"}}),
            ),
        };
        Response { status, content_type: "application/json", body: reply.to_string().into_bytes() }
    });
}

/// The text of the tool message answering `call_id` in one recorded request.
fn tool_result(request: &Value, call_id: &str) -> String {
    let messages = request["messages"].as_array().expect("messages");
    let message = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool message for `{call_id}` in {request:#}"));
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        other => panic!("unexpected tool content {other}"),
    }
}

/// Answers a model's call to a tool rig does not offer (a denied one) with the dispatcher's refusal.
struct RefuseUnoffered(GuardedRigTools);

impl AgentHook for RefuseUnoffered {
    async fn on_invalid_tool_call(
        &self,
        _ctx: &HookContext,
        event: &InvalidToolCallContext,
    ) -> Option<InvalidToolCallAction> {
        if !matches!(event.reason, InvalidToolCallReason::UnknownTool) {
            return None;
        }
        let call_id = event.tool_call_id.as_ref()?.to_string();
        let arguments = event.args.as_deref().and_then(|args| serde_json::from_str(args).ok()).unwrap_or(Value::Null);
        let refusal = self.0.refusal_for_unoffered(&call_id, &event.tool_name, arguments).await?;
        Some(InvalidToolCallAction::Skip { reason: refusal })
    }
}

struct Fixture {
    tools: GuardedRigTools,
    shop: Arc<Shop>,
    asked: Arc<Mutex<Vec<ApprovalRequest>>>,
}

fn fixture() -> Fixture {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let dispatcher = Dispatcher::builder()
        .tool(tool!(lookup_order))
        .tool(tool!(echo))
        .tool(tool!(cancel_order))
        .tool(tool!(refund))
        .policy(Policy::builder().deny("admin_*").build().expect("a valid policy"))
        // The human approves cancelling A1 and nothing else.
        .approver(move |request: ApprovalRequest| {
            let yes = request.arguments["order_id"] == "A1";
            log.lock().expect("not poisoned").push(request);
            async move {
                if yes {
                    Decision::Approve
                } else {
                    Decision::Deny { reason: Some("that order already shipped".into()) }
                }
            }
        })
        .build()
        .expect("distinct tool names");
    let shop = Arc::new(Shop::default());
    let context = CallContext::new().with_thread("rig-test").with_state_arc(Arc::clone(&shop));
    Fixture { tools: GuardedRigTools::new(Arc::new(dispatcher), context), shop, asked }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rig_agent_loop_runs_every_call_through_the_gates() {
    let fixture = fixture();
    let model = FakeModel::start(vec![
        Turn { calls: vec![("call_1", "lookup_order", json!({"order_id": "A1"}))], answer: "" },
        Turn { calls: vec![("call_2", "echo", json!({"text": "hi", "as_root": true, "sudo": "yes"}))], answer: "" },
        Turn { calls: vec![("call_3", "admin_refund", json!({"order_id": "A1"}))], answer: "" },
        Turn { calls: vec![("call_4", "cancel_order", json!({"order_id": "A1"}))], answer: "" },
        Turn { calls: vec![("call_5", "cancel_order", json!({"order_id": "B2"}))], answer: "" },
        Turn { calls: vec![("call_6", "echo", json!({"text": 5}))], answer: "" },
        Turn { calls: Vec::new(), answer: "all done" },
    ]);

    let provider = OpenAIConfig::new("sk-test").with_base_url(model.base_url.clone()).client();
    let agent = AgentBuilder::new(provider.chat("gpt-test"))
        .preamble("You help with orders.")
        .dynamic_tools(fixture.tools.tools())
        .build();
    let response = agent
        .prompt("Sort out order A1 and B2.")
        .max_turns(10)
        .add_hook(RefuseUnoffered(fixture.tools.clone()))
        .run()
        .await
        .expect("the agent run completes");
    assert_eq!(response.output(), "all done");

    let requests = model.requests();
    assert_eq!(requests.len(), 7, "one request per scripted turn");

    // The model is offered the allowed and escalated tools, never the denied one.
    let mut offered = requests[0]["tools"]
        .as_array()
        .expect("tools offered")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("a name").to_owned())
        .collect::<Vec<_>>();
    offered.sort();
    assert_eq!(offered, ["cancel_order", "echo", "lookup_order"]);
    let echo_schema = requests[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["function"]["name"] == "echo")
        .expect("echo offered")["function"]["parameters"]
        .clone();
    assert_eq!(echo_schema["required"], json!(["text"]));
    assert_eq!(echo_schema["additionalProperties"], json!(false));

    // An allowed call runs, and its result is masked before the model sees it.
    assert_eq!(tool_result(&requests[1], "call_1"), "order A1: shipped to [EMAIL]");
    // Ghost arguments are stripped before the tool runs.
    let echoed: Value = serde_json::from_str(&tool_result(&requests[2], "call_2")).expect("echo returns JSON");
    assert_eq!(echoed, json!({"text": "hi"}));
    // The denied tool is refused with the dispatcher's text, and nothing ran.
    let refusal = tool_result(&requests[3], "call_3");
    assert!(refusal.starts_with("tool `admin_refund` is not permitted in this deployment"), "{refusal}");
    assert!(refusal.contains("\nhint: do not retry this tool"), "{refusal}");
    // An escalated call the human approves runs; one the human refuses does not, and the model is told why.
    assert_eq!(tool_result(&requests[4], "call_4"), "cancelled A1");
    let declined = tool_result(&requests[5], "call_5");
    assert!(
        declined.starts_with("a human declined this call to `cancel_order`: that order already shipped"),
        "{declined}"
    );
    // Invalid arguments come back with the field named.
    let invalid = tool_result(&requests[6], "call_6");
    assert!(invalid.contains("`text`"), "{invalid}");

    assert_eq!(*fixture.shop.cancelled.lock().expect("not poisoned"), ["A1"]);
    let asked = fixture.asked.lock().expect("not poisoned");
    assert_eq!(asked.len(), 2, "the approver was asked once per escalated call");
    assert_eq!(asked[0].thread_id.as_deref(), Some("rig-test"));
    assert!(asked[0].tool_call_id.starts_with("rig-"));
}

#[tokio::test]
async fn a_rig_tool_reports_what_the_guard_did() {
    let fixture = fixture();
    let tools = fixture.tools.tools();
    let echo = tools.iter().find(|t| t.name().as_str() == "echo").expect("echo is offered");
    assert!(tools.iter().all(|t| t.name().as_str() != "admin_refund"));

    let mut context = ToolContext::new();
    context.insert(RigThreadId("conversation-7".into())).expect("a context value");
    let output = echo.execute_with(&mut context, json!({"text": "hi", "as_root": true})).await.expect("echo runs");
    assert_eq!(output.as_text(), Some(r#"{"text":"hi"}"#));
    let report = context.result::<GuardReport>().expect("a readable report").expect("a report");
    assert_eq!(report.stripped_arguments, ["as_root"]);
    assert!(report.refusal.is_none());

    let cancel = tools.iter().find(|t| t.name().as_str() == "cancel_order").expect("cancel_order is offered");
    let mut context = ToolContext::new();
    context.insert(RigThreadId("conversation-7".into())).expect("a context value");
    let error = cancel.execute_with(&mut context, json!({"order_id": "B2"})).await.expect_err("the human refuses");
    assert_eq!(error.kind(), ToolErrorKind::PermissionDenied);
    assert!(error.model_feedback().is_some_and(|text| text.starts_with("a human declined")), "{error:?}");
    let report = context.result::<GuardReport>().expect("a readable report").expect("a report");
    assert_eq!(report.refusal.map(|r| r.kind), Some(RefusalKind::HumanDenied));
    // The run's thread id reached the approver.
    let asked = fixture.asked.lock().expect("not poisoned");
    assert_eq!(asked[0].thread_id.as_deref(), Some("conversation-7"));
    assert!(fixture.shop.cancelled.lock().expect("not poisoned").is_empty());
}
