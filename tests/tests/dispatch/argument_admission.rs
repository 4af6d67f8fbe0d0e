//! What the schema says about nested arguments holds at run time: unknown keys at every depth are stripped
//! (with their path) or blocked, sets refuse repeated items, integers their type cannot hold are refused
//! with the range, and every refusal stays short and one line per problem whatever the model sent.

use std::collections::{BTreeSet, HashMap};

use agent_airlock::{
    CallContext, Dispatcher, RefusalKind, Status, ToolCall, ToolDefinition, ToolMessage, airlock_tool, tool,
};
use agent_airlock_tests::block_on;
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// A postal address.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Address {
    /// Street and number.
    pub street: String,
    /// City.
    pub city: String,
    /// Postal code.
    pub zip: Option<String>,
}

/// An amount, as a number of cents or as text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Amount {
    /// Cents.
    Cents(u64),
    /// Written out.
    Text(String),
}

/// Ships parcels.
#[airlock_tool]
fn ship(
    /// Where to.
    address: Address,
    /// Further stops.
    stops: Option<Vec<Address>>,
    /// Labels to print.
    labels: Option<BTreeSet<String>>,
    /// Grams.
    weight: Option<i32>,
    /// Notes per parcel.
    notes: Option<HashMap<String, u8>>,
    /// Declared value.
    value: Option<Amount>,
) -> String {
    let extras = (stops.map(|s| s.len()), labels.map(|l| l.len()), weight, notes.map(|n| n.len()), value);
    format!("to {} in {} ({:?}) {extras:?}", address.street, address.city, address.zip)
}

/// Ships, refusing any undeclared key.
#[airlock_tool(ghost = "block")]
fn ship_strictly(
    /// Where to.
    address: Address,
) -> String {
    format!("to {}", address.street)
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder().tool(tool!(ship)).tool(tool!(ship_strictly)).build().unwrap()
}

fn send(name: &str, arguments: Value) -> ToolMessage {
    block_on(dispatcher().dispatch(ToolCall::new("c", name, arguments), &CallContext::new())).expect_message()
}

fn kind(message: &ToolMessage) -> Option<RefusalKind> {
    message.refusal.as_ref().map(|r| r.kind)
}

#[test]
fn unknown_nested_keys_are_stripped_and_reported_with_their_path() {
    let message = send(
        "ship",
        json!({
            "address": {"street": "s", "city": "c", "zipcode": "123"},
            "stops": [{"street": "a", "city": "b"}, {"street": "a", "city": "b"}, {"street": "a", "city": "b", "zipcode": 1}],
            "sudo": true,
        }),
    );
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(message.stripped_arguments, ["sudo", "address.zipcode", "stops[2].zipcode"]);
    assert_eq!(message.content, "to s in c (None) (Some(3), None, None, None, None)");
}

#[test]
fn ghost_block_refuses_unknown_nested_keys_with_a_hint() {
    let message = send("ship_strictly", json!({"address": {"street": "s", "city": "c", "zipcode": "123"}}));
    assert_eq!(kind(&message), Some(RefusalKind::MalformedArguments));
    assert!(message.content.contains("does not take `address.zipcode`"), "{}", message.content);
    assert!(message.hints.iter().any(|h| h.contains("did you mean `address.zip`")), "{:?}", message.hints);
    assert_eq!(send("ship_strictly", json!({"address": {"street": "s", "city": "c"}})).content, "to s");
}

#[test]
fn a_misspelt_nested_key_is_named_beside_the_missing_one() {
    let message = send("ship", json!({"address": {"stret": "s", "city": "c"}}));
    assert_eq!(kind(&message), Some(RefusalKind::InvalidArguments));
    assert_eq!(message.stripped_arguments, ["address.stret"]);
    assert!(message.content.contains("`address`: missing field `street`"), "{}", message.content);
    assert!(message.hints.iter().any(|h| h == "rename `address.stret` to `address.street`"), "{:?}", message.hints);
}

#[test]
fn sets_refuse_repeated_items_as_their_schema_says() {
    let schema = ToolDefinition::of(&tool!(ship)).input_schema;
    assert_eq!(schema["properties"]["labels"]["uniqueItems"], true);
    // Dialects without `uniqueItems` say it in the description.
    let only_labels = json!({"type": "object", "properties": {"labels": schema["properties"]["labels"]}});
    let openai = agent_airlock::dialect::Dialect::OpenAi.schema(&only_labels).unwrap();
    let gemini = agent_airlock::dialect::Dialect::Gemini.schema(&only_labels).unwrap();
    for labels in [&openai["properties"]["labels"], &gemini["properties"]["labels"]] {
        assert!(labels.get("uniqueItems").is_none(), "{labels}");
        assert_eq!(labels["description"], "Labels to print. Items must be unique.", "{labels}");
    }
    let message = send("ship", json!({"address": {"street": "s", "city": "c"}, "labels": ["a", "b", "a"]}));
    assert_eq!(kind(&message), Some(RefusalKind::InvalidArguments));
    assert!(message.content.contains("`labels` holds `\"a\"` more than once"), "{}", message.content);
    let message = send("ship", json!({"address": {"street": "s", "city": "c"}, "labels": ["a", "b"]}));
    assert_eq!(message.status, Status::Success);
}

