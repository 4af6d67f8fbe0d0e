//! The upstream MCP server: a child process spoken to over its stdin and stdout with rmcp's client, or a
//! server reached over Streamable HTTP ([`Upstream::connect`]).
//!
//! The child starts with a scrubbed environment ([`UpstreamEnvironment`]): never the gateway's secrets. Its
//! stderr is the gateway's (a server's logs reach whoever reads the gateway's logs; nothing of it can reach
//! the gateway's stdout, which belongs to the downstream client). Shutting down follows the MCP
//! stdio transport's order: close the child's stdin, wait, then SIGTERM, wait, then SIGKILL.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities, ClientRequest,
    ContentBlock, Implementation, InitializeRequestParams, JsonObject, ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceError};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::environment::{EnvironmentError, UpstreamEnvironment};
use super::framing::{DEFAULT_MAX_MESSAGE_BYTES, LineTransport};
use super::sandbox::{SandboxError, SandboxLauncher, SandboxPlan};
use crate::json_tool::JsonOutput;
use crate::tool::ToolError;

/// How long the child is given to exit after its stdin closes, and again after SIGTERM.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// How long the gateway waits for the upstream to list its tools (at start, and again after it says they
/// changed): an upstream that never answers must not hold the gateway.
pub const LIST_TOOLS_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start an upstream MCP server: a program, its arguments, and where it runs.
#[derive(Debug, Clone)]
pub struct UpstreamCommand {
    program: OsString,
    args: Vec<OsString>,
    current_dir: Option<PathBuf>,
    environment: UpstreamEnvironment,
    max_message_bytes: usize,
    sandbox: Option<SandboxLauncher>,
}

impl UpstreamCommand {
    /// `program` with `args`, found on the `PATH` as a shell would, in the gateway's working directory, with
    /// the default [`UpstreamEnvironment`] (the allow-list only, never the gateway's own variables).
    pub fn new(program: impl Into<OsString>, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        UpstreamCommand {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            current_dir: None,
            environment: UpstreamEnvironment::new(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            sandbox: None,
        }
    }

    /// Starts the server in a sandbox (Linux): `launcher` sets it up and `exec`s the server
    /// ([`super::Sandbox`] says what the server may do, [`super::exec_sandboxed`] how it is set up).
    #[must_use]
    pub fn sandbox(mut self, launcher: SandboxLauncher) -> Self {
        self.sandbox = Some(launcher);
        self
    }

    /// What the sandbox's launcher will do, if the server is sandboxed: the program found on the server's
    /// `PATH`, the paths it may read and write, its limits.
    pub fn sandbox_plan(&self) -> Option<Result<SandboxPlan, SandboxError>> {
        let launcher = self.sandbox.as_ref()?;
        let environment = self.environment.resolve(std::env::vars_os()).unwrap_or_default();
        let var = |name: &str| environment.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_os_str());
        Some(launcher.sandbox.plan(&self.program, self.current_dir.as_deref(), var("PATH"), var("HOME")))
    }

    /// The largest message read from the server, a result included ([`DEFAULT_MAX_MESSAGE_BYTES`]): a larger
    /// result fails its call at once with a JSON-RPC error (its effect ambiguous), never buffered.
    #[must_use]
    pub fn max_message_bytes(mut self, limit: usize) -> Self {
        self.max_message_bytes = limit;
        self
    }

    /// Starts the server with `environment` (what passes beyond the allow-list, what never does).
    #[must_use]
    pub fn environment(mut self, environment: UpstreamEnvironment) -> Self {
        self.environment = environment;
        self
    }

