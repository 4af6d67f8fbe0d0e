//! A guarded MCP server on [rmcp](https://docs.rs/rmcp), the official MCP Rust SDK (feature `mcp`).
//!
//! [`GuardedMcpServer`] serves a [`Dispatcher`]'s tools to any MCP client:
//!
//! - `tools/list` returns what the dispatcher offers: denied tools are absent, escalated ones listed;
//! - `tools/call` runs [`Dispatcher::dispatch_with_approver`]. Refusals and tool failures are tool results
//!   with `isError: true` whose text is the refusal and its hints (never a JSON-RPC error, which clients
//!   hide from the model). Every result carries `_meta["agent-airlock/call"]` ([`CALL_META_KEY`]): the tool
//!   call id, the stripped ghost arguments, and for refusals the refusal (kind, rule, retry) and hints;
//! - an escalated call is decided as the server's [`McpApprovals`] say, chosen when it is made: the client's
//!   human through MCP form elicitation on the connection of the request being served (recorded and bound
//!   in a ledger, or not), or the dispatcher's own approver or interrupt approvals. A client that did not
//!   declare elicitation gets a refusal ("needs a human's approval and none can be asked here"), never a
//!   silent run. An answer approves only the call it was asked for: nothing is remembered, so the same
//!   request id or the same arguments ask again;
//! - the human is shown the call in full, every argument whole with hidden characters escaped
//!   ([`crate::approval::display`]); a call too long to show is refused without asking. At most one elicitation per
//!   tool waits on a connection; a cancelled call (`notifications/cancelled`) withdraws its elicitation and
//!   never runs, whatever the human answers later. When no answer is obtained (cancelled, timed out,
//!   undeliverable) the model is told so, never that a human declined.
//!
//! The call's [`CallContext`] has the connection id as its thread ([`GuardedMcpServer::connection_id`]),
//! and the JSON-RPC request id (as JSON text: `7` or `"abc"`, so a number and a string never collide) as
//! its tool call id. Where the transport says who made the request
//! ([`GuardedMcpServer::with_caller_of`]), the call runs as that caller too
//! ([`CallContext::with_caller`]): per-thread rate limits then count the caller across all of its
//! connections, while approvals stay bound to the connection.
//!
//! Elicitation is a server-to-client request, which protocol revision 2026-07-28 no longer allows (it
//! replaces it with `InputRequiredResult` round trips). The server therefore offers the revisions up to
//! 2025-11-25; clients that probe for the newer one fall back to the `initialize` handshake.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_airlock::Dispatcher;
//! use agent_airlock::integrations::mcp::{GuardedMcpServer, McpApprovals};
//!
//! # async fn run(dispatcher: Dispatcher) -> Result<(), Box<dyn std::error::Error>> {
//! GuardedMcpServer::new(Arc::new(dispatcher), McpApprovals::ClientElicitation).serve_stdio().await?;
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::collections::HashSet;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures_util::future::{BoxFuture, Either, select};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotification, CancelledNotificationParam,
    ClientResult, ContentBlock, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    Implementation, JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams, ProtocolVersion, RequestId,
    RequestMetaObject, ServerCapabilities, ServerConfig, ServerNotification, ServerRequest,
};
use rmcp::service::{
    ElicitationMode, NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleServer, ServerInitializeError,
};
use rmcp::{ErrorData, ServerHandler, ServiceError, ServiceExt as _};
use serde::Serialize;
use serde_json::{Map, Value};

pub use rmcp;

use crate::approval::display::DisplayError;
use crate::approval::protocol::{CLOSED_BY, DecisionError, InterruptApprovals, ResumeValue};
use crate::approval::{ApprovalRequest, Approver, Decision, EscalationReason};
use crate::context::CallContext;
use crate::dispatch::Dispatcher;
use crate::message::{Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};
use crate::policy::ApprovalRoute;
use crate::schema::ToolDefinition;

/// The `_meta` key of every `tools/call` result: what the guard did with the call.
pub const CALL_META_KEY: &str = "agent-airlock/call";

