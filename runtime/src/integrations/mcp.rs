//! A guarded MCP server on [rmcp](https://docs.rs/rmcp), the official MCP Rust SDK (feature `mcp`).
//!
//! [`GuardedMcpServer`] serves a [`Dispatcher`]'s tools to any MCP client:
//!
//! - `tools/list` returns what the dispatcher offers: denied tools are absent, escalated ones listed;
//! - `tools/call` runs [`Dispatcher::dispatch_with_approver`]. Refusals and tool failures are tool results
//!   with `isError: true` whose text is the refusal and its hints (never a JSON-RPC error, which clients
//!   hide from the model). Every result carries `_meta["agent-airlock/call"]` ([`CALL_META_KEY`]): the tool
//!   call id, the stripped ghost arguments, and for refusals the refusal (kind, rule, retry) and hints;
//! - an escalated call asks the client's human through MCP form elicitation, on the connection of the
//!   request being served (or the dispatcher's own approver, with [`McpApprovals::Dispatcher`]). A client that did not declare elicitation gets a refusal ("needs a human's
//!   approval and none can be asked here"), never a silent run. An answer approves only the call it was
//!   asked for: nothing is remembered, so the same request id or the same arguments ask again.
//!
//! The call's [`CallContext`] has the connection id as its thread ([`GuardedMcpServer::connection_id`]),
//! and the JSON-RPC request id (as JSON text: `7` or `"abc"`, so a number and a string never collide) as
//! its tool call id.
//!
//! Elicitation is a server-to-client request, which protocol revision 2026-07-28 no longer allows (it
//! replaces it with `InputRequiredResult` round trips). The server therefore offers the revisions up to
//! 2025-11-25; clients that probe for the newer one fall back to the `initialize` handshake.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_airlock::Dispatcher;
//! use agent_airlock::integrations::mcp::GuardedMcpServer;
//!
//! # async fn run(dispatcher: Dispatcher) -> Result<(), Box<dyn std::error::Error>> {
//! GuardedMcpServer::new(Arc::new(dispatcher)).serve_stdio().await?;
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, Implementation, JsonObject, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProtocolVersion, RequestId, RequestMetaObject, ServerCapabilities, ServerConfig,
};
use rmcp::service::{ElicitationMode, Peer, RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData, ServerHandler, ServiceError, ServiceExt as _};
use serde::Serialize;
use serde_json::{Map, Value};

pub use rmcp;

use crate::approval::{ApprovalRequest, Approver, Decision, EscalationReason};
use crate::context::CallContext;
use crate::dispatch::Dispatcher;
use crate::interrupt::InterruptApprovals;
use crate::message::{Outcome, Refusal, Status, ToolCall};
use crate::schema::ToolDefinition;

/// The `_meta` key of every `tools/call` result: what the guard did with the call.
pub const CALL_META_KEY: &str = "agent-airlock/call";

/// The `_meta` key of an approval elicitation: the [`ApprovalRequest`] as JSON, for clients that show more
/// than the message.
pub const APPROVAL_META_KEY: &str = "agent-airlock/approval";

/// How long an approval elicitation waits for the human before the call is refused.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// Arguments longer than this are cut in the approval message (the full arguments are in its `_meta`).
const MAX_ARGUMENTS_SHOWN: usize = 4000;

/// Who decides an escalated call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum McpApprovals {
    /// The human behind the MCP client, asked through form elicitation on the request's connection. A client
    /// that did not declare elicitation gets a refusal.
    #[default]
    Elicitation,
    /// The dispatcher's own [`Approver`] (an operator's channel outside MCP, when the client's user must not
    /// approve their own calls). Without one, escalated calls are refused.
    Dispatcher,
}

/// An MCP server whose tools are a [`Dispatcher`]'s, every call guarded by its gates.
///
/// One value serves one connection: its [`connection_id`](Self::connection_id) is the thread of every call.
/// For transports with many sessions (streamable HTTP), make each session's server with
/// [`for_new_connection`](Self::for_new_connection).
pub struct GuardedMcpServer {
    dispatcher: Arc<Dispatcher>,
    tools: Arc<[rmcp::model::Tool]>,
    /// The host's context as given, without the thread.
    host_context: CallContext,
    /// The host's context with this connection as its thread: what every call runs with.
    context: CallContext,
    connection_id: Arc<str>,
    config: ServerConfig,
    approvals: McpApprovals,
    approval_timeout: Duration,
    /// With these, an elicited yes or no is bound to the exact call and recorded in the ledger.
    bound: Option<InterruptApprovals>,
}

