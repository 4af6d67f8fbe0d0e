//! What admitting one `--listen` request costs the gateway: the static bearer token (a SHA-256 digest and a
//! comparison) side by side with an OAuth access token (a JWT: header, signature against the issuer's JWKS,
//! `iss`/`aud`/`exp`/`nbf`, the identity built from its claims) for each signature family, and the policy's
//! identity condition on the admitted caller, and a token admitted again from the cache of verified tokens
//! (its SHA-256 and a lookup; the `oauth_*` figures are measured with that cache off). One run, so the figures
//! compare.
//!
//! The keys under `benches/keys/` are test keys made for this benchmark (no secret of anyone's).
//!
//! `cargo bench -p agent-airlock-benches --bench gateway_auth`

use std::hint::black_box;
use std::time::Duration;

use agent_airlock::integrations::mcp_gateway::{BearerToken, KeySource, OAuthConfig, OAuthResourceServer};
use agent_airlock::policy::condition::Condition;
use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Map, json};

const ISSUER: &str = "https://issuer.test";
const RESOURCE: &str = "https://gateway.test/mcp";

fn token(alg: Algorithm, kid: &str, key: &EncodingKey) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    let claims = json!({
        "iss": ISSUER, "sub": "alice", "aud": RESOURCE, "iat": now, "nbf": now - 5, "exp": now + 3600,
        "groups": ["payments", "staff"], "scope": "mcp:tools read",
    });
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &claims, key).expect("the token is signed")
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let keys = KeySource::from_json(include_str!("../keys/jwks.json")).expect("the JWKS");
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, keys);
    config.claims = vec!["groups".to_owned(), "scope".to_owned()];
    let cached = OAuthResourceServer::new(config.clone()).expect("a resource server");
    config.verified_cache = 0;
    let server = OAuthResourceServer::new(config).expect("a resource server");
    let static_token = "a-static-gateway-token-of-32-chars";
    let bearer = BearerToken::new(static_token).expect("a token");
    let tokens = [
        (
            "oauth_rs256",
            token(Algorithm::RS256, "rs256", &EncodingKey::from_rsa_der(include_bytes!("../keys/rs256.der"))),
        ),
        (
            "oauth_es256",
            token(Algorithm::ES256, "es256", &EncodingKey::from_ec_der(include_bytes!("../keys/es256.der"))),
        ),
        (
            "oauth_eddsa",
            token(Algorithm::EdDSA, "eddsa", &EncodingKey::from_ed_der(include_bytes!("../keys/eddsa.der"))),
        ),
    ];
    for (name, token) in &tokens {
        assert!(runtime.block_on(server.admit(token)).is_ok(), "{name} is admitted");
    }
    let caller = runtime.block_on(server.admit(&tokens[0].1)).expect("admitted");
    let identity = caller.identity().expect("an identity");
    let condition = Condition::parse(r#"not (identity.groups contains "payments")"#).expect("a condition");
    let no_arguments = Map::new();

    let mut group = c.benchmark_group("gateway_auth");
    group.bench_function("static_token", |b| b.iter(|| black_box(bearer.matches(black_box(static_token)))));
    for (name, token) in &tokens {
        group.bench_function(*name, |b| b.iter(|| black_box(runtime.block_on(server.admit(black_box(token))).is_ok())));
    }
    // The cache's cost does not depend on the algorithm: an RS256 token, the costliest to verify.
    assert!(runtime.block_on(cached.admit(&tokens[0].1)).is_ok());
    assert_eq!(cached.verified_tokens(), 1);
    group.bench_function("oauth_cached", |b| {
        b.iter(|| black_box(runtime.block_on(cached.admit(black_box(&tokens[0].1))).is_ok()))
    });
    group.bench_function("identity_condition", |b| {
        b.iter(|| black_box(condition.evaluate_for(&no_arguments, Some(black_box(identity)))))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
