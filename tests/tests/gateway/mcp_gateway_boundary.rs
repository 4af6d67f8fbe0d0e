//! The gateway's trust boundary, against a hostile upstream (`tests/mcp/hostile_upstream.py`, JSON-RPC by
//! hand) and a hand-written client (`StdioSession`): the upstream learns none of the gateway's secrets, and
//! every request gets an answer whatever arrives from either side.

use std::process::{Command, Stdio};
use std::time::Duration;

use agent_airlock_tests::mcp_stdio::StdioSession;
use agent_airlock_tests::python_env::Venv;
use serde_json::{Value, json};

use crate::gateway;
use gateway::{HttpSession, Listening, Scratch, airlock, venv};

const HOSTILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/hostile_upstream.py");
const APPROVAL_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// `airlock --db … mcp --policy … <gateway_args> -- python hostile_upstream.py <dir>`.
fn hostile_gateway(scratch: &Scratch, venv: &Venv, gateway_args: &[&str]) -> Command {
    let mut command = scratch.gateway();
    command.args(gateway_args).arg("--").arg(venv.python()).arg(HOSTILE).arg(scratch.dir()).stderr(Stdio::inherit());
    command
}

fn text_of(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("a text result: {answer}"))
}

/// Every secret the gateway holds in its environment, and where each comes from.
fn with_secrets(command: &mut Command) -> &mut Command {
    command
        .env("AIRLOCK_APPROVAL_KEY", APPROVAL_KEY)
        .env("MY_APPROVAL_KEY", APPROVAL_KEY)
        .env("AIRLOCK_GATEWAY_TOKEN", "gateway-token-never-leaves")
        .env("AIRLOCK_WEBHOOK_KEY", "webhook-key-never-leaves")
        .env("AIRLOCK_DB", "postgresql://airlock:db-password-never-leaves@db/airlock")
        .env("AIRLOCK_OPERATOR", "alice")
        .env("UNLISTED_CLOUD_SECRET", "cloud-secret-never-leaves")
        .env("KEEP_ME", "kept")
}

#[test]
fn the_upstream_starts_with_a_scrubbed_environment() {
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    let mut command =
        hostile_gateway(&scratch, &venv, &["--key-env", "MY_APPROVAL_KEY", "--env", "KEEP_ME", "--env", "SET_ME=a=b"]);
    let mut session = StdioSession::start(with_secrets(&mut command));
    session.call(2, "environment", json!({}));
    let answer = session.response(2, Duration::from_secs(60));
    let relayed = text_of(&answer).to_owned();
    session.close();

    let seen: Value = serde_json::from_str(
        &std::fs::read_to_string(scratch.path("environment.json")).expect("the upstream recorded its environment"),
    )
    .expect("JSON");
    let seen = seen.as_object().expect("an object");
    let names: Vec<&String> = seen.keys().collect();
    for name in &names {
        assert!(!name.to_ascii_uppercase().starts_with("AIRLOCK_"), "{name} reached the upstream: {names:?}");
    }
    for name in ["MY_APPROVAL_KEY", "UNLISTED_CLOUD_SECRET"] {
        assert!(!seen.contains_key(name), "{name} reached the upstream: {names:?}");
    }
    assert_eq!(seen["KEEP_ME"], "kept", "`--env NAME` copies the gateway's value");
    assert_eq!(seen["SET_ME"], "a=b", "`--env NAME=VALUE` sets it");
    assert_eq!(seen["PATH"].as_str(), std::env::var("PATH").ok().as_deref(), "the allow-list passes");
    for secret in [APPROVAL_KEY, "never-leaves"] {
        assert!(!relayed.contains(secret), "{relayed}");
    }
}

#[test]
fn an_env_option_naming_one_of_the_gateways_secrets_is_refused() {
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    let python = venv.python().display().to_string();
    let dir = scratch.dir().display().to_string();
    let db = scratch.path("airlock.redb").display().to_string();
    let policy = scratch.path("airlock.toml").display().to_string();
    for (extra, name) in [
        (&["--env", "AIRLOCK_APPROVAL_KEY"][..], "AIRLOCK_APPROVAL_KEY"),
        (&["--env", "airlock_db=x"][..], "airlock_db"),
        (&["--key-env", "MY_APPROVAL_KEY", "--env", "MY_APPROVAL_KEY"][..], "MY_APPROVAL_KEY"),
        (&["--token-env", "MY_TOKEN", "--env", "MY_TOKEN=x"][..], "MY_TOKEN"),
    ] {
        let mut args = vec!["--db", &db, "mcp", "--policy", &policy];
        args.extend(extra);
        args.extend(["--", &python, HOSTILE, &dir]);
        let output = airlock(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra:?} started: {stderr}");
        assert!(stderr.contains(&format!("`{name}` is the gateway's own")), "{stderr}");
    }
}