/// The `_meta` key of a bound approval elicitation: the sealed `{"airlock_approval": {...}}` request, with
/// the HMAC binding of the call (thread = connection id, tool call id = JSON-RPC request id).
pub const BOUND_APPROVAL_META_KEY: &str = "agent-airlock/sealed-approval";

impl GuardedMcpServer {
    /// A server for `dispatcher`'s offered tools, with an empty host context, a fresh connection id, and
    /// this crate's name and version as the server's identity.
    pub fn new(dispatcher: Arc<Dispatcher>) -> Self {
        let tools = dispatcher.offered_tools().iter().map(mcp_tool).collect::<Arc<[_]>>();
        let connection_id = new_connection_id();
        let config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")));
        GuardedMcpServer {
            dispatcher,
            tools,
            host_context: CallContext::new(),
            context: CallContext::new().with_thread(&*connection_id),
            connection_id,
            config,
            approvals: McpApprovals::default(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            bound: None,
        }
    }

    /// The values tools inject (`State<T>`, `Store<T>`). Its thread id is replaced by the connection id.
    pub fn with_context(mut self, context: CallContext) -> Self {
        self.context = context.clone().with_thread(&*self.connection_id);
        self.host_context = context;
        self
    }

    /// The name and version the server reports to clients.
    pub fn with_server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.config = self.config.with_server_info(Implementation::new(name, version));
        self
    }

    /// Instructions the client may show its model.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.config = self.config.with_instructions(instructions);
        self
    }

    /// Who decides escalated calls ([`McpApprovals::Elicitation`] unless set).
    pub fn with_approvals(mut self, approvals: McpApprovals) -> Self {
        self.approvals = approvals;
        self
    }

    /// Binds every elicited approval to the exact call with the HMAC binding of [`InterruptApprovals`] and
    /// records it in their ledger: the call pauses as an interrupt (a sealed request recorded pending), the
    /// client's human answers, the answer is recorded as a grant or a denial, and the call is dispatched
    /// again with it as the resume value, so the grant is spent exactly once by exactly this call (thread =
    /// connection id, tool call id = JSON-RPC request id). The dispatcher must have been built with
    /// `.interrupt_approvals(approvals.clone())`, sharing the key ring and the ledger.
    pub fn with_bound_approvals(mut self, approvals: InterruptApprovals) -> Self {
        self.bound = Some(approvals);
        self
    }

    /// How long an approval elicitation waits before the call is refused ([`DEFAULT_APPROVAL_TIMEOUT`]).
    pub fn with_approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// This connection's id: the thread id of every call it serves. Random, minted per server value.
    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    /// A server with the same dispatcher and settings for another connection, with a fresh connection id.
    pub fn for_new_connection(&self) -> Self {
        let connection_id = new_connection_id();
        GuardedMcpServer {
            dispatcher: Arc::clone(&self.dispatcher),
            tools: Arc::clone(&self.tools),
            host_context: self.host_context.clone(),
            context: self.host_context.clone().with_thread(&*connection_id),
            connection_id,
            config: self.config.clone(),
            approvals: self.approvals,
            approval_timeout: self.approval_timeout,
            bound: self.bound.clone(),
        }
    }

    /// Serves one client over standard input and output until it disconnects.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        let running =
            self.serve(rmcp::transport::stdio()).await.map_err(|error| McpServeError::Initialize(Box::new(error)))?;
        running.waiting().await.map_err(|error| McpServeError::Session(error.to_string()))?;
        Ok(())
    }

    /// Interrupt, ask the client's human, record the answer bound to the call, resume with it.
    async fn dispatch_bound(
        &self,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        bound: &InterruptApprovals,
    ) -> Outcome {
        let Some(approver) = self.approver_for(context) else {
            // Nobody can be asked in-band: escalated calls are refused before any request is recorded.
            return self.dispatcher.dispatch_with_approver(call, &self.context, None).await;
        };
        let request = match self.dispatcher.dispatch(call.clone(), &self.context).await {
            Outcome::Interrupt { request, .. } => request,
            done => return done,
        };
        let question = ApprovalRequest {
            tool: call.name.clone(),
            tool_call_id: call.id.clone(),
            thread_id: Some(self.connection_id.to_string()),
            reasons: vec![EscalationReason { rule: request.rule().to_owned(), reason: request.reason().to_owned() }],
            arguments: Value::Object(request.arguments().clone()),
        };
        let interrupt = request.into_value();
        let resume = match approver.ask(question, Some(&interrupt)).await {
            Decision::Approve => match bound.approve(&interrupt, &format!("mcp-client:{}", self.connection_id)).await {
                Ok(resume) => resume.into_value(),
                Err(error) => {
                    tracing::error!(target: "agent_airlock", %error, "recording an MCP approval failed");
                    return self
                        .resume_with_denial(call, bound, &interrupt, "the approval could not be recorded")
                        .await;
                }
            },
            Decision::Deny { reason } => {
                let reason = reason.unwrap_or_else(|| "declined".to_owned());
                return self.resume_with_denial(call, bound, &interrupt, &reason).await;
            }
        };
        self.dispatcher.dispatch(call, &self.context.clone().with_resume(resume)).await
    }

    async fn resume_with_denial(
        &self,
        call: ToolCall,
        bound: &InterruptApprovals,
        interrupt: &Value,
        reason: &str,
    ) -> Outcome {
        let by = format!("mcp-client:{}", self.connection_id);
        // A recorded denial refuses through the dispatcher (and its audit log); any other value is a no too.
        let resume = match bound.deny(interrupt, &by, Some(reason)).await {
            Ok(denied) => denied.into_value(),
            Err(error) => {
                tracing::error!(target: "agent_airlock", %error, "recording an MCP denial failed");
                Value::Bool(false)
            }
        };
        self.dispatcher.dispatch(call, &self.context.clone().with_resume(resume)).await
    }

    /// The approver for one request: its client's human, if the client can be asked.
    fn approver_for(&self, context: &RequestContext<RoleServer>) -> Option<ElicitationApprover> {
        context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
            .then(|| ElicitationApprover { peer: context.peer.clone(), timeout: self.approval_timeout })
    }
}

