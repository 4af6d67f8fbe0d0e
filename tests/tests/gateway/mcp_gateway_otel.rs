//! `airlock mcp --otlp-endpoint`: the gateway, a real process in front of the Python SDK server of
//! `tests/mcp/upstream_server.py`, exports each decision to an OTLP receiver the test runs on loopback. The
//! client is a hand-written JSON-RPC session on the gateway's stdio that answers the approval's elicitation.
//! What arrives is decoded and read back: a span per call with the GenAI and airlock attributes, the counters
//! (sent when the gateway stops), and no argument value anywhere in the bytes. Resource reads and prompt gets
//! are exported as their own spans, a resource by its URI's scheme only.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_airlock_tests::mcp_stdio::StdioSession;
use agent_airlock_tests::otlp_receiver::{OtlpReceiver, ReceivedSpan, contains};
use agent_airlock_tests::python_env::Venv;
use serde_json::{Value, json};

use crate::gateway;
use gateway::{AIRLOCK, UPSTREAM, venv};

/// What the model sends as arguments: neither may reach the collector.
const SECRET_TEXT: &str = "db-password-otel-7c1e93";
const SECRET_ACCOUNT: &str = "acct-otel-5b20d4";
/// A resource URI's path is the request's argument: it may not reach the collector either.
const SECRET_NOTE: &str = "note-otel-secret-e4a9f1";

const POLICY: &str = r#"version = 1
default = "allow"
deny = ["delete_everything"]
deny_prompts = ["admin_*"]

[tools.transfer]
escalate = "moves money"
effect = "transfer:{to}"

[tools.write_note]
effect = "note:{name}"
"#;

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let scratch = Scratch { dir: tempfile::tempdir().expect("a temporary directory") };
        std::fs::write(scratch.path("airlock.toml"), POLICY).expect("the policy is written");
        std::fs::create_dir(scratch.path("notes")).expect("the notes directory");
        scratch
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `airlock --db <scratch>/airlock.redb mcp --policy … --otlp-endpoint <endpoint> -- <upstream>`.
    fn gateway(&self, venv: &Venv, endpoint: &str) -> Command {
        self.gateway_with(venv, Some(endpoint))
    }

    /// The same, `--otlp-endpoint` only if given (and `OTEL_EXPORTER_OTLP_ENDPOINT` unset: set it after).
    fn gateway_with(&self, venv: &Venv, endpoint: Option<&str>) -> Command {
        let mut command = Command::new(AIRLOCK);
        command.arg("--db").arg(self.path("airlock.redb")).args(["mcp", "--policy"]).arg(self.path("airlock.toml"));
        if let Some(endpoint) = endpoint {
            command.args(["--otlp-endpoint", endpoint]);
        }
        command.arg("--").arg(venv.python()).arg(UPSTREAM).arg(self.path("calls.log")).arg(self.path("notes"));
        command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT").stderr(Stdio::inherit());
        command
    }
}

const WITHIN: Duration = Duration::from_secs(60);

fn call(session: &mut StdioSession, id: u64, tool: &str, arguments: Value) -> Value {
    session.call(id, tool, arguments);
    session.response(id, WITHIN)
}

fn span<'a>(spans: &'a [ReceivedSpan], tool: &str, outcome: &str) -> &'a ReceivedSpan {
    let found: Vec<_> = spans
        .iter()
        .filter(|span| span.attr("gen_ai.tool.name") == Some(tool) && span.attr("airlock.outcome") == Some(outcome))
        .collect();
    assert_eq!(found.len(), 1, "one `{outcome}` span for `{tool}`: {spans:#?}");
    found[0]
}

