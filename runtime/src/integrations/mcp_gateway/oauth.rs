//! The gateway as an OAuth 2.1 resource server (the MCP authorization spec): every request to `--listen`
//! carries `Authorization: Bearer <JWT>`, and the token is admitted only if
//!
//! - its header names an algorithm on the allow-list (asymmetric only by default: RSA, RSA-PSS, ECDSA,
//!   EdDSA; `alg: none` and the HMAC algorithms are refused, since a shared secret would let any holder mint
//!   tokens);
//! - it is signed by a key of the issuer's JWKS (a file, or the `jwks_uri` the issuer's RFC 8414 / OpenID
//!   Connect discovery document names, fetched once, cached, and fetched again when a token names a key id
//!   the cache lacks or the cache is an hour old, at most once per [`REFETCH_INTERVAL`]); a key's own `alg`
//!   and `use`, when it states them, must agree; symmetric (`oct`) keys are never used;
//! - `iss` is the configured issuer, `aud` contains this resource ([`OAuthConfig::audience`]), `exp` is in
//!   the future and `nbf` (if present) in the past, each with [`DEFAULT_LEEWAY`] for clock skew, `sub` is
//!   a non-empty string; `exp`, `nbf`, `iss`, `sub` of another JSON type refuse the token.
//!
//! What it proves becomes the call's [`Identity`]: issuer, subject and the claims the deployment keeps
//! ([`OAuthConfig::claims`]; `scope` and `scp` given as one space-separated string become a list). The caller
//! is named `ISSUER#SUBJECT`, so rate limits and audit records count and name the subject.
//!
//! A token that passed every check is remembered by the SHA-256 of the token (see `verified_tokens`): seen again,
//! it is admitted without checking its signature until its `exp` (with the leeway) or
//! [`OAuthConfig::verified_ttl`], whichever comes first; refusals are never remembered, and replaced keys empty
//! the cache.
//!
//! Refusals say why in a fixed phrase ([`TokenRefusal`]) and never repeat the token or any of its claims.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::issuer_client::IssuerClient;
use super::verified_tokens::{self, VerifiedTokens};
use crate::clock::{Clock, SystemClock};
use crate::identity::{Caller, Identity};

/// How far `exp` and `nbf` may be off for clock skew.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);

/// The shortest time between two fetches of the issuer's keys: a stream of tokens naming unknown key ids
/// cannot make the gateway hammer the issuer.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// How many verified tokens are remembered, so a token seen again is admitted without checking its signature.
pub const VERIFIED_CACHE_CAPACITY: usize = 1024;

/// How long a verified token is admitted again without checking its signature (never past its `exp`).
pub const VERIFIED_CACHE_TTL: Duration = Duration::from_secs(60);

/// How long fetched keys are used before they are fetched again. Older keys still admit the tokens they
/// verify while the fetch runs in the background (no request waits on the issuer), so a key the issuer withdrew
/// stops admitting tokens within this time of the issuer answering again.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(3600);

/// The algorithms admitted unless configured otherwise: every asymmetric one the JWT crate verifies.
pub const DEFAULT_ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Where the issuer's signing keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// A JWKS read once, from a file or a string: never fetched.
    Fixed(JwkSet),
    /// The issuer's discovery document (`/.well-known/oauth-authorization-server`, else
    /// `/.well-known/openid-configuration`) names its `jwks_uri`, fetched over `https://` trusting the
    /// system's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` when set), or over `http://` for an `http://` issuer
    /// on this host (a loopback address or `localhost`; another is refused by [`OAuthResourceServer::new`]).
    Discover,
}

impl KeySource {
    /// A JWKS file (`{"keys": [...]}`).
    pub fn from_file(path: &Path) -> Result<Self, OAuthConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| OAuthConfigError::Keys(format!("cannot read `{}`: {error}", path.display())))?;
        Self::from_json(&text).map_err(|error| match error {
            OAuthConfigError::Keys(why) => OAuthConfigError::Keys(format!("`{}`: {why}", path.display())),
            other => other,
        })
    }

    /// A JWKS document (`{"keys": [...]}`).
    pub fn from_json(text: &str) -> Result<Self, OAuthConfigError> {
        let keys: JwkSet = serde_json::from_str(text)
            .map_err(|error| OAuthConfigError::Keys(format!("not a JWKS document: {error}")))?;
        if usable_keys(&keys).next().is_none() {
            return Err(OAuthConfigError::Keys("the JWKS holds no public signing key".to_owned()));
        }
        Ok(KeySource::Fixed(keys))
    }
}

/// What the resource server admits.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier: `iss` must equal it exactly, and it is the one
    /// authorization server the metadata names.
    pub issuer: String,
    /// This resource's canonical URL (RFC 8707 / RFC 9728 `resource`), e.g. `https://gw.example/mcp`.
    pub resource: String,
    /// What `aud` must contain: the resource unless set otherwise.
    pub audience: String,
    /// The signing keys.
    pub keys: KeySource,
    /// The admitted algorithms ([`DEFAULT_ALGORITHMS`]); HMAC algorithms are refused when configured.
    pub algorithms: Vec<Algorithm>,
    /// The claims kept in the caller's [`Identity`] besides `iss` and `sub` (e.g. `groups`, `scope`).
    pub claims: Vec<String>,
    /// The scopes the metadata lists as supported (`scopes_supported`), if any.
    pub scopes_supported: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The shortest time between two fetches of discovered keys ([`REFETCH_INTERVAL`]).
    pub refetch_interval: Duration,
    /// How long discovered keys are used before they are fetched again ([`KEYS_MAX_AGE`]).
    pub keys_max_age: Duration,
    /// How many verified tokens are remembered ([`VERIFIED_CACHE_CAPACITY`]; 0 checks every token's
    /// signature every time).
    pub verified_cache: usize,
    /// How long a verified token is admitted again without checking its signature ([`VERIFIED_CACHE_TTL`]),
    /// never past its `exp` and the leeway.
    pub verified_ttl: Duration,
}

