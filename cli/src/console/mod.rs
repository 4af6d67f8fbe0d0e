//! `airlock console`: the operator's web page over the same database as the other commands.
//!
//! Pages: the pending requests (refreshed in place every two seconds), each request's sealed call in full
//! after its seal is checked (a tampered request is shown as such and cannot be approved), approve and deny
//! with a reason, recent decisions, ambiguous effects with resolve buttons, and the audit log's status.
//! Deciding goes through the same functions as `airlock approve` and `airlock deny`; the signed-in operator
//! is the approver recorded in the grant (and so in the audit record of the call the grant admits), and
//! the operator a resolved effect is recorded under. Sign-in is throttled per account and per client
//! (`throttle`), with a bounded number of password checks at once.
//!
//! Everything is served by the binary (HTML rendered here, one stylesheet, one small script); nothing is
//! loaded from elsewhere, and the Content-Security-Policy says so. The console listens on a loopback
//! address, and answers only requests addressed to a loopback name, unless `--allow-remote` is given (put
//! TLS in front of it then: the console speaks plain HTTP).

mod pages;
mod session;
mod throttle;
mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::approval::DecisionSigner;
use agent_airlock::approval::operators::OperatorKey;
use agent_airlock::audit::{Anchor, AuditConfig, AuditLog, verify};
use agent_airlock::effect::{EffectFilter, EffectStore, Resolution};
use agent_airlock::keys::WebhookKey;
use agent_airlock::ledger::ApprovalLedger;
use agent_airlock::{Clock as _, SystemClock};
use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST, LOCATION, REFERRER_POLICY, RETRY_AFTER, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use clap::{Args, Subcommand};
use serde::Deserialize;

use self::pages::Listed;
use self::session::{Activity, LOGIN_COOKIE, SESSION_COOKIE, Session, SessionRules, Sessions, SignIn};
use self::throttle::{CheckSlots, Throttle, TooSoon};
use crate::effects::ensure_signable;
use crate::keys::{AuditKeySource, KeySource, audit_key, warn_if_others_can_read};
use crate::requests::{Approval, Verifier, approve_request, deny_request, find, list_requests};
use crate::{Cli, Failure, Storage};

