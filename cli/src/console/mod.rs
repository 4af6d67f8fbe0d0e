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

mod decide;
mod pages;
mod routes;
mod session;
mod sign_in;
mod throttle;
mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::approval::DecisionSigner;
use agent_airlock::approval::operators::OperatorKey;
use agent_airlock::audit::{Anchor, AuditConfig, AuditLog, verify};
use agent_airlock::effect::{EffectFilter, EffectStore};
use agent_airlock::keys::WebhookKey;
use agent_airlock::ledger::ApprovalLedger;
use agent_airlock::{Clock as _, SystemClock};
use axum::extract::{FromRequestParts, Path, State};
use axum::http::header::LOCATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use clap::{Args, Subcommand};

use self::pages::Listed;
use self::routes::router;
use self::session::{Activity, Session, SessionRules, Sessions, SignIn};
use self::throttle::{CheckSlots, Throttle};
use crate::keys::{AuditKeySource, KeySource, audit_key, warn_if_others_can_read};
use crate::requests::{Verifier, find, list_requests};
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
    /// The gateway's append-only audit file (`airlock mcp --audit-file`): the audit page verifies it instead of
    /// `--db`'s log (reading it, taking no lock), and effect resolutions are appended to it (each append takes
    /// the file's lock for its write only), while the gateway writes it. It must exist.
    #[arg(long, value_name = "PATH")]
    audit_file: Option<PathBuf>,
    /// The gateway's separate redb audit file (`airlock mcp --audit`): the audit page verifies it, and effect
    /// resolutions are recorded in it, instead of `--db`'s log. It must exist; it is opened as `--db` is
    /// (`--multi-process` beside a running gateway).
    #[arg(long, value_name = "PATH", conflicts_with = "audit_file")]
    audit: Option<PathBuf>,
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
    /// The log the audit page verifies when it is not `audit`: the gateway's append-only file, read only.
    audit_file: Option<Result<AuditLog, Failure>>,
    /// Where resolutions are recorded when it is not `audit`: the gateway's append-only file, opened to
    /// append for each resolution (the console changes nothing in it otherwise).
    resolutions_file: Option<(PathBuf, Result<AuditConfig, Failure>)>,
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
    let audit_file = args.audit_file.as_ref().map(|path| {
        let config = AuditConfig { key: audit_key.clone()?, ..AuditConfig::default() };
        AuditLog::read_append_only(path, config).map_err(|e| e.to_string())
    });
    let resolutions_file = args
        .audit_file
        .as_ref()
        .map(|path| (path.clone(), audit_key.clone().map(|key| AuditConfig { key, ..AuditConfig::default() })));
    let audit = audit_key.and_then(|key| {
        let config = AuditConfig { key, ..AuditConfig::default() };
        match &args.audit {
            Some(path) => crate::effects::open_audit_redb(cli, path, config),
            None => storage.audit(config),
        }
    });
    let console = Arc::new(Console {
        effects: storage.effects()?,
        ledger,
        audit,
        audit_file,
        resolutions_file,
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

async fn audit_page(State(console): Shared, SignedIn(session): SignedIn) -> Response {
    let shared = Arc::clone(&console);
    let status = blocking(move || {
        let log = match &shared.audit_file {
            Some(file) => file.as_ref().map_err(Clone::clone)?,
            None => shared.audit.as_ref().map_err(Clone::clone)?,
        };
        let anchor = match &shared.anchor {
            Some(path) => Some(Anchor::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?),
            None => None,
        };
        verify(log, anchor.as_ref()).map(|report| report.to_string()).map_err(|e| e.to_string())
    })
    .await;
    Html(pages::audit(&session, &status)).into_response()
}

#[cfg(test)]
mod tests {
    use super::routes::is_loopback_host;

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
