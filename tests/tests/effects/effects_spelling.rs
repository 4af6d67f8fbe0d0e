//! An effect runs once, whatever the spelling: the effect key is rendered from each argument's typed value
//! serialized back and canonicalized, so `100` and `100.0`, reordered object keys and a field the type
//! ignores give one key, while different values still give different keys. Driven through the real
//! dispatcher with a redb effect store.

use std::sync::Arc;

use agent_airlock::effect::{EffectFilter, EffectStore, RedbEffectStore};
use agent_airlock::{CallContext, Clock, Dispatcher, ManualClock, RefusalKind, Status, ToolCall, airlock_tool, tool};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::START;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A payee; unknown fields are ignored (no `deny_unknown_fields`).
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Payee {
    iban: String,
    name: String,
}

/// How to pay.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Method {
    /// A card, by its last digits.
    Card { brand: String, last4: String },
    /// A bank transfer.
    #[serde(alias = "wire")]
    Transfer,
}

/// Transfer money.
#[airlock_tool(effect = "transfer:{to}:{amount}")]
fn transfer(
    /// Who is paid.
    to: Payee,
    /// How much.
    amount: f64,
) -> String {
    format!("{amount} to {}", to.name)
}

/// Pay an invoice.
#[airlock_tool(effect = "pay:{invoice}:{lines}:{method}:{note}:{split}")]
fn pay(
    /// The invoice number.
    invoice: u64,
    /// The line amounts.
    lines: Vec<f64>,
    /// How to pay.
    method: Method,
    /// A note for the payee.
    note: Option<String>,
    /// Payees and shares.
    split: Vec<Payee>,
) -> String {
    format!("{invoice} paid: {lines:?} {method:?} {note:?} {split:?}")
}

struct Host {
    _dir: tempfile::TempDir,
    dispatcher: Dispatcher,
    effects: Arc<RedbEffectStore>,
    clock: Arc<ManualClock>,
    calls: std::cell::Cell<u32>,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().expect("a temp dir");
        let effects = Arc::new(RedbEffectStore::open(dir.path().join("effects.redb")).expect("opens"));
        let clock = Arc::new(ManualClock::new(START));
        let dispatcher = Dispatcher::builder()
            .tool(tool!(transfer))
            .tool(tool!(pay))
            .effects(Arc::clone(&effects))
            .clock(Arc::clone(&clock))
            .build()
            .expect("builds");
        Host { _dir: dir, dispatcher, effects, clock, calls: std::cell::Cell::new(0) }
    }

    /// Dispatches one call: `true` if the tool ran, `false` if it was refused as a duplicate.
    fn runs(&self, name: &str, arguments: Value) -> bool {
        self.calls.set(self.calls.get() + 1);
        let call = ToolCall::new(format!("call_{}", self.calls.get()), name, arguments.clone());
        let message = block_on(self.dispatcher.dispatch(call, &CallContext::new())).expect_message();
        match &message.refusal {
            None => {
                assert_eq!(message.status, Status::Success, "{arguments}: {}", message.content);
                true
            }
            Some(refusal) if refusal.kind == RefusalKind::Duplicate => false,
            Some(refusal) => panic!("{arguments}: unexpected refusal {refusal:?}: {}", message.content),
        }
    }

    fn keys(&self) -> Vec<String> {
        let records = self.effects.list(&EffectFilter::all(), self.clock.now()).expect("lists");
        records.into_iter().map(|record| record.key).collect()
    }
}

fn payee(iban: &str) -> Value {
    json!({"iban": iban, "name": "Jane"})
}

#[test]
fn a_float_spelled_as_an_integer_or_in_exponent_form_is_one_effect() {
    let host = Host::new();
    assert!(host.runs("transfer", json!({"to": payee("DE1"), "amount": 100})));
    assert!(!host.runs("transfer", json!({"to": payee("DE1"), "amount": 100.0})));
    assert!(!host.runs("transfer", json!({"to": payee("DE1"), "amount": 1e2})));
    assert!(host.runs("transfer", json!({"to": payee("DE1"), "amount": 100.5})), "a different amount");
    assert_eq!(host.keys().len(), 2, "{:?}", host.keys());
}

#[test]
fn reordered_object_keys_and_an_ignored_field_are_one_effect() {
    let host = Host::new();
    assert!(host.runs("transfer", json!({"to": {"iban": "DE1", "name": "Jane"}, "amount": 5})));
    assert!(!host.runs("transfer", json!({"to": {"name": "Jane", "iban": "DE1"}, "amount": 5})));
    assert!(!host.runs("transfer", json!({"to": {"iban": "DE1", "name": "Jane", "memo": "again"}, "amount": 5})));
    assert!(host.runs("transfer", json!({"to": {"iban": "DE2", "name": "Jane"}, "amount": 5})), "another payee");
    assert_eq!(host.keys().len(), 2, "{:?}", host.keys());
}

#[test]
fn integers_arrays_enums_and_options_each_have_one_key_per_value() {
    let host = Host::new();
    let base = json!({
        "invoice": 9_007_199_254_740_993u64,
        "lines": [1, 2.5],
        "method": {"card": {"brand": "visa", "last4": "4242"}},
        "split": [payee("DE1")],
    });
    assert!(host.runs("pay", base.clone()));
    // Same values, other spellings: floats in arrays, variant fields reordered, `null` for an absent option,
    // an ignored field inside an array element.
    let respelled = json!({
        "invoice": 9_007_199_254_740_993u64,
        "lines": [1.0, 25e-1],
        "method": {"card": {"last4": "4242", "brand": "visa"}},
        "note": null,
        "split": [{"name": "Jane", "iban": "DE1", "extra": true}],
    });
    assert!(!host.runs("pay", respelled));
    // Each different value is a different effect; an integer beyond 2^53 keeps its exact value.
    let variants = [
        ("invoice", json!(9_007_199_254_740_992u64)),
        ("lines", json!([1, 2.5, 0])),
        ("lines", json!([2.5, 1])),
        ("method", json!({"card": {"brand": "visa", "last4": "4243"}})),
        ("method", json!("transfer")),
        ("note", json!("thanks")),
        ("note", json!("~")),
        ("split", json!([payee("DE1"), payee("DE2")])),
    ];
    for (field, value) in &variants {
        let mut arguments = base.clone();
        arguments[*field] = value.clone();
        assert!(host.runs("pay", arguments), "{field} = {value}");
    }
    // A serde alias of a variant is the same variant.
    let mut wire = base.clone();
    wire["method"] = json!("wire");
    assert!(!host.runs("pay", wire), "`wire` is an alias of `transfer`");
    assert_eq!(host.keys().len(), 1 + variants.len(), "{:#?}", host.keys());
}

#[test]
fn values_cannot_forge_the_separators() {
    let host = Host::new();
    let key_count = || host.keys().len();
    assert!(host.runs("transfer", json!({"to": payee("DE1:2"), "amount": 3})));
    assert!(host.runs("transfer", json!({"to": payee("DE1"), "amount": 23})));
    assert_eq!(key_count(), 2);
    for key in host.keys() {
        assert_eq!(key.matches(':').count(), 2, "a value's `:` is percent-encoded: {key}");
        assert!(key.starts_with("transfer:%7B%22iban%22%3A%22DE1"), "{key}");
    }
}
