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

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;

use super::oauth::OAuthResourceServer;
use super::{DEFAULT_SHUTDOWN_GRACE, GatewayError, GatewayServer, McpGateway, relisting, watch_closed};
use crate::identity::Caller;
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

    /// Whether `token` is this token (by digest).
    pub fn matches(&self, token: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        digest == self.digest
    }

    /// Who the request comes from, if its `Authorization` header carries this token: everyone holding it
    /// is one caller.
    fn admits<B>(&self, request: &Request<B>) -> Option<Caller> {
        let token = bearer_of(request)?;
        self.matches(token).then(|| Caller::new(Caller::BEARER_TOKEN))
    }
}

/// The caller attached to the HTTP request behind an MCP request, if any: attached to the request (its
/// extensions) once its credential is checked, and read back for each request
/// ([`GuardedMcpServer::with_caller_of`](crate::integrations::mcp::GuardedMcpServer::with_caller_of)).
fn caller_of(context: &rmcp::service::RequestContext<rmcp::service::RoleServer>) -> Option<Caller> {
    let parts = context.extensions.get::<hyper::http::request::Parts>()?;
    parts.extensions.get::<Caller>().cloned()
}

/// How `--listen` admits requests: one static bearer token (everyone holding it is one caller, with no
/// identity), or OAuth 2.1 access tokens (JWTs) of one issuer, each naming its subject. Exclusive: a
/// gateway in OAuth mode admits no static token.
#[derive(Debug, Clone)]
pub enum HttpAuth {
    /// The static bearer token.
    Token(BearerToken),
    /// The gateway as an OAuth 2.1 resource server.
    OAuth(OAuthResourceServer),
}

impl From<BearerToken> for HttpAuth {
    fn from(token: BearerToken) -> Self {
        HttpAuth::Token(token)
    }
}

impl From<OAuthResourceServer> for HttpAuth {
    fn from(server: OAuthResourceServer) -> Self {
        HttpAuth::OAuth(server)
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive).
fn bearer_of<B>(request: &Request<B>) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

impl McpGateway {
    /// Serves MCP over Streamable HTTP on `listener` (on any path; clients conventionally use `/mcp`) to
    /// every client `auth` admits, until `shutdown` completes or the upstream goes away; re-lists the
    /// upstream's tools whenever it says they changed. Then ends every session and shuts the upstream down.
    ///
    /// In OAuth mode the protected resource metadata (RFC 9728) is served, to anyone, at
    /// `/.well-known/oauth-protected-resource` and at that path followed by the resource's path
    /// ([`OAuthResourceServer::metadata_path`]); every other request needs a valid access token, else it is
    /// answered `401` with a `WWW-Authenticate: Bearer resource_metadata="…"` challenge (and
    /// `error="invalid_token"` when a token was sent and refused).
    pub async fn serve_http(
        mut self,
        approvals: McpApprovals,
        listener: TcpListener,
        auth: impl Into<HttpAuth>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), GatewayError> {
        let auth = auth.into();
        let loopback = listener.local_addr().map(|addr| addr.ip().is_loopback()).unwrap_or(false);
        let base = self.server(approvals).with_caller_of(caller_of);
        let peer = self.upstream.peer();
        let surfaces = Arc::clone(&self.surfaces);
        let mut config = StreamableHttpServerConfig::default();
        if !loopback {
            // Clients reach a non-loopback address by names the gateway cannot know: the token is the gate.
            config = config.disable_allowed_hosts();
        }
        let sessions = config.cancellation_token.clone();
        let manager = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(
            move || Ok(GatewayServer::new(base.for_new_connection(), peer.clone(), Arc::clone(&surfaces))),
            Arc::clone(&manager),
            config,
        );
        let owners = SessionOwners::default();
        // rmcp ends a session a client left idle; its owner is forgotten at the next sweep, so a caller that
        // opens sessions and never ends them grows nothing here beyond rmcp's own live sessions.
        let mut sweep = tokio::time::interval(OWNERS_SWEEP_INTERVAL);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = std::pin::pin!(shutdown);
        let mut changed = self.upstream.tools_changed();
        let mut upstream_gone = std::pin::pin!(watch_closed(self.upstream.caller()));
        let mut relist = std::pin::pin!(None);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, from)) => serve_connection(stream, from, service.clone(), auth.clone(), Arc::clone(&owners)),
                    Err(error) => tracing::warn!(target: "agent_airlock", %error, "a connection was not accepted"),
                },
                _ = sweep.tick() => forget_ended_sessions(&owners, &manager).await,
                () = &mut shutdown => {
                    tracing::info!(target: "agent_airlock", "shutting down on request");
                    break;
                }
                () = &mut upstream_gone => {
                    tracing::error!(target: "agent_airlock", "the upstream server closed the connection; stopping");
                    break;
                }
                // While the upstream lists its tools again, connections are still accepted and a shutdown
                // still stops at once (see `relisting`).
                Ok(()) = changed.changed(), if relist.is_none() => relist.set(Some(self.upstream.listing())),
                listed = relisting(relist.as_mut()) => {
                    relist.set(None);
                    self.serve_relisted(listed).await;
                }
            }
        }
        sessions.cancel();
        self.upstream.shutdown(DEFAULT_SHUTDOWN_GRACE).await;
        Ok(())
    }
}