    /// Runs the server in `dir`.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// The command line, for messages.
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|part| part.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// An upstream that could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The program could not be started.
    #[error("cannot start the upstream server `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The MCP handshake with the upstream failed.
    #[error("the upstream server `{command}` did not complete the MCP handshake: {reason}")]
    Handshake {
        /// The command line.
        command: String,
        /// What rmcp said.
        reason: String,
    },
    /// The upstream's URL is not an `http://` or `https://` URL.
    #[error("the upstream URL `{url}` is not an `http://` or `https://` URL")]
    Url {
        /// The URL as given.
        url: String,
    },
    /// A variable the upstream was to be given is the gateway's own.
    #[error("cannot start the upstream server `{command}`: {source}")]
    Environment {
        /// The command line.
        command: String,
        /// Which variable.
        #[source]
        source: EnvironmentError,
    },
    /// The sandbox could not be planned.
    #[error("cannot start the upstream server `{command}`: {source}")]
    Sandbox {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: SandboxError,
    },
    /// The upstream's tools could not be listed.
    #[error("the upstream server did not list its tools: {0}")]
    ListTools(#[source] ServiceError),
    /// The upstream did not answer `tools/list` in time.
    #[error("the upstream server did not list its tools within {0:?}")]
    ListToolsTimeout(Duration),
    /// The upstream's resources, resource templates or prompts could not be listed.
    #[error("the upstream server did not list its {what}: {source}")]
    List {
        /// `resources`, `resource templates` or `prompts`.
        what: &'static str,
        /// What rmcp said.
        #[source]
        source: ServiceError,
    },
    /// The upstream did not answer a listing of its resources, resource templates or prompts in time.
    #[error("the upstream server did not list its {what} within {timeout:?}")]
    ListTimeout {
        /// `resources`, `resource templates` or `prompts`.
        what: &'static str,
        /// How long it was given.
        timeout: Duration,
    },
}

/// What an upstream lists besides its tools ([`Upstream::list_surfaces`]): each list empty when the upstream
/// does not declare the capability or answers that it has no such method.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ListedSurfaces {
    /// `resources/list`, every page.
    pub resources: Vec<rmcp::model::Resource>,
    /// `resources/templates/list`, every page.
    pub templates: Vec<rmcp::model::ResourceTemplate>,
    /// `prompts/list`, every page.
    pub prompts: Vec<rmcp::model::Prompt>,
    /// The listings that failed otherwise (an error, no answer in time): what they would have listed is
    /// unknown, the others are kept.
    pub failed: Vec<UpstreamError>,
}

/// A running upstream MCP server, connected as a client.
pub struct Upstream {
    client: RunningService<RoleClient, UpstreamClient>,
    /// The server's process, when the gateway started it.
    child: Option<Child>,
    command: String,
    tools_changed: watch::Receiver<u64>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("command", &self.command)
            .field("pid", &self.child.as_ref().and_then(Child::id))
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Starts `command` as a child process and completes the MCP handshake with it over its stdio.
    pub async fn spawn(command: &UpstreamCommand) -> Result<Upstream, UpstreamError> {
        let display = command.display();
        let environment = command
            .environment
            .resolve(std::env::vars_os())
            .map_err(|source| UpstreamError::Environment { command: display.clone(), source })?;
        let mut process = match (&command.sandbox, command.sandbox_plan()) {
            // The launcher puts itself in the sandbox, then becomes the server.
            (Some(launcher), Some(plan)) => {
                let plan = plan.map_err(|source| UpstreamError::Sandbox { command: display.clone(), source })?;
                let mut process = Command::new(&launcher.program);
                process.args(&launcher.args).arg(plan.to_arg()).arg("--").arg(&command.program);
                process
            }
            _ => Command::new(&command.program),
        };
        // The child sees the allow-list and what was asked for, never the gateway's secrets.
        process.env_clear().envs(environment);
        process.args(&command.args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(dir) = &command.current_dir {
            process.current_dir(dir);
        }
        // A gateway that dies without shutting down must not leave the server running.
        process.kill_on_drop(true);
        let mut child = process.spawn().map_err(|source| UpstreamError::Spawn { command: display.clone(), source })?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(UpstreamError::Spawn {
                command: display,
                source: std::io::Error::other("the child's stdio was not piped"),
            });
        };
        let (changed, tools_changed) = watch::channel(0);
        let handler = UpstreamClient { changed };
        let transport =
            LineTransport::new(stdout, stdin, "upstream server").max_message_bytes(command.max_message_bytes);
        let client = match handler.serve(transport).await {
            Ok(client) => client,
            Err(error) => {
                stop_child(&mut child, DEFAULT_SHUTDOWN_GRACE).await;
                return Err(UpstreamError::Handshake { command: display, reason: error.to_string() });
            }
        };
        Ok(Upstream { client, child: Some(child), command: display, tools_changed })
    }

