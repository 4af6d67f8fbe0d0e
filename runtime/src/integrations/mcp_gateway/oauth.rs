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

mod config;
mod keys;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use self::config::refused;
pub use self::config::{
    DEFAULT_ALGORITHMS, DEFAULT_LEEWAY, KEYS_MAX_AGE, KeySource, OAuthConfig, OAuthConfigError, REFETCH_INTERVAL,
    TokenRefusal, VERIFIED_CACHE_CAPACITY, VERIFIED_CACHE_TTL, parse_algorithm,
};
use self::keys::{discovery_urls, fetched_safely, fits, usable_keys};
use super::issuer_client::IssuerClient;
use super::verified_tokens::{self, VerifiedTokens};
use crate::clock::{Clock, SystemClock};
use crate::identity::{Caller, Identity};

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

#[cfg(test)]
mod tests;