#[test]
fn the_gateways_own_secret_names_are_masked_in_what_the_upstream_returns() {
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    let mut session = StdioSession::start(&mut hostile_gateway(&scratch, &venv, &[]));
    let leaked = format!(
        "AIRLOCK_APPROVAL_KEY={APPROVAL_KEY}\nAIRLOCK_WEBHOOK_KEY=c0ffee00c0ffee00c0ffee00\nAIRLOCK_DB=/srv/airlock.redb"
    );
    session.call(2, "echo", json!({"text": leaked}));
    let answer = session.response(2, Duration::from_secs(60));
    let text = text_of(&answer);
    for value in [APPROVAL_KEY, "c0ffee00c0ffee00c0ffee00", "/srv/airlock.redb"] {
        assert!(!text.contains(value), "{text}");
    }
    assert!(text.contains("AIRLOCK_APPROVAL_KEY="), "the name stays, the value goes: {text}");
    session.close();
}

fn effects_ambiguous(scratch: &Scratch) -> Vec<Value> {
    let db = scratch.path("airlock.redb");
    let effects = airlock(&["--db", db.to_str().expect("UTF-8 path"), "--json", "effects", "list", "--ambiguous"]);
    let effects: Value = serde_json::from_slice(&effects.stdout).expect("JSON");
    effects.as_array().expect("a list").iter().map(|record| record["key"].clone()).collect()
}

/// A result over the limit (whose `id` comes after it, so nothing short of reading it all finds it) fails
/// its call at once, leaves its effect ambiguous, and the gateway serves on; the limit is `--max-result-bytes`,
/// 16 MiB by default.
#[test]
fn an_oversized_result_fails_its_call_at_once_and_leaves_its_effect_ambiguous() {
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n\n[tools.huge]\neffect = \"huge:{bytes}\"\n");
    let mut session = StdioSession::start(&mut hostile_gateway(&scratch, &venv, &["--max-result-bytes", "100000"]));
    session.call(2, "huge", json!({"bytes": 200_000}));
    let answer = session.response(2, Duration::from_secs(30));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(text_of(&answer).contains("more than the gateway's limit of 100000"), "{answer}");
    session.call(3, "huge", json!({"bytes": 50_000}));
    let answer = session.response(3, Duration::from_secs(30));
    assert_eq!(text_of(&answer).len(), 50_000, "a result within the limit passes");
    session.close();
    assert_eq!(effects_ambiguous(&scratch), [json!("huge:200000")]);

    // rmcp's own limit would drop this line and leave the call waiting forever.
    let mut session = StdioSession::start(&mut hostile_gateway(&scratch, &venv, &[]));
    session.call(4, "huge", json!({"bytes": 17 * 1024 * 1024}));
    let answer = session.response(4, Duration::from_secs(60));
    assert_eq!(answer["result"]["isError"], true, "{answer:.300}");
    session.call(5, "echo", json!({"text": "still here"}));
    assert_eq!(text_of(&session.response(5, Duration::from_secs(30))), "still here");
    session.close();
}

/// Every line a client sends gets an answer: not JSON → `-32700` with `id: null`; nested deeper than the
/// parser goes, JSON that is not a request, or a request over the limit → `-32600` with its `id`; and the
/// gateway serves on.
#[test]
fn every_client_line_is_answered_and_the_gateway_keeps_serving() {
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    let mut session = StdioSession::start(&mut hostile_gateway(&scratch, &venv, &[]));
    let error_for = |session: &mut StdioSession, id: Value| {
        session
            .message_where(Duration::from_secs(30), |m| m["id"] == id && m.get("error").is_some())
            .unwrap_or_else(|| panic!("no error answer for id {id}"))["error"]["code"]
            .clone()
    };

    session.send_line("{this is not json");
    assert_eq!(error_for(&mut session, Value::Null), -32700);

    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    session.send_line(&format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"echo","arguments":{{"text":{deep}}}}},"id":5}}"#
    ));
    assert_eq!(error_for(&mut session, json!(5)), -32600);

    session.send_line(r#"{"jsonrpc":"2.0","id":6,"method":42}"#);
    assert_eq!(error_for(&mut session, json!(6)), -32600);

    let big = "x".repeat(17 * 1024 * 1024);
    session.send_line(&format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{big}"}}}},"id":7}}"#
    ));
    assert_eq!(error_for(&mut session, json!(7)), -32600);

    session.call(8, "echo", json!({"text": "still here"}));
    assert_eq!(text_of(&session.response(8, Duration::from_secs(30))), "still here");
    session.close();
}