impl std::fmt::Debug for GuardedMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMcpServer")
            .field("connection_id", &self.connection_id)
            .field("tools", &self.tools.len())
            .field("approvals", &self.approvals)
            .field("approval_timeout", &self.approval_timeout)
            .finish_non_exhaustive()
    }
}

/// A guarded MCP server that could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The client did not complete the `initialize` handshake.
    #[error("the MCP session did not start: {0}")]
    Initialize(#[source] Box<ServerInitializeError>),
    /// The session's task ended abnormally.
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

impl ServerHandler for GuardedMcpServer {
    fn get_info(&self) -> ServerConfig {
        self.config.clone()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        // Elicitation needs a server-to-client request, which 2026-07-28 forbids.
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall::new(request_id_text(&context.id), request.name, arguments);
        let outcome = match (self.approvals, &self.bound) {
            (McpApprovals::Elicitation, Some(bound)) => self.dispatch_bound(call, &context, bound).await,
            (McpApprovals::Elicitation, None) => {
                let approver = self.approver_for(&context);
                self.dispatcher
                    .dispatch_with_approver(call, &self.context, approver.as_ref().map(|a| a as &dyn Approver))
                    .await
            }
            (McpApprovals::Dispatcher, _) => self.dispatcher.dispatch(call, &self.context).await,
        };
        Ok(tool_result(outcome).into())
    }
}

/// The MCP `inputSchema` of a tool: its canonical schema, which already is one closed JSON object.
// The single place to swap in the MCP dialect transform of the canonical schema.
pub fn mcp_input_schema(definition: &ToolDefinition) -> JsonObject {
    match &definition.input_schema {
        Value::Object(schema) => schema.clone(),
        // The canonical schema is always an object; should that change, offer a tool that takes nothing
        // rather than a schema MCP clients reject.
        _ => {
            let mut schema = Map::new();
            schema.insert("type".into(), "object".into());
            schema.insert("properties".into(), Value::Object(Map::new()));
            schema.insert("additionalProperties".into(), Value::Bool(false));
            schema
        }
    }
}

/// A tool definition as MCP lists it.
pub fn mcp_tool(definition: &ToolDefinition) -> rmcp::model::Tool {
    rmcp::model::Tool::new(
        definition.name.clone(),
        definition.description.clone(),
        Arc::new(mcp_input_schema(definition)),
    )
}

/// What the guard did with a call, as reported under [`CALL_META_KEY`].
#[derive(Serialize)]
struct CallReport<'a> {
    tool_call_id: &'a str,
    status: Status,
    stripped_arguments: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a Refusal>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    hints: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    host_command: bool,
}