/// The `_meta` key of an approval elicitation: the [`ApprovalRequest`] as JSON, for clients that show more
/// than the message.
pub const APPROVAL_META_KEY: &str = "agent-airlock/approval";

/// How long an approval elicitation waits for the human before the call is refused.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// Who decides an escalated call served over MCP. Chosen when the server is made
/// ([`GuardedMcpServer::new`]), never implied: it says whom the server trusts with a yes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum McpApprovals {
    /// The human behind the MCP client, asked through form elicitation on the request's connection.
    ///
    /// **Trusted: the client.** Its user approves the calls their own agent makes, and nothing is recorded
    /// beyond the audit log: right for a desktop client whose user owns what the tools touch, wrong when the
    /// client's user must not approve their own calls. A client that did not declare elicitation gets a
    /// refusal. The dispatcher's own approver or interrupt approvals are not asked.
    ClientElicitation,
    /// [`ClientElicitation`](Self::ClientElicitation), with every answer bound to the exact call by the HMAC
    /// binding of these [`InterruptApprovals`] and recorded in their ledger: the call pauses as an
    /// interrupt (a sealed request recorded pending), the client's human answers, the answer is recorded as
    /// a grant or a denial, and the call is dispatched again with it as the resume value, so the grant is
    /// spent exactly once by exactly this call (thread = connection id, tool call id = JSON-RPC request id).
    /// The dispatcher must have been built with `.interrupt_approvals(approvals.clone())`, sharing the key
    /// ring and the ledger.
    ///
    /// **Trusted: the client**, as above; the ledger proves what was asked and answered.
    BoundClientElicitation(Box<InterruptApprovals>),
    /// What the dispatcher was built with: its approver callback (an operator's channel outside MCP), or
    /// its interrupt approvals (the call is refused as pending and an operator approves out of band, e.g.
    /// with `airlock approve`), or, with neither, a refusal. The MCP client is never asked.
    ///
    /// **Trusted: the operator** behind the dispatcher's approver or ledger, never the client's user. A call the
    /// client cancels stops waiting for the dispatcher's approver callback and never runs; one cancelled while
    /// its tool runs is dropped (its effect, if any, is left ambiguous for an operator).
    Dispatcher,
    /// Bound approvals, as [`BoundClientElicitation`](Self::BoundClientElicitation), asked of whoever each
    /// tool's [`ApprovalRoute`] names: the client's human through elicitation, or an operator. For the
    /// operator the call pauses as a sealed request recorded pending in the ledger and waits, up to the
    /// server's approval timeout, for a decision another process records in the same ledger (`airlock
    /// approve` or `airlock deny` against the shared store); it then resumes with that decision, so the
    /// grant is spent exactly once by exactly this call. A call cancelled or timed out while it waits is
    /// closed in the ledger (a later approval admits nothing) and never runs.
    ///
    /// **Trusted: the client** for the tools routed to it, **the operator** for the others.
    Routed(Box<RoutedApprovals>),
}

/// The approvals and routes of [`McpApprovals::Routed`].
#[derive(Clone)]
pub struct RoutedApprovals {
    approvals: InterruptApprovals,
    routes: Arc<dyn Fn(&str) -> ApprovalRoute + Send + Sync>,
    poll_interval: Duration,
}

/// How often a call waiting for an operator looks for the decision in the ledger, unless set.
pub const DEFAULT_OPERATOR_POLL: Duration = Duration::from_millis(250);

impl RoutedApprovals {
    /// Bound approvals recorded in `approvals`' ledger, each tool's asked of whom `routes` names for it
    /// (for a policy: `move |tool| policy.for_tool(tool).approver`).
    pub fn new(approvals: InterruptApprovals, routes: impl Fn(&str) -> ApprovalRoute + Send + Sync + 'static) -> Self {
        RoutedApprovals { approvals, routes: Arc::new(routes), poll_interval: DEFAULT_OPERATOR_POLL }
    }

    /// How often a call waiting for an operator looks for the decision ([`DEFAULT_OPERATOR_POLL`]).
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }
}

