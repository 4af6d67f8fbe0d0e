//! The dispatcher's facts also go out as `tracing` events, so existing observability stacks see them.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use agent_airlock::{CallContext, Dispatcher, Policy, ToolCall, airlock_tool, tool};
use agent_airlock_tests::block_on;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::{Layer, Registry};

/// Echoes a word.
#[airlock_tool]
fn echo(
    /// The word.
    word: String,
) -> String {
    word
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl<S: tracing::Subscriber> Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut line = format!("{} ", event.metadata().target());
        event.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
    }
}

fn events_of(dispatcher: &Dispatcher, call: ToolCall) -> Vec<String> {
    let captured = Captured::default();
    let subscriber = Registry::default().with(captured.clone());
    agent_airlock_tests::tracing_capture::with_default(subscriber, || {
        block_on(dispatcher.dispatch(call, &CallContext::new()));
    });
    captured.0.lock().unwrap().clone()
}

#[test]
fn stripped_ghost_arguments_are_an_event() {
    let dispatcher = Dispatcher::builder().tool(tool!(echo)).build().unwrap();
    let events = events_of(&dispatcher, ToolCall::new("c1", "echo", json!({"word": "hi", "sudo": true})));
    let ghost = events.iter().find(|e| e.contains("undeclared arguments stripped")).expect("a ghost event");
    assert!(ghost.starts_with("agent_airlock "), "{ghost}");
    assert!(ghost.contains("stripped=[\"sudo\"]"), "{ghost}");
    assert!(!ghost.contains("hi"), "argument values are not logged: {ghost}");
    assert!(events.iter().any(|e| e.contains("outcome=\"executed\"")), "{events:?}");
}

#[test]
fn refusals_are_events_with_kind_and_rule() {
    let policy = Policy::builder().deny("ec*").build().unwrap();
    let dispatcher = Dispatcher::builder().tool(tool!(echo)).policy(policy).build().unwrap();
    let events = events_of(&dispatcher, ToolCall::new("c1", "echo", json!({"word": "secret-value"})));
    let refused = events.iter().find(|e| e.contains("outcome=\"refused\"")).expect("a refusal event");
    assert!(refused.contains("kind=Denied") && refused.contains("rule=\"ec*\""), "{refused}");
    assert!(events.iter().all(|e| !e.contains("secret-value")), "{events:?}");
}
