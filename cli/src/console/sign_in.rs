//! Signing in and out: the double-submit sign-in form, the client a sign-in comes from (behind a proxy,
//! the header it writes), throttling before any password is checked, and the session cookie.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::header::{RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::decide::checked_post;
use super::session::{self, LOGIN_COOKIE, SESSION_COOKIE};
use super::throttle::TooSoon;
use super::{Console, Shared, blocking, pages, refusal, see_other};

pub(super) async fn login_page(State(console): Shared) -> Response {
    login_form(&console, StatusCode::OK, None)
}

/// The sign-in form with a fresh double-submit value in its cookie.
pub(super) fn login_form(console: &Console, status: StatusCode, error: Option<&str>) -> Response {
    let nonce = match session::random_hex() {
        Ok(nonce) => nonce,
        Err(error) => return refusal(StatusCode::INTERNAL_SERVER_ERROR, None, &error),
    };
    let cookie = console.sessions.cookie(LOGIN_COOKIE, &nonce, "/login", Duration::from_secs(600));
    (status, [(SET_COOKIE, cookie)], Html(pages::login(console.sign_in.asks_for_name(), &nonce, error))).into_response()
}

/// The sign-in form's fields.
#[derive(Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
    #[serde(default)]
    nonce: String,
}

/// The client a sign-in comes from: the peer, or behind a proxy the last address of the header it writes
/// (the peer when the header is missing or holds no address).
pub(super) fn client_address(console: &Console, headers: &HeaderMap, peer: SocketAddr) -> std::net::IpAddr {
    let Some(name) = &console.client_address_header else { return peer.ip() };
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .next_back()
        .and_then(|last| {
            let last = last.trim();
            last.parse::<std::net::IpAddr>().ok().or_else(|| last.parse::<SocketAddr>().ok().map(|a| a.ip()))
        })
        .unwrap_or_else(|| peer.ip())
}

/// A sign-in refused before any password was checked, with when to try again.
pub(super) fn try_later(console: &Console, status: StatusCode, retry_after: Duration, message: &str) -> Response {
    let secs = retry_after.as_secs().saturating_add(u64::from(retry_after.subsec_nanos() > 0)).max(1);
    let mut response = login_form(console, status, Some(&format!("{message}: try again in {secs} s")));
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    response
}

pub(super) async fn login(
    State(console): Shared,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let cookie = session::cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if form.nonce.is_empty() || !session::same(&cookie, &form.nonce) {
        return login_form(
            &console,
            StatusCode::FORBIDDEN,
            Some("the sign-in form expired or came from elsewhere: try again"),
        );
    }
    // A bounded number of checks at once, each refused at once beyond that: a flood of sign-ins costs
    // neither unbounded memory nor a queue.
    let Some(slot) = console.check_slots.try_take() else {
        return try_later(
            &console,
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(1),
            "too many sign-ins at once",
        );
    };
    let client = client_address(&console, &headers, peer);
    if let Err(TooSoon { retry_after }) = console.throttle.attempt(&form.name, client) {
        return try_later(&console, StatusCode::TOO_MANY_REQUESTS, retry_after, "too many failed sign-ins");
    }
    let shared = Arc::clone(&console);
    let name = form.name.clone();
    // Checking an argon2 hash takes a while: not on the server's threads.
    let operator = blocking(move || {
        let checked = shared.sign_in.check(&form.name, &form.secret);
        drop(slot);
        Ok(checked)
    })
    .await
    .ok()
    .flatten();
    let Some(operator) = operator else {
        return login_form(&console, StatusCode::UNAUTHORIZED, Some("wrong name, password or token"));
    };
    console.throttle.succeeded(&name, client);
    match console.sessions.start(operator, console.sign_in.is_personal()) {
        Ok(id) => {
            let mut response = see_other("/");
            let cleared = console.sessions.cookie(LOGIN_COOKIE, "", "/login", Duration::ZERO);
            let headers = response.headers_mut();
            for value in [console.sessions.cookie_for(&id), cleared] {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.append(SET_COOKIE, value);
                }
            }
            response
        }
        Err(error) => refusal(StatusCode::INTERNAL_SERVER_ERROR, None, &error),
    }
}

/// The sign-out form.
#[derive(Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

pub(super) async fn logout(
    State(console): Shared,
    headers: HeaderMap,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if let Err(refused) = checked_post(&console, &headers, &form.csrf) {
        return refused.into_response();
    }
    console.sessions.end(&headers);
    let mut response = see_other("/login");
    if let Ok(cleared) = HeaderValue::from_str(&console.sessions.cookie(SESSION_COOKIE, "", "/", Duration::ZERO)) {
        response.headers_mut().append(SET_COOKIE, cleared);
    }
    response
}