/// `airlock console`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ConsoleArgs {
    #[command(subcommand)]
    command: Option<ConsoleCommand>,
    /// The address to serve on. A non-loopback address needs `--allow-remote`.
    #[arg(long, default_value = "127.0.0.1:8700", value_name = "ADDRESS:PORT")]
    listen: SocketAddr,
    /// Serve on a non-loopback address, and answer requests addressed to any host name. The console speaks
    /// plain HTTP: put it behind TLS.
    #[arg(long)]
    allow_remote: bool,
    /// The operators who may sign in: `NAME:HASH` lines from `airlock console hash-password NAME`.
    #[arg(long, value_name = "FILE")]
    operators: Option<PathBuf>,
    /// Without `--operators`: the one operator, who signs in once with a token printed at start.
    #[arg(long, env = "AIRLOCK_OPERATOR", value_name = "NAME")]
    operator: Option<String>,
    /// The console's own signing key (`airlock operators add NAME --console --key-out FILE`): every decision
    /// made by an operator who signed in with a password is signed with it, attesting who signed in. Without
    /// it, or for the one-time token's sign-in, decisions are unsigned and count for nothing on a host that
    /// checks signatures (`airlock mcp --operators FILE`).
    #[arg(long, env = "AIRLOCK_CONSOLE_KEY", value_name = "FILE")]
    console_key: Option<PathBuf>,
    /// How long a grant made in the console stays valid, in seconds.
    #[arg(long, default_value_t = 900)]
    ttl_secs: u64,
    /// How long a sign-in lasts at most, in seconds.
    #[arg(long, default_value_t = 8 * 3600)]
    session_secs: u64,
    /// How long a sign-in lasts while the operator does nothing (the pending list's own refresh does not
    /// count), in seconds.
    #[arg(long, default_value_t = 15 * 60)]
    idle_secs: u64,
    /// Mark the cookies `Secure`, so the browser sends them over HTTPS only: for a console served behind
    /// TLS (a reverse proxy terminating it).
    #[arg(long)]
    secure_cookies: bool,
    /// How many password checks (argon2, about 19 MiB of memory each) may run at once; a sign-in beyond
    /// that is refused at once (503) rather than queued.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    max_sign_in_checks: u16,
    /// Behind a reverse proxy: the header it puts the client's address in (e.g. `X-Forwarded-For`; the
    /// last address listed, the one the proxy added, is used), so failed sign-ins are throttled per client
    /// rather than for everyone behind the proxy at once. Only for a console that only the proxy can reach:
    /// anyone else could write the header.
    #[arg(long, value_name = "HEADER")]
    client_address_header: Option<axum::http::HeaderName>,
    /// A head exported earlier (`airlock audit export-head`), to check the audit log against.
    #[arg(long, value_name = "FILE")]
    anchor: Option<PathBuf>,
    #[command(flatten)]
    key: KeySource,
    #[command(flatten)]
    audit_key: AuditKeySource,
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// Where new pending requests are announced.
#[derive(Args)]
struct WebhookArgs {
    /// POST each new pending request here (`http://` or `https://`), signed with the webhook key.
    #[arg(long, value_name = "URL")]
    webhook_url: Option<String>,
    /// A file holding the webhook key's secret as hex.
    #[arg(long, value_name = "FILE", requires = "webhook_url")]
    webhook_key_file: Option<PathBuf>,
    /// The CA certificates (PEM) an `https://` webhook's certificate must chain to; without it, the system's
    /// roots. The receiver's host name is always verified.
    #[arg(long, value_name = "FILE", requires = "webhook_url")]
    webhook_ca_file: Option<PathBuf>,
    /// An environment variable holding the webhook key's secret as hex (without `--webhook-key-file`).
    #[arg(long, default_value = "AIRLOCK_WEBHOOK_KEY", value_name = "VAR")]
    webhook_key_env: String,
    /// How many times a notification is tried before it is given up.
    #[arg(long, default_value_t = 6)]
    webhook_attempts: u32,
    /// The wait before the first retry, in milliseconds; it doubles for each later one.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    webhook_backoff_ms: u64,
}

impl WebhookArgs {
    fn webhook(&self) -> Result<Option<webhook::Webhook>, Failure> {
        let Some(url) = &self.webhook_url else { return Ok(None) };
        let key = match &self.webhook_key_file {
            Some(path) => {
                warn_if_others_can_read(path);
                WebhookKey::from_file(WEBHOOK_KEY_ID, path)
            }
            None => WebhookKey::from_env(WEBHOOK_KEY_ID, &self.webhook_key_env),
        }
        .map_err(|e| e.to_string())?;
        let backoff = Duration::from_millis(self.webhook_backoff_ms);
        webhook::Webhook::new(url, key, self.webhook_attempts, backoff, self.webhook_ca_file.as_deref()).map(Some)
    }
}

/// The id the webhook key is loaded under (receivers are not told it).
const WEBHOOK_KEY_ID: &str = "webhook";

#[derive(Subcommand)]
enum ConsoleCommand {
    /// Hash a password (read from standard input, one line) for an operators file; prints `NAME:HASH`.
    HashPassword {
        /// The operator's name.
        name: String,
    },
}

/// What every handler shares.
struct Console {
    ledger: Arc<dyn ApprovalLedger>,
    effects: Arc<dyn EffectStore>,
    audit: Result<AuditLog, Failure>,
    /// Whether the audit log is opened with its key (its records signed).
    audit_signed: bool,
    anchor: Option<PathBuf>,
    verifier: Verifier,
    key: KeySource,
    grant_ttl: Duration,
    console_key: Option<OperatorKey>,
    sign_in: SignIn,
    sessions: Sessions,
    throttle: Throttle,
    check_slots: CheckSlots,
    client_address_header: Option<axum::http::HeaderName>,
    allow_remote: bool,
}

type Shared = State<Arc<Console>>;

