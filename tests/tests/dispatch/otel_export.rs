//! The OpenTelemetry export (feature `otel`): the dispatcher's decisions as spans and counters, sent over
//! OTLP/HTTP to a receiver the test runs on loopback, decoded there with the protocol's own types. What
//! arrives is read back: each span's name and attributes, each counter's total, and every byte, which must
//! never hold an argument value.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_airlock::approval::{Decision, InterruptApprovals};
use agent_airlock::effect::MemoryEffectStore;
use agent_airlock::ledger::MemoryLedger;
use agent_airlock::otel::OtlpExport;
use agent_airlock::{CallContext, Dispatcher, ManualClock, Outcome, Policy, ToolCall, airlock_tool, tool};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use agent_airlock_tests::otlp_receiver::{OtlpReceiver, ReceivedSpan, contains};
use agent_airlock_tests::payments::{self, ExecutionLog};
use serde_json::json;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt as _;

/// What the model sends as an argument in every call below: it must never reach the receiver.
const SECRET: &str = "sk-live-otel-4f9d2c7a1b8e";

/// Echoes a word.
#[airlock_tool]
fn echo(
    /// The word.
    word: String,
) -> String {
    format!("echo: {word}")
}

/// Wipes a disk.
#[airlock_tool]
fn wipe(
    /// The disk.
    disk: String,
) -> String {
    format!("wiped {disk}")
}

/// Charges a card, and panics while doing it.
#[airlock_tool(effect = "charge:{reference}")]
fn charge(
    /// The charge's reference.
    reference: String,
) -> String {
    panic!("the card reader fell over while charging {reference}")
}

/// Sends money; each transfer once.
#[airlock_tool(escalate = "moves money", effect = "send:{reference}")]
fn send_money(
    /// The transfer's reference.
    reference: String,
    /// Where to.
    to: String,
) -> String {
    format!("sent {reference} to {to}")
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .tool(tool!(echo))
        .tool(tool!(wipe))
        .tool(tool!(send_money))
        .tool(tool!(charge))
        .policy(Policy::builder().deny("wipe").build().expect("a policy"))
        .approver(|_| async { Decision::Approve })
        .effects(MemoryEffectStore::new())
        .build()
        .expect("distinct tools")
}

fn span<'a>(spans: &'a [ReceivedSpan], call_id: &str) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|span| span.attr("gen_ai.tool.call.id") == Some(call_id)).collect();
    assert_eq!(found.len(), 1, "one span for `{call_id}`: {spans:#?}");
    found[0]
}

/// Runs `calls` through `dispatcher` under a subscriber with only the export's layer, then shuts the export
/// down (which sends what is queued).
fn export_calls(receiver: &OtlpReceiver, dispatcher: &Dispatcher, calls: Vec<(ToolCall, CallContext)>) -> Vec<Outcome> {
    let export = OtlpExport::http(receiver.endpoint()).service_name("otel-export-test").build().expect("an export");
    let subscriber = Registry::default().with(export.layer());
    let outcomes = agent_airlock_tests::tracing_capture::with_default(subscriber, || {
        calls.into_iter().map(|(call, context)| block_on(dispatcher.dispatch(call, &context))).collect()
    });
    export.shutdown().expect("the receiver took everything");
    outcomes
}