impl CallReport<'_> {
    fn into_meta(self) -> Option<MetaObject> {
        let report = serde_json::to_value(&self).ok()?;
        let mut meta = MetaObject::new();
        meta.insert(CALL_META_KEY.to_owned(), report);
        Some(meta)
    }
}

/// A dispatch outcome as an MCP tool result: refusals and failures with `isError: true` and the text the
/// model reads (refusal, then hints), and the guard's report in `_meta`.
pub fn tool_result(outcome: Outcome) -> CallToolResult {
    match outcome {
        Outcome::Message(message) => {
            let text = super::model_text(&message);
            let result = match message.status {
                Status::Success => CallToolResult::success(vec![ContentBlock::text(text)]),
                Status::Error => CallToolResult::error(vec![ContentBlock::text(text)]),
            };
            let meta = CallReport {
                tool_call_id: &message.tool_call_id,
                status: message.status,
                stripped_arguments: &message.stripped_arguments,
                refusal: message.refusal.as_ref(),
                hints: &message.hints,
                host_command: false,
            }
            .into_meta();
            result.with_meta(meta)
        }
        // MCP has no graph to apply a host command to: the client gets the command as the tool's JSON
        // result, flagged in `_meta`.
        // MCP cannot resume a call with a value: an interrupt (interrupt approvals on this dispatcher) is an
        // error result saying the approval is pending; an operator approves out of band.
        Outcome::Interrupt { tool_call_id, request } => {
            let meta = CallReport {
                tool_call_id: &tool_call_id,
                status: Status::Error,
                stripped_arguments: &[],
                refusal: None,
                hints: &[],
                host_command: false,
            }
            .into_meta();
            CallToolResult::error(vec![ContentBlock::text(super::pending_approval_text(&request))]).with_meta(meta)
        }
        Outcome::Command { command, tool_call_id, stripped_arguments } => {
            let text = serde_json::to_string(&command).unwrap_or_default();
            let meta = CallReport {
                tool_call_id: &tool_call_id,
                status: Status::Success,
                stripped_arguments: &stripped_arguments,
                refusal: None,
                hints: &[],
                host_command: true,
            }
            .into_meta();
            CallToolResult::success(vec![ContentBlock::text(text)]).with_meta(meta)
        }
    }
}

/// A JSON-RPC request id as the call's tool call id: its JSON text, so `7` and `"7"` stay distinct.
fn request_id_text(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_else(|_| id.to_string())
}

fn new_connection_id() -> Arc<str> {
    format!("mcp-{}", uuid::Uuid::new_v4().simple()).into()
}

/// Asks the human behind one MCP client, through form elicitation on that client's connection.
struct ElicitationApprover {
    peer: Peer<RoleServer>,
    timeout: Duration,
}

impl Approver for ElicitationApprover {
    fn review(&self, request: ApprovalRequest) -> BoxFuture<'static, Decision> {
        self.ask(request, None)
    }
}

impl ElicitationApprover {
    /// Asks about `request`; a sealed interrupt request, if any, goes along in `_meta`.
    fn ask(&self, request: ApprovalRequest, sealed: Option<&Value>) -> BoxFuture<'static, Decision> {
        let peer = self.peer.clone();
        let timeout = self.timeout;
        let mut meta = approval_meta(&request);
        if let Some(sealed) = sealed {
            meta.0.insert(BOUND_APPROVAL_META_KEY.to_owned(), sealed.clone());
        }
        Box::pin(async move {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: Some(meta),
                message: approval_message(&request),
                requested_schema: approval_schema(),
            };
            match peer.create_elicitation_with_timeout(params, Some(timeout)).await {
                Ok(answer) => decision_of(answer),
                Err(ServiceError::Timeout { .. }) => Decision::Deny {
                    reason: Some(format!("no answer to the approval request within {} s", timeout.as_secs())),
                },
                Err(error) => {
                    tracing::warn!(target: "agent_airlock", %error, "approval elicitation failed");
                    Decision::Deny { reason: Some("the approval request could not be delivered".into()) }
                }
            }
        })
    }
}