impl std::fmt::Debug for RoutedApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutedApprovals")
            .field("approvals", &self.approvals)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

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
    served: ServedDispatcher,
    /// The host's context as given, without the thread.
    host_context: CallContext,
    /// The host's context with this connection as its thread: what every call runs with.
    context: CallContext,
    connection_id: Arc<str>,
    config: ServerConfig,
    approvals: McpApprovals,
    approval_timeout: Duration,
    /// The tools with an approval elicitation waiting on this connection.
    eliciting: Arc<Mutex<HashSet<String>>>,
    /// Who made a request, as its transport says ([`with_caller_of`](Self::with_caller_of)).
    caller_of: Option<CallerOf>,
}

/// Who made a request, as its transport attached it to the request (an HTTP request's authenticated
/// identity, say): the caller its call runs as ([`CallContext::with_caller`]), `None` for none.
pub type CallerOf = Arc<dyn Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync>;

/// The dispatcher a [`GuardedMcpServer`] serves and the tools it lists, shared by the servers of every
/// connection made from it ([`GuardedMcpServer::for_new_connection`]) and replaceable while they serve: a
/// gateway whose upstream changed its tools builds a new dispatcher and [`replace`](Self::replace)s the old.
///
/// A call is served to its end by the dispatcher it arrived at; later calls and lists see the new one.
#[derive(Clone)]
pub struct ServedDispatcher {
    inner: Arc<ServedInner>,
}

struct ServedInner {
    current: RwLock<Arc<Served>>,
    /// The clients connected through servers of this value, told when the tools change.
    peers: Mutex<Vec<Peer<RoleServer>>>,
}

/// One generation of what is served.
struct Served {
    dispatcher: Arc<Dispatcher>,
    tools: Arc<[rmcp::model::Tool]>,
}

impl ServedDispatcher {
    /// Serves `dispatcher`, listing the tools it offers ([`Dispatcher::offered_tools`]).
    pub fn new(dispatcher: Arc<Dispatcher>) -> Self {
        let tools = offered_mcp_tools(&dispatcher);
        Self::with_tools(dispatcher, tools)
    }

    /// Serves `dispatcher`, listing `tools`: definitions its host made for MCP (an upstream's own, for
    /// instance), each of which the dispatcher must offer under the same name. A listed tool the dispatcher
    /// does not offer is dropped from the list rather than listed and refused.
    pub fn with_tools(dispatcher: Arc<Dispatcher>, tools: Vec<rmcp::model::Tool>) -> Self {
        let served = Served::new(dispatcher, tools);
        ServedDispatcher {
            inner: Arc::new(ServedInner { current: RwLock::new(Arc::new(served)), peers: Mutex::default() }),
        }
    }

    /// Serves `dispatcher` listing `tools` (as in [`with_tools`](Self::with_tools)) from now on, and sends
    /// `notifications/tools/list_changed` to every client connected through this value.
    pub async fn replace(&self, dispatcher: Arc<Dispatcher>, tools: Vec<rmcp::model::Tool>) {
        let served = Arc::new(Served::new(dispatcher, tools));
        *self.inner.current.write().unwrap_or_else(PoisonError::into_inner) = served;
        let peers = self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for peer in peers.iter().filter(|peer| !peer.is_transport_closed()) {
            if let Err(error) = peer.notify_tool_list_changed().await {
                tracing::debug!(target: "agent_airlock", %error, "a client was not told the tools changed");
            }
        }
        self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner).retain(|peer| !peer.is_transport_closed());
    }

    /// The dispatcher served now.
    pub fn dispatcher(&self) -> Arc<Dispatcher> {
        Arc::clone(&self.current().dispatcher)
    }

    /// The names of the tools listed now, in list order.
    pub fn tool_names(&self) -> Vec<String> {
        self.current().tools.iter().map(|tool| tool.name.to_string()).collect()
    }

    fn current(&self) -> Arc<Served> {
        Arc::clone(&self.inner.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn connected(&self, peer: Peer<RoleServer>) {
        let mut peers = self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.retain(|peer| !peer.is_transport_closed());
        peers.push(peer);
    }
}

impl Served {
    fn new(dispatcher: Arc<Dispatcher>, tools: Vec<rmcp::model::Tool>) -> Self {
        let offered: HashSet<String> =
            dispatcher.offered_tools().into_iter().map(|definition| definition.name).collect();
        let tools = tools.into_iter().filter(|tool| offered.contains(tool.name.as_ref())).collect();
        Served { dispatcher, tools }
    }
}

impl std::fmt::Debug for ServedDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedDispatcher").field("tools", &self.tool_names()).finish_non_exhaustive()
    }
}

