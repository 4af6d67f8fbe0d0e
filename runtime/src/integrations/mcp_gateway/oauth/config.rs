//! What the resource server is told: the issuer, where its keys are, the audience, the claims kept, the
//! algorithms allowed, the clock's leeway; and the fixed phrases a refused token is answered with (a
//! verification error read as one of them).

use std::path::Path;
use std::time::Duration;

use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::JwkSet;

use super::keys::usable_keys;

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
    /// on this host (a loopback address or `localhost`; another is refused by [`OAuthResourceServer::new`](super::OAuthResourceServer::new)).
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
    /// The claims kept in the caller's [`Identity`](crate::identity::Identity) besides `iss` and `sub` (e.g. `groups`, `scope`).
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

/// A verification error of `jsonwebtoken`, as the fixed phrase the caller is answered with.
pub(super) fn refused(kind: &jsonwebtoken::errors::ErrorKind) -> TokenRefusal {
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