type Service = StreamableHttpService<GatewayServer, LocalSessionManager>;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Who opened each MCP session (its id → the caller's name).
type SessionOwners = Arc<Mutex<HashMap<String, Arc<str>>>>;

/// How often the owners of sessions rmcp has ended are forgotten.
const OWNERS_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Forgets the owners of sessions `manager` no longer has (ended by their client, or idle for too long).
async fn forget_ended_sessions(owners: &SessionOwners, manager: &LocalSessionManager) {
    let live = manager.sessions.read().await;
    owners.lock().unwrap_or_else(PoisonError::into_inner).retain(|id, _| live.contains_key(id.as_str()));
}

/// Whether the session `id` was opened by `caller`. A session whose owner is not known (never opened here,
/// or forgotten once rmcp ended it) is nobody's: refused like another caller's, so a lost owner can never
/// let a credential into a session it did not open. To the client both look like a session that ended.
fn opened_by(owners: &SessionOwners, id: &str, caller: &str) -> bool {
    owners.lock().unwrap_or_else(PoisonError::into_inner).get(id).is_some_and(|owner| **owner == *caller)
}

const SESSION_HEADER: &str = "mcp-session-id";

/// Where the protected resource metadata is served whatever the resource's path.
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

fn text_response(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

/// A refusal answered before the request's body was read, marked `Connection: close`. hyper keeps the connection
/// only if it can drain the unread body at once; when the body's bytes had not all arrived, it closed the
/// connection without saying so, and a client that sent its next request on it (an HTTP client's pool does) met
/// a connection closed under it ("server disconnected without sending a response"). Said in the answer, the
/// client opens a new one. The body of a refused request is not read: it may come from anyone.
fn closing(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}

/// The RFC 9728 metadata, to `GET` (and `HEAD`); CORS-readable, since browser-based clients fetch it too.
fn metadata_response(server: &OAuthResourceServer, method: &hyper::Method) -> Response<Body> {
    if method != hyper::Method::GET && method != hyper::Method::HEAD {
        let mut refused = text_response(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        refused.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        // A `POST` here may carry a body, which is not read.
        return closing(refused);
    }
    let body = serde_json::to_vec(&server.metadata()).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, header::HeaderValue::from_static("*"));
    response
}

/// `401` with the challenge RFC 9728 §5.1 and RFC 6750 §3 describe: where the metadata is, and for a
/// refused token `error="invalid_token"` with the refusal's fixed phrase.
fn challenge(server: &OAuthResourceServer, refusal: Option<super::oauth::TokenRefusal>) -> Response<Body> {
    let metadata = server.metadata_url().replace(['"', '\\'], "");
    let value = match refusal {
        None => format!("Bearer resource_metadata=\"{metadata}\""),
        Some(refusal) => {
            format!("Bearer error=\"invalid_token\", error_description=\"{refusal}\", resource_metadata=\"{metadata}\"")
        }
    };
    let mut refused = text_response(StatusCode::UNAUTHORIZED, "the gateway needs a valid OAuth access token\n");
    if let Ok(value) = header::HeaderValue::from_str(&value) {
        refused.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    refused
}

/// Serves one TCP connection's HTTP/1 requests on its own task: each is refused unless `auth` admits it
/// (the OAuth metadata excepted).
fn serve_connection(
    stream: tokio::net::TcpStream,
    from: SocketAddr,
    service: Service,
    auth: HttpAuth,
    owners: SessionOwners,
) {
    let handler = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        let service = service.clone();
        let auth = auth.clone();
        let owners = Arc::clone(&owners);
        async move {
            let caller = match &auth {
                HttpAuth::Token(token) => match token.admits(&request) {
                    Some(caller) => caller,
                    None => {
                        tracing::warn!(target: "agent_airlock", %from, "a request without the gateway's bearer token was refused");
                        let mut refused = text_response(
                            StatusCode::UNAUTHORIZED,
                            "the gateway needs `Authorization: Bearer <token>`\n",
                        );
                        refused
                            .headers_mut()
                            .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
                        return Ok::<_, Infallible>(closing(refused));
                    }
                },
                HttpAuth::OAuth(server) => {
                    let path = request.uri().path();
                    if path == WELL_KNOWN || path == server.metadata_path() {
                        return Ok(metadata_response(server, request.method()));
                    }
                    let Some(token) = bearer_of(&request) else {
                        tracing::warn!(target: "agent_airlock", %from, "a request without an access token was refused");
                        return Ok(closing(challenge(server, None)));
                    };
                    match server.admit(token).await {
                        Ok(caller) => caller,
                        Err(refusal) => {
                            // The reason, never the token.
                            tracing::warn!(target: "agent_airlock", %from, reason = %refusal, "an access token was refused");
                            return Ok(closing(challenge(server, Some(refusal))));
                        }
                    }
                }
            };
            // A session belongs to the caller who opened it: another caller's credential does not reach into
            // it (the session id is not a credential).
            let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
            if let Some(id) = &session
                && !opened_by(&owners, id, caller.name())
            {
                tracing::warn!(target: "agent_airlock", %from, "a request for another caller's session was refused");
                return Ok(closing(text_response(StatusCode::NOT_FOUND, "no such session\n")));
            }
            let ending = request.method() == hyper::Method::DELETE;
            let name: Arc<str> = caller.name().into();
            // rmcp passes the request's parts, extensions included, to the handler of each MCP request.
            request.extensions_mut().insert(caller);
            let response = service.handle(request).await;
            let mut owners = owners.lock().unwrap_or_else(PoisonError::into_inner);
            match (&session, response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())) {
                (None, Some(opened)) => {
                    owners.insert(opened.to_owned(), name);
                }
                // Ended by this request, or unknown to rmcp (ended before): the owner goes with it.
                (Some(id), _)
                    if (ending && response.status().is_success()) || response.status() == StatusCode::NOT_FOUND =>
                {
                    owners.remove(id);
                }
                _ => {}
            }
            drop(owners);
            Ok(response.map(|body| body.boxed()))
        }
    });
    // An answer is written in parts (the head, then each event of the stream): with Nagle's algorithm a part
    // waits for the ACK of the one before, which the client delays (40 ms on Linux) while it waits for the rest.
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(target: "agent_airlock", %error, %from, "TCP_NODELAY could not be set");
    }
    tokio::spawn(async move {
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), handler);
        if let Err(error) = connection.await {
            tracing::debug!(target: "agent_airlock", %error, %from, "an HTTP connection ended abnormally");
        }
    });
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_server::session::SessionManager as _;

    use super::*;

    #[test]
    fn a_session_admits_only_the_caller_who_opened_it_and_an_unknown_one_nobody() {
        let owners = SessionOwners::default();
        owners.lock().unwrap().insert("s1".to_owned(), Arc::from("alice"));
        assert!(opened_by(&owners, "s1", "alice"));
        assert!(!opened_by(&owners, "s1", "bob"));
        assert!(!opened_by(&owners, "s1", "alic"));
        // An owner that was never recorded, or swept: fail closed.
        assert!(!opened_by(&owners, "s2", "alice"));
    }

    #[tokio::test]
    async fn the_owners_of_ended_sessions_are_forgotten_and_no_others() {
        let manager = LocalSessionManager::default();
        let (live, _transport) = manager.create_session().await.expect("a session");
        let (ended, _transport) = manager.create_session().await.expect("a session");
        let owners = SessionOwners::default();
        {
            let mut map = owners.lock().unwrap();
            for id in [live.to_string(), ended.to_string(), "never-opened".to_owned()] {
                map.insert(id, Arc::from("alice"));
            }
        }
        manager.close_session(&ended).await.expect("closed");
        forget_ended_sessions(&owners, &manager).await;
        let left: Vec<String> = owners.lock().unwrap().keys().cloned().collect();
        assert_eq!(left, vec![live.to_string()]);
    }
}