#[test]
fn each_decision_is_a_span_with_the_gen_ai_attributes_and_counters_and_no_argument_value() {
    let receiver = OtlpReceiver::start();
    let dispatcher = dispatcher();
    let call = |id: &str, tool: &str, arguments| (ToolCall::new(id, tool, arguments), CallContext::new());
    let outcomes = export_calls(
        &receiver,
        &dispatcher,
        vec![
            call("c-echo", "echo", json!({"word": SECRET, "ghost": SECRET})),
            call("c-wipe", "wipe", json!({"disk": SECRET})),
            call("c-send", "send_money", json!({"reference": "r1", "to": SECRET})),
            call("c-send-again", "send_money", json!({"reference": "r1", "to": SECRET})),
            call("c-bad", "echo", json!({"word": 42})),
            call("c-unknown", "format_disk", json!({"disk": SECRET})),
            call("c-panic", "charge", json!({"reference": "r2"})),
        ],
    );
    let texts: Vec<_> = outcomes.into_iter().map(|outcome| outcome.expect_message().content).collect();
    assert_eq!(texts[0], format!("echo: {SECRET}"), "the export changes nothing the model sees");
    assert_eq!(texts[2], format!("sent r1 to {SECRET}"));

    assert_eq!(receiver.errors(), Vec::<String>::new());
    let spans = receiver.spans();
    assert_eq!(spans.len(), 7, "{spans:#?}");
    for span in spans.iter().filter(|span| span.attr("gen_ai.tool.call.id") != Some("c-unknown")) {
        assert_eq!(span.attr("gen_ai.operation.name"), Some("execute_tool"), "{span:?}");
        assert_eq!(span.name, format!("execute_tool {}", span.attr("gen_ai.tool.name").unwrap_or("")));
        assert_eq!(span.service_name.as_deref(), Some("otel-export-test"));
    }

    let executed = span(&spans, "c-echo");
    assert_eq!(executed.attr("gen_ai.tool.name"), Some("echo"));
    assert_eq!(executed.attr("airlock.outcome"), Some("executed"));
    assert_eq!(executed.attr("airlock.refusal.kind"), None);
    assert_eq!(executed.attr("airlock.effect"), None, "echo has no effect");
    assert_ne!(executed.status_code, 2, "not an error");

    let denied = span(&spans, "c-wipe");
    assert_eq!(denied.attr("airlock.outcome"), Some("refused"));
    assert_eq!(denied.attr("airlock.refusal.kind"), Some("denied"));
    assert_eq!(denied.attr("airlock.rule"), Some("wipe"));
    assert_eq!(denied.attr("error.type"), Some("denied"));
    assert_eq!(denied.status_code, 2, "a refusal is an error status");

    let approved = span(&spans, "c-send");
    assert_eq!(approved.attr("airlock.outcome"), Some("executed"));
    assert_eq!(approved.attr("airlock.approved"), Some("true"));
    assert_eq!(approved.attr("airlock.rule"), Some("attribute"), "the escalation's rule: the tool's own attribute");
    assert_eq!(approved.attr("airlock.effect"), Some("executed"));

    let replayed = span(&spans, "c-send-again");
    assert_eq!(replayed.attr("airlock.outcome"), Some("refused"));
    assert_eq!(replayed.attr("airlock.refusal.kind"), Some("duplicate"));
    assert_eq!(replayed.attr("airlock.effect"), Some("replayed"));
    assert_eq!(replayed.attr("airlock.approved"), None, "a duplicate is refused before a human is asked");

    assert_eq!(span(&spans, "c-bad").attr("airlock.refusal.kind"), Some("invalid_arguments"));
    // A made-up tool names no span and no series of its own; the attribute keeps what was called.
    let unknown = span(&spans, "c-unknown");
    assert_eq!(unknown.attr("airlock.refusal.kind"), Some("unknown_tool"));
    assert_eq!(unknown.name, "execute_tool (unknown)");
    assert_eq!(unknown.attr("gen_ai.tool.name"), Some("format_disk"));
    assert_eq!(receiver.counter("airlock.refusals", &[("gen_ai.tool.name", "(unknown)")]), Some(1));
    assert_eq!(receiver.counter("airlock.refusals", &[("gen_ai.tool.name", "format_disk")]), None);

    // A tool that panics while holding its effect leaves the effect ambiguous, and says so.
    let panicked = span(&spans, "c-panic");
    assert_eq!(panicked.attr("airlock.outcome"), Some("panicked"));
    assert_eq!(panicked.attr("airlock.effect"), Some("ambiguous"));
    assert_eq!(panicked.status_code, 2);

    // The counters, by kind, outcome and effect.
    let refusals = |kind| receiver.counter("airlock.refusals", &[("airlock.refusal.kind", kind)]);
    assert_eq!(refusals("denied"), Some(1));
    assert_eq!(refusals("duplicate"), Some(1));
    assert_eq!(refusals("invalid_arguments"), Some(1));
    assert_eq!(refusals("unknown_tool"), Some(1));
    assert_eq!(receiver.counter("airlock.refusals", &[("gen_ai.tool.name", "wipe")]), Some(1));
    assert_eq!(receiver.counter("airlock.approvals", &[("gen_ai.tool.name", "send_money")]), Some(1));
    assert_eq!(receiver.counter("airlock.effects", &[("airlock.effect", "executed")]), Some(1));
    assert_eq!(receiver.counter("airlock.effects", &[("airlock.effect", "replayed")]), Some(1));
    assert_eq!(receiver.counter("airlock.effects", &[("airlock.effect", "ambiguous")]), Some(1));
    assert_eq!(receiver.counter("airlock.tool_calls", &[("airlock.outcome", "panicked")]), Some(1));
    assert_eq!(receiver.counter("airlock.tool_calls", &[("airlock.outcome", "executed")]), Some(2));
    assert_eq!(receiver.counter("airlock.tool_calls", &[("airlock.outcome", "refused")]), Some(4));

    // Not one argument value, in any request, spans or counters.
    let raw = receiver.raw();
    assert!(contains(&raw, b"execute_tool echo"), "the raw bytes are searchable");
    assert!(!contains(&raw, SECRET.as_bytes()), "an argument value reached the receiver");
    assert!(!contains(&raw, b"echo: "), "a result reached the receiver");
}

