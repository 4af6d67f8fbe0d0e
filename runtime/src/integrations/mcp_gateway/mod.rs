//! A gateway that puts the guard in front of an MCP server nobody here wrote (feature `mcp-gateway`).
//!
//! The upstream server runs as a child process ([`Upstream`]). Each tool it lists becomes a guarded tool
//! defined by its JSON Schema ([`JsonTool`]) whose execution forwards the admitted
//! call upstream ([`UpstreamCaller`]); a [`Dispatcher`] holds them with the deployment's policy, approvals,
//! effects and audit log; a [`GuardedMcpServer`] offers them downstream. So every call a client makes goes
//! through the same gates as a `#[airlock_tool]` tool: policy (denied tools are not even listed), ghost
//! stripping and validation against the upstream's own schema, escalation to the client's human, rate
//! limits, effect reservation, then the upstream, then masking and the audit record. An argument the
//! schema does not declare never reaches the upstream.
//!
//! - **Pins.** The policy can pin each tool's definition ([`tool_pin`]). A pinned tool whose definition the
//!   upstream changed is hidden and its calls refused until it is pinned again; unpinned tools follow the
//!   policy's default.
//! - **Poisoning.** Each tool's definition is scanned ([`scan_tool`]) at every listing: a tool whose
//!   definition has findings (hidden instructions, hidden characters, a parameter soliciting a secret, …) is
//!   hidden and its calls refused, pinned or not, unless [`AllowedFindings`] (the policy's `allow_findings`)
//!   accept every kind it has.
//! - **Changes.** When the upstream sends `notifications/tools/list_changed`, the gateway lists its tools
//!   again, builds a new dispatcher and tells its client the same ([`McpGateway::refresh`]). Every
//!   dispatcher it builds keeps its rate buckets in the gateway's one [`LocalRateBuckets`]: a re-list, which
//!   the upstream can ask for at will, gives no tool a fresh rate budget.
//! - **Resources and prompts** go through the same gates ([`SurfaceGuard`], [`McpGateway::with_policy`]):
//!   the policy's resource and prompt rules (`default = "deny"` included), their rate limits, the
//!   upstream, masking of the contents and messages returned, and an audit record for each read or get.
//!   Their listings are scanned as tools are ([`scan_resource`], [`scan_resource_template`], [`scan_prompt`]):
//!   an entry with findings its `[resources.…]` / `[prompts.…]` table does not accept is left out.
//! - **Every request is answered.** Over stdio the gateway frames messages itself ([`LineTransport`]): a
//!   message too large, too deep or malformed is answered with a JSON-RPC error, never dropped; a result
//!   too large fails its call (effect ambiguous). Listing the upstream's tools is bounded
//!   ([`LIST_TOOLS_TIMEOUT`]), and a re-list never answered holds up neither a shutdown nor, over HTTP, new
//!   connections.
//! - **Settling effects.** A result commits the call's effect; a request that never left (the upstream is
//!   gone) fails it (a retry is safe); an `isError` result, a JSON-RPC error or a connection lost after the
//!   request was sent leave it ambiguous, for an operator to resolve.
//!
//! ```no_run
//! use agent_airlock::Dispatcher;
//! use agent_airlock::integrations::mcp::McpApprovals;
//! use agent_airlock::integrations::mcp_gateway::{McpGateway, ToolPins, Upstream, UpstreamCommand};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let upstream = Upstream::spawn(&UpstreamCommand::new("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/srv"])).await?;
//! let gateway = McpGateway::start(upstream, ToolPins::new(), Dispatcher::builder).await?;
//! gateway.serve_stdio(McpApprovals::ClientElicitation, std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