fn offered_mcp_tools(dispatcher: &Dispatcher) -> Vec<rmcp::model::Tool> {
    dispatcher.offered_tools().iter().map(mcp_tool).collect()
}

/// The `_meta` key of a bound approval elicitation: the sealed `{"airlock_approval": {...}}` request, with
/// the HMAC binding of the call (thread = connection id, tool call id = JSON-RPC request id).
pub const BOUND_APPROVAL_META_KEY: &str = "agent-airlock/sealed-approval";

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

    fn with_capabilities(served: ServedDispatcher, approvals: McpApprovals, capabilities: ServerCapabilities) -> Self {
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

    /// Reads who made each `tools/call` from what its transport attached to the request: every call runs
    /// as that caller ([`CallContext::with_caller`]), so per-thread rate limits count by the caller across
    /// all of its connections, not afresh on each. Approvals stay bound to the connection. Without it (and
    /// when it answers `None`) calls count by the connection.
    pub fn with_caller_of(
        mut self,
        caller_of: impl Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync + 'static,
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

    /// Interrupt, ask the client's human, record the answer bound to the call, resume with it.
    async fn dispatch_bound(
        &self,
        dispatcher: &Dispatcher,
        cx: &CallContext,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        bound: &InterruptApprovals,
    ) -> Outcome {
        let Some(approver) = self.approver_for(context) else {
            // Nobody can be asked in-band: escalated calls are refused before any request is recorded.
            let call_id = call.clone();
            return unless_cancelled(context, &call_id, dispatcher.dispatch_with_approver(call, cx, None)).await;
        };
        // Without an escalation the tool runs here: a cancellation stops it.
        let request = match unless_cancelled(context, &call, dispatcher.dispatch(call.clone(), cx)).await {
            Outcome::Interrupt { request, .. } => request,
            done => return done,
        };
        // What the human is shown comes from the sealed request: exactly what will be admitted.
        let question = ApprovalRequest {
            tool: request.tool().to_owned(),
            tool_call_id: call.id.clone(),
            thread_id: Some(self.connection_id.to_string()),
            reasons: vec![EscalationReason { rule: request.rule().to_owned(), reason: request.reason().to_owned() }],
            arguments: Value::Object(request.arguments().clone()),
        };
        let interrupt = request.into_value();
        let by = format!("mcp-client:{}", self.connection_id);
        let resume = match approver.ask(question, Some(&interrupt)).await {
            Decision::Approve if context.ct.is_cancelled() => {
                return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, CANCELLED).await;
            }
            Decision::Approve => match bound.approve(&interrupt, &by).await {
                Ok(resume) => resume.into_value(),
                Err(error) => {
                    tracing::error!(target: "agent_airlock", %error, "recording an MCP approval failed");
                    return self
                        .close_unanswered(dispatcher, cx, call, bound, &interrupt, "the approval could not be recorded")
                        .await;
                }
            },
            Decision::Deny { reason } => {
                // A recorded denial refuses through the dispatcher (and its audit log) with the human's words.
                let resume = match bound.deny(&interrupt, &by, reason.as_deref()).await {
                    Ok(denied) => denied.into_value(),
                    Err(error) => {
                        tracing::error!(target: "agent_airlock", %error, "recording an MCP denial failed");
                        return self
                            .close_unanswered(
                                dispatcher,
                                cx,
                                call,
                                bound,
                                &interrupt,
                                "the denial could not be recorded",
                            )
                            .await;
                    }
                };
                return dispatcher.dispatch(call, &cx.clone().with_resume(resume)).await;
            }
            Decision::Unavailable { reason } => {
                return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, &reason).await;
            }
        };
        if context.ct.is_cancelled() {
            // Cancelled between the answer and the run: the denial revokes the unspent grant.
            return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, CANCELLED).await;
        }
        self.run_approved(dispatcher, call, context, bound, &interrupt, cx.clone().with_resume(resume)).await
    }

    /// Runs an approved call in `resumed` (the call's context with its resume value), unless the client
    /// cancels it first. Cancelled before the grant was spent, the grant is revoked, so the request is
    /// closed rather than left granted.
    async fn run_approved(
        &self,
        dispatcher: &Dispatcher,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        bound: &InterruptApprovals,
        interrupt: &Value,
        resumed: CallContext,
    ) -> Outcome {
        let call_id = call.clone();
        let outcome = unless_cancelled(context, &call_id, dispatcher.dispatch(call, &resumed)).await;
        if context.ct.is_cancelled() {
            // A grant already spent stays spent (the call was admitted); the ledger says so and nothing changes.
            match bound.close(interrupt, CLOSED_BY, Some("closed: the client cancelled the call before it ran")).await {
                Ok(_) | Err(DecisionError::AlreadySpent { .. }) => {}
                Err(error) => {
                    tracing::error!(target: "agent_airlock", %error, "a cancelled call's request could not be closed");
                }
            }
        }
        outcome
    }

    /// Interrupt, wait for an operator's decision in the shared ledger, resume with it.
    async fn dispatch_operator(
        &self,
        dispatcher: &Dispatcher,
        cx: &CallContext,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        routed: &RoutedApprovals,
    ) -> Outcome {
        // Without an escalation the tool runs here: a cancellation stops it.
        let request = match unless_cancelled(context, &call, dispatcher.dispatch(call.clone(), cx)).await {
            Outcome::Interrupt { request, .. } => request,
            done => return done,
        };
        let bound = &routed.approvals;
        tracing::info!(
            target: "agent_airlock", tool = %call.name, request_id = %request.request_id(),
            "an escalated call waits for an operator: `airlock approve {}`", request.request_id()
        );
        let interrupt = request.into_value();
        let waited = tokio::time::timeout(
            self.approval_timeout,
            wait_for_decision(bound, &interrupt, routed.poll_interval, context),
        )
        .await;
        let resume = match waited {
            Ok(Ok(resume)) => resume,
            Ok(Err(reason)) => return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, &reason).await,
            Err(_elapsed) => {
                let reason = format!("no operator decided within {} s", self.approval_timeout.as_secs());
                return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, &reason).await;
            }
        };
        if context.ct.is_cancelled() {
            // Cancelled as the decision came: the denial revokes the unspent grant.
            return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, CANCELLED).await;
        }
        let resumed = cx.clone().with_resume(resume.into_value());
        self.run_approved(dispatcher, call, context, bound, &interrupt, resumed).await
    }

    /// No human's answer was obtained for a recorded request: close it in the ledger (so it neither stays
    /// pending nor can be approved out of band later; an unspent grant is revoked), and refuse the call as
    /// unavailable, through the dispatcher and its audit log.
    async fn close_unanswered(
        &self,
        dispatcher: &Dispatcher,
        cx: &CallContext,
        call: ToolCall,
        bound: &InterruptApprovals,
        interrupt: &Value,
        reason: &str,
    ) -> Outcome {
        let note = format!("closed unanswered: {reason}");
        if let Err(error) = bound.close(interrupt, CLOSED_BY, Some(&note)).await {
            tracing::error!(target: "agent_airlock", %error, "closing an unanswered MCP approval request failed");
        }
        let unavailable = Unavailable(reason.to_owned());
        dispatcher.dispatch_with_approver(call, cx, Some(&unavailable)).await
    }

    /// The approver for one request: its client's human, if the client can be asked.
    fn approver_for(&self, context: &RequestContext<RoleServer>) -> Option<ElicitationApprover> {
        context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form).then(|| ElicitationApprover {
            context: context.clone(),
            timeout: self.approval_timeout,
            eliciting: Arc::clone(&self.eliciting),
        })
    }
}