/// An upstream that announces `tools/list_changed` and never answers the re-list holds up neither the other
/// calls nor the gateway's end: on SIGTERM, or when the client goes.
#[test]
fn an_upstream_that_never_answers_the_relist_holds_up_nothing() {
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    for stop_by_signal in [true, false] {
        let mut session = StdioSession::start(&mut hostile_gateway(&scratch, &venv, &[]));
        session.call(2, "relist", json!({}));
        assert_eq!(text_of(&session.response(2, Duration::from_secs(30))), "announced");
        session.call(3, "echo", json!({"text": "still here"}));
        assert_eq!(text_of(&session.response(3, Duration::from_secs(10))), "still here");
        if stop_by_signal {
            let kill = Command::new("kill").arg("-TERM").arg(session.pid().to_string()).status().expect("kill runs");
            assert!(kill.success());
            let status = session.wait_for_exit(Duration::from_secs(15));
            assert!(status.success(), "{status}");
        } else {
            // Closing stdin ends the session; `close` allows 30 s, less than the re-list's own bound would be
            // with the upstream's shutdown after it, so only a re-list cut short passes in time.
            let started = std::time::Instant::now();
            session.close();
            assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
        }
    }
}

/// Over `--listen` too: while the upstream leaves a re-list unanswered (for up to 30 s), the gateway still
/// accepts connections (a new session opens) and stops at once on SIGTERM.
#[test]
fn an_upstream_that_never_answers_the_relist_holds_up_neither_the_listener_nor_its_shutdown() {
    const TOKEN: &str = "gateway-test-token-relist";
    // Far below the re-list's own bound (30 s), so only a listener and a shutdown the re-list does not hold
    // up pass; generous for a loaded machine.
    const PROMPTLY: Duration = Duration::from_secs(10);
    let venv = venv();
    let scratch = Scratch::with_policy("version = 1\ndefault = \"allow\"\n");
    let gateway = Listening::start(
        hostile_gateway(&scratch, &venv, &["--listen", "127.0.0.1:0"]).env("AIRLOCK_GATEWAY_TOKEN", TOKEN),
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    runtime.block_on(async {
        let first = HttpSession::open(&gateway.url, TOKEN).await;
        assert_eq!(first.call(2, "relist", json!({})).await, "announced");
        // The gateway has the announcement before the answer that follows it; give its loop time to start
        // the re-list, so the next connection arrives while the listing hangs.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = std::time::Instant::now();
        let second = tokio::time::timeout(PROMPTLY, HttpSession::open(&gateway.url, TOKEN))
            .await
            .unwrap_or_else(|_| panic!("no new session within {PROMPTLY:?} while the re-list hangs"));
        assert_eq!(second.call(3, "echo", json!({"text": "still here"})).await, "still here");
        assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    });
    gateway.terminate_within(PROMPTLY);
}

/// A `[tools.…]` table naming no tool the upstream offers (a typo) is an error: for `airlock policy check
/// --against` and at the gateway's start, with the closest name; `--allow-unmatched-tables` makes it a warning.
#[test]
fn a_policy_table_naming_no_upstream_tool_is_reported_with_the_closest_name() {
    let venv = venv();
    let scratch = Scratch::with_policy(
        "version = 1\ndefault = \"allow\"\n\n[tools.ehco]\nescalate = \"x\"\n\n[tools.\"e*\"]\nrate = \"5/second\"\n",
    );
    let policy = scratch.path("airlock.toml").display().to_string();
    let python = venv.python().display().to_string();
    let dir = scratch.dir().display().to_string();
    let check = airlock(&["policy", "check", &policy, "--against", "--", &python, HOSTILE, &dir]);
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success(), "{stderr}");
    assert!(stderr.contains("`[tools.ehco]` names no tool the server offers (did you mean `echo`?)"), "{stderr}");
    assert!(!stderr.contains("tools.e*"), "a glob that matches is fine: {stderr}");
    let check = airlock(&["policy", "check", &policy]);
    assert!(check.status.success(), "without `--against` the file alone is checked");

    let db = scratch.path("airlock.redb").display().to_string();
    let start = airlock(&["--db", &db, "mcp", "--policy", &policy, "--", &python, HOSTILE, &dir]);
    let stderr = String::from_utf8_lossy(&start.stderr);
    assert!(!start.status.success(), "{stderr}");
    assert!(stderr.contains("(did you mean `echo`?)") && stderr.contains("--allow-unmatched-tables"), "{stderr}");

    let mut session = StdioSession::start(&mut hostile_gateway(&scratch, &venv, &["--allow-unmatched-tables"]));
    session.call(2, "echo", json!({"text": "served"}));
    assert_eq!(text_of(&session.response(2, Duration::from_secs(30))), "served");
    session.close();
}