impl Console {
    /// Who signs a decision by `account`: the console's key, attesting the account, when the account
    /// signed in with a password. A one-time token's sign-in is never attested, so it never counts toward
    /// the approvals a host checking signatures needs.
    fn attesting<'a>(&'a self, account: &'a str) -> Option<DecisionSigner<'a>> {
        match (&self.console_key, &self.sign_in) {
            (Some(key), SignIn::Operators { .. }) => Some(DecisionSigner::Console { key, account }),
            _ => None,
        }
    }
}

/// Runs `airlock console`: `hash-password`, or the server until SIGTERM or SIGINT.
pub(crate) fn run(cli: &Cli, args: &ConsoleArgs) -> Result<(), Failure> {
    if let Some(ConsoleCommand::HashPassword { name }) = &args.command {
        let mut password = String::new();
        std::io::stdin().read_line(&mut password).map_err(|e| format!("reading the password failed: {e}"))?;
        let password = password.strip_suffix('\n').unwrap_or(&password);
        let password = password.strip_suffix('\r').unwrap_or(password);
        println!("{}", session::hash_password_line(name, password)?);
        return Ok(());
    }
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        return Err(format!(
            "`{}` is not a loopback address: the console serves only this host unless `--allow-remote` is given",
            args.listen
        ));
    }
    let (sign_in, token) = match (&args.operators, &args.operator) {
        (Some(path), _) => (SignIn::from_operators_file(path)?, None),
        (None, Some(operator)) => {
            let (sign_in, token) = SignIn::one_time(operator)?;
            (sign_in, Some(token))
        }
        (None, None) => {
            return Err("no one could sign in: pass `--operators FILE` (lines from `airlock console hash-password \
                        NAME`), or `--operator NAME` (or `AIRLOCK_OPERATOR`) for one operator with a one-time token"
                .to_owned());
        }
    };
    let webhook = args.webhook.webhook()?;
    let console_key = match &args.console_key {
        Some(path) => {
            warn_if_others_can_read(path);
            Some(OperatorKey::from_file(path).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let storage = Storage::open(cli)?;
    let ledger = storage.ledger()?;
    let verifier = Verifier::new(Arc::clone(&ledger), &args.key)?;
    if verifier.is_none() {
        return Err("the console needs the approval key (`--key-file`, or `--key-env`, default \
                    `AIRLOCK_APPROVAL_KEY`): it shows and approves only requests whose seal it has checked"
            .to_owned());
    }
    let audit_key = audit_key(&args.audit_key);
    let audit_signed = matches!(audit_key, Ok(Some(_)));
    let audit = audit_key.and_then(|key| storage.audit(AuditConfig { key, ..AuditConfig::default() }));
    let console = Arc::new(Console {
        effects: storage.effects()?,
        ledger,
        audit,
        audit_signed,
        anchor: args.anchor.clone(),
        verifier,
        key: args.key.clone(),
        grant_ttl: Duration::from_secs(args.ttl_secs),
        console_key,
        sign_in,
        sessions: Sessions::new(
            SessionRules {
                lifetime: Duration::from_secs(args.session_secs),
                idle: Duration::from_secs(args.idle_secs),
                secure: args.secure_cookies,
            },
            Arc::new(SystemClock),
        ),
        throttle: Throttle::new(Arc::new(SystemClock)),
        check_slots: CheckSlots::new(usize::from(args.max_sign_in_checks)),
        client_address_header: args.client_address_header.clone(),
        allow_remote: args.allow_remote,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the server's runtime failed: {e}"))?;
    let served = runtime.block_on(serve(console, args.listen, token, webhook));
    // The storage (a PostgreSQL pool has its own runtime) outlives the server's runtime.
    drop(runtime);
    drop(storage);
    served
}

async fn serve(
    console: Arc<Console>,
    listen: SocketAddr,
    token: Option<String>,
    webhook: Option<webhook::Webhook>,
) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("listening on {listen}: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    println!("airlock console: http://{address}/");
    if let Some(token) = token {
        println!("airlock console: sign in with this one-time token: {token}");
    }
    if let Some(webhook) = webhook {
        let webhook = Arc::new(webhook.linking_to(format!("http://{address}")));
        tokio::spawn(webhook::announce(Arc::clone(&console), webhook));
    }
    let stop = crate::mcp::termination("airlock console");
    // Each connection's peer address: sign-in failures are throttled per client.
    let app = router(console).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).with_graceful_shutdown(stop).await.map_err(|e| e.to_string())
}

fn router(console: Arc<Console>) -> Router {
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
async fn guard_host(State(console): Shared, request: Request, next: Next) -> Response {
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
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Headers on every answer: nothing loads from elsewhere, nothing frames the console, nothing is cached.
async fn security_headers(mut response: Response) -> Response {
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

/// Runs storage work off the server's threads (redb and the PostgreSQL ledger block).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, Failure> + Send + 'static) -> Result<T, Failure> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("the work stopped: {e}"))?
}

fn now() -> Duration {
    SystemClock.now()
}

fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to.to_owned())]).into_response()
}

fn refusal(status: StatusCode, session: Option<&Session>, message: &str) -> Response {
    (status, Html(pages::refused(session, message))).into_response()
}

/// The signed-in operator of a page request; without a session, the browser is sent to sign in.
struct SignedIn(Session);

impl FromRequestParts<Arc<Console>> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Arc<Console>) -> Result<Self, Response> {
        console.sessions.find(&parts.headers, Activity::Operator).map(SignedIn).ok_or_else(|| see_other("/login"))
    }
}