    /// Connects to the MCP server at `url` over Streamable HTTP and completes the handshake, sending
    /// `bearer` (a token, without the `Bearer ` prefix) with every request if given.
    pub async fn connect(url: &str, bearer: Option<String>) -> Result<Upstream, UpstreamError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(UpstreamError::Url { url: url.to_owned() });
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        if let Some(token) = bearer {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let (changed, tools_changed) = watch::channel(0);
        let client = UpstreamClient { changed }
            .serve(transport)
            .await
            .map_err(|error| UpstreamError::Handshake { command: url.to_owned(), reason: error.to_string() })?;
        Ok(Upstream { client, child: None, command: url.to_owned(), tools_changed })
    }

    /// The command line the upstream was started with, or its URL.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Every tool the upstream lists now (all pages), within [`LIST_TOOLS_TIMEOUT`].
    pub async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, UpstreamError> {
        self.listing().await
    }

    /// [`list_tools`](Self::list_tools) as a future that holds no borrow of the upstream, so a re-list can
    /// run beside everything else the gateway does rather than in its stead.
    pub(crate) fn listing(
        &self,
    ) -> impl Future<Output = Result<Vec<rmcp::model::Tool>, UpstreamError>> + Send + 'static {
        let peer = self.client.peer().clone();
        async move {
            match tokio::time::timeout(LIST_TOOLS_TIMEOUT, peer.list_all_tools()).await {
                Ok(listed) => listed.map_err(UpstreamError::ListTools),
                Err(_) => Err(UpstreamError::ListToolsTimeout(LIST_TOOLS_TIMEOUT)),
            }
        }
    }

    /// Every resource, resource template and prompt the upstream lists now (all pages; none of a kind it does
    /// not declare, or whose listing it answers with "method not found"), each listing within
    /// [`LIST_TOOLS_TIMEOUT`]: what `airlock mcp scan` reviews besides tools. A listing that fails otherwise
    /// is reported in [`ListedSurfaces::failed`], the others kept.
    pub async fn list_surfaces(&self) -> ListedSurfaces {
        async fn within<T: Default>(
            failed: &mut Vec<UpstreamError>,
            what: &'static str,
            listing: impl Future<Output = Result<T, ServiceError>>,
        ) -> T {
            match tokio::time::timeout(LIST_TOOLS_TIMEOUT, listing).await {
                Ok(Ok(listed)) => listed,
                Ok(Err(ServiceError::McpError(error))) if error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND => {
                    T::default()
                }
                Ok(Err(source)) => {
                    failed.push(UpstreamError::List { what, source });
                    T::default()
                }
                Err(_) => {
                    failed.push(UpstreamError::ListTimeout { what, timeout: LIST_TOOLS_TIMEOUT });
                    T::default()
                }
            }
        }
        let peer = self.client.peer();
        let capabilities = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
        let mut listed = ListedSurfaces::default();
        if capabilities.resources.is_some() {
            listed.resources = within(&mut listed.failed, "resources", peer.list_all_resources()).await;
            listed.templates =
                within(&mut listed.failed, "resource templates", peer.list_all_resource_templates()).await;
        }
        if capabilities.prompts.is_some() {
            listed.prompts = within(&mut listed.failed, "prompts", peer.list_all_prompts()).await;
        }
        listed
    }

    /// The client side of the session, for what passes through unguarded (resources, prompts).
    pub(crate) fn peer(&self) -> Peer<RoleClient> {
        self.client.peer().clone()
    }

    /// A handle that forwards calls to this upstream, for the tools that stand for its tools.
    pub fn caller(&self) -> UpstreamCaller {
        UpstreamCaller { peer: self.client.peer().clone() }
    }

    /// Changes each time the upstream sends `notifications/tools/list_changed`.
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.tools_changed.clone()
    }

    /// Whether the connection to the upstream is gone (it exited or closed its stdout).
    pub fn is_closed(&self) -> bool {
        self.client.peer().is_transport_closed()
    }

    /// Ends the session and the child, if the gateway started one: its stdin closes, then after `grace`
    /// SIGTERM, then after `grace` again SIGKILL. Returns once the child has exited.
    pub async fn shutdown(self, grace: Duration) {
        let Upstream { client, child, .. } = self;
        // Cancelling the session drops the transport, which closes the child's stdin (or ends the HTTP session).
        if let Err(error) = client.cancel().await {
            tracing::debug!(target: "agent_airlock", %error, "the upstream session ended abnormally");
        }
        if let Some(mut child) = child {
            stop_child(&mut child, grace).await;
        }
    }
}