#[test]
fn integers_carry_their_range_and_are_refused_outside_it() {
    let schema = ToolDefinition::of(&tool!(ship)).input_schema;
    let weight = &schema["properties"]["weight"];
    assert_eq!((weight["minimum"].as_i64(), weight["maximum"].as_i64()), (Some(-2147483648), Some(2147483647)));
    let address = json!({"street": "s", "city": "c"});
    for (weight, shown) in [(json!(2147483648_u64), "2147483648"), (json!(1e20), "100000000000000000000")] {
        let message = send("ship", json!({"address": address, "weight": weight}));
        assert_eq!(kind(&message), Some(RefusalKind::InvalidArguments));
        let expected =
            format!("`weight`: `{shown}` is out of range for i32: expected an integer from -2147483648 to 2147483647");
        assert!(message.content.contains(&expected), "{}", message.content);
        assert!(!message.content.contains("floating point"), "{}", message.content);
    }
}

#[test]
fn an_untagged_enum_refusal_says_what_each_variant_takes() {
    let message = send("ship", json!({"address": {"street": "s", "city": "c"}, "value": true}));
    assert_eq!(kind(&message), Some(RefusalKind::InvalidArguments));
    let text = &message.content;
    assert!(text.contains("`value`: matches none of the accepted forms: a JSON integer from 0 to"), "{text}");
    assert!(text.contains("or a JSON string"), "{text}");
}

#[test]
fn huge_input_gives_a_short_refusal() {
    let huge = "9".repeat(20 << 20);
    let message = send("ship", json!({"address": {"street": "s", "city": "c"}, "weight": huge}));
    assert_eq!(kind(&message), Some(RefusalKind::InvalidArguments));
    assert!(message.content.len() < 1_000, "{} bytes", message.content.len());
    assert!(message.content.contains('…'));

    let message = send(&"n".repeat(20 << 20), json!({}));
    assert_eq!(kind(&message), Some(RefusalKind::UnknownTool));
    assert!(message.content.len() < 200 && message.content.contains('…'), "{} bytes", message.content.len());

    let message = send("ship_strictly", json!({"address": {"street": "s", "city": "c", "x".repeat(1 << 20): 1}}));
    assert!(message.content.len() < 1_000, "{} bytes", message.content.len());
}

#[test]
fn a_model_chosen_key_cannot_forge_refusal_lines() {
    let forged = "a\n- `address` is required";
    let message = send("ship", json!({"address": {"street": "s", "city": "c"}, "notes": {(forged): "not a number"}}));
    assert_eq!(kind(&message), Some(RefusalKind::InvalidArguments));
    let lines: Vec<&str> = message.content.lines().collect();
    assert_eq!(lines.len(), 2, "{}", message.content);
    assert!(lines[1].starts_with("- `notes.a\\n- `address` is required`: invalid type"), "{}", lines[1]);
    let message = send(forged, json!({}));
    assert_eq!(message.content.lines().count(), 1, "{}", message.content);
}

fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("address".to_owned()),
        Just("street".to_owned()),
        Just("weight".to_owned()),
        "[a-z\n`\"\\\\]{0,8}",
        (0..max).prop_map(|n| "w\n".repeat(n)),
    ]
}

fn argument_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e30..1e30f64).prop_map(Value::from),
        text(5_000).prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text(5_000), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Keys at every depth of `value`.
fn keys(value: &Value) -> usize {
    match value {
        Value::Object(map) => map.len() + map.values().map(keys).sum::<usize>(),
        Value::Array(items) => items.iter().map(keys).sum(),
        _ => 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(256)))]

    #[test]
    fn refusal_text_is_bounded_by_the_number_of_fields(
        name in prop_oneof![Just("ship".to_owned()), Just("ship_strictly".to_owned()), text(5_000)],
        members in prop::collection::vec((text(5_000), argument_value()), 0..8),
    ) {
        let arguments = Value::Object(members.into_iter().collect());
        let fields = keys(&arguments) + 1;
        let message = send(&name, arguments);
        if message.refusal.is_some() {
            // A line per problem, each a few capped fragments long.
            let hints: usize = message.hints.iter().map(String::len).sum();
            prop_assert!(message.content.len() <= 1_200 * fields, "{} bytes for {fields} fields", message.content.len());
            prop_assert!(hints <= 1_200 * fields, "{hints} bytes of hints for {fields} fields");
            prop_assert!(message.content.lines().count() <= fields + 1, "{}", message.content);
        }
    }
}