/// The human's answer. Only an accepted form with `approve` ticked approves; anything else is a no.
fn decision_of(answer: ElicitResult) -> Decision {
    match answer.action {
        ElicitationAction::Accept => {
            let content = answer.content.unwrap_or(Value::Null);
            if content.get("approve") == Some(&Value::Bool(true)) {
                Decision::Approve
            } else {
                let note = content
                    .get("note")
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|note| !note.is_empty())
                    .map(str::to_owned);
                Decision::Deny { reason: note.or_else(|| Some("approval was not given".into())) }
            }
        }
        ElicitationAction::Decline => Decision::Deny { reason: None },
        // Cancel, and any action a later protocol adds: not a yes.
        _ => Decision::Deny { reason: Some("the approval request was dismissed".into()) },
    }
}

fn approval_message(request: &ApprovalRequest) -> String {
    let reasons = request.reasons.iter().map(|r| format!("{} ({})", r.reason, r.rule)).collect::<Vec<_>>().join("; ");
    let mut arguments = request.arguments.to_string();
    if arguments.len() > MAX_ARGUMENTS_SHOWN {
        let mut end = MAX_ARGUMENTS_SHOWN;
        while !arguments.is_char_boundary(end) {
            end -= 1;
        }
        arguments.truncate(end);
        arguments.push('…');
    }
    format!("Allow `{}` to run once?\nWhy it needs approval: {reasons}\nArguments: {arguments}", request.tool)
}

fn approval_meta(request: &ApprovalRequest) -> RequestMetaObject {
    let mut meta = MetaObject::new();
    if let Ok(value) = serde_json::to_value(request) {
        meta.insert(APPROVAL_META_KEY.to_owned(), value);
    }
    RequestMetaObject(meta)
}

fn approval_schema() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool_property("approve", |b| {
            b.title("Approve").description("Run this one call with exactly these arguments")
        })
        .string_property("note", |s| {
            s.title("Note").description("Optional: why, shown to the agent if you do not approve")
        })
        .build_unchecked()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let mut result = ElicitResult::new(action);
        result.content = content;
        result
    }

    #[test]
    fn only_a_ticked_approve_approves() {
        assert_eq!(decision_of(answer(ElicitationAction::Accept, Some(json!({"approve": true})))), Decision::Approve);
        for content in [
            None,
            Some(json!({})),
            Some(json!({"approve": "true"})),
            Some(json!({"approve": 1})),
            Some(json!({"approve": false, "note": "  "})),
        ] {
            assert_eq!(
                decision_of(answer(ElicitationAction::Accept, content)),
                Decision::Deny { reason: Some("approval was not given".into()) }
            );
        }
        assert_eq!(
            decision_of(answer(ElicitationAction::Accept, Some(json!({"approve": false, "note": "not that file"})))),
            Decision::Deny { reason: Some("not that file".into()) }
        );
        assert_eq!(decision_of(answer(ElicitationAction::Decline, None)), Decision::Deny { reason: None });
        assert!(matches!(
            decision_of(answer(ElicitationAction::Cancel, Some(json!({"approve": true})))),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn request_ids_of_both_kinds_stay_distinct() {
        assert_eq!(request_id_text(&RequestId::Number(7)), "7");
        assert_eq!(request_id_text(&RequestId::String("7".into())), "\"7\"");
    }

    #[test]
    fn long_arguments_are_cut_on_a_char_boundary() {
        let request = ApprovalRequest {
            tool: "t".into(),
            tool_call_id: "1".into(),
            thread_id: None,
            reasons: Vec::new(),
            arguments: json!({"s": "é".repeat(MAX_ARGUMENTS_SHOWN)}),
        };
        let message = approval_message(&request);
        assert!(message.ends_with('…'));
        assert!(message.len() < MAX_ARGUMENTS_SHOWN + 200);
    }
}
