//! The gateway's added latency over `--listen` with identity on and off, side by side (BENCHMARKS.md §12): a
//! `tools/call` through `airlock mcp --listen` admitted by the static bearer token, by an OAuth access token
//! (ES256, the costliest signature to verify) the gateway has verified before (its cache of verified tokens),
//! and by a fresh OAuth token on every call (a signature verified per call, as without the cache); and what the
//! tool-poisoning scan costs each listing of the upstream's tools.
//!
//! The upstream is the Python SDK server of `tests/mcp/upstream_server.py` (its `read_note` tool); each gateway
//! runs `default = "allow"` and audits every call to a redb file on a tmpfs when there is one (the gateway's
//! own work, as in §8). The client is the same for every path: one HTTP/1.1 connection per gateway (reqwest),
//! the MCP session set up once, then `tools/call` POSTs, each with its `Authorization` header. Calls alternate in
//! blocks of 50 between the paths so load on the shared machine falls on all alike. The OAuth gateways check
//! tokens against `benches/keys/jwks.json` (`--jwks-file`; test keys, no secret of anyone's).
//!
//! The scan runs when the gateway lists the upstream's tools (at start and on `list_changed`), never on a call;
//! there is no switch to turn it off, so its cost is timed here in process: `scan_tool` over the tools the
//! gateway lists, as one listing costs.
//!
//! `cargo bench -p agent-airlock-tests --bench gateway_listen` (`-- --calls N` to change the sample size).

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_airlock::integrations::mcp_gateway::scan_tool;
use agent_airlock_tests::python_env::PythonEnv;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");
const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements.txt");
const JWKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/keys/jwks.json");
const ES256_KEY: &[u8] = include_bytes!("../../benches/keys/es256.der");
const ISSUER: &str = "https://issuer.test";
const STATIC_TOKEN: &str = "a-static-gateway-token-of-32-chars";
const BLOCK: usize = 50;

/// A process killed when the bench ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `airlock mcp --listen` with `extra` arguments (and `token` as the static token, if any); its URL.
fn gateway(dir: &Path, name: &str, extra: &[&str], token: Option<&str>, python: &Path) -> (String, Reaped) {
    let notes = dir.join("notes");
    let mut command = Command::new(AIRLOCK);
    command
        .arg("--db")
        .arg(dir.join(format!("{name}.redb")))
        .args(["mcp", "--policy"])
        .arg(dir.join("airlock.toml"))
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--")
        .arg(python)
        .arg(UPSTREAM)
        .arg(dir.join(format!("{name}.log")))
        .arg(&notes)
        .env_remove("AIRLOCK_GATEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        command.env("AIRLOCK_GATEWAY_TOKEN", token);
    }
    let mut child = command.spawn().expect("the gateway starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("readable") > 0, "the gateway stopped: {line}");
        if let Some(rest) = line.split("Streamable HTTP on ").nth(1) {
            break rest.split_whitespace().next().expect("a URL").to_owned();
        }
    };
    std::thread::spawn(move || for _ in stderr.lines() {});
    (url, Reaped(child))
}

/// An ES256 token of the issuer for `audience`; `nonce` makes each token distinct.
fn token(key: &EncodingKey, audience: &str, nonce: usize) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    let claims = json!({"iss": ISSUER, "sub": "alice", "aud": audience, "iat": now, "exp": now + 3600,
                        "jti": format!("bench-{nonce}")});
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("es256".to_owned());
    jsonwebtoken::encode(&header, &claims, key).expect("a signed token")
}