impl OAuthConfig {
    /// A configuration for tokens of `issuer` to `resource` (also the audience), keys from `keys`,
    /// the default algorithms and leeway, and no claims kept but `iss` and `sub`.
    pub fn new(issuer: impl Into<String>, resource: impl Into<String>, keys: KeySource) -> Self {
        let resource = resource.into();
        OAuthConfig {
            issuer: issuer.into(),
            audience: resource.clone(),
            resource,
            keys,
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            claims: Vec::new(),
            scopes_supported: Vec::new(),
            leeway: DEFAULT_LEEWAY,
            refetch_interval: REFETCH_INTERVAL,
            keys_max_age: KEYS_MAX_AGE,
            verified_cache: VERIFIED_CACHE_CAPACITY,
            verified_ttl: VERIFIED_CACHE_TTL,
        }
    }
}

/// A resource server configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthConfigError {
    /// The issuer or resource is not an absolute `http(s)` URL.
    #[error("{0}")]
    Url(String),
    /// An algorithm is not allowed (HMAC) or unknown.
    #[error("{0}")]
    Algorithm(String),
    /// The keys could not be read or hold nothing usable.
    #[error("{0}")]
    Keys(String),
}

/// Why a bearer token was refused: a fixed phrase, never the token or its claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRefusal {
    /// Not a JWT (three base64url parts, a JSON header and claims), or `alg: none`.
    #[error("the token is not a well-formed signed JWT")]
    Malformed,
    /// Signed with an algorithm that is not allowed.
    #[error("the token's signing algorithm is not allowed")]
    Algorithm,
    /// Signed by no key the issuer publishes.
    #[error("the token was not signed by a key of the issuer")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` has passed.
    #[error("the token has expired")]
    Expired,
    /// `nbf` has not come yet.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("the token was issued by another issuer")]
    Issuer,
    /// `aud` does not name this resource.
    #[error("the token is not meant for this resource")]
    Audience,
    /// `exp`, `iss`, `aud` or `sub` is missing or of the wrong type.
    #[error("the token lacks a required claim or has one of the wrong type")]
    Claims,
    /// The issuer's keys could not be fetched (nothing is admitted until they can be).
    #[error("the issuer's keys are unavailable")]
    KeysUnavailable,
}

/// The claims every admitted token has, typed: a string `exp` is not a number.
#[derive(Deserialize)]
struct Registered {
    iss: String,
    sub: String,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

struct KeyCache {
    keys: Arc<JwkSet>,
    fetched: Option<Instant>,
    last_attempt: Option<Instant>,
}

/// Validates bearer JWTs for the gateway; cheap to clone.
#[derive(Clone)]
pub struct OAuthResourceServer {
    inner: Arc<Inner>,
}

struct Inner {
    config: OAuthConfig,
    allowed: HashSet<Algorithm>,
    cache: Mutex<KeyCache>,
    /// One fetch at a time; waiting tokens then find the fresh keys.
    fetching: tokio::sync::Mutex<()>,
    http: IssuerClient,
    /// Tokens whose signature and claims were checked ([`OAuthConfig::verified_cache`]).
    verified: Mutex<VerifiedTokens>,
    /// What `exp`, `nbf` and the cache's deadlines are compared with.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for OAuthResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthResourceServer")
            .field("issuer", &self.inner.config.issuer)
            .field("resource", &self.inner.config.resource)
            .field("audience", &self.inner.config.audience)
            .finish_non_exhaustive()
    }
}

