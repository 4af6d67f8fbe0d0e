//! [`GuardedMcpServer`]: one connection's server, its settings, its transport, and the MCP handler that
//! lists and calls the dispatcher's tools.

use std::borrow::Cow;
use std::collections::HashSet;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{Either, select};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};
use serde_json::Value;

pub(super) use rmcp;

use crate::approval::Approver;
use crate::context::CallContext;
use crate::dispatch::Dispatcher;
use crate::identity::Caller;
use crate::message::{Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};
use crate::policy::ApprovalRoute;

use super::served::ServedDispatcher;
use super::wire::{request_id_text, tool_result};
use super::{DEFAULT_APPROVAL_TIMEOUT, McpApprovals};

/// An MCP server whose tools are a [`Dispatcher`]'s, every call guarded by its gates.
///
/// One value serves one connection: its [`connection_id`](Self::connection_id) is the thread of every call.
/// For transports with many sessions (streamable HTTP), make each session's server with
/// [`for_new_connection`](Self::for_new_connection).
///
/// Who may approve an escalated call is the [`McpApprovals`] it was made with. With client elicitation, at
/// most one approval elicitation per tool waits on a connection at a time (a model calling in a loop gets
/// refusals, not a stack of popups), and a call the client cancels (`notifications/cancelled`) stops
/// waiting: the elicitation is withdrawn, nothing is granted or spent, and the call never runs.
pub struct GuardedMcpServer {
    pub(super) served: ServedDispatcher,
    /// The host's context as given, without the thread.
    pub(super) host_context: CallContext,
    /// The host's context with this connection as its thread: what every call runs with.
    pub(super) context: CallContext,
    pub(super) connection_id: Arc<str>,
    pub(super) config: ServerConfig,
    pub(super) approvals: McpApprovals,
    pub(super) approval_timeout: Duration,
    /// The tools with an approval elicitation waiting on this connection.
    pub(super) eliciting: Arc<Mutex<HashSet<String>>>,
    /// Who made a request, as its transport says ([`with_caller_of`](Self::with_caller_of)).
    pub(super) caller_of: Option<CallerOf>,
}

/// Who made a request, as its transport attached it to the request (an HTTP request's authenticated
/// identity, say): the caller its call runs as ([`CallContext::with_authenticated`]), `None` for none.
pub type CallerOf = Arc<dyn Fn(&RequestContext<RoleServer>) -> Option<Caller> + Send + Sync>;

impl GuardedMcpServer {
    /// A server for `dispatcher`'s offered tools whose escalated calls are decided as `approvals` says,
    /// with an empty host context, a fresh connection id, and this crate's name and version as the
    /// server's identity.
    pub fn new(dispatcher: Arc<Dispatcher>, approvals: McpApprovals) -> Self {
        Self::with_capabilities(
            ServedDispatcher::new(dispatcher),
            approvals,
            ServerCapabilities::builder().enable_tools().build(),
        )
    }

    /// A server for whatever `served` holds when each request arrives: replacing its dispatcher
    /// ([`ServedDispatcher::replace`]) changes the tools listed and called, and tells every client connected
    /// through it (`notifications/tools/list_changed`, declared in the server's capabilities). Otherwise as
    /// [`new`](Self::new).
    pub fn serving(served: ServedDispatcher, approvals: McpApprovals) -> Self {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build();
        Self::with_capabilities(served, approvals, capabilities)
    }

    pub(super) fn with_capabilities(
        served: ServedDispatcher,
        approvals: McpApprovals,
        capabilities: ServerCapabilities,
    ) -> Self {
        let connection_id = new_connection_id();
        let config = ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")));
        GuardedMcpServer {
            served,
            host_context: CallContext::new(),
            context: CallContext::new().with_thread(&*connection_id),
            connection_id,
            config,
            approvals,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            eliciting: Arc::default(),
            caller_of: None,
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

    /// How long an approval elicitation waits before the call is refused ([`DEFAULT_APPROVAL_TIMEOUT`]).
    pub fn with_approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// Reads who made each request from what its transport attached to it: every call runs as that caller
    /// ([`CallContext::with_authenticated`]), so per-thread rate limits count by the caller across all of
    /// its connections, not afresh on each, the audit record names it, and the policy's identity conditions
    /// test its identity; `tools/list` leaves out what the policy denies it outright
    /// ([`Dispatcher::offered_tools_to`]). Approvals stay bound to the connection. Without it (and when it
    /// answers `None`) calls count by the connection.
    pub fn with_caller_of(
        mut self,
        caller_of: impl Fn(&RequestContext<RoleServer>) -> Option<Caller> + Send + Sync + 'static,
    ) -> Self {
        self.caller_of = Some(Arc::new(caller_of));
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
            served: self.served.clone(),
            host_context: self.host_context.clone(),
            context: self.host_context.clone().with_thread(&*connection_id),
            connection_id,
            config: self.config.clone(),
            approvals: self.approvals.clone(),
            approval_timeout: self.approval_timeout,
            eliciting: Arc::default(),
            caller_of: self.caller_of.clone(),
        }
    }

    /// Serves one client over standard input and output until it disconnects. Where both are pipes (as
    /// an MCP client starts a server) they are read and written on the async reactor, through descriptors of
    /// the server's own (see [`rmcp::transport::stdio_pipes`]), rather than a blocking thread per message.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        let running = self
            .serve(rmcp::transport::stdio_pipes())
            .await
            .map_err(|error| McpServeError::Initialize(Box::new(error)))?;
        running.waiting().await.map_err(|error| McpServeError::Session(error.to_string()))?;
        Ok(())
    }
}