#[test]
fn an_escalation_and_its_approval_on_resume_are_two_spans() {
    let receiver = OtlpReceiver::start();
    let ledger = Arc::new(MemoryLedger::new());
    let clock = Arc::new(ManualClock::new(START));
    let dispatcher = payments::dispatcher(Arc::clone(&ledger) as _, Arc::clone(&clock), Policy::new());
    let dir = tempfile::tempdir().expect("a directory");
    let log = || ExecutionLog { path: dir.path().join("executions.log"), hang_after_start: false };
    let call = ToolCall::new("call_1", "refund", json!({"payment_id": SECRET, "amount": 500}));

    let export = OtlpExport::http(receiver.endpoint()).build().expect("an export");
    let subscriber = Registry::default().with(export.layer());
    agent_airlock_tests::tracing_capture::with_default(subscriber, || {
        let first = block_on(dispatcher.dispatch(call.clone(), &payments::context(log(), "c1", None)));
        let Outcome::Interrupt { request, .. } = first else { panic!("an interrupt: {first:?}") };
        let approvals = InterruptApprovals::new(key_ring(), Arc::clone(&ledger), GRANT_TTL).with_clock(clock);
        let resume = block_on(approvals.approve(&request.into_value(), "alice")).expect("approved").into_value();
        let second = block_on(dispatcher.dispatch(call, &payments::context(log(), "c1", Some(resume))));
        assert!(second.expect_message().content.starts_with("refunded 500"));
    });
    export.shutdown().expect("the receiver took everything");

    let spans = receiver.spans();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let (escalated, resumed) = (&spans[0], &spans[1]);
    assert_eq!(escalated.name, "execute_tool refund");
    assert_eq!(escalated.attr("airlock.outcome"), Some("escalated"));
    assert_eq!(escalated.attr("airlock.rule"), Some("attribute"), "escalated by the tool's own attribute");
    assert_eq!(escalated.attr("airlock.approved"), None);
    assert_eq!(resumed.attr("airlock.outcome"), Some("executed"));
    assert_eq!(resumed.attr("airlock.approved"), Some("true"));
    assert_eq!(resumed.attr("gen_ai.tool.call.id"), Some("call_1"));
    assert_eq!(receiver.counter("airlock.approvals", &[]), Some(1));
    assert_eq!(receiver.counter("airlock.tool_calls", &[("airlock.outcome", "escalated")]), Some(1));
    assert!(!contains(&receiver.raw(), SECRET.as_bytes()), "an argument value reached the receiver");
}

#[test]
fn observe_mode_exports_what_it_would_refuse_as_counted_but_not_enforced() {
    let receiver = OtlpReceiver::start();
    let policy = Policy::from_toml("version = 1\ndefault = \"allow\"\nmode = \"observe\"\ndeny = [\"wipe\"]\n")
        .expect("a policy");
    let dispatcher = Dispatcher::builder().tool(tool!(wipe)).policy(policy).build().expect("a dispatcher");
    export_calls(
        &receiver,
        &dispatcher,
        vec![(ToolCall::new("c1", "wipe", json!({"disk": "sda"})), CallContext::new())],
    );

    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].attr("airlock.outcome"), Some("executed"));
    assert_eq!(spans[0].attr("airlock.would_refuse.kinds"), Some("denied"));
    assert_eq!(spans[0].attr("airlock.refusal.kind"), None);
    let observed = [("airlock.refusal.kind", "denied"), ("airlock.enforced", "false")];
    assert_eq!(receiver.counter("airlock.refusals", &observed), Some(1));
    assert_eq!(receiver.counter("airlock.refusals", &[("airlock.enforced", "true")]), None);
}

#[test]
fn a_collector_that_is_down_or_never_answers_fails_and_slows_no_call() {
    // One port nobody listens on, and one that accepts connections and never answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let closed_endpoint = format!("http://{}", closed.local_addr().expect("its address"));
    drop(closed);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let silent_endpoint = format!("http://{}", silent.local_addr().expect("its address"));
    let held = std::thread::spawn(move || silent.incoming().take(8).filter_map(Result::ok).collect::<Vec<_>>());

    let dispatcher = dispatcher();
    for endpoint in [closed_endpoint, silent_endpoint] {
        let export = OtlpExport::http(&endpoint)
            .interval(Duration::from_millis(10))
            .timeout(Duration::from_millis(300))
            .build()
            .expect("an export is built without reaching its endpoint");
        let subscriber = Registry::default().with(export.layer());
        agent_airlock_tests::tracing_capture::with_default(subscriber, || {
            for n in 0..200 {
                let call = ToolCall::new(format!("c{n}"), "echo", json!({"word": n.to_string()}));
                let message = block_on(dispatcher.dispatch(call, &CallContext::new())).expect_message();
                assert_eq!(message.content, format!("echo: {n}"), "{endpoint}");
            }
        });
        // Bounded by the export timeout per signal (generous here: a loaded machine), never a hang.
        let started = Instant::now();
        let _ = export.shutdown();
        assert!(started.elapsed() < Duration::from_secs(20), "{endpoint}: shutdown took {:?}", started.elapsed());
    }
    drop(held);
}