mod environment;
mod framing;
mod http;
mod issuer_client;
mod oauth;
mod passthrough;
mod pin;
mod sandbox;
mod scan;
mod surfaces;
mod upstream;
mod verified_tokens;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use environment::{EnvironmentError, INHERITED_VARIABLES, OWN_PREFIX, UpstreamEnvironment};
pub use framing::{DEFAULT_MAX_MESSAGE_BYTES, LineTransport};
pub use http::{BearerToken, HttpAuth};
pub use oauth::{
    DEFAULT_ALGORITHMS, DEFAULT_LEEWAY, KEYS_MAX_AGE, KeySource, OAuthConfig, OAuthConfigError, OAuthResourceServer,
    REFETCH_INTERVAL, TokenRefusal, VERIFIED_CACHE_CAPACITY, VERIFIED_CACHE_TTL, parse_algorithm,
};
pub use passthrough::GatewayServer;
pub use pin::{PIN_PREFIX, PINNED_MEMBERS, PinCheck, ToolPins, listing_pin, tool_pin};
pub use sandbox::{
    DEFAULT_ADDRESS_SPACE, DEFAULT_OPEN_FILES, DEFAULT_PROCESSES, SYSTEM_READ_PATHS, SYSTEM_WRITE_PATHS, Sandbox,
    SandboxError, SandboxLauncher, SandboxLimits, SandboxPlan, exec_sandboxed,
};
pub use scan::{
    AllowedFindings, Finding, LONG_DESCRIPTION_BASE, LONG_DESCRIPTION_PER_PARAMETER, SPACE_RUN, scan_definition,
    scan_prompt, scan_resource, scan_resource_template, scan_tool,
};
pub use surfaces::{PROMPT_GET, RESOURCE_READ, SurfaceGuard};
pub use upstream::{
    DEFAULT_SHUTDOWN_GRACE, LIST_TOOLS_TIMEOUT, ListedSurfaces, Upstream, UpstreamCaller, UpstreamCommand,
    UpstreamError,
};

use rmcp::ServiceExt as _;
use rmcp::transport::IntoTransport;

use crate::dispatch::{BuildError, Dispatcher, DispatcherBuilder};
use crate::integrations::mcp::{DEFAULT_APPROVAL_TIMEOUT, GuardedMcpServer, McpApprovals, ServedDispatcher};
use crate::json_tool::{JsonCall, JsonTool};
use crate::{LocalRateBuckets, Policy};
use serde_json::Value;

/// Makes a dispatcher builder with everything but the tools: policy, approvals, effects, audit, masker.
/// Called again for every new list of upstream tools.
pub type DispatcherSetup = Arc<dyn Fn() -> DispatcherBuilder + Send + Sync>;

/// A gateway that could not start or serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The upstream server failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The dispatcher for the upstream's tools could not be built.
    #[error("the gateway's dispatcher could not be built: {0}")]
    Build(#[from] BuildError),
    /// The downstream client did not complete the MCP handshake.
    #[error("the downstream MCP session did not start: {0}")]
    Downstream(String),
}

/// What one listing of the upstream's tools became.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewayTools {
    /// Every tool the upstream listed, offered or not, in its order.
    pub listed: Vec<String>,
    /// The tools offered downstream (those the policy does not deny), in the upstream's order.
    pub offered: Vec<String>,
    /// Pinned tools whose definition changed: hidden, their calls refused.
    pub changed_pins: Vec<String>,
    /// Tools that cannot be guarded (a name no provider accepts, a schema that does not compile), with why:
    /// hidden.
    pub unusable: Vec<(String, String)>,
    /// Tools whose definitions have findings the policy does not allow ([`scan_tool`]), with them: hidden,
    /// their calls refused.
    pub flagged: Vec<(String, Vec<Finding>)>,
    /// Tools offered although their definitions have findings, each accepted by the policy
    /// ([`AllowedFindings`]), with them.
    pub accepted: Vec<(String, Vec<Finding>)>,
}

/// The gateway: an upstream, the guarded tools standing for its tools, and the dispatcher serving them.
pub struct McpGateway {
    upstream: Upstream,
    served: ServedDispatcher,
    setup: DispatcherSetup,
    pins: ToolPins,
    allowed: AllowedFindings,
    tools: GatewayTools,
    approval_timeout: Duration,
    /// The tools' rate buckets, handed to every dispatcher built, so they hold across re-lists.
    rates: LocalRateBuckets,
    /// Guards the resources and prompts: one for every session, so their rate limits hold across sessions.
    surfaces: Arc<SurfaceGuard>,
}