/// Runs `dispatch` unless the client cancels the request first. Cancelled, the dispatch is dropped as the
/// protocol asks: a tool already running stops (an upstream behind a gateway is sent
/// `notifications/cancelled`), its reserved effect, if any, is left ambiguous for an operator, and the call
/// is answered as cancelled (the client no longer reads the answer).
async fn unless_cancelled(
    context: &RequestContext<RoleServer>,
    call: &ToolCall,
    dispatch: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    match select(pin!(context.ct.cancelled()), pin!(dispatch)).await {
        Either::Left(((), _)) => cancelled_outcome(call),
        Either::Right((outcome, _)) => outcome,
    }
}

/// Polls the ledger until an operator decided the request `interrupt` stands for; an error (the reason no
/// decision is used) when the call is cancelled first or the ledger cannot answer.
async fn wait_for_decision(
    approvals: &InterruptApprovals,
    interrupt: &Value,
    every: Duration,
    context: &RequestContext<RoleServer>,
) -> Result<ResumeValue, String> {
    let cancelled = &context.ct;
    loop {
        let (approvals, interrupt) = (approvals.clone(), interrupt.clone());
        // The ledger's reads block (a redb transaction, a PostgreSQL round trip).
        let read = tokio::task::spawn_blocking(move || approvals.recorded_decision_blocking(&interrupt));
        match select(pin!(cancelled.cancelled()), read).await {
            Either::Left(((), _)) => return Err(CANCELLED.to_owned()),
            Either::Right((Ok(Ok(Some(resume))), _)) => return Ok(resume),
            Either::Right((Ok(Ok(None)), _)) => {}
            Either::Right((Ok(Err(error)), _)) => {
                tracing::error!(target: "agent_airlock", %error, "reading an operator's decision failed");
                return Err(format!("the operator's decision could not be read ({error})"));
            }
            Either::Right((Err(error), _)) => {
                return Err(format!("the operator's decision could not be read ({error})"));
            }
        }
        if let Either::Left(((), _)) = select(pin!(cancelled.cancelled()), pin!(tokio::time::sleep(every))).await {
            return Err(CANCELLED.to_owned());
        }
    }
}