/// Waits for `child` to exit after its stdin closed; then SIGTERM, then SIGKILL.
async fn stop_child(child: &mut Child, grace: Duration) {
    if let Ok(Ok(_)) = tokio::time::timeout(grace, child.wait()).await {
        return;
    }
    #[cfg(unix)]
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()).and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        if let Ok(Ok(_)) = tokio::time::timeout(grace, child.wait()).await {
            return;
        }
    }
    tracing::warn!(target: "agent_airlock", "the upstream server did not exit; killing it");
    let _ = child.kill().await;
}

/// Forwards `tools/call` requests to the upstream. Cheap to clone; one per upstream tool.
#[derive(Clone)]
pub struct UpstreamCaller {
    peer: Peer<RoleClient>,
}

impl std::fmt::Debug for UpstreamCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamCaller").finish_non_exhaustive()
    }
}

impl UpstreamCaller {
    /// Whether the connection to the upstream is gone.
    pub fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    /// Calls the upstream's tool `name` with `arguments` and waits for its result, settled for the effect
    /// records:
    ///
    /// - a result is the tool's output: its text (text blocks joined by new lines), or the JSON of its
    ///   content blocks when any is not text; its `structuredContent`, if any, comes with it (the dispatcher
    ///   masks both);
    /// - a request that could not be sent (the upstream is gone) is [`ToolError::not_executed`]: nothing
    ///   reached the server, a retry is safe;
    /// - everything after the request was sent is a [`ToolError::new`], whose effect is ambiguous: an
    ///   `isError` result (the tool ran and failed, how far is unknown), a JSON-RPC error, a connection lost
    ///   while waiting;
    /// - dropping the returned future (the downstream client cancelled) sends `notifications/cancelled`.
    pub async fn call(&self, name: &str, arguments: JsonObject) -> Result<JsonOutput, ToolError> {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match self.peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
            Ok(handle) => handle,
            Err(error) => {
                return Err(ToolError::not_executed(format!("the upstream server is unreachable ({error})")));
            }
        };
        let mut cancel = CancelOnDrop { peer: Some(self.peer.clone()), id: handle.id.clone() };
        let response = handle.await_response().await;
        cancel.peer = None;
        settle(name, response)
    }
}

