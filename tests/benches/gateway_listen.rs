//! The gateway's added latency over `--listen`, every path in one run so the ratios compare (BENCHMARKS.md
//! §12): a `tools/call` sent straight to the upstream over Streamable HTTP, and through `airlock mcp --listen`
//! admitted by the static bearer token, by an OAuth access token (ES256, the costliest signature to verify) the
//! gateway has verified before (its cache of verified tokens), and by a new OAuth token on every call (a
//! signature verified per call); and what the tool-poisoning scan costs each listing of the upstream's tools.
//!
//! One upstream serves every path: the Python SDK server of `tests/mcp/upstream_server.py` (its `read_note`
//! tool) on Streamable HTTP, which the gateways reach with `--upstream-url`, so the direct path and the
//! gateways' differ by the gateway alone. One more gateway (static token) runs the same server as its child
//! over stdio, the usual deployment. Each gateway runs `default = "allow"` and audits every call to a redb
//! file on a tmpfs when there is one (the gateway's own work, as in §8); one more (static token) audits to an
//! append-only file there instead (`--audit-file`), its records written by the log's own thread. The client is the same for every path:
//! one HTTP/1.1 connection per path (reqwest, `TCP_NODELAY`, each request one write), the MCP session set up
//! once, then `tools/call` POSTs, each with its `Authorization` header. Calls alternate in blocks of 50 between
//! the paths so load on the shared machine falls on all alike. The OAuth gateways check tokens against
//! `benches/keys/jwks.json` (`--jwks-file`; test keys, no secret of anyone's).
//!
//! The scan runs when the gateway lists the upstream's tools (at start and on `list_changed`), never on a call
//! nor on a client's `tools/list`; there is no switch to turn it off, so its cost is timed here in process:
//! `scan_tool` over the tools the gateway lists, as one listing costs.
//!
//! `cargo bench -p agent-airlock-tests --bench gateway_listen` (`-- --calls N` to change the sample size).

use std::time::{Duration, Instant};

use agent_airlock::integrations::mcp_gateway::scan_tool;
use agent_airlock_tests::gateway_bench::{self, NOTE, Scratch, line, micros};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
const JWKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/keys/jwks.json");
const ES256_KEY: &[u8] = include_bytes!("../../benches/keys/es256.der");
const ISSUER: &str = "https://issuer.test";
const STATIC_TOKEN: &str = "a-static-gateway-token-of-32-chars";
const BLOCK: usize = 50;
/// The upstream's call log, every path's calls in it.
const LOG: &str = "calls.log";

/// An ES256 token of the issuer for `audience`; `nonce` makes each token distinct.
fn token(key: &EncodingKey, audience: &str, nonce: usize) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    let claims = json!({"iss": ISSUER, "sub": "alice", "aud": audience, "iat": now, "exp": now + 3600,
                        "jti": format!("bench-{nonce}")});
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("es256".to_owned());
    jsonwebtoken::encode(&header, &claims, key).expect("a signed token")
}

/// One MCP session over Streamable HTTP, on a connection of its own.
struct Session {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl Session {
    async fn open(url: &str, token: Option<&str>) -> Session {
        // reqwest's default, said here because the figures depend on it: without it a request's last segment
        // can wait for the ACK of the one before (Nagle), which the peer delays by up to 40 ms.
        let http = reqwest::Client::builder().tcp_nodelay(true).pool_max_idle_per_host(1).build().expect("a client");
        let mut session = Session { http, url: url.to_owned(), session: None, next_id: 1 };
        session
            .request(
                token,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "gateway_listen bench", "version": "0"}}),
            )
            .await;
        session.notify(token, "notifications/initialized").await;
        session
    }

    fn post(&self, token: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    async fn notify(&self, token: Option<&str>, method: &str) {
        let response = self.post(token, &json!({"jsonrpc": "2.0", "method": method})).send().await.expect("sent");
        assert!(response.status().is_success(), "{method}: {}", response.status());
    }

    /// Sends a request and returns its JSON-RPC result.
    async fn request(&mut self, token: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.post(token, &body).send().await.expect("sent");
        assert!(response.status().is_success(), "{method}: {}", response.status());
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = Some(session.to_str().expect("ASCII").to_owned());
        }
        let text = response.text().await.expect("a body");
        // A JSON body, or an event stream whose `data:` lines carry the messages.
        let messages: Vec<Value> = match serde_json::from_str(&text) {
            Ok(message) => vec![message],
            Err(_) => text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str(data.trim()).ok())
                .collect(),
        };
        let answer = messages.into_iter().find(|m| m.get("id") == Some(&json!(id))).expect("an answer");
        answer.get("result").cloned().unwrap_or_else(|| panic!("{method} failed: {answer}"))
    }

    async fn read_note(&mut self, token: Option<&str>) -> Duration {
        let started = Instant::now();
        let result = self.request(token, "tools/call", json!({"name": "read_note", "arguments": {"name": NOTE}})).await;
        let took = started.elapsed();
        assert_ne!(result.get("isError"), Some(&json!(true)), "{result}");
        took
    }
}

/// How a path's calls present themselves.
enum Credential {
    None,
    Fixed(String),
    /// A token the gateway has not seen on every call (minted before the timing).
    Fresh(std::vec::IntoIter<String>),
}

impl Credential {
    fn next(&mut self) -> Option<String> {
        match self {
            Credential::None => None,
            Credential::Fixed(token) => Some(token.clone()),
            Credential::Fresh(tokens) => Some(tokens.next().expect("enough tokens")),
        }
    }
}