/// Why a form post was refused before anything was done.
struct PostRefused {
    session: Option<Session>,
    message: &'static str,
}

impl IntoResponse for PostRefused {
    fn into_response(self) -> Response {
        refusal(StatusCode::FORBIDDEN, self.session.as_ref(), self.message)
    }
}

/// The session of a form post whose CSRF token matches it; anything else is refused.
fn checked_post(console: &Console, headers: &HeaderMap, csrf: &str) -> Result<Session, PostRefused> {
    let Some(session) = console.sessions.find(headers, Activity::Operator) else {
        return Err(PostRefused { session: None, message: "not signed in: sign in and try again" });
    };
    if !session.csrf_matches(csrf) {
        return Err(PostRefused {
            session: Some(session),
            message: "the form's CSRF token is missing or wrong: nothing was done; reload the page and try again",
        });
    }
    Ok(session)
}

/// The pending requests, oldest first, each with its seal checked.
async fn listed_pending(console: &Arc<Console>) -> Result<Vec<Listed>, Failure> {
    let console = Arc::clone(console);
    blocking(move || {
        Ok(list_requests(&*console.ledger, true)?
            .into_iter()
            .map(|entry| Listed { sealed: console.verifier.check(&entry), entry })
            .collect())
    })
    .await
}

async fn pending_page(State(console): Shared, SignedIn(session): SignedIn) -> Response {
    match listed_pending(&console).await {
        Ok(listed) => Html(pages::pending(&session, &listed, now())).into_response(),
        Err(error) => refusal(StatusCode::INTERNAL_SERVER_ERROR, Some(&session), &error),
    }
}

/// The pending table's rows alone, for the page's live refresh.
async fn pending_rows(State(console): Shared, headers: HeaderMap) -> Response {
    // The page refreshing itself is not the operator doing something: it does not keep the session alive.
    if console.sessions.find(&headers, Activity::Refresh).is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    match listed_pending(&console).await {
        Ok(listed) => Html(pages::pending_rows(&listed, now())).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error).into_response(),
    }
}

async fn request_page(State(console): Shared, SignedIn(session): SignedIn, Path(id): Path<String>) -> Response {
    let shared = Arc::clone(&console);
    let found = blocking(move || {
        let entry = find(&*shared.ledger, &id)?;
        Ok(Listed { sealed: shared.verifier.check(&entry), entry })
    })
    .await;
    match found {
        Ok(item) => Html(pages::request(&session, &item, now())).into_response(),
        Err(error) => refusal(StatusCode::NOT_FOUND, Some(&session), &error),
    }
}