/// The outcome of a `tools/call` the upstream received (or may have received).
fn settle(name: &str, response: Result<ServerResult, ServiceError>) -> Result<JsonOutput, ToolError> {
    let result = match response {
        Ok(ServerResult::CallToolResult(result)) => result,
        Ok(_) => {
            return Err(ToolError::new(format!(
                "the upstream server answered the call to `{name}` with something other than a tool result; \
                 whether it ran is unknown"
            )));
        }
        Err(ServiceError::McpError(error)) => {
            return Err(ToolError::new(format!(
                "the upstream server refused the call to `{name}` with JSON-RPC error {}: {}",
                error.code.0, error.message
            )));
        }
        Err(error) => {
            return Err(ToolError::new(format!(
                "the connection to the upstream server failed while calling `{name}` ({error}); whether it ran \
                 is unknown"
            )));
        }
    };
    let output = content_value(&result.content, result.structured_content.as_ref());
    if result.is_error == Some(true) {
        let text = match output {
            Value::String(text) => text,
            other => other.to_string(),
        };
        return Err(ToolError::new(text));
    }
    Ok(match result.structured_content {
        Some(structured) => JsonOutput::structured(output, structured),
        None => JsonOutput::from(output),
    })
}

/// What the model reads of a tool result: its text, or the content blocks as JSON when any is not text.
fn content_value(content: &[ContentBlock], structured: Option<&Value>) -> Value {
    if content.is_empty() {
        return structured.cloned().unwrap_or_else(|| Value::String(String::new()));
    }
    let texts: Option<Vec<&str>> = content.iter().map(|block| block.as_text().map(|text| text.text.as_str())).collect();
    match texts {
        Some(texts) => Value::String(texts.join("\n")),
        None => serde_json::to_value(content).unwrap_or(Value::Null),
    }
}

/// Sends `notifications/cancelled` for a request whose caller stopped waiting.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: rmcp::model::RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the downstream client cancelled the call".to_owned()),
        );
        runtime.spawn(async move {
            let _ = peer.notify_cancelled(params).await;
        });
    }
}

/// The gateway's client side: it tells the gateway when the upstream's tools change.
struct UpstreamClient {
    changed: watch::Sender<u64>,
}

impl ClientHandler for UpstreamClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    fn get_info(&self) -> InitializeRequestParams {
        InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("agent-airlock-gateway", env!("CARGO_PKG_VERSION")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, ErrorCode, ErrorData};
    use serde_json::json;

    #[test]
    fn a_result_is_its_text_and_an_error_result_is_ambiguous() {
        let ok = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(settle("t", Ok(ServerResult::CallToolResult(ok))), Ok(json!("a\nb").into()));
        let mut structured = CallToolResult::success(vec![ContentBlock::text("{\"n\":1}")]);
        structured.structured_content = Some(json!({"n": 1}));
        assert_eq!(
            settle("t", Ok(ServerResult::CallToolResult(structured))),
            Ok(JsonOutput::structured(json!("{\"n\":1}"), json!({"n": 1})))
        );
        let failed = CallToolResult::error(vec![ContentBlock::text("disk full")]);
        let error = settle("t", Ok(ServerResult::CallToolResult(failed))).unwrap_err();
        assert_eq!(error.message(), "disk full");
        assert!(!error.is_not_executed(), "an isError result may have done part of its work");
    }

    #[test]
    fn errors_after_sending_are_ambiguous() {
        let rpc = ErrorData::new(ErrorCode::INTERNAL_ERROR, "boom", None);
        let error = settle("t", Err(ServiceError::McpError(rpc))).unwrap_err();
        assert!(!error.is_not_executed());
        assert!(error.message().contains("JSON-RPC error -32603: boom"), "{}", error.message());
        let error = settle("t", Err(ServiceError::TransportClosed)).unwrap_err();
        assert!(!error.is_not_executed());
    }

    #[test]
    fn non_text_content_is_passed_as_json() {
        let value = content_value(&[ContentBlock::text("a"), ContentBlock::image("AAAA", "image/png")], None);
        assert_eq!(value[1]["type"], "image");
        assert_eq!(content_value(&[], Some(&json!({"n": 1}))), json!({"n": 1}));
    }
}