/// What the model is told when its client cancelled the call while it waited for approval.
const CANCELLED: &str = "the client cancelled the call before it was approved";

/// The answer to a call its client cancelled while the dispatcher's own approver had it (nobody reads it:
/// the client gave up on the request, but the session logs it).
fn cancelled_outcome(call: &ToolCall) -> Outcome {
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

/// An approver that answers [`Decision::Unavailable`], to refuse a call through the dispatcher's gates.
struct Unavailable(String);

impl Approver for Unavailable {
    fn review(&self, _request: ApprovalRequest) -> BoxFuture<'static, Decision> {
        Box::pin(std::future::ready(Decision::Unavailable { reason: self.0.clone() }))
    }
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
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.served.current().tools.to_vec()))
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
        let with_caller;
        let cx = match self.caller_of.as_ref().and_then(|caller_of| caller_of(&context)) {
            Some(caller) => {
                with_caller = self.context.clone().with_caller(caller);
                &with_caller
            }
            None => &self.context,
        };
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
            let mut result = match message.status {
                Status::Success => CallToolResult::success(vec![ContentBlock::text(text)]),
                Status::Error => CallToolResult::error(vec![ContentBlock::text(text)]),
            };
            result.structured_content = message.structured_content.clone();
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
pub(crate) fn request_id_text(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_else(|_| id.to_string())
}

fn new_connection_id() -> Arc<str> {
    format!("mcp-{}", uuid::Uuid::new_v4().simple()).into()
}

/// Asks the human behind one MCP client, through form elicitation on the connection of the request being
/// served, and stops waiting when that request is cancelled.
struct ElicitationApprover {
    /// The request being served: its peer to ask, its cancellation to heed.
    context: RequestContext<RoleServer>,
    timeout: Duration,
    eliciting: Arc<Mutex<HashSet<String>>>,
}

impl Approver for ElicitationApprover {
    fn review(&self, request: ApprovalRequest) -> BoxFuture<'static, Decision> {
        self.ask(request, None)
    }
}