impl std::fmt::Debug for McpGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpGateway")
            .field("upstream", &self.upstream)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl McpGateway {
    /// Lists `upstream`'s tools and builds the dispatcher guarding them: `setup` gives a builder with the
    /// deployment's policy, approvals, effects and audit log; `pins` are the policy's definition pins. A tool
    /// with a poisoning finding is hidden ([`start_allowing`](Self::start_allowing) accepts some).
    pub async fn start(
        upstream: Upstream,
        pins: ToolPins,
        setup: impl Fn() -> DispatcherBuilder + Send + Sync + 'static,
    ) -> Result<McpGateway, GatewayError> {
        Self::start_allowing(upstream, pins, AllowedFindings::new(), setup).await
    }

    /// [`start`](Self::start), offering the tools whose findings `allowed` accepts (every kind each has).
    pub async fn start_allowing(
        upstream: Upstream,
        pins: ToolPins,
        allowed: AllowedFindings,
        setup: impl Fn() -> DispatcherBuilder + Send + Sync + 'static,
    ) -> Result<McpGateway, GatewayError> {
        let setup: DispatcherSetup = Arc::new(setup);
        let rates = LocalRateBuckets::new();
        let listed = upstream.list_tools().await?;
        let (dispatcher, offered, tools) = build(&upstream, &pins, &allowed, &setup, &rates, listed)?;
        let surfaces = Arc::new(surface_guard(&dispatcher, Arc::new(Policy::new())));
        let served = ServedDispatcher::with_tools(Arc::new(dispatcher), offered);
        let tools = GatewayTools { offered: served.tool_names(), ..tools };
        Ok(McpGateway {
            upstream,
            served,
            setup,
            pins,
            allowed,
            tools,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            rates,
            surfaces,
        })
    }

    /// The policy whose resource and prompt rules guard the upstream's resources and prompts: `deny_*` and
    /// `allow_*` globs, `default = "deny"`, the `[resources.…]` and `[prompts.…]` tables' rates and masks
    /// (without it, all are served, masked and audited with the dispatcher's masker and log). The tools'
    /// policy is the dispatcher's, from the setup.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.surfaces = Arc::new(surface_guard(&self.served.dispatcher(), Arc::new(policy)));
        self
    }

    /// How long an approval elicitation waits for the client's human ([`DEFAULT_APPROVAL_TIMEOUT`]).
    #[must_use]
    pub fn with_approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// What the last listing of the upstream's tools became.
    pub fn tools(&self) -> &GatewayTools {
        &self.tools
    }

    /// The dispatcher and tool list served now, shared by every server made from this gateway.
    pub fn served(&self) -> &ServedDispatcher {
        &self.served
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// A guarded MCP server for one downstream connection, serving this gateway's tools; escalated calls are
    /// decided as `approvals` says.
    pub fn server(&self, approvals: McpApprovals) -> GuardedMcpServer {
        GuardedMcpServer::serving(self.served.clone(), approvals)
            .with_server_info("agent-airlock-gateway", env!("CARGO_PKG_VERSION"))
            .with_approval_timeout(self.approval_timeout)
    }

    /// Lists the upstream's tools again and serves the new list, telling connected clients. A list whose
    /// dispatcher cannot be built leaves the current one in place. The tools' rate limits go on from where
    /// they were: a tool that was out of budget still is.
    pub async fn refresh(&mut self) -> Result<&GatewayTools, GatewayError> {
        let listed = self.upstream.list_tools().await?;
        self.serve_listed(listed).await
    }

    /// The second half of [`refresh`](Self::refresh), once the upstream has listed its tools: builds their
    /// dispatcher and swaps it in. Quick; the listing is the part that can take long.
    async fn serve_listed(&mut self, listed: Vec<rmcp::model::Tool>) -> Result<&GatewayTools, GatewayError> {
        let (dispatcher, offered, tools) =
            build(&self.upstream, &self.pins, &self.allowed, &self.setup, &self.rates, listed)?;
        self.served.replace(Arc::new(dispatcher), offered).await;
        self.tools = GatewayTools { offered: self.served.tool_names(), ..tools };
        Ok(&self.tools)
    }

    /// Serves what a re-list listed, or keeps the tools served now if it failed; logs which.
    async fn serve_relisted(&mut self, listed: Result<Vec<rmcp::model::Tool>, UpstreamError>) {
        let refreshed = match listed {
            Ok(listed) => self.serve_listed(listed).await,
            Err(error) => Err(error.into()),
        };
        match refreshed {
            Ok(tools) => {
                tracing::info!(target: "agent_airlock", offered = ?tools.offered, "the upstream's tools changed")
            }
            Err(error) => {
                tracing::error!(target: "agent_airlock", %error, "the upstream's new tools could not be served; the previous ones stay")
            }
        }
    }

    /// Stops without serving: shuts the upstream down as [`serve`](Self::serve) does when it ends.
    pub async fn shutdown(self) {
        self.upstream.shutdown(DEFAULT_SHUTDOWN_GRACE).await;
    }

    /// Serves one client on standard input and output; see [`serve`](Self::serve). Where both are pipes
    /// (as an MCP client starts a server) they are read and written on the async reactor, through
    /// descriptors of the gateway's own ([`rmcp::transport::stdio_pipes`]): no hand-off to a blocking thread
    /// for each message, each way.
    pub async fn serve_stdio(
        self,
        approvals: McpApprovals,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), GatewayError> {
        let (read, write) = rmcp::transport::stdio_pipes();
        // Every line the client sends is answered, even one that is not JSON (see `LineTransport`).
        let transport = LineTransport::new(read, write, "client").answering_parse_errors();
        self.serve(approvals, transport, shutdown).await
    }

    /// Serves one client on `transport` until it disconnects, the upstream exits, or `shutdown` completes;
    /// re-lists the upstream's tools whenever it says they changed. Then shuts the upstream down (its stdin
    /// closed, then SIGTERM, then SIGKILL, [`DEFAULT_SHUTDOWN_GRACE`] apart).
    pub async fn serve<T, E, A>(
        mut self,
        approvals: McpApprovals,
        transport: T,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), GatewayError>
    where
        T: IntoTransport<rmcp::RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let server = GatewayServer::new(self.server(approvals), self.upstream.peer(), Arc::clone(&self.surfaces));
        let mut calls_finished = std::pin::pin!(server.calls_finished());
        let mut shutdown = std::pin::pin!(shutdown);
        // A client that never completes the handshake must not keep the gateway from stopping.
        let handshake = tokio::select! {
            handshake = server.serve(transport) => Some(handshake),
            () = &mut shutdown => None,
        };
        let running = match handshake {
            Some(Ok(running)) => running,
            Some(Err(error)) => {
                self.upstream.shutdown(DEFAULT_SHUTDOWN_GRACE).await;
                return Err(GatewayError::Downstream(error.to_string()));
            }
            None => {
                self.upstream.shutdown(DEFAULT_SHUTDOWN_GRACE).await;
                return Ok(());
            }
        };
        let stop = running.cancellation_token();
        let mut session = std::pin::pin!(running.waiting());
        let mut changed = self.upstream.tools_changed();
        let mut upstream_gone = std::pin::pin!(watch_closed(self.upstream.caller()));
        let mut relist = std::pin::pin!(None);
        loop {
            tokio::select! {
                ended = &mut session => {
                    if let Err(error) = ended {
                        tracing::warn!(target: "agent_airlock", %error, "the downstream session ended abnormally");
                    }
                    break;
                }
                () = &mut shutdown => {
                    tracing::info!(target: "agent_airlock", "shutting down on request");
                    stop.cancel();
                    let _ = session.await;
                    break;
                }
                () = &mut upstream_gone => {
                    tracing::error!(target: "agent_airlock", "the upstream server closed the connection; stopping");
                    // The calls in flight lost their upstream too: each fails on its own, its effect settled
                    // and the client told whether it may have run. Let them answer (bounded) before the
                    // session ends, rather than cut them off as if the client had cancelled them.
                    let _ = tokio::time::timeout(DEFAULT_SHUTDOWN_GRACE, &mut calls_finished).await;
                    stop.cancel();
                    let _ = session.await;
                    break;
                }
                // See `relisting` for why the listing is an arm of its own.
                Ok(()) = changed.changed(), if relist.is_none() => relist.set(Some(self.upstream.listing())),
                listed = relisting(relist.as_mut()) => {
                    relist.set(None);
                    self.serve_relisted(listed).await;
                }
            }
        }
        self.upstream.shutdown(DEFAULT_SHUTDOWN_GRACE).await;
        Ok(())
    }
}