/// A decision form: its CSRF token, and for a denial the reason.
#[derive(Deserialize)]
struct DecisionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

async fn approve(
    State(console): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<DecisionForm>,
) -> Response {
    let session = match checked_post(&console, &headers, &form.csrf) {
        Ok(session) => session,
        Err(refused) => return refused.into_response(),
    };
    let (shared, operator, request_id) = (Arc::clone(&console), session.operator.clone(), id.clone());
    let personal = session.personal;
    let approved = blocking(move || {
        let signer = shared.attesting(&operator);
        approve_request(
            Arc::clone(&shared.ledger),
            &shared.key,
            &request_id,
            signer,
            &operator,
            shared.grant_ttl,
            |request, entry| match &entry.status {
                // Anyone who can read the console's output holds the one-time token: it is no one's own
                // credential, so it never counts as one of several distinct approvers.
                _ if !personal && request.approvals_required() > 1 => Err(format!(
                    "request `{request_id}` needs {} distinct approvers, and a sign-in with the console's one-time \
                     token does not count toward them: each approver signs in with their own password (start \
                     the console with `--operators FILE`); nothing was approved",
                    request.approvals_required()
                )),
                status if status.is_waiting() => Ok(()),
                other => Err(format!("request `{request_id}` is {}, not pending", other.label(now()))),
            },
        )
    })
    .await;
    match approved {
        Ok(Approval::Granted(resume)) => {
            let shown = serde_json::to_string_pretty(resume.as_value()).unwrap_or_default();
            Html(pages::decided(&session, &id, "approved", &shown)).into_response()
        }
        Ok(Approval::Waiting { approvers, required }) => {
            Html(pages::approving(&session, &id, &Approval::waiting_text(&approvers, required))).into_response()
        }
        Err(error) => refusal(StatusCode::CONFLICT, Some(&session), &error),
    }
}

async fn deny(
    State(console): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<DecisionForm>,
) -> Response {
    let session = match checked_post(&console, &headers, &form.csrf) {
        Ok(session) => session,
        Err(refused) => return refused.into_response(),
    };
    let (shared, operator, request_id) = (Arc::clone(&console), session.operator.clone(), id.clone());
    let reason = Some(form.reason.trim().to_owned()).filter(|r| !r.is_empty());
    let denied = blocking(move || {
        let entry = find(&*shared.ledger, &request_id)?;
        if !entry.status.is_waiting() {
            return Err(format!("request `{request_id}` is {}, not pending", entry.status.label(now())));
        }
        let signer = shared.attesting(&operator);
        deny_request(Arc::clone(&shared.ledger), &shared.key, &request_id, signer, &operator, reason.as_deref())
    })
    .await;
    match denied {
        Ok(resume) => {
            let shown = serde_json::to_string_pretty(resume.as_value()).unwrap_or_default();
            Html(pages::decided(&session, &id, "denied", &shown)).into_response()
        }
        Err(error) => refusal(StatusCode::CONFLICT, Some(&session), &error),
    }
}

/// How many decided requests the decisions page shows.
const RECENT_DECISIONS: usize = 100;

async fn decisions_page(State(console): Shared, SignedIn(session): SignedIn) -> Response {
    let shared = Arc::clone(&console);
    let decided = blocking(move || {
        let mut entries = list_requests(&*shared.ledger, false)?;
        entries.retain(|e| !e.status.is_waiting());
        entries.sort_by_key(|e| std::cmp::Reverse(pages::decided_at(&e.status)));
        entries.truncate(RECENT_DECISIONS);
        Ok(entries)
    })
    .await;
    match decided {
        Ok(entries) => Html(pages::decisions(&session, &entries, now())).into_response(),
        Err(error) => refusal(StatusCode::INTERNAL_SERVER_ERROR, Some(&session), &error),
    }
}

async fn effects_page(State(console): Shared, SignedIn(session): SignedIn) -> Response {
    let shared = Arc::clone(&console);
    let listed = blocking(move || shared.effects.list(&EffectFilter::ambiguous(), now()).map_err(|e| e.to_string()));
    match listed.await {
        Ok(records) => Html(pages::effects(&session, &records, now())).into_response(),
        Err(error) => refusal(StatusCode::INTERNAL_SERVER_ERROR, Some(&session), &error),
    }
}