#[test]
fn the_gateway_exports_each_decision_over_otlp_without_argument_values() {
    let venv = venv();
    let scratch = Scratch::new();
    let receiver = OtlpReceiver::start();
    let mut command = scratch.gateway(&venv, &receiver.endpoint());
    let mut session = StdioSession::start_with_capabilities(&mut command, json!({"elicitation": {}}));

    let note = json!({"name": "a.txt", "text": SECRET_TEXT});
    let wrote = call(&mut session, 1, "write_note", note.clone());
    assert_eq!(wrote["result"]["isError"], false, "{wrote}");
    let again = call(&mut session, 2, "write_note", note);
    assert_eq!(again["result"]["isError"], true, "the same effect twice is refused: {again}");
    let denied = call(&mut session, 3, "delete_everything", json!({}));
    assert_eq!(denied["result"]["isError"], true, "{denied}");

    // The escalated transfer asks the client's human, who accepts.
    session.call(4, "transfer", json!({"amount": 4242, "to": SECRET_ACCOUNT}));
    let asked = session
        .message_where(WITHIN, |message| message["method"] == "elicitation/create")
        .expect("the gateway asks the client's human");
    session.send(json!({"jsonrpc": "2.0", "id": asked["id"].clone(),
        "result": {"action": "accept", "content": {"approve": true}}}));
    let transferred = session.response(4, WITHIN);
    assert_eq!(transferred["result"]["isError"], false, "{transferred}");

    // Resources and prompts: a read served, a read the upstream fails (no such note), a prompt served, a
    // prompt the policy denies.
    let mut request = |id: u64, method: &str, params: Value| {
        session.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        session.response(id, WITHIN)
    };
    let read = request(5, "resources/read", json!({"uri": "note://a.txt"}));
    assert!(read.get("result").is_some(), "{read}");
    let missing = request(6, "resources/read", json!({"uri": format!("note://{SECRET_NOTE}.txt")}));
    assert!(missing.get("error").is_some(), "{missing}");
    let prompt = request(7, "prompts/get", json!({"name": "summarise", "arguments": {"name": "a.txt"}}));
    assert!(prompt.get("result").is_some(), "{prompt}");
    let denied_prompt = request(8, "prompts/get", json!({"name": "admin_reset"}));
    assert!(denied_prompt.get("error").is_some(), "{denied_prompt}");

    // Closing stdin stops the gateway, which sends what is queued before it exits.
    session.close();
    assert_eq!(receiver.errors(), Vec::<String>::new());
    let all = receiver.spans();
    let (surfaces, spans): (Vec<ReceivedSpan>, Vec<ReceivedSpan>) =
        all.into_iter().partition(|span| span.attr("mcp.method.name").is_some());
    // Five decisions: the transfer is two, its escalation (the gateway asks the human) and its approved run.
    assert_eq!(spans.len(), 5, "{spans:#?}");
    for span in &spans {
        assert_eq!(span.attr("gen_ai.operation.name"), Some("execute_tool"), "{span:?}");
        assert!(span.attr("gen_ai.tool.call.id").is_some_and(|id| !id.is_empty()), "{span:?}");
        assert_eq!(span.service_name.as_deref(), Some("airlock-mcp-gateway"));
    }

    let executed = span(&spans, "write_note", "executed");
    assert_eq!(executed.name, "execute_tool write_note");
    assert_eq!(executed.attr("airlock.effect"), Some("executed"));
    let replayed = span(&spans, "write_note", "refused");
    assert_eq!(replayed.attr("airlock.refusal.kind"), Some("duplicate"));
    assert_eq!(replayed.attr("airlock.effect"), Some("replayed"));
    assert_eq!(replayed.attr("airlock.rule"), Some("effect"));
    let refused = span(&spans, "delete_everything", "refused");
    assert_eq!(refused.attr("airlock.refusal.kind"), Some("denied"));
    assert_eq!(refused.attr("airlock.rule"), Some("delete_everything"));
    assert_eq!(refused.status_code, 2);
    let escalated = span(&spans, "transfer", "escalated");
    assert_eq!(escalated.attr("airlock.rule"), Some("transfer"));
    assert_eq!(escalated.attr("airlock.approved"), None);
    let approved = span(&spans, "transfer", "executed");
    assert_eq!(approved.attr("gen_ai.tool.call.id"), escalated.attr("gen_ai.tool.call.id"), "one call, two decisions");
    assert_eq!(approved.attr("airlock.approved"), Some("true"));
    assert_eq!(approved.attr("airlock.effect"), Some("executed"));

    // The four reads and gets, each its own span.
    assert_eq!(surfaces.len(), 4, "{surfaces:#?}");
    let surface = |method: &str, outcome: &str| {
        let found: Vec<_> = surfaces
            .iter()
            .filter(|span| {
                span.attr("mcp.method.name") == Some(method) && span.attr("airlock.outcome") == Some(outcome)
            })
            .collect();
        assert_eq!(found.len(), 1, "one `{outcome}` span for `{method}`: {surfaces:#?}");
        found[0]
    };
    let read = surface("resources/read", "executed");
    assert_eq!(read.name, "resources/read note");
    assert_eq!(read.attr("airlock.resource.scheme"), Some("note"));
    assert_eq!(read.attr("jsonrpc.request.id"), Some("5"));
    assert_eq!(read.attr("gen_ai.tool.name"), None);
    let failed = surface("resources/read", "failed");
    assert_eq!(failed.status_code, 2);
    let got = surface("prompts/get", "executed");
    assert_eq!((got.name.as_str(), got.attr("gen_ai.prompt.name")), ("prompts/get summarise", Some("summarise")));
    let refused_prompt = surface("prompts/get", "refused");
    assert_eq!(refused_prompt.attr("airlock.refusal.kind"), Some("denied"));
    assert_eq!(refused_prompt.attr("airlock.rule"), Some("admin_*"));
    assert_eq!(refused_prompt.attr("gen_ai.prompt.name"), Some("admin_reset"));
    assert_eq!(refused_prompt.status_code, 2);
    let denied_prompts = [("airlock.refusal.kind", "denied"), ("mcp.method.name", "prompts/get")];
    assert_eq!(receiver.counter("airlock.refusals", &denied_prompts), Some(1));
    assert_eq!(receiver.counter("airlock.mcp_requests", &[("airlock.outcome", "executed")]), Some(2));

    let denied_tool = [("airlock.refusal.kind", "denied"), ("gen_ai.tool.name", "delete_everything")];
    assert_eq!(receiver.counter("airlock.refusals", &denied_tool), Some(1));
    assert_eq!(receiver.counter("airlock.refusals", &[("airlock.refusal.kind", "duplicate")]), Some(1));
    assert_eq!(receiver.counter("airlock.tool_calls", &[("airlock.outcome", "escalated")]), Some(1));
    assert_eq!(receiver.counter("airlock.approvals", &[("gen_ai.tool.name", "transfer")]), Some(1));
    assert_eq!(receiver.counter("airlock.effects", &[("airlock.effect", "executed")]), Some(2));
    assert_eq!(receiver.counter("airlock.effects", &[("airlock.effect", "replayed")]), Some(1));

    let raw = receiver.raw();
    assert!(contains(&raw, b"execute_tool transfer"), "the raw bytes are searchable");
    for secret in [SECRET_TEXT, SECRET_ACCOUNT, "4242", SECRET_NOTE] {
        assert!(!contains(&raw, secret.as_bytes()), "the argument value `{secret}` reached the collector");
    }
}

