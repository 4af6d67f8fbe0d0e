//! The gateway's Streamable HTTP downstream: rmcp's session service behind a plain HTTP/1 server that
//! refuses, with `401`, every request without the gateway's bearer token, before any MCP is read.
//!
//! Each MCP session (an `initialize` without a session id) gets its own [`GatewayServer`] with a fresh
//! connection id, so calls of different clients never share approvals or a thread. Bound to a loopback
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

    /// Whether the request's `Authorization` header carries this token.
    fn admits<B>(&self, request: &Request<B>) -> bool {
        let Some(value) = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let Some(token) = value.strip_prefix("Bearer ").map(str::trim) else { return false };
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        digest == self.digest
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
        let base = self.server(approvals);
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
    let handler = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let service = service.clone();
        let admitted = token.admits(&request);
        async move {
            if !admitted {
                tracing::warn!(target: "agent_airlock", %from, "a request without the gateway's bearer token was refused");
                let body = Full::new(Bytes::from_static(b"the gateway needs `Authorization: Bearer <token>`\n"))
                    .map_err(|never: Infallible| match never {})
                    .boxed();
                let mut refused = Response::new(body);
                *refused.status_mut() = StatusCode::UNAUTHORIZED;
                refused.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
                return Ok::<_, Infallible>(refused);
            }
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