impl ElicitationApprover {
    /// Asks about `request`; a sealed interrupt request, if any, goes along in `_meta`.
    fn ask(&self, request: ApprovalRequest, sealed: Option<&Value>) -> BoxFuture<'static, Decision> {
        let unavailable = |reason: String| -> BoxFuture<'static, Decision> {
            Box::pin(std::future::ready(Decision::Unavailable { reason }))
        };
        let message = match approval_message(&request) {
            Ok(message) => message,
            Err(error) => return unavailable(format!("{error}, so no human was asked")),
        };
        let Some(slot) = ElicitationSlot::take(&self.eliciting, &request.tool) else {
            return unavailable(format!(
                "another approval request for `{}` is already waiting for an answer on this connection; retry \
                 once it is answered",
                request.tool
            ));
        };
        let mut meta = approval_meta(&request);
        if let Some(sealed) = sealed {
            meta.0.insert(BOUND_APPROVAL_META_KEY.to_owned(), sealed.clone());
        }
        let peer = self.context.peer.clone();
        let cancelled = self.context.ct.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let _slot = slot;
            let params = ElicitRequestParams::FormElicitationParams {
                meta: Some(meta),
                message,
                requested_schema: approval_schema(),
            };
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let handle = match peer.send_request_with_option(request, PeerRequestOptions::with_timeout(timeout)).await {
                Ok(handle) => handle,
                Err(error) => {
                    tracing::warn!(target: "agent_airlock", %error, "approval elicitation not sent");
                    return Decision::Unavailable { reason: "the approval request could not be delivered".into() };
                }
            };
            let elicitation_id = handle.id.clone();
            // Cancellation first: once the call is cancelled, no answer, however timely, lets it run.
            let answer = match select(pin!(cancelled.cancelled()), pin!(handle.await_response())).await {
                Either::Left(((), _)) => {
                    let withdraw = CancelledNotification::new(CancelledNotificationParam::new(
                        Some(elicitation_id),
                        Some(CANCELLED.to_owned()),
                    ));
                    let _ = peer.send_notification(ServerNotification::CancelledNotification(withdraw)).await;
                    return Decision::Unavailable { reason: CANCELLED.into() };
                }
                Either::Right((answer, _)) => answer,
            };
            if cancelled.is_cancelled() {
                return Decision::Unavailable { reason: CANCELLED.into() };
            }
            match answer {
                Ok(ClientResult::ElicitResult(answer)) => decision_of(answer),
                Ok(_) => Decision::Unavailable { reason: "the client did not answer the approval request".into() },
                Err(ServiceError::Timeout { .. }) => Decision::Unavailable {
                    reason: format!("no answer to the approval request within {} s", timeout.as_secs()),
                },
                Err(error) => {
                    tracing::warn!(target: "agent_airlock", %error, "approval elicitation failed");
                    Decision::Unavailable { reason: "the approval request could not be delivered".into() }
                }
            }
        })
    }
}

/// One tool's approval elicitation waiting on a connection; the tool is free again when this drops.
struct ElicitationSlot {
    eliciting: Arc<Mutex<HashSet<String>>>,
    tool: String,
}

impl ElicitationSlot {
    /// The slot for `tool`, unless an elicitation for it is already waiting.
    fn take(eliciting: &Arc<Mutex<HashSet<String>>>, tool: &str) -> Option<Self> {
        let fresh = eliciting.lock().unwrap_or_else(PoisonError::into_inner).insert(tool.to_owned());
        fresh.then(|| ElicitationSlot { eliciting: Arc::clone(eliciting), tool: tool.to_owned() })
    }
}

impl Drop for ElicitationSlot {
    fn drop(&mut self) {
        self.eliciting.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.tool);
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

/// The prompt: the call in full (see [`crate::approval::display`]), or an error if it cannot be shown whole.
fn approval_message(request: &ApprovalRequest) -> Result<String, DisplayError> {
    Ok(format!("Allow this call to run once, exactly as shown?\n{}", request.render()?))
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
}