/// The guard of the resources and prompts: `policy`, with the dispatcher's masker, audit log and clock.
fn surface_guard(dispatcher: &Dispatcher, policy: Arc<Policy>) -> SurfaceGuard {
    SurfaceGuard::with_clock(
        policy,
        Arc::clone(dispatcher.masker()),
        dispatcher.audit_log().cloned(),
        Arc::clone(dispatcher.clock()),
    )
}

/// The upstream's tools as the re-list in flight lists them; never, while none is. The serving loops poll it
/// as an arm of their own, beside the client, the listener and a shutdown request: an upstream that announces
/// a change and never answers the re-list (bounded by [`LIST_TOOLS_TIMEOUT`] only) holds up none of them.
/// The loops do not look for changes while a listing runs: the watch keeps the latest, so the changes the
/// upstream announces meanwhile bring one more listing after this one, not one each.
async fn relisting<F: Future>(relist: std::pin::Pin<&mut Option<F>>) -> F::Output {
    match relist.as_pin_mut() {
        Some(listing) => listing.await,
        None => std::future::pending().await,
    }
}

/// Completes once the upstream's connection is closed.
async fn watch_closed(caller: UpstreamCaller) {
    loop {
        if caller.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The dispatcher for one listing of the upstream's tools, its rate buckets kept in `rates`, the MCP
/// definitions to offer, and the report.
fn build(
    upstream: &Upstream,
    pins: &ToolPins,
    allowed: &AllowedFindings,
    setup: &DispatcherSetup,
    rates: &LocalRateBuckets,
    listed: Vec<rmcp::model::Tool>,
) -> Result<(Dispatcher, Vec<rmcp::model::Tool>, GatewayTools), GatewayError> {
    let mut report = GatewayTools::default();
    let mut builder = setup().local_rates(rates.clone());
    let mut seen = HashSet::new();
    let mut offered = Vec::new();
    for tool in listed {
        let name = tool.name.to_string();
        if !seen.insert(name.clone()) {
            report.unusable.push((name, "the upstream lists it twice".to_owned()));
            continue;
        }
        report.listed.push(name.clone());
        if let PinCheck::Changed { pinned, now } = pins.check(&tool) {
            tracing::warn!(
                target: "agent_airlock", tool = %surfaces::shown(&name), %pinned, %now,
                "the upstream changed a pinned tool's definition: hidden and refused until it is pinned again"
            );
            report.changed_pins.push(name);
            continue;
        }
        // Pinned or not: a pin says the definition is the one reviewed, not that its findings were accepted
        // (`airlock mcp scan` pins every tool it lists).
        let (hiding, accepted) = allowed.split(&name, scan_tool(&tool));
        if !hiding.is_empty() {
            let shown = scan::findings_logged(&hiding);
            tracing::warn!(
                target: "agent_airlock", tool = %surfaces::shown(&name), findings = ?shown,
                "an upstream tool's definition has poisoning findings the policy does not allow: hidden and refused"
            );
            report.flagged.push((name, hiding));
            continue;
        }
        if !accepted.is_empty() {
            report.accepted.push((name.clone(), accepted));
        }
        match guarded_tool(&tool, upstream.caller()) {
            Ok(guarded) => {
                offered.push(downstream_definition(tool, &guarded));
                builder = builder.tool(guarded);
            }
            Err(why) => {
                tracing::warn!(target: "agent_airlock", tool = %surfaces::shown(&name), %why, "an upstream tool cannot be guarded: hidden");
                report.unusable.push((name, why));
            }
        }
    }
    Ok((builder.build()?, offered, report))
}

/// The upstream's definition as offered downstream: its name, title, annotations, description and output
/// schema as the upstream wrote them (its structured content is passed on, masked like its text), and its
/// input schema as the guard enforces it (objects the upstream left open closed, see
/// [`Closing`](crate::json_tool::Closing)).
fn downstream_definition(mut tool: rmcp::model::Tool, guarded: &JsonTool) -> rmcp::model::Tool {
    if let Value::Object(schema) = guarded.definition_schema() {
        tool.input_schema = Arc::new(schema.clone());
    }
    tool
}

/// The guarded tool standing for an upstream tool: its JSON Schema validates and screens the arguments, and
/// admitted calls are forwarded to the upstream.
fn guarded_tool(tool: &rmcp::model::Tool, caller: UpstreamCaller) -> Result<JsonTool, String> {
    // Every guarded tool has a description; for an upstream tool without one, say so rather than hide it.
    let description = match (tool.description.as_deref(), &tool.title) {
        (Some(description), _) if !description.trim().is_empty() => description.to_owned(),
        (_, Some(title)) if !title.trim().is_empty() => title.clone(),
        _ => format!("`{}` (the upstream server gives no description)", tool.name),
    };
    let schema = Value::Object((*tool.input_schema).clone());
    JsonTool::builder(tool.name.to_string(), description, schema)
        .build(move |call: JsonCall| {
            let caller = caller.clone();
            async move { caller.call(&call.tool, call.arguments).await }
        })
        .map_err(|error| error.to_string())
}
