//! `airlock mcp --listen --oauth-issuer …`: the gateway as an OAuth 2.1 resource server, in front of the Python
//! SDK upstream of `tests/mcp/upstream_server.py`. The issuer is `tests/mcp/oauth_issuer.py` on loopback (its own
//! keys, RFC 8414 discovery, a JWKS); the client, `tests/mcp/oauth_client.py`, mints real tokens with PyJWT and
//! speaks MCP with the official Python SDK over Streamable HTTP. Refused tokens never reach the upstream; two
//! identities see different tool lists and different outcomes of one `identity.groups` condition; rate limits
//! and audit records follow the identity.

use std::io::BufReader;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::gateway;
use gateway::{HttpSession, Listening, Reaped, Scratch, run_client, venv, word_after};

const ISSUER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/oauth_issuer.py");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/oauth_client.py");

const POLICY: &str = r#"version = 1
default = "allow"
deny = ["delete_everything"]

[tools.read_note]
rate = "1/minute"
rate_per = "thread"

[[tools.transfer.when]]
if = 'not (identity.groups contains "payments")'
deny = "payments team only"

[[tools.write_note.when]]
if = 'identity.sub == "alice"'
escalate = "alice's notes are reviewed"
"#;

#[test]
fn the_gateway_admits_oauth_tokens_of_its_issuer_only_and_the_policy_sees_who_calls() {
    let venv = venv();
    let scratch = Scratch::with_policy(POLICY);

    let mut issuer = venv
        .command()
        .arg(ISSUER)
        .arg(scratch.path("issuer"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the issuer starts");
    let mut issuer_out = BufReader::new(issuer.stdout.take().expect("stdout is piped"));
    let _issuer = Reaped(issuer);
    let issuer_url = word_after(&mut issuer_out, "issuer ", "the issuer");

    let gateway = Listening::start(
        scratch
            .gateway()
            .args(["--listen", "127.0.0.1:0", "--oauth-issuer", &issuer_url, "--oauth-claims", "groups,scope"])
            .args(["--oauth-scopes", "mcp:tools", "--"])
            .args(scratch.upstream(&venv)),
    );

    let config = json!({
        "url": gateway.url,
        "keys": scratch.path("issuer").join("keys.json"),
        "log": scratch.path("calls.log"),
        "notes": scratch.path("notes"),
    });
    run_client(&venv, CLIENT, &config, scratch.dir(), 20);
    gateway.terminate();

    // The keys were fetched once, at start: no token (not even those naming an unknown key id, within the
    // refetch interval) made the gateway fetch them again.
    let requests = std::fs::read_to_string(scratch.path("issuer").join("requests.log")).expect("the issuer logged");
    assert_eq!(requests.lines().collect::<Vec<_>>(), ["/.well-known/oauth-authorization-server", "/jwks.json"]);

    // The audit records name who asked: the subject, prefixed with its issuer.
    let records = scratch.audit_records();
    let transfers: Vec<(String, Option<String>)> = records
        .iter()
        .filter(|record| record.tool == "transfer")
        .map(|record| (record.outcome.to_string(), record.caller.clone()))
        .collect();
    let caller = |sub: &str| Some(format!("{issuer_url}#{sub}"));
    assert_eq!(
        transfers,
        [
            ("executed".to_owned(), caller("alice")),
            ("refused (denied)".to_owned(), caller("bob")),
            ("refused (denied)".to_owned(), caller("carol")),
        ],
        "{records:#?}"
    );
    assert!(records.iter().all(|record| record.caller.as_deref().is_some_and(|c| c.starts_with(&issuer_url))));
    // The caller is part of each record's hashed body: the chain still verifies.
    let log = agent_airlock::audit::AuditLog::open(scratch.path("airlock.redb"), Default::default())
        .expect("the gateway's audit log opens");
    let verified = agent_airlock::audit::verify(&log, None).expect("the log verifies");
    assert_eq!(verified.records, records.len() as u64, "{verified}");
}

#[test]
fn oauth_and_the_static_token_are_exclusive_and_a_bad_issuer_stops_the_start() {
    let scratch = Scratch::with_policy(POLICY);
    let run = |extra: &[&str], token: Option<&str>| {
        let mut command = scratch.gateway();
        command.args(["--listen", "127.0.0.1:0", "--upstream-url", "http://127.0.0.1:9/mcp"]).args(extra);
        if let Some(token) = token {
            command.env("AIRLOCK_GATEWAY_TOKEN", token);
        }
        let output = command.output().expect("airlock runs");
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let both = run(&["--oauth-issuer", "http://127.0.0.1:9"], Some("a-static-token"));
    assert!(both.contains("unset `AIRLOCK_GATEWAY_TOKEN`"), "{both}");
    let unreachable = run(&["--oauth-issuer", "http://127.0.0.1:9"], None);
    assert!(unreachable.contains("the issuer's keys cannot be fetched"), "{unreachable}");
    let hmac = run(&["--oauth-issuer", "http://127.0.0.1:9", "--oauth-algorithms", "RS256,HS256"], None);
    assert!(hmac.contains("shared-secret algorithm"), "{hmac}");
    let jwks = scratch.path("jwks.json");
    std::fs::write(&jwks, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).expect("written");
    let symmetric = run(&["--oauth-issuer", "http://127.0.0.1:9", "--jwks-file", jwks.to_str().expect("UTF-8")], None);
    assert!(symmetric.contains("holds no public signing key"), "{symmetric}");
}

/// An OAuth issuer on loopback over HTTPS: a CA of the test's own signs its certificate for `127.0.0.1`; it
/// serves its RFC 8414 discovery document and a JWKS with one P-256 key, and counts the requests it answers.
struct HttpsIssuer {
    url: String,
    /// The CA's certificate (PEM).
    ca_pem: String,
    signing_key: jsonwebtoken::EncodingKey,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
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

fn test_ca(name: &str) -> (rcgen::CertificateParams, rcgen::KeyPair) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    (params, rcgen::KeyPair::generate().expect("a CA key"))
}

impl HttpsIssuer {
    fn start() -> Self {
        use std::sync::Arc;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject as _;

        let (ca_params, ca_key) = test_ca("airlock test issuer CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
        let ca = rcgen::Issuer::new(ca_params, ca_key);
        let tls_key = rcgen::KeyPair::generate().expect("the issuer's TLS key");
        let tls_cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("server params")
            .signed_by(&tls_key, &ca)
            .expect("the issuer's certificate");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![rustls::pki_types::CertificateDer::from_pem_slice(tls_cert.pem().as_bytes()).expect("PEM")],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(tls_key.serialize_pem().as_bytes()).expect("PEM"),
            )
            .expect("a TLS server configuration");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        // The token signing key: P-256, published as a JWK (x and y of the uncompressed point).
        let signing = rcgen::KeyPair::generate().expect("a signing key");
        let point = signing.public_key_raw();
        let jwk = json!({"kty": "EC", "crv": "P-256", "x": base64_url(&point[1..33]), "y": base64_url(&point[33..65]),
                         "kid": "es-1", "alg": "ES256", "use": "sig"});
        let signing_key = jsonwebtoken::EncodingKey::from_ec_der(&signing.serialize_der());

        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a port");
        let url = format!("https://{}", listener.local_addr().expect("an address"));
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/jwks.json")}).to_string();
        let jwks = json!({"keys": [jwk]}).to_string();
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, discovery, jwks, counted) =
                    (acceptor.clone(), discovery.clone(), jwks.clone(), Arc::clone(&counted));
                tokio::spawn(async move {
                    let Ok(mut stream) = acceptor.accept(tcp).await else { return };
                    let mut request = vec![0; 4096];
                    let read = stream.read(&mut request).await.unwrap_or(0);
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let request = String::from_utf8_lossy(&request[..read]).into_owned();
                    let body = if request.starts_with("GET /.well-known/oauth-authorization-server ") {
                        discovery
                    } else if request.starts_with("GET /jwks.json ") {
                        jwks
                    } else {
                        let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await;
                        return;
                    };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        HttpsIssuer { url, ca_pem: ca_cert.pem(), signing_key, requests, _runtime: runtime }
    }

    /// A token of this issuer for `audience`, signed by `key` under the key id `kid`.
    fn token(&self, key: &jsonwebtoken::EncodingKey, kid: &str, audience: &str) -> String {
        let now = jsonwebtoken::get_current_timestamp();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(kid.to_owned());
        let claims = json!({"iss": self.url, "sub": "alice", "aud": audience, "exp": now + 600, "iat": now});
        jsonwebtoken::encode(&header, &claims, key).expect("a signed token")
    }
}

/// `airlock mcp --listen --oauth-issuer https://…` in front of the Python upstream, trusting the CA in
/// `ca_file` (`SSL_CERT_FILE`, as rustls-native-certs reads it).
fn https_gateway(issuer: &str, ca_file: &std::path::Path, scratch: &Scratch) -> std::process::Command {
    let mut command = scratch.gateway();
    command
        .args(["--listen", "127.0.0.1:0", "--oauth-issuer", issuer, "--"])
        .args(scratch.upstream(&venv()))
        .env_remove("SSL_CERT_DIR")
        .env("SSL_CERT_FILE", ca_file);
    command
}

#[test]
fn the_issuers_keys_are_fetched_over_https_trusting_the_ca_of_ssl_cert_file_and_no_other() {
    let issuer = HttpsIssuer::start();
    let scratch = Scratch::with_policy(POLICY);
    let path = |name: &str| scratch.path(name);
    std::fs::write(path("ca.pem"), &issuer.ca_pem).expect("the CA is written");
    let (other_params, other_key) = test_ca("another CA");
    let other = other_params.self_signed(&other_key).expect("another CA certificate");
    std::fs::write(path("other-ca.pem"), other.pem()).expect("the other CA is written");

    // A CA that did not sign the issuer's certificate: the gateway does not start, and says which URL failed.
    let refused = https_gateway(&issuer.url, &path("other-ca.pem"), &scratch).output().expect("airlock runs");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("the issuer's keys cannot be fetched"), "{stderr}");
    assert!(stderr.contains(&format!("`{}/.well-known/", issuer.url)), "{stderr}");
    assert!(stderr.contains("certificate is not trusted"), "{stderr}");
    assert_eq!(issuer.requests.load(std::sync::atomic::Ordering::SeqCst), 0, "a request passed an untrusted TLS");

    // The issuer's own CA: the keys are fetched over TLS, a token signed by them is admitted.
    let gateway = Listening::start(&mut https_gateway(&issuer.url, &path("ca.pem"), &scratch));
    let url = &gateway.url;
    assert_eq!(issuer.requests.load(std::sync::atomic::Ordering::SeqCst), 2, "discovery, then the JWKS");

    let initialize = |token: &str| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let response = runtime.block_on(gateway::initialize(&reqwest::Client::new(), url, token, "https-issuer-test"));
        response.status().as_u16()
    };
    assert_eq!(initialize(&issuer.token(&issuer.signing_key, "es-1", url)), 200);
    let rogue = rcgen::KeyPair::generate().expect("a rogue key");
    let rogue = jsonwebtoken::EncodingKey::from_ec_der(&rogue.serialize_der());
    assert_eq!(initialize(&issuer.token(&rogue, "es-1", url)), 401, "a key the issuer does not publish");
}

/// The cap on pending approval requests (4 per tool) counts per caller over `--listen`: two MCP sessions of
/// one OAuth subject share it (a new session is no fresh budget), while another subject has a cap of its own.
#[test]
fn the_pending_approvals_of_one_caller_are_capped_across_their_sessions() {
    const JWKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/keys/jwks.json");
    const ES256_KEY: &[u8] = include_bytes!("../../../benches/keys/es256.der");
    const CAP: usize = agent_airlock::approval::DEFAULT_MAX_PENDING as usize;
    let venv = venv();
    // Every write waits for an operator nobody is: each stays pending for the whole test.
    let scratch = Scratch::with_policy(
        "version = 1\ndefault = \"allow\"\n\n[tools.write_note]\nescalate = \"reviewed\"\napprover = \"operator\"\n",
    );
    // Each request recorded as pending is announced on standard error.
    let (waiting, announced) = std::sync::mpsc::channel();
    let gateway = Listening::start_watching(
        scratch
            .gateway()
            .args(["--multi-process", "--listen", "127.0.0.1:0", "--oauth-issuer", "https://issuer.test"])
            .args(["--jwks-file", JWKS, "--approval-timeout-secs", "120", "--"])
            .args(scratch.upstream(&venv))
            // Each recorded request is logged at `info`.
            .env("AIRLOCK_LOG", "agent_airlock=info")
            // The approval key an operator would decide with (none does here).
            .env("AIRLOCK_APPROVAL_KEY", "0f".repeat(32)),
        move |line| {
            if line.contains("waits for an operator") {
                let _ = waiting.send(line);
            }
        },
    );
    let url = &gateway.url;
    let await_pending = |count: usize| {
        for n in 0..count {
            announced
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("only {n} of {count} more requests were recorded as pending"));
        }
    };

    let key = jsonwebtoken::EncodingKey::from_ec_der(ES256_KEY);
    let token = |sub: &str| {
        let now = jsonwebtoken::get_current_timestamp();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("es256".to_owned());
        let claims = json!({"iss": "https://issuer.test", "sub": sub, "aud": url, "iat": now, "exp": now + 600});
        jsonwebtoken::encode(&header, &claims, &key).expect("a signed token")
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    runtime.block_on(async {
        let alice = [HttpSession::open(url, &token("alice")).await, HttpSession::open(url, &token("alice")).await];
        let bob = HttpSession::open(url, &token("bob")).await;
        // Alice fills her cap from two sessions, half in each; every call waits.
        let mut held = Vec::new();
        for n in 0..CAP {
            let session = alice[n % 2].clone();
            held.push(tokio::spawn(async move { session.write_note(n as u64 + 1).await }));
        }
        tokio::task::block_in_place(|| await_pending(CAP));
        // One more from either session is refused at once, nothing recorded.
        for (n, session) in alice.iter().enumerate() {
            let refused = tokio::time::timeout(Duration::from_secs(30), session.write_note(100 + n as u64))
                .await
                .expect("refused without waiting");
            assert!(
                refused.contains(&format!("already has {CAP} approval requests waiting for this caller")),
                "{refused}"
            );
        }
        // Bob has a cap of his own: his calls wait (recorded) up to it, then he is refused too.
        for n in 0..CAP {
            let session = bob.clone();
            held.push(tokio::spawn(async move { session.write_note(200 + n as u64).await }));
        }
        tokio::task::block_in_place(|| await_pending(CAP));
        let refused =
            tokio::time::timeout(Duration::from_secs(30), bob.write_note(300)).await.expect("refused without waiting");
        assert!(refused.contains("waiting for this caller"), "{refused}");
        assert!(announced.try_recv().is_err(), "no refused call was recorded as pending");
        assert!(held.iter().all(|call| !call.is_finished()), "every recorded call still waits");
        for call in held {
            call.abort();
        }
    });
    assert_eq!(scratch.upstream_calls(), "", "no write reached the upstream");
}

/// Over `--listen` a call is answered in two writes (the head with the event stream's first event, then the
/// result's event); without `TCP_NODELAY` on the gateway's socket the second waited for the client's delayed ACK,
/// 40 ms on Linux, on every call (43.9 ms to 48 ms each, measured with `set_nodelay(false)`). Twenty calls on
/// one connection: the quickest is well under that. Not a performance check: the quickest of twenty is slowed
/// past 35 ms only by the stall (or by a machine so loaded that every one of twenty calls waits), so the test
/// does not flake under load the way a median would.
#[test]
fn a_call_over_listen_does_not_wait_for_a_delayed_ack() {
    const TOKEN: &str = "a-static-gateway-token-of-32-chars";
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    scratch.notes(&[("a.txt", "a note")]);
    let gateway = Listening::start(
        scratch
            .gateway()
            .args(["--listen", "127.0.0.1:0", "--"])
            .args(scratch.upstream(&venv))
            .env("AIRLOCK_GATEWAY_TOKEN", TOKEN),
    );
    let url = &gateway.url;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let mut times = runtime.block_on(async {
        let session = HttpSession::open(url, TOKEN).await;
        let mut times = Vec::new();
        for id in 1..=20 {
            let started = std::time::Instant::now();
            let text = session.call(id, "read_note", json!({"name": "a.txt"})).await;
            times.push(started.elapsed());
            assert_eq!(text, "a note");
        }
        times
    });
    times.sort();
    assert!(times[0] < Duration::from_millis(35), "the quickest of twenty calls took {:?}: {times:?}", times[0]);
}