impl OAuthResourceServer {
    /// A resource server for `config`; its keys are fetched on the first token (see
    /// [`fetch_keys`](Self::fetch_keys) to fetch them at start).
    pub fn new(config: OAuthConfig) -> Result<Self, OAuthConfigError> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// A resource server whose `exp` and `nbf` checks and cache deadlines read `clock`.
    pub fn with_clock(config: OAuthConfig, clock: Arc<dyn Clock>) -> Result<Self, OAuthConfigError> {
        for (what, url) in [("issuer", &config.issuer), ("resource", &config.resource)] {
            let parsed = url::Url::parse(url)
                .map_err(|error| OAuthConfigError::Url(format!("the {what} `{url}` is not a URL: {error}")))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.fragment().is_some() {
                return Err(OAuthConfigError::Url(format!(
                    "the {what} `{url}` must be an `https://` (or `http://`) URL without a fragment"
                )));
            }
        }
        if matches!(config.keys, KeySource::Discover) && !fetched_safely(&config.issuer) {
            return Err(OAuthConfigError::Url(format!(
                "the issuer `{}` would be asked for its keys over plain `http` across a network, where anyone on \
                 the path could answer with keys of their own: use its `https://` URL, or give its keys as a file",
                config.issuer
            )));
        }
        if config.audience.trim().is_empty() {
            return Err(OAuthConfigError::Url("the audience is empty".to_owned()));
        }
        if config.algorithms.is_empty() {
            return Err(OAuthConfigError::Algorithm("no signing algorithm is allowed".to_owned()));
        }
        if let Some(hmac) =
            config.algorithms.iter().find(|alg| matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        {
            return Err(OAuthConfigError::Algorithm(format!(
                "`{hmac:?}` is a shared-secret algorithm: a resource server holding the secret could mint tokens; \
                 allow asymmetric algorithms only"
            )));
        }
        let (keys, fetched) = match &config.keys {
            KeySource::Fixed(keys) => (Arc::new(keys.clone()), Some(Instant::now())),
            KeySource::Discover => (Arc::new(JwkSet { keys: Vec::new() }), None),
        };
        let http = match &config.keys {
            KeySource::Fixed(_) => IssuerClient::without_tls(),
            KeySource::Discover => IssuerClient::with_system_roots(),
        };
        Ok(OAuthResourceServer {
            inner: Arc::new(Inner {
                allowed: config.algorithms.iter().copied().collect(),
                verified: Mutex::new(VerifiedTokens::new(config.verified_cache)),
                clock,
                config,
                cache: Mutex::new(KeyCache { keys, fetched, last_attempt: None }),
                fetching: tokio::sync::Mutex::new(()),
                http,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OAuthConfig {
        &self.inner.config
    }

    /// The protected resource metadata (RFC 9728) this server publishes.
    pub fn metadata(&self) -> Value {
        let config = &self.inner.config;
        let mut metadata = serde_json::json!({
            "resource": config.resource,
            "authorization_servers": [config.issuer],
            "bearer_methods_supported": ["header"],
        });
        if !config.scopes_supported.is_empty() {
            metadata["scopes_supported"] = Value::from(config.scopes_supported.clone());
        }
        metadata
    }

    /// Where the metadata is served: `/.well-known/oauth-protected-resource` followed by the resource's
    /// path (RFC 9728 §3.1), e.g. `/.well-known/oauth-protected-resource/mcp`.
    pub fn metadata_path(&self) -> String {
        let path = url::Url::parse(&self.inner.config.resource).map(|url| url.path().to_owned()).unwrap_or_default();
        match path.trim_end_matches('/') {
            "" => WELL_KNOWN.to_owned(),
            path => format!("{WELL_KNOWN}{path}"),
        }
    }

    /// The metadata's URL, as the `resource_metadata` of a `WWW-Authenticate` challenge names it.
    pub fn metadata_url(&self) -> String {
        match url::Url::parse(&self.inner.config.resource) {
            Ok(url) => format!("{}{}", url.origin().ascii_serialization(), self.metadata_path()),
            Err(_) => self.metadata_path(),
        }
    }

    /// Fetches the issuer's keys now (a fixed JWKS needs no fetch).
    pub async fn fetch_keys(&self) -> Result<(), String> {
        if matches!(self.inner.config.keys, KeySource::Fixed(_)) {
            return Ok(());
        }
        let _one = self.inner.fetching.lock().await;
        self.refetch().await
    }

    /// How many verified tokens the cache holds ([`OAuthConfig::verified_cache`]).
    pub fn verified_tokens(&self) -> usize {
        self.inner.verified.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The caller a bearer token proves, or why it is refused. A token verified before is admitted from the
    /// cache until its `exp` or [`OAuthConfig::verified_ttl`], whichever comes first.
    pub async fn admit(&self, token: &str) -> Result<Caller, TokenRefusal> {
        let digest = verified_tokens::digest(token);
        let generation = {
            let verified = self.inner.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(caller) = verified.get(&digest, self.inner.clock.now()) {
                return Ok(caller);
            }
            // Read before the keys are: a verification with keys replaced meanwhile is not stored.
            verified.generation()
        };
        let (caller, until) = self.verify(token).await?;
        self.inner.verified.lock().unwrap_or_else(PoisonError::into_inner).insert(
            digest,
            caller.clone(),
            until,
            generation,
        );
        Ok(caller)
    }

    /// Checks a token's signature and claims: the caller it proves and until when that may be remembered.
    async fn verify(&self, token: &str) -> Result<(Caller, Duration), TokenRefusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenRefusal::Malformed)?;
        if !self.inner.allowed.contains(&header.alg) {
            return Err(TokenRefusal::Algorithm);
        }
        let keys = self.keys_for(header.kid.as_deref()).await?;
        let candidates: Vec<&Jwk> = usable_keys(&keys)
            .filter(|jwk| header.kid.is_none() || jwk.common.key_id.as_deref() == header.kid.as_deref())
            .filter(|jwk| fits(jwk, header.alg))
            .collect();
        // A token naming no key is tried against each key that fits, so that many keys would make one request
        // cost as many signature checks: past a few, it must say which key signed it.
        if candidates.is_empty() || (header.kid.is_none() && candidates.len() > MAX_KEYS_WITHOUT_KID) {
            return Err(TokenRefusal::UnknownKey);
        }
        let mut validation = Validation::new(header.alg);
        // `exp` and `nbf` are checked against the injected clock, below.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = true;
        validation.set_issuer(&[&self.inner.config.issuer]);
        validation.set_audience(&[&self.inner.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut refusal = TokenRefusal::Signature;
        for jwk in candidates {
            let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
            match jsonwebtoken::decode::<Registered>(token, &key, &validation) {
                Ok(data) => return self.in_time(data.claims),
                Err(error) => {
                    refusal = refused(error.kind());
                    if refusal != TokenRefusal::Signature {
                        // The signature verified (claims are checked after it): no other key is needed.
                        return Err(refusal);
                    }
                }
            }
        }
        Err(refusal)
    }

    /// `exp` (with the leeway) has not passed and `nbf` has come; the caller and until when it may be cached.
    fn in_time(&self, claims: Registered) -> Result<(Caller, Duration), TokenRefusal> {
        let now = self.inner.clock.now();
        let leeway = self.inner.config.leeway;
        let expires = Duration::from_secs(claims.exp).saturating_add(leeway);
        if expires < now {
            return Err(TokenRefusal::Expired);
        }
        if claims.nbf.is_some_and(|nbf| Duration::from_secs(nbf) > now.saturating_add(leeway)) {
            return Err(TokenRefusal::NotYetValid);
        }
        let until = expires.min(now.saturating_add(self.inner.config.verified_ttl));
        Ok((self.identity(claims)?, until))
    }

    fn identity(&self, claims: Registered) -> Result<Caller, TokenRefusal> {
        // `decode` checked `iss`; `sub` must name someone.
        if claims.sub.is_empty() || claims.iss != self.inner.config.issuer {
            return Err(TokenRefusal::Claims);
        }
        let mut identity = Identity::new(claims.iss, claims.sub);
        for name in &self.inner.config.claims {
            let Some(value) = claims.rest.get(name) else { continue };
            let value = match (name.as_str(), value) {
                ("scope" | "scp", Value::String(scopes)) => {
                    Value::from(scopes.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
                }
                _ => value.clone(),
            };
            identity = identity.with_claim(name.clone(), value);
        }
        Ok(Caller::identified(identity))
    }

    /// The keys to check a token naming `kid` against: the cache, fetched again first if the key id is
    /// unknown (at most once per refetch interval). Keys past their age that hold the key are used as they
    /// are while they are fetched again in the background: an issuer that hangs stalls no request.
    async fn keys_for(&self, kid: Option<&str>) -> Result<Arc<JwkSet>, TokenRefusal> {
        if matches!(self.inner.config.keys, KeySource::Fixed(_)) {
            return Ok(self.cached().0);
        }
        let wanted = |keys: &JwkSet| kid.is_none_or(|kid| keys.find(kid).is_some());
        let (keys, fresh) = self.cached();
        if wanted(&keys) && (fresh || !keys.keys.is_empty()) {
            if !fresh {
                self.refresh_in_background();
            }
            return Ok(keys);
        }
        let _one = self.inner.fetching.lock().await;
        // Another token may have fetched them while this one waited.
        let (keys, fresh) = self.cached();
        if fresh && wanted(&keys) {
            return Ok(keys);
        }
        if !self.attempted_recently()
            && let Err(error) = self.refetch().await
        {
            tracing::warn!(target: "agent_airlock", %error, "the issuer's keys could not be fetched");
        }
        let (keys, _) = self.cached();
        if keys.keys.is_empty() {
            return Err(TokenRefusal::KeysUnavailable);
        }
        Ok(keys)
    }

    /// Fetches the keys again on a task of its own, unless a fetch is running or one was attempted within
    /// the refetch interval (outside a Tokio runtime: not at all; the next token past the age asks again).
    fn refresh_in_background(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let server = self.clone();
        runtime.spawn(async move {
            let Ok(_one) = server.inner.fetching.try_lock() else { return };
            if server.attempted_recently() {
                return;
            }
            if let Err(error) = server.refetch().await {
                tracing::warn!(target: "agent_airlock", %error, "the issuer's keys could not be fetched again; the older ones are used");
            }
        });
    }

    fn attempted_recently(&self) -> bool {
        let cache = self.inner.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.last_attempt.is_some_and(|at| at.elapsed() < self.inner.config.refetch_interval)
    }

    fn cached(&self) -> (Arc<JwkSet>, bool) {
        let cache = self.inner.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = cache.fetched.is_some_and(|at| at.elapsed() < self.inner.config.keys_max_age);
        (Arc::clone(&cache.keys), fresh)
    }

    /// Fetches the discovery document and the JWKS it names; the cache keeps the old keys on failure.
    async fn refetch(&self) -> Result<(), String> {
        self.inner.cache.lock().unwrap_or_else(PoisonError::into_inner).last_attempt = Some(Instant::now());
        let issuer = &self.inner.config.issuer;
        let mut last_error = String::new();
        let mut jwks_uri = None;
        for url in discovery_urls(issuer) {
            match self.inner.http.get_json(&url).await {
                Ok(document) => {
                    // RFC 8414 §3.3: the document must be the issuer's own.
                    if document.get("issuer").and_then(Value::as_str) != Some(issuer.as_str()) {
                        last_error = format!("the discovery document at `{url}` names another issuer");
                        continue;
                    }
                    match document.get("jwks_uri").and_then(Value::as_str) {
                        Some(uri) => {
                            jwks_uri = Some(uri.to_owned());
                            break;
                        }
                        None => last_error = format!("the discovery document at `{url}` names no `jwks_uri`"),
                    }
                }
                Err(error) => last_error = error,
            }
        }
        let jwks_uri = jwks_uri.ok_or(last_error)?;
        // Keys fetched in the clear would undo the TLS the discovery document came over; over plain http, only
        // from this host.
        if (issuer.starts_with("https://") && !jwks_uri.starts_with("https://")) || !fetched_safely(&jwks_uri) {
            return Err(format!("the issuer's `jwks_uri` `{jwks_uri}` is not an `https://` URL"));
        }
        let document = self.inner.http.get_json(&jwks_uri).await?;
        let keys: JwkSet =
            serde_json::from_value(document).map_err(|error| format!("`{jwks_uri}` is not a JWKS: {error}"))?;
        let usable = usable_keys(&keys).count();
        {
            let mut cache = self.inner.cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache.keys = Arc::new(keys);
            cache.fetched = Some(Instant::now());
        }
        // After the keys: a verification that read the old generation is never stored.
        self.inner.verified.lock().unwrap_or_else(PoisonError::into_inner).keys_replaced();
        tracing::info!(target: "agent_airlock", keys = usable, "the issuer's signing keys were fetched");
        Ok(())
    }
}

const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The most keys a token without a `kid` is checked against; with more that fit, it is refused as naming an
/// unknown key.
const MAX_KEYS_WITHOUT_KID: usize = 3;

/// Whether keys fetched from `url` cannot be swapped on the way: over `https`, or over `http` from this host
/// (a loopback address or `localhost`, as an issuer a test or a sidecar runs).
fn fetched_safely(url: &str) -> bool {
    let Ok(url) = url::Url::parse(url) else { return false };
    match (url.scheme(), url.host()) {
        ("https", _) => true,
        ("http", Some(url::Host::Ipv4(ip))) => ip.is_loopback(),
        ("http", Some(url::Host::Ipv6(ip))) => ip.is_loopback(),
        ("http", Some(url::Host::Domain(domain))) => domain.eq_ignore_ascii_case("localhost"),
        _ => false,
    }
}

/// RFC 8414 §3.1 (the well-known segment between the host and the issuer's path), then OpenID Connect
/// Discovery (appended to the issuer).
fn discovery_urls(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let mut urls = Vec::with_capacity(2);
    if let Ok(url) = url::Url::parse(issuer) {
        let path = url.path().trim_end_matches('/');
        urls.push(format!("{}/.well-known/oauth-authorization-server{path}", url.origin().ascii_serialization()));
    }
    urls.push(format!("{trimmed}/.well-known/openid-configuration"));
    urls
}

/// The keys of a set that can verify a signature: public keys of an asymmetric type, not marked for
/// encryption only.
fn usable_keys(keys: &JwkSet) -> impl Iterator<Item = &Jwk> {
    keys.keys.iter().filter(|jwk| {
        !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_))
            && !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption) | Some(PublicKeyUse::Other(_)))
    })
}

/// Whether a key may verify a signature made with `alg`: its type is `alg`'s family and, if it names
/// an algorithm, it names `alg`.
fn fits(jwk: &Jwk, alg: Algorithm) -> bool {
    let family = matches!(
        (&jwk.algorithm, alg),
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ) | (AlgorithmParameters::EllipticCurve(_), Algorithm::ES256 | Algorithm::ES384)
            | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
    );
    let named = match jwk.common.key_algorithm {
        None => true,
        Some(named) => key_algorithm(named) == Some(alg),
    };
    family && named
}

fn key_algorithm(named: KeyAlgorithm) -> Option<Algorithm> {
    Some(match named {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

fn refused(kind: &jsonwebtoken::errors::ErrorKind) -> TokenRefusal {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::InvalidSignature => TokenRefusal::Signature,
        ErrorKind::ExpiredSignature => TokenRefusal::Expired,
        ErrorKind::ImmatureSignature => TokenRefusal::NotYetValid,
        ErrorKind::InvalidIssuer => TokenRefusal::Issuer,
        ErrorKind::InvalidAudience => TokenRefusal::Audience,
        ErrorKind::MissingRequiredClaim(_) | ErrorKind::Json(_) | ErrorKind::InvalidClaimFormat(_) => {
            TokenRefusal::Claims
        }
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => TokenRefusal::Algorithm,
        ErrorKind::InvalidKeyFormat
        | ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_) => TokenRefusal::Signature,
        _ => TokenRefusal::Malformed,
    }
}

/// Parses an algorithm name of `--oauth-algorithms` (`RS256`, `ES256`, `EdDSA`, …).
pub fn parse_algorithm(name: &str) -> Result<Algorithm, OAuthConfigError> {
    name.parse::<Algorithm>().map_err(|_| {
        OAuthConfigError::Algorithm(format!(
            "unknown signing algorithm `{name}`, expected one of `RS256`, `RS384`, `RS512`, `PS256`, `PS384`, \
             `PS512`, `ES256`, `ES384`, `EdDSA`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use super::*;

    const ISSUER: &str = "https://issuer.test";
    const RESOURCE: &str = "https://gateway.test/mcp";

    /// An Ed25519 key from a fixed seed: its PKCS#8 encoding (to sign) and its public JWK (to verify).
    fn ed25519(seed: u8, kid: &str) -> (EncodingKey, Value) {
        let seed = [seed; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key().to_bytes();
        // PKCS#8 v1 for Ed25519 (RFC 8410): a fixed prefix, then the 32-byte seed.
        let mut der = hex::decode("302e020100300506032b657004220420").expect("hex");
        der.extend_from_slice(&seed);
        let x = base64_url(&public);
        (EncodingKey::from_ed_der(&der), json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "use": "sig"}))
    }

    fn base64_url(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        out
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn claims(sub: &str) -> Value {
        json!({"iss": ISSUER, "sub": sub, "aud": RESOURCE, "exp": now() + 600, "nbf": now() - 5,
               "groups": ["payments"], "scope": "mcp:tools read"})
    }

    fn sign(key: &EncodingKey, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, claims, key).expect("signed")
    }

    fn server(jwks: Value) -> OAuthResourceServer {
        let keys = KeySource::from_json(&jwks.to_string()).expect("a JWKS");
        let mut config = OAuthConfig::new(ISSUER, RESOURCE, keys);
        config.claims = vec!["groups".to_owned(), "scope".to_owned()];
        OAuthResourceServer::new(config).expect("a resource server")
    }

    fn unsigned(header: &Value, claims: &Value, signature: &str) -> String {
        format!(
            "{}.{}.{signature}",
            base64_url(header.to_string().as_bytes()),
            base64_url(claims.to_string().as_bytes())
        )
    }

    #[tokio::test]
    async fn a_valid_token_proves_its_subject_and_the_claims_kept() {
        let (key, jwk) = ed25519(1, "k1");
        let server = server(json!({"keys": [jwk]}));
        let caller = server.admit(&sign(&key, "k1", &claims("alice"))).await.expect("admitted");
        assert_eq!(caller.name(), "https://issuer.test#alice");
        let identity = caller.identity().expect("an identity");
        assert_eq!((identity.issuer(), identity.subject()), (ISSUER, "alice"));
        assert_eq!(identity.claim("groups"), Some(json!(["payments"])));
        // A space-separated scope becomes a list; a claim not configured is not kept.
        assert_eq!(identity.claim("scope"), Some(json!(["mcp:tools", "read"])));
        let mut extra = claims("alice");
        extra["department"] = json!("finance");
        let caller = server.admit(&sign(&key, "k1", &extra)).await.expect("admitted");
        assert_eq!(caller.identity().and_then(|i| i.claim("department")), None);
        // Without a key id, every key of the algorithm's family is tried.
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = None;
        let token = jsonwebtoken::encode(&header, &claims("bob"), &key).expect("signed");
        assert_eq!(server.admit(&token).await.expect("admitted").name(), "https://issuer.test#bob");
    }

    #[tokio::test]
    async fn keys_past_their_age_are_used_while_fetched_again_in_the_background() {
        let (old, old_jwk) = ed25519(1, "old");
        let (_, new_jwk) = ed25519(2, "new");
        let jwks = Arc::new(Mutex::new(json!({"keys": [old_jwk]})));
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let issuer = loopback_issuer(Arc::clone(&jwks), Arc::clone(&fetches)).await;
        let mut claims = claims("alice");
        claims["iss"] = json!(issuer);
        let token = sign(&old, "old", &claims);
        let mut config = OAuthConfig::new(&issuer, RESOURCE, KeySource::Discover);
        (config.keys_max_age, config.refetch_interval, config.verified_cache) = (Duration::ZERO, Duration::ZERO, 0);
        let server = OAuthResourceServer::new(config).expect("a resource server");
        server.fetch_keys().await.expect("the keys are fetched");
        // The issuer withdraws the key. The keys held are past their age, but the request does not wait for
        // them to be fetched again (it would be refused if it did): they are used, and fetched in the background.
        *jwks.lock().expect("not poisoned") = json!({"keys": [new_jwk]});
        assert!(server.admit(&token).await.is_ok(), "the keys held are used");
        // Once the background fetch lands, the withdrawn key admits nothing.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match server.admit(&token).await.map(|c| c.name().to_owned()) {
                Err(TokenRefusal::UnknownKey) => break,
                other => assert!(Instant::now() < deadline, "the withdrawn key still admits: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(fetches.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    }

    #[tokio::test]
    async fn a_token_naming_no_key_is_checked_against_a_few_keys_at_most() {
        let keys: Vec<(EncodingKey, Value)> = (1..=5).map(|seed| ed25519(seed, &format!("k{seed}"))).collect();
        let kidless = |key: &EncodingKey| {
            let mut header = Header::new(Algorithm::EdDSA);
            header.kid = None;
            jsonwebtoken::encode(&header, &claims("bob"), key).expect("signed")
        };
        let few = server(json!({"keys": keys[..MAX_KEYS_WITHOUT_KID].iter().map(|(_, jwk)| jwk).collect::<Vec<_>>()}));
        assert!(few.admit(&kidless(&keys[MAX_KEYS_WITHOUT_KID - 1].0)).await.is_ok(), "the last of a few keys");
        let many = server(json!({"keys": keys.iter().map(|(_, jwk)| jwk).collect::<Vec<_>>()}));
        let refused = many.admit(&kidless(&keys[0].0)).await.map(|c| c.name().to_owned());
        assert_eq!(refused, Err(TokenRefusal::UnknownKey));
        // Naming its key, the same token is checked against that key alone and admitted.
        assert!(many.admit(&sign(&keys[4].0, "k5", &claims("bob"))).await.is_ok());
    }

    #[tokio::test]
    async fn each_bad_token_is_refused_for_its_reason() {
        let (key, jwk) = ed25519(1, "k1");
        let (rogue, _) = ed25519(2, "k1");
        let server = server(json!({"keys": [jwk]}));
        let with = |change: &dyn Fn(&mut Value)| {
            let mut claims = claims("mallory");
            change(&mut claims);
            sign(&key, "k1", &claims)
        };
        let cases: Vec<(&str, String, TokenRefusal)> = vec![
            ("expired", with(&|c| c["exp"] = json!(now() - 120)), TokenRefusal::Expired),
            ("not yet valid", with(&|c| c["nbf"] = json!(now() + 120)), TokenRefusal::NotYetValid),
            ("another audience", with(&|c| c["aud"] = json!("https://other.test/mcp")), TokenRefusal::Audience),
            ("another issuer", with(&|c| c["iss"] = json!("https://evil.test")), TokenRefusal::Issuer),
            ("no audience", with(&|c| drop(c.as_object_mut().map(|c| c.remove("aud")))), TokenRefusal::Claims),
            ("no subject", with(&|c| drop(c.as_object_mut().map(|c| c.remove("sub")))), TokenRefusal::Claims),
            ("no expiry", with(&|c| drop(c.as_object_mut().map(|c| c.remove("exp")))), TokenRefusal::Claims),
            ("a string expiry", with(&|c| c["exp"] = json!((now() + 600).to_string())), TokenRefusal::Claims),
            ("a string nbf", with(&|c| c["nbf"] = json!((now() + 600).to_string())), TokenRefusal::Claims),
            ("an empty subject", with(&|c| c["sub"] = json!("")), TokenRefusal::Claims),
            ("another key, a known key id", sign(&rogue, "k1", &claims("mallory")), TokenRefusal::Signature),
            ("an unknown key id", sign(&key, "k9", &claims("mallory")), TokenRefusal::UnknownKey),
            (
                "alg none",
                unsigned(&json!({"alg": "none", "typ": "JWT"}), &claims("mallory"), ""),
                TokenRefusal::Malformed,
            ),
            (
                "HS256",
                unsigned(&json!({"alg": "HS256", "typ": "JWT", "kid": "k1"}), &claims("mallory"), "c2ln"),
                TokenRefusal::Algorithm,
            ),
            ("not a JWT", "not-a-jwt".to_owned(), TokenRefusal::Malformed),
        ];
        // A refusal is a fixed phrase (`TokenRefusal` holds nothing of the token), so neither the log line nor
        // the `WWW-Authenticate` challenge built from it can echo a token.
        for (what, token, expected) in cases {
            assert_eq!(server.admit(&token).await.map(|c| c.name().to_owned()), Err(expected), "{what}");
        }
        // A token just past its expiry is still inside the leeway.
        let late = with(&|c| c["exp"] = json!(now() - 30));
        assert!(server.admit(&late).await.is_ok());
    }

    #[tokio::test]
    async fn a_key_is_used_only_for_the_algorithm_it_names() {
        let (key, mut jwk) = ed25519(1, "k1");
        jwk["alg"] = json!("RS256");
        let server = server(json!({"keys": [jwk]}));
        let refused = server.admit(&sign(&key, "k1", &claims("alice"))).await;
        assert_eq!(refused.map(|c| c.name().to_owned()), Err(TokenRefusal::UnknownKey));
        // An algorithm left off the allow-list refuses the token before any key is looked at.
        let (key, jwk) = ed25519(1, "k1");
        let mut config = OAuthConfig::new(
            ISSUER,
            RESOURCE,
            KeySource::from_json(&json!({"keys": [jwk]}).to_string()).expect("a JWKS"),
        );
        config.algorithms = vec![Algorithm::RS256];
        let strict = OAuthResourceServer::new(config).expect("a resource server");
        let refused = strict.admit(&sign(&key, "k1", &claims("alice"))).await;
        assert_eq!(refused.map(|c| c.name().to_owned()), Err(TokenRefusal::Algorithm));
    }

    /// An issuer on loopback serving its discovery document and whatever JWKS `jwks` holds, counting the
    /// JWKS fetches.
    async fn loopback_issuer(jwks: Arc<Mutex<Value>>, fetches: Arc<std::sync::atomic::AtomicUsize>) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let issuer = format!("http://{}", listener.local_addr().expect("an address"));
        let discovery = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = vec![0; 4096];
                let read = stream.read(&mut request).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&request[..read]).into_owned();
                let body = if request.starts_with("GET /jwks ") {
                    fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    jwks.lock().expect("not poisoned").to_string()
                } else {
                    discovery.to_string()
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        issuer
    }

    #[tokio::test]
    async fn discovered_keys_are_fetched_again_for_an_unknown_key_id_at_most_once_per_interval() {
        let (old, old_jwk) = ed25519(1, "old");
        let (new, new_jwk) = ed25519(2, "new");
        let jwks = Arc::new(Mutex::new(json!({"keys": [old_jwk.clone()]})));
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let issuer = loopback_issuer(Arc::clone(&jwks), Arc::clone(&fetches)).await;
        let fetched = || fetches.load(std::sync::atomic::Ordering::SeqCst);
        let token = |key: &EncodingKey, kid: &str| {
            let mut claims = claims("alice");
            claims["iss"] = json!(issuer);
            sign(key, kid, &claims)
        };
        let mut config = OAuthConfig::new(&issuer, RESOURCE, KeySource::Discover);
        config.refetch_interval = Duration::from_secs(3600);
        let patient = OAuthResourceServer::new(config.clone()).expect("a resource server");
        patient.fetch_keys().await.expect("the keys are fetched");
        assert_eq!(fetched(), 1);
        assert!(patient.admit(&token(&old, "old")).await.is_ok());
        // One that may fetch again at once, with the same keys before the rotation.
        config.refetch_interval = Duration::ZERO;
        let eager = OAuthResourceServer::new(config).expect("a resource server");
        eager.fetch_keys().await.expect("the keys are fetched");
        assert_eq!(fetched(), 2);
        // The issuer rotates to a new key: within the interval, an unknown key id fetches nothing.
        *jwks.lock().expect("not poisoned") = json!({"keys": [old_jwk, new_jwk]});
        for _ in 0..3 {
            let refused = patient.admit(&token(&new, "new")).await.map(|c| c.name().to_owned());
            assert_eq!(refused, Err(TokenRefusal::UnknownKey));
        }
        assert_eq!(fetched(), 2, "a stream of unknown key ids hammers the issuer");
        // Past the interval, the first unknown key id fetches the keys again, once, and is admitted.
        assert!(eager.admit(&token(&new, "new")).await.is_ok());
        assert_eq!(fetched(), 3, "the unknown key id fetched the keys once");
        assert!(eager.admit(&token(&old, "old")).await.is_ok());
        assert!(eager.admit(&token(&new, "new")).await.is_ok());
        assert_eq!(fetched(), 3, "known keys are not fetched again");
        // A discovery document naming another issuer is not trusted: this issuer's document, asked for as
        // another issuer's (a path below it), names this one.
        let mut impostor = OAuthConfig::new(format!("{issuer}/other"), RESOURCE, KeySource::Discover);
        impostor.refetch_interval = Duration::ZERO;
        let server = OAuthResourceServer::new(impostor).expect("a resource server");
        let mut other_token = claims("alice");
        other_token["iss"] = json!(format!("{issuer}/other"));
        let refused = server.admit(&sign(&old, "old", &other_token)).await.map(|c| c.name().to_owned());
        assert_eq!(refused, Err(TokenRefusal::KeysUnavailable));
        assert_eq!(fetched(), 3, "no JWKS was fetched for the impostor");
        let error = server.fetch_keys().await.expect_err("the impostor's keys are not fetched");
        assert!(error.contains("names another issuer"), "{error}");
    }

    #[tokio::test]
    async fn a_cached_token_is_refused_once_it_expires_and_the_cache_is_bounded() {
        let (key, jwk) = ed25519(1, "k1");
        let clock = Arc::new(crate::ManualClock::new(Duration::from_secs(now())));
        let keys = KeySource::from_json(&json!({"keys": [jwk]}).to_string()).expect("a JWKS");
        let mut config = OAuthConfig::new(ISSUER, RESOURCE, keys);
        config.verified_cache = 3;
        let server = OAuthResourceServer::with_clock(config, clock.clone()).expect("a resource server");
        let mut short = claims("alice");
        short["exp"] = json!(now() + 10);
        let short = sign(&key, "k1", &short);
        assert!(server.admit(&short).await.is_ok());
        assert_eq!(server.verified_tokens(), 1);
        assert!(server.admit(&short).await.is_ok(), "admitted again from the cache");
        // Past `exp` and the leeway, the cached token is refused (and the refusal is not cached).
        clock.advance(Duration::from_secs(10) + DEFAULT_LEEWAY + Duration::from_secs(1));
        assert_eq!(server.admit(&short).await.map(|c| c.name().to_owned()), Err(TokenRefusal::Expired));
        // Refusals are never cached; the cache holds at most its capacity.
        let bad = sign(&ed25519(2, "k1").0, "k1", &claims("mallory"));
        assert_eq!(server.admit(&bad).await.map(|c| c.name().to_owned()), Err(TokenRefusal::Signature));
        assert_eq!(server.admit(&bad).await.map(|c| c.name().to_owned()), Err(TokenRefusal::Signature));
        for subject in ["a", "b", "c", "d", "e"] {
            let mut fresh = claims(subject);
            fresh["exp"] = json!(clock.now().as_secs() + 600);
            assert!(server.admit(&sign(&key, "k1", &fresh)).await.is_ok());
        }
        assert_eq!(server.verified_tokens(), 3);
    }

    #[tokio::test]
    async fn a_token_of_a_key_the_issuer_removed_is_refused_once_the_keys_are_fetched_again() {
        let (old, old_jwk) = ed25519(1, "old");
        let (new, new_jwk) = ed25519(2, "new");
        let jwks = Arc::new(Mutex::new(json!({"keys": [old_jwk]})));
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let issuer = loopback_issuer(Arc::clone(&jwks), Arc::clone(&fetches)).await;
        let token = |key: &EncodingKey, kid: &str| {
            let mut claims = claims("alice");
            claims["iss"] = json!(issuer);
            sign(key, kid, &claims)
        };
        let mut config = OAuthConfig::new(&issuer, RESOURCE, KeySource::Discover);
        config.refetch_interval = Duration::ZERO;
        let server = OAuthResourceServer::new(config).expect("a resource server");
        let cached = token(&old, "old");
        assert!(server.admit(&cached).await.is_ok());
        assert!(server.admit(&cached).await.is_ok());
        assert_eq!(server.verified_tokens(), 1);
        // The issuer withdraws the old key; a token of its new key makes the gateway fetch the keys again.
        *jwks.lock().expect("not poisoned") = json!({"keys": [new_jwk]});
        assert!(server.admit(&token(&new, "new")).await.is_ok());
        let refused = server.admit(&cached).await.map(|c| c.name().to_owned());
        assert_eq!(refused, Err(TokenRefusal::UnknownKey), "a cached token outlived its key");
    }

    #[test]
    fn configurations_that_cannot_be_safe_are_refused() {
        let (_, jwk) = ed25519(1, "k1");
        let keys = || KeySource::from_json(&json!({"keys": [jwk.clone()]}).to_string()).expect("a JWKS");
        let mut hmac = OAuthConfig::new(ISSUER, RESOURCE, keys());
        hmac.algorithms = vec![Algorithm::ES256, Algorithm::HS256];
        assert!(
            matches!(OAuthResourceServer::new(hmac), Err(OAuthConfigError::Algorithm(why)) if why.contains("shared-secret"))
        );
        let secret_only = KeySource::from_json(r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#);
        assert!(matches!(secret_only, Err(OAuthConfigError::Keys(why)) if why.contains("no public signing key")));
        assert!(matches!(KeySource::from_json("{}"), Err(OAuthConfigError::Keys(_))));
        let fragment = OAuthConfig::new("https://issuer.test#x", RESOURCE, keys());
        assert!(matches!(OAuthResourceServer::new(fragment), Err(OAuthConfigError::Url(_))));
        assert!(matches!(
            OAuthResourceServer::new(OAuthConfig::new("issuer", RESOURCE, keys())),
            Err(OAuthConfigError::Url(_))
        ));
        assert!(parse_algorithm("none").is_err() && parse_algorithm("EdDSA").is_ok());
        // Keys discovered over plain http only from this host: across a network anyone on the path could
        // answer with keys of their own.
        let discover = |issuer: &str| OAuthResourceServer::new(OAuthConfig::new(issuer, RESOURCE, KeySource::Discover));
        for remote in ["http://idp.corp:8080/realms/x", "http://10.0.0.7", "http://[2001:db8::1]:80"] {
            assert!(
                matches!(discover(remote), Err(OAuthConfigError::Url(why)) if why.contains("plain `http`")),
                "{remote}"
            );
        }
        for near in ["http://127.0.0.1:9", "http://localhost:8080/x", "http://[::1]:9", "https://idp.corp"] {
            assert!(discover(near).is_ok(), "{near}");
        }
        // Keys given as a file are not fetched: any issuer URL names them.
        assert!(OAuthResourceServer::new(OAuthConfig::new("http://idp.corp", RESOURCE, keys())).is_ok());
    }

    #[test]
    fn the_metadata_names_the_resource_and_its_issuer_where_rfc_9728_puts_it() {
        let (_, jwk) = ed25519(1, "k1");
        let mut server = server(json!({"keys": [jwk.clone()]}));
        assert_eq!(server.metadata_path(), "/.well-known/oauth-protected-resource/mcp");
        assert_eq!(server.metadata_url(), "https://gateway.test/.well-known/oauth-protected-resource/mcp");
        assert_eq!(
            server.metadata(),
            json!({"resource": RESOURCE, "authorization_servers": [ISSUER], "bearer_methods_supported": ["header"]})
        );
        let mut config = OAuthConfig::new(
            ISSUER,
            "https://gateway.test/",
            KeySource::from_json(&json!({"keys": [jwk]}).to_string()).expect("a JWKS"),
        );
        config.scopes_supported = vec!["mcp:tools".to_owned()];
        server = OAuthResourceServer::new(config).expect("a resource server");
        assert_eq!(server.metadata_path(), "/.well-known/oauth-protected-resource");
        assert_eq!(server.metadata()["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(
            discovery_urls("https://auth.test/tenant/1"),
            [
                "https://auth.test/.well-known/oauth-authorization-server/tenant/1",
                "https://auth.test/tenant/1/.well-known/openid-configuration"
            ]
        );
    }
}