#[test]
fn a_collector_that_is_down_breaks_no_call_of_the_gateway() {
    let venv = venv();
    let scratch = Scratch::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let endpoint = format!("http://{}", closed.local_addr().expect("its address"));
    drop(closed);
    let mut session = StdioSession::start(&mut scratch.gateway(&venv, &endpoint));
    for id in 1..=3 {
        let wrote = call(&mut session, id, "write_note", json!({"name": format!("{id}.txt"), "text": "hello"}));
        assert_eq!(wrote["result"]["isError"], false, "{wrote}");
    }
    // It exits successfully: the unsent spans are a warning on stderr, not a failure.
    session.close();
}

#[test]
fn an_endpoint_that_is_not_http_stops_the_gateway_before_it_starts() {
    let venv = venv();
    let scratch = Scratch::new();
    let output = scratch
        .gateway(&venv, "https://collector.invalid:4318")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("airlock runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--otlp-endpoint") && stderr.contains("https"), "{stderr}");
    assert!(!scratch.path("calls.log").exists(), "no upstream was started");
}

#[test]
fn the_environments_endpoint_is_used_and_one_the_gateway_cannot_use_is_a_warning_not_a_stop() {
    let venv = venv();
    let scratch = Scratch::new();
    // Set for everything in the environment (a Kubernetes collector over TLS, say): the gateway starts,
    // serves, and says it does not export.
    let stderr = scratch.path("stderr.log");
    let mut command = scratch.gateway_with(&venv, None);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.invalid:4318")
        .stderr(std::fs::File::create(&stderr).expect("a log file"));
    let mut session = StdioSession::start(&mut command);
    let wrote = call(&mut session, 1, "write_note", json!({"name": "1.txt", "text": "hello"}));
    assert_eq!(wrote["result"]["isError"], false, "{wrote}");
    session.close();
    let warned = std::fs::read_to_string(&stderr).expect("the log");
    assert!(warned.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && warned.contains("not exported"), "{warned}");

    // A collector it can reach, named by the environment alone, gets the decisions.
    let receiver = OtlpReceiver::start();
    let mut command = scratch.gateway_with(&venv, None);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let mut session = StdioSession::start(&mut command);
    let wrote = call(&mut session, 1, "write_note", json!({"name": "2.txt", "text": "hello"}));
    assert_eq!(wrote["result"]["isError"], false, "{wrote}");
    session.close();
    assert!(receiver.wait_until(WITHIN, |receiver| !receiver.spans().is_empty()), "no span arrived");
    span(&receiver.spans(), "write_note", "executed");
}
