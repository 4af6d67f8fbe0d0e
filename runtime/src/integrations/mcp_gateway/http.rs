//! The gateway's Streamable HTTP downstream: rmcp's session service behind a plain HTTP/1 server that
//! refuses, with `401`, every request without the gateway's bearer token, before any MCP is read.
//!
//! Each MCP session (an `initialize` without a session id) gets its own [`GatewayServer`] with a fresh
//! connection id, so calls of different sessions never share approvals or a thread. Who is calling is not
//! the session but the credential the request carried ([`Caller`]): every call runs as that caller, so a
//! per-thread rate limit counts a caller's calls across all of their sessions, and opening a new session
//! buys no fresh budget. With the one static bearer token, everyone holding it is one caller. Bound to a loopback
//! address the service also checks the `Host` header (against DNS rebinding); bound elsewhere it does not,
//! and the token is the only gate.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;

use super::{DEFAULT_SHUTDOWN_GRACE, GatewayError, GatewayServer, McpGateway, watch_closed};
use crate::integrations::mcp::McpApprovals;

/// The token clients must send as `Authorization: Bearer <token>`. Compared by digest, so the time a
/// comparison takes says nothing about the token.
#[derive(Clone)]
pub struct BearerToken {
    digest: [u8; 32],
}

impl BearerToken {
    /// A token; empty or blank tokens are refused (`None`).
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| BearerToken { digest: Sha256::digest(token.as_bytes()).into() })
    }

    /// Who the request comes from, if its `Authorization` header carries this token: everyone holding it
    /// is one caller.
    fn admits<B>(&self, request: &Request<B>) -> Option<Caller> {
        let value = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())?;
        let token = value.strip_prefix("Bearer ").map(str::trim)?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        (digest == self.digest).then(|| Caller::new(Caller::BEARER_TOKEN))
    }
}

/// Who an admitted HTTP request comes from, as its credential says: attached to the request (its
/// extensions) once the credential is checked, and read back for each call
/// ([`GuardedMcpServer::with_caller_of`](crate::integrations::mcp::GuardedMcpServer::with_caller_of)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(Arc<str>);

impl Caller {
    /// The caller of every request with the gateway's static bearer token: one caller, whoever holds it.
    pub const BEARER_TOKEN: &'static str = "bearer-token";

    /// A caller by name (for an OAuth token, its issuer and subject).
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Caller(name.into())
    }

    /// The name calls run as ([`CallContext::with_caller`](crate::CallContext::with_caller)).
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The caller attached to the HTTP request behind an MCP request, if any.
    fn of(context: &rmcp::service::RequestContext<rmcp::service::RoleServer>) -> Option<String> {
        let parts = context.extensions.get::<hyper::http::request::Parts>()?;
        parts.extensions.get::<Caller>().map(|caller| caller.0.to_string())
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

impl McpGateway {
    /// Serves MCP over Streamable HTTP on `listener` (on any path; clients conventionally use `/mcp`) to
    /// every client that sends `token`, until `shutdown` completes or the upstream goes away; re-lists the
    /// upstream's tools whenever it says they changed. Then ends every session and shuts the upstream down.
    pub async fn serve_http(
        mut self,
        approvals: McpApprovals,
        listener: TcpListener,
        token: BearerToken,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), GatewayError> {
        let loopback = listener.local_addr().map(|addr| addr.ip().is_loopback()).unwrap_or(false);
        let base = self.server(approvals).with_caller_of(Caller::of);
        let peer = self.upstream.peer();
        let surfaces = Arc::clone(&self.surfaces);
        let mut config = StreamableHttpServerConfig::default();
        if !loopback {
            // Clients reach a non-loopback address by names the gateway cannot know: the token is the gate.
            config = config.disable_allowed_hosts();
        }
        let sessions = config.cancellation_token.clone();
        let service = StreamableHttpService::new(
            move || Ok(GatewayServer::new(base.for_new_connection(), peer.clone(), Arc::clone(&surfaces))),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let mut shutdown = std::pin::pin!(shutdown);
        let mut changed = self.upstream.tools_changed();
        let mut upstream_gone = std::pin::pin!(watch_closed(self.upstream.caller()));
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, from)) => serve_connection(stream, from, service.clone(), token.clone()),
                    Err(error) => tracing::warn!(target: "agent_airlock", %error, "a connection was not accepted"),
                },
                () = &mut shutdown => {
                    tracing::info!(target: "agent_airlock", "shutting down on request");
                    break;
                }
                () = &mut upstream_gone => {
                    tracing::error!(target: "agent_airlock", "the upstream server closed the connection; stopping");
                    break;
                }
                Ok(()) = changed.changed() => {
                    match self.refresh().await {
                        Ok(tools) => tracing::info!(target: "agent_airlock", offered = ?tools.offered, "the upstream's tools changed"),
                        Err(error) => tracing::error!(target: "agent_airlock", %error, "the upstream's new tools could not be served; the previous ones stay"),
                    }
                }
            }
        }
        sessions.cancel();
        self.upstream.shutdown(DEFAULT_SHUTDOWN_GRACE).await;
        Ok(())
    }
}

type Service = StreamableHttpService<GatewayServer, LocalSessionManager>;

/// Serves one TCP connection's HTTP/1 requests on its own task: each is refused unless it has the token.
fn serve_connection(stream: tokio::net::TcpStream, from: SocketAddr, service: Service, token: BearerToken) {
    let handler = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        let service = service.clone();
        let caller = token.admits(&request);
        async move {
            let Some(caller) = caller else {
                tracing::warn!(target: "agent_airlock", %from, "a request without the gateway's bearer token was refused");
                let body = Full::new(Bytes::from_static(b"the gateway needs `Authorization: Bearer <token>`\n"))
                    .map_err(|never: Infallible| match never {})
                    .boxed();
                let mut refused = Response::new(body);
                *refused.status_mut() = StatusCode::UNAUTHORIZED;
                refused.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
                return Ok::<_, Infallible>(refused);
            };
            // rmcp passes the request's parts, extensions included, to the handler of each MCP request.
            request.extensions_mut().insert(caller);
            Ok(service.handle(request).await)
        }
    });
    tokio::spawn(async move {
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), handler);
        if let Err(error) = connection.await {
            tracing::debug!(target: "agent_airlock", %error, %from, "an HTTP connection ended abnormally");
        }
    });
}