/// An effect's resolution.
#[derive(Deserialize)]
struct ResolveForm {
    #[serde(default)]
    csrf: String,
    key: String,
    outcome: String,
}

async fn resolve_effect(
    State(console): Shared,
    headers: HeaderMap,
    axum::Form(form): axum::Form<ResolveForm>,
) -> Response {
    let session = match checked_post(&console, &headers, &form.csrf) {
        Ok(session) => session,
        Err(refused) => return refused.into_response(),
    };
    let resolution = match form.outcome.as_str() {
        "committed" => Resolution::Committed,
        "failed" => Resolution::Failed,
        other => {
            let message = format!("unknown outcome `{other}`, expected one of `committed`, `failed`");
            return refusal(StatusCode::BAD_REQUEST, Some(&session), &message);
        }
    };
    let (shared, operator) = (Arc::clone(&console), session.operator.clone());
    let resolved = blocking(move || {
        let log = shared.audit.as_ref().map_err(|e| format!("{e}; nothing was resolved"))?;
        ensure_signable(log, shared.audit_signed)?;
        crate::effects::resolve_effect(&*shared.effects, log, &form.key, resolution, &operator, now())
    });
    match resolved.await {
        Ok(_) => see_other("/effects"),
        Err(error) => refusal(StatusCode::CONFLICT, Some(&session), &error),
    }
}

async fn audit_page(State(console): Shared, SignedIn(session): SignedIn) -> Response {
    let shared = Arc::clone(&console);
    let status = blocking(move || {
        let log = shared.audit.as_ref().map_err(Clone::clone)?;
        let anchor = match &shared.anchor {
            Some(path) => Some(Anchor::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?),
            None => None,
        };
        verify(log, anchor.as_ref()).map(|report| report.to_string()).map_err(|e| e.to_string())
    })
    .await;
    Html(pages::audit(&session, &status)).into_response()
}

async fn login_page(State(console): Shared) -> Response {
    login_form(&console, StatusCode::OK, None)
}

/// The sign-in form with a fresh double-submit value in its cookie.
fn login_form(console: &Console, status: StatusCode, error: Option<&str>) -> Response {
    let nonce = match session::random_hex() {
        Ok(nonce) => nonce,
        Err(error) => return refusal(StatusCode::INTERNAL_SERVER_ERROR, None, &error),
    };
    let cookie = console.sessions.cookie(LOGIN_COOKIE, &nonce, "/login", Duration::from_secs(600));
    (status, [(SET_COOKIE, cookie)], Html(pages::login(console.sign_in.asks_for_name(), &nonce, error))).into_response()
}

/// The sign-in form's fields.
#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
    #[serde(default)]
    nonce: String,
}

/// The client a sign-in comes from: the peer, or behind a proxy the last address of the header it writes
/// (the peer when the header is missing or holds no address).
fn client_address(console: &Console, headers: &HeaderMap, peer: SocketAddr) -> std::net::IpAddr {
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
fn try_later(console: &Console, status: StatusCode, retry_after: Duration, message: &str) -> Response {
    let secs = retry_after.as_secs().saturating_add(u64::from(retry_after.subsec_nanos() > 0)).max(1);
    let mut response = login_form(console, status, Some(&format!("{message}: try again in {secs} s")));
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    response
}

async fn login(
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
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(State(console): Shared, headers: HeaderMap, axum::Form(form): axum::Form<CsrfForm>) -> Response {
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

async fn script() -> Response {
    ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("assets/console.js")).into_response()
}

async fn stylesheet() -> Response {
    ([(CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("assets/console.css")).into_response()
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn only_loopback_host_names_pass() {
        for host in ["127.0.0.1:8700", "localhost", "LOCALHOST:1", "[::1]:8700", "127.0.0.2"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["", "evil.example:8700", "10.0.0.1", "localhost.evil.example", "[::2]:1"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
