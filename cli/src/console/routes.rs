//! The console's HTTP surface: its routes, the host guard against DNS rebinding, the security headers on
//! every answer, and the two assets.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::decide::{approve, deny, resolve_effect};
use super::sign_in::{login, login_page, logout};
use super::{Console, Shared, audit_page, decisions_page, effects_page, pending_page, pending_rows, request_page};

pub(super) fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(pending_page))
        .route("/pending/rows", get(pending_rows))
        .route("/requests/{id}", get(request_page))
        .route("/requests/{id}/approve", post(approve))
        .route("/requests/{id}/deny", post(deny))
        .route("/decisions", get(decisions_page))
        .route("/effects", get(effects_page))
        .route("/effects/resolve", post(resolve_effect))
        .route("/audit", get(audit_page))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/assets/console.js", get(script))
        .route("/assets/console.css", get(stylesheet))
        .layer(middleware::from_fn_with_state(Arc::clone(&console), guard_host))
        .layer(middleware::map_response(security_headers))
        .with_state(console)
}

/// Refuses requests addressed to a name that is not loopback (DNS rebinding), unless remote use is allowed.
pub(super) async fn guard_host(State(console): Shared, request: Request, next: Next) -> Response {
    if !console.allow_remote {
        let host = request.headers().get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !is_loopback_host(host) {
            return (StatusCode::MISDIRECTED_REQUEST, "the console answers only requests to a loopback address")
                .into_response();
        }
    }
    next.run(request).await
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
pub(super) fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Headers on every answer: nothing loads from elsewhere, nothing frames the console, nothing is cached.
pub(super) async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub(super) async fn script() -> Response {
    ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("assets/console.js")).into_response()
}

pub(super) async fn stylesheet() -> Response {
    ([(CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("assets/console.css")).into_response()
}