/// Runs `dispatch` unless the client cancels the request first. Cancelled, the dispatch is dropped as the
/// protocol asks: a tool already running stops (an upstream behind a gateway is sent
/// `notifications/cancelled`), its reserved effect, if any, is left ambiguous for an operator, and the call
/// is answered as cancelled (the client no longer reads the answer).
pub(super) async fn unless_cancelled(
    context: &RequestContext<RoleServer>,
    call: &ToolCall,
    dispatch: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    match select(pin!(context.ct.cancelled()), pin!(dispatch)).await {
        Either::Left(((), _)) => cancelled_outcome(call),
        Either::Right((outcome, _)) => outcome,
    }
}

/// The answer to a call its client cancelled while the dispatcher's own approver had it (nobody reads it:
/// the client gave up on the request, but the session logs it).
pub(super) fn cancelled_outcome(call: &ToolCall) -> Outcome {
    Outcome::Message(ToolMessage {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content: "the client cancelled the call; it did not run to completion".to_owned(),
        status: Status::Error,
        hints: Vec::new(),
        stripped_arguments: Vec::new(),
        refusal: Some(Refusal { kind: RefusalKind::ApprovalUnavailable, rule: None, retry_after: None }),
        structured_content: None,
    })
}

impl std::fmt::Debug for GuardedMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMcpServer")
            .field("connection_id", &self.connection_id)
            .field("tools", &self.served.current().tools.len())
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

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.served.connected(context.peer);
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        // Elicitation needs a server-to-client request, which 2026-07-28 forbids.
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let served = self.served.current();
        // What the policy denies this caller outright is not offered to it; a caller without an identity
        // (stdio, a static token) is denied every tool an identity condition denies (fail closed).
        let cx = self.call_context(&context);
        let tools: Vec<_> =
            served.tools.iter().filter(|tool| !served.dispatcher.denies_caller(&tool.name, &cx)).cloned().collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall::new(request_id_text(&context.id), request.name, arguments);
        // The dispatcher of the moment the call arrived serves it to the end, even if it is replaced meanwhile.
        let served = self.served.current();
        let dispatcher = &*served.dispatcher;
        // The caller, where the transport names one, is what per-thread rate limits count by; the thread (and
        // so every approval's binding) stays this connection.
        let cx = &*self.call_context(&context);
        let outcome = match &self.approvals {
            McpApprovals::BoundClientElicitation(bound) => {
                self.dispatch_bound(dispatcher, cx, call, &context, bound).await
            }
            McpApprovals::Routed(routed) => match (routed.routes)(&call.name) {
                ApprovalRoute::Client => self.dispatch_bound(dispatcher, cx, call, &context, &routed.approvals).await,
                ApprovalRoute::Operator => self.dispatch_operator(dispatcher, cx, call, &context, routed).await,
            },
            McpApprovals::ClientElicitation => {
                let approver = self.approver_for(&context);
                dispatcher.dispatch_with_approver(call, cx, approver.as_ref().map(|a| a as &dyn Approver)).await
            }
            McpApprovals::Dispatcher => {
                // The dispatcher's approver callback may be waiting on an operator: a cancelled request stops
                // there, before anything is spent or run.
                unless_cancelled(&context, &call, dispatcher.dispatch(call.clone(), cx)).await
            }
        };
        Ok(tool_result(outcome).into())
    }
}

impl GuardedMcpServer {
    /// The context a request runs with: this connection's, as the caller its transport names, if any.
    fn call_context(&self, request: &RequestContext<RoleServer>) -> Cow<'_, CallContext> {
        match self.caller_of.as_ref().and_then(|caller_of| caller_of(request)) {
            Some(caller) => Cow::Owned(self.context.clone().with_authenticated(&caller)),
            None => Cow::Borrowed(&self.context),
        }
    }
}

pub(super) fn new_connection_id() -> Arc<str> {
    format!("mcp-{}", uuid::Uuid::new_v4().simple()).into()
}