struct Path {
    label: &'static str,
    session: Session,
    credential: Credential,
    times: Vec<Duration>,
}

impl Path {
    async fn open(label: &'static str, url: &str, mut credential: Credential) -> Path {
        let session = Session::open(url, credential.next().as_deref()).await;
        Path { label, session, credential, times: Vec::new() }
    }

    async fn call(&mut self) -> Duration {
        let token = self.credential.next();
        self.session.read_note(token.as_deref()).await
    }
}

fn main() {
    let calls = gateway_bench::calls_arg(1000);
    let venv = gateway_bench::python(env!("CARGO_TARGET_TMPDIR"));
    let scratch = Scratch::new(true);
    let python = venv.python();
    let (upstream_url, _upstream) = gateway_bench::http_upstream(&scratch, python, LOG);

    let listen = |name: &str, extra: &[&str], token: Option<&str>, stdio: bool| {
        let db = scratch.path(&format!("{name}.redb"));
        let upstream = if stdio { scratch.upstream(python, LOG) } else { Vec::new() };
        let mut args = vec!["--listen", "127.0.0.1:0"];
        if !stdio {
            args.extend(["--upstream-url", upstream_url.as_str()]);
        }
        args.extend(extra);
        let mut command = gateway_bench::gateway_command(AIRLOCK, &scratch, &db, &args, &upstream);
        if let Some(token) = token {
            command.env("AIRLOCK_GATEWAY_TOKEN", token);
        }
        gateway_bench::listening_gateway(command)
    };
    let oauth = ["--oauth-issuer", ISSUER, "--jwks-file", JWKS];
    let (static_url, _static) = listen("static", &[], Some(STATIC_TOKEN), false);
    let (cached_url, _cached) = listen("oauth_cached", &oauth, None, false);
    let (fresh_url, _fresh) = listen("oauth_fresh", &oauth, None, false);
    let (stdio_url, _stdio) = listen("static_stdio", &[], Some(STATIC_TOKEN), true);
    let audit_file = scratch.path("static_file.audit");
    let audit_file = audit_file.to_str().expect("a UTF-8 path");
    let (file_url, _file) = listen("static_file", &["--audit-file", audit_file], Some(STATIC_TOKEN), false);

    let key = EncodingKey::from_ec_der(ES256_KEY);
    let cached_token = token(&key, &cached_url, 0);
    // Every call of the fresh path (warm-up, timed, the session's opening two) presents a new token.
    let fresh_tokens: Vec<String> = (0..calls + 2 * BLOCK + 2).map(|n| token(&key, &fresh_url, n + 1)).collect();

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    runtime.block_on(async {
        let fixed = |token: &str| Credential::Fixed(token.to_owned());
        let mut paths = vec![
            Path::open("direct (client -> upstream, no gateway)", &upstream_url, Credential::None).await,
            Path::open("gateway, static token", &static_url, fixed(STATIC_TOKEN)).await,
            Path::open("gateway, OAuth ES256 verified before (cache)", &cached_url, fixed(&cached_token)).await,
            Path::open("gateway, OAuth ES256 new token per call", &fresh_url, Credential::Fresh(fresh_tokens.into_iter()))
                .await,
            Path::open("gateway, static token, upstream on stdio", &stdio_url, fixed(STATIC_TOKEN)).await,
            Path::open("gateway, static token, --audit-file", &file_url, fixed(STATIC_TOKEN)).await,
        ];

        // What one listing's scan costs: the tools the gateway lists, each scanned.
        let listed = paths[1].session.request(Some(STATIC_TOKEN), "tools/list", json!({})).await;
        let tools: Vec<rmcp::model::Tool> =
            serde_json::from_value(listed["tools"].clone()).expect("the gateway's tools");
        let scans = 1000;
        let started = Instant::now();
        for _ in 0..scans {
            for tool in &tools {
                std::hint::black_box(scan_tool(std::hint::black_box(tool)));
            }
        }
        let per_listing = started.elapsed() / scans;

        for path in &mut paths {
            for _ in 0..BLOCK {
                path.call().await;
            }
        }
        while paths[0].times.len() < calls {
            for path in &mut paths {
                for _ in 0..BLOCK {
                    let took = path.call().await;
                    path.times.push(took);
                }
            }
        }
        for path in &mut paths {
            path.times.sort();
        }
        println!(
            "calls per path: {} (blocks of {BLOCK}, alternating; audit on {})",
            paths[0].times.len(),
            if scratch.on_tmpfs { "tmpfs" } else { "the disk" }
        );
        let direct = paths[0].times.clone();
        let static_token = paths[1].times.clone();
        println!("beside the direct path:");
        for path in &paths {
            line(path.label, &path.times, (path.label != paths[0].label).then_some(direct.as_slice()));
        }
        println!("beside the gateway with the static token:");
        for path in paths[2..4].iter().chain(&paths[5..]) {
            line(path.label, &path.times, Some(&static_token));
        }
        println!(
            "scan of the {} tools the gateway lists: {:.1} us per listing (at start and on list_changed, never on a call)",
            tools.len(),
            micros(per_listing)
        );
        let made: usize = paths.iter().map(|path| path.times.len() + BLOCK).sum();
        assert_eq!(scratch.calls_logged(LOG), made, "every call reached the upstream");
    });
}
