//! Every append is also a `tracing` event with target `agent_airlock::audit`, carrying the same facts
//! (commitments, never raw values).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agent_airlock::RefusalKind;
use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// An event's target and its fields, rendered as text.
type CapturedEvent = (String, BTreeMap<String, String>);

#[derive(Default, Clone)]
struct Capture {
    events: Arc<Mutex<Vec<CapturedEvent>>>,
}

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        self.events.lock().expect("not poisoned").push((event.metadata().target().to_owned(), fields.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn each_append_is_traced_with_its_facts() {
    let capture = Capture::default();
    let log = AuditLog::in_memory(AuditConfig { store_raw: true, ..AuditConfig::default() });
    let arguments = json!({"path": "/etc/secret-file"});
    agent_airlock_tests::tracing_capture::with_default(capture.clone(), || {
        let event = AuditEvent::new("delete_file", "call_9", AuditOutcome::Refused { refusal: RefusalKind::Denied })
            .thread_id(Some("t-1"))
            .rule(Some("delete_*"))
            .arguments(&arguments);
        log.append(event).expect("appended");
    });
    let events = capture.events.lock().expect("not poisoned");
    let audit: Vec<_> = events.iter().filter(|(target, _)| target == "agent_airlock::audit").collect();
    assert_eq!(audit.len(), 1, "{events:?}");
    let fields = &audit[0].1;
    let record = &log.records(1, 1).expect("readable")[0];
    assert_eq!(fields["seq"], "1");
    assert_eq!(fields["tool"], "delete_file");
    assert_eq!(fields["tool_call_id"], "call_9");
    assert_eq!(fields["thread_id"], "t-1");
    assert_eq!(fields["outcome"], "refused (denied)");
    assert_eq!(fields["rule"], "delete_*");
    assert_eq!(fields["arguments"], record.arguments.expect("committed").digest.to_hex());
    assert_eq!(fields["hash"], record.hash.to_hex());
    assert!(!fields.values().any(|v| v.contains("secret-file")), "raw values never reach traces: {fields:?}");
}