/// One MCP session on a gateway over Streamable HTTP.
struct Session {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl Session {
    async fn open(url: &str, token: &str) -> Session {
        let mut session = Session { http: reqwest::Client::new(), url: url.to_owned(), session: None, next_id: 1 };
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

    fn post(&self, token: &str, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    async fn notify(&self, token: &str, method: &str) {
        let response = self.post(token, &json!({"jsonrpc": "2.0", "method": method})).send().await.expect("sent");
        assert!(response.status().is_success(), "{method}: {}", response.status());
    }

    /// Sends a request and returns its JSON-RPC result.
    async fn request(&mut self, token: &str, method: &str, params: Value) -> Value {
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

    async fn read_note(&mut self, token: &str) -> Duration {
        let started = Instant::now();
        let result =
            self.request(token, "tools/call", json!({"name": "read_note", "arguments": {"name": "bench.txt"}})).await;
        let took = started.elapsed();
        assert_ne!(result.get("isError"), Some(&json!(true)), "{result}");
        took
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn line(label: &str, sorted: &[Duration], baseline: Option<&[Duration]>) {
    let (p50, p99) = (percentile(sorted, 0.50), percentile(sorted, 0.99));
    let added = baseline.map_or_else(String::new, |base| {
        format!(
            "   beside the static token: p50 {:>+7.1} us  p99 {:>+7.1} us",
            micros(p50) - micros(percentile(base, 0.50)),
            micros(p99) - micros(percentile(base, 0.99))
        )
    });
    println!("{label:<36} p50 {:>8.1} us  p99 {:>8.1} us{added}", micros(p50), micros(p99));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let calls: usize = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let venv = PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("the Python MCP SDK cannot be provisioned: {why}"));
    let on_tmpfs = std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_whitespace().nth(1) == Some("/dev/shm") && line.contains(" tmpfs "));
    let scratch = if on_tmpfs { tempfile::tempdir_in("/dev/shm") } else { tempfile::tempdir() }.expect("a directory");
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("notes")).expect("notes");
    std::fs::write(dir.join("notes").join("bench.txt"), "a short note").expect("a note");
    std::fs::write(dir.join("airlock.toml"), "version = 1\ndefault = \"allow\"\n").expect("the policy");
    let python = venv.python();

    let (static_url, _static) = gateway(dir, "static", &[], Some(STATIC_TOKEN), python);
    let oauth = ["--oauth-issuer", ISSUER, "--jwks-file", JWKS];
    let (cached_url, _cached) = gateway(dir, "oauth_cached", &oauth, None, python);
    let (fresh_url, _fresh) = gateway(dir, "oauth_fresh", &oauth, None, python);

    let key = EncodingKey::from_ec_der(ES256_KEY);
    let cached_token = token(&key, &cached_url, 0);
    // Every call of the fresh path presents a token the gateway has not seen (minted before the timing).
    let fresh_tokens: Vec<String> = (0..calls + BLOCK + 1).map(|n| token(&key, &fresh_url, n + 1)).collect();
    let mut fresh_tokens = fresh_tokens.iter();

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    runtime.block_on(async {
        let mut static_session = Session::open(&static_url, STATIC_TOKEN).await;
        let mut cached_session = Session::open(&cached_url, &cached_token).await;
        let mut fresh_session = Session::open(&fresh_url, fresh_tokens.next().expect("a token")).await;

        // What one listing's scan costs: the tools the gateway lists, each scanned.
        let listed = static_session.request(STATIC_TOKEN, "tools/list", json!({})).await;
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

        for _ in 0..BLOCK {
            static_session.read_note(STATIC_TOKEN).await;
            cached_session.read_note(&cached_token).await;
            fresh_session.read_note(fresh_tokens.next().expect("a token")).await;
        }
        let (mut static_times, mut cached_times, mut fresh_times) = (Vec::new(), Vec::new(), Vec::new());
        while static_times.len() < calls {
            for _ in 0..BLOCK {
                static_times.push(static_session.read_note(STATIC_TOKEN).await);
            }
            for _ in 0..BLOCK {
                cached_times.push(cached_session.read_note(&cached_token).await);
            }
            for _ in 0..BLOCK {
                let Some(token) = fresh_tokens.next() else { break };
                fresh_times.push(fresh_session.read_note(token).await);
            }
        }
        static_times.sort();
        cached_times.sort();
        fresh_times.sort();
        println!(
            "calls per path: {} (blocks of {BLOCK}, alternating; audit on {})",
            static_times.len(),
            if on_tmpfs { "tmpfs" } else { "the disk" }
        );
        line("static bearer token", &static_times, None);
        line("OAuth ES256, verified before (cache)", &cached_times, Some(&static_times));
        line("OAuth ES256, a new token per call", &fresh_times, Some(&static_times));
        println!(
            "scan of the {} tools the gateway lists: {:.1} us per listing (never on a call)",
            tools.len(),
            micros(per_listing)
        );
    });
}
