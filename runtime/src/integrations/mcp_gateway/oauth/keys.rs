//! The issuer's keys: where discovery may fetch them from, which keys of a JWKS may verify a token and
//! with which algorithm.

use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};

/// Whether keys fetched from `url` cannot be swapped on the way: over `https`, or over `http` from this host
/// (a loopback address or `localhost`, as an issuer a test or a sidecar runs).
pub(super) fn fetched_safely(url: &str) -> bool {
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
pub(super) fn discovery_urls(issuer: &str) -> Vec<String> {
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
pub(super) fn usable_keys(keys: &JwkSet) -> impl Iterator<Item = &Jwk> {
    keys.keys.iter().filter(|jwk| {
        !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_))
            && !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption) | Some(PublicKeyUse::Other(_)))
    })
}

/// Whether a key may verify a signature made with `alg`: its type is `alg`'s family and, if it names
/// an algorithm, it names `alg`.
pub(super) fn fits(jwk: &Jwk, alg: Algorithm) -> bool {
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

pub(super) fn key_algorithm(named: KeyAlgorithm) -> Option<Algorithm> {
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
