//! Unit tests of `oauth`.

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
    format!("{}.{}.{signature}", base64_url(header.to_string().as_bytes()), base64_url(claims.to_string().as_bytes()))
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
        ("alg none", unsigned(&json!({"alg": "none", "typ": "JWT"}), &claims("mallory"), ""), TokenRefusal::Malformed),
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
    let mut config =
        OAuthConfig::new(ISSUER, RESOURCE, KeySource::from_json(&json!({"keys": [jwk]}).to_string()).expect("a JWKS"));
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
