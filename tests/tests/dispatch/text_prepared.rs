//! A call whose arguments come as JSON text, to a tool nothing after gate 4 reads the arguments of and with no
//! audit log to keep them, is prepared straight from each argument's text ([`Tool::prepare_text`]) when gate
//! 3's screen would admit the arguments unchanged. It must be answered exactly as the call parsed first:
//! the same message word for word, the tool given the same typed values (every tool here writes its typed
//! arguments into its result). Checked over generated texts near a tool whose parameters are of every kind
//! (strings, integers up to 128 bits, floats, closed and open structs, lists, sets, maps, any JSON, unit and
//! data enums, an injected value), and that the texts go both ways in good numbers, so the agreement is not
//! vacuous; and fixed texts for each reason a call leaves the text path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::dialect::Dialect;
use agent_airlock::effect::MemoryEffectStore;
use agent_airlock::tool::{ArgumentErrors, ArgumentTexts, Arguments, Invocation, Prepared, Tool, ToolSpec};
use agent_airlock::{
    CallContext, Dispatcher, Policy, RefusalKind, State, Status, ToolCall, ToolCallId, ToolCallText, ToolMessage,
    airlock_tool, tool,
};
use agent_airlock_tests::block_on;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde::Deserialize;
use serde_json::{Value, json};

/// A closed nested struct.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Address {
    /// Street.
    pub street: String,
    /// Postal code.
    pub zip: Option<String>,
}

/// A nested struct that does not refuse unknown fields itself (the screen still knows its keys).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Loose {
    /// Note.
    pub note: String,
    /// Level.
    pub level: Option<i32>,
}

/// A unit enum.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Color {
    /// Red.
    Red,
    /// Green.
    Green,
}

/// A data enum: a union of object alternatives.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// A circle.
    Circle {
        /// Radius.
        r: f64,
    },
    /// A square.
    Square {
        /// Side.
        side: u32,
    },
}

/// An untagged enum: serde buffers the value before trying each variant.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum IntOrText {
    /// A number.
    Int(i64),
    /// A large one.
    Wide(u128),
    /// Text.
    Text(String),
}

/// An internally tagged enum.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Tagged {
    /// A point.
    Point {
        /// X.
        x: i32,
    },
    /// Nothing.
    Empty,
}

/// A value whose type reads nothing of what it is sent (serde's `IgnoredAny`): the text path must not admit
/// text the map's parse refuses because this type skips it.
#[derive(Debug)]
pub struct Anything;

impl<'de> Deserialize<'de> for Anything {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| Anything)
    }
}

impl schemars::JsonSchema for Anything {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Anything".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({})
    }
}

/// Record something: every kind of parameter, all written back.
#[airlock_tool]
#[allow(clippy::too_many_arguments)]
fn record(
    /// Name.
    name: String,
    /// Offset.
    offset: i64,
    /// Count.
    count: Option<u8>,
    /// Ratio.
    ratio: Option<f64>,
    /// Flag.
    flag: Option<bool>,
    /// Address.
    address: Option<Address>,
    /// Loose.
    loose: Option<Loose>,
    /// Tags.
    tags: Option<Vec<String>>,
    /// Labels, a set.
    labels: Option<BTreeSet<String>>,
    /// A large integer.
    big: Option<u128>,
    /// A signed large integer.
    wide: Option<i128>,
    /// Anything.
    extra: Option<Value>,
    /// Color.
    color: Option<Color>,
    /// Shape.
    shape: Option<Shape>,
    /// Scores.
    scores: Option<BTreeMap<String, i32>>,
    /// Read by nothing.
    ignored: Option<Anything>,
    /// A pair.
    pair: Option<(u8, String)>,
    /// A letter.
    letter: Option<char>,
    /// A single-precision float.
    small: Option<f32>,
    /// A number or text.
    either: Option<IntOrText>,
    /// Tagged.
    tagged: Option<Tagged>,
    #[inject] id: ToolCallId,
) -> String {
    format!(
        "{name:?} {offset} {count:?} {ratio:?} {flag:?} {address:?} {loose:?} {tags:?} {labels:?} {big:?} {wide:?} \
         {extra:?} {color:?} {shape:?} {scores:?} {ignored:?} {pair:?} {letter:?} {small:?} {either:?} {tagged:?} {}",
        id.0
    )
}

/// The host's workspace, which the test's host never supplies.
#[derive(Debug, Clone)]
pub struct Workspace;

/// Needs the workspace.
#[airlock_tool]
fn needs_workspace(
    /// Path.
    path: String,
    #[inject] ws: State<Workspace>,
) -> String {
    format!("{path} {:?}", *ws)
}

/// Has an effect template: the arguments are read after gate 4.
#[airlock_tool(effect = "send:{to}")]
fn send(
    /// To.
    to: String,
) -> String {
    to
}

/// Counts the calls a tool prepared from texts; otherwise the tool itself.
struct Counting {
    inner: Arc<dyn Tool>,
    from_text: AtomicUsize,
}

impl Counting {
    fn new(inner: impl Tool) -> Arc<Self> {
        Arc::new(Counting { inner: Arc::new(inner), from_text: AtomicUsize::new(0) })
    }

    fn prepared_from_text(&self) -> usize {
        self.from_text.load(Ordering::SeqCst)
    }
}

impl Tool for Counting {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn prepare(
        &self,
        arguments: std::borrow::Cow<'_, Arguments>,
        invocation: &Invocation<'_>,
    ) -> Result<Prepared, ArgumentErrors> {
        self.inner.prepare(arguments, invocation)
    }

    fn prepares_text(&self) -> bool {
        self.inner.prepares_text()
    }

    fn prepare_text(&self, texts: &ArgumentTexts<'_>, invocation: &Invocation<'_>) -> Option<Prepared> {
        let prepared = self.inner.prepare_text(texts, invocation);
        if prepared.is_some() {
            self.from_text.fetch_add(1, Ordering::SeqCst);
        }
        prepared
    }
}

struct Host {
    dispatcher: Dispatcher,
    record: Arc<Counting>,
    needs_workspace: Arc<Counting>,
    send: Arc<Counting>,
}

fn host(audit: Option<Arc<AuditLog>>) -> Host {
    let (record, needs_workspace, send) =
        (Counting::new(tool!(record)), Counting::new(tool!(needs_workspace)), Counting::new(tool!(send)));
    let mut builder = Dispatcher::builder()
        .tool_arc(record.clone())
        .tool_arc(needs_workspace.clone())
        .tool_arc(send.clone())
        .effects(MemoryEffectStore::new())
        .policy(Policy::builder().build().unwrap());
    if let Some(audit) = audit {
        builder = builder.audit(audit);
    }
    Host { dispatcher: builder.build().unwrap(), record, needs_workspace, send }
}

fn dispatch(host: &Host, call: impl Into<agent_airlock::IncomingCall>, cx: &CallContext) -> ToolMessage {
    block_on(host.dispatcher.dispatch(call, cx)).expect_message()
}

/// A value's JSON text, from a few of each kind.
fn scalar() -> BoxedStrategy<String> {
    prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        (-5i64..300).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u128>().prop_map(|n| n.to_string()),
        any::<i128>().prop_map(|n| n.to_string()),
        Just("-0".to_owned()),
        Just("5.0".to_owned()),
        Just("1e3".to_owned()),
        Just("-1.5E-3".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("9223372036854775808".to_owned()),
        Just("-9223372036854775809".to_owned()),
        any::<f64>().prop_filter_map("finite", |f| f.is_finite().then(|| json!(f).to_string())),
        ".{0,8}".prop_map(|s| json!(s).to_string()),
        Just("\"red\"".to_owned()),
        Just("\"blue\"".to_owned()),
        Just("\"a\\u0000b\\\"c\"".to_owned()),
        // Not JSON, though skipping them does not notice: a lone surrogate, a number out of range.
        Just("\"\\ud800\"".to_owned()),
        Just("\"\\udc00x\\n\"".to_owned()),
        Just("1e400".to_owned()),
        Just("-1E+999".to_owned()),
    ]
    .boxed()
}

/// A key: one the tool declares (at the top or nested), a near miss, or anything.
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "name", "offset", "count", "ratio", "flag", "address", "loose", "tags", "labels", "big", "wide", "extra",
            "color", "shape", "scores", "ignored", "pair", "letter", "small", "either", "tagged", "kind", "x", "point", "street", "zip", "note", "level", "circle", "square", "r", "side", "id",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,4}",
    ]
    .boxed()
}

/// An object's text from its members, keys possibly repeated, spelled with an escape now and then.
fn object(members: Vec<(String, String)>, escape: bool) -> String {
    let members: Vec<String> = members
        .into_iter()
        .map(|(key, value)| {
            let key = json!(key).to_string();
            let key = match (escape, key.find('e')) {
                (true, Some(at)) => format!("{}\\u0065{}", &key[..at], &key[at + 1..]),
                _ => key,
            };
            format!("{key}:{value}")
        })
        .collect();
    format!("{{{}}}", members.join(","))
}

/// Any JSON value's text near the tool's shapes, nested a few levels.
fn value() -> BoxedStrategy<String> {
    scalar()
        .prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
                (prop::collection::vec((key(), inner), 0..4), prop::bool::weighted(0.05))
                    .prop_map(|(members, escape)| object(members, escape)),
            ]
        })
        .boxed()
}

/// A value the tool's parameter `key` accepts (most of the time), or any value.
fn value_for(param: &'static str) -> BoxedStrategy<String> {
    let typical: BoxedStrategy<String> = match param {
        "name" => ".{0,12}".prop_map(|s| json!(s).to_string()).boxed(),
        "offset" => any::<i64>().prop_map(|n| n.to_string()).boxed(),
        "count" => prop_oneof![9 => 0u16..256, 1 => 256u16..1000].prop_map(|n| n.to_string()).boxed(),
        "ratio" => any::<f64>().prop_filter_map("finite", |f| f.is_finite().then(|| json!(f).to_string())).boxed(),
        "flag" => any::<bool>().prop_map(|b| b.to_string()).boxed(),
        "address" => prop::collection::vec(
            prop_oneof![
                3 => ".{0,6}".prop_map(|s| ("street".to_owned(), json!(s).to_string())),
                2 => ".{0,6}".prop_map(|s| ("zip".to_owned(), json!(s).to_string())),
                1 => Just(("zip".to_owned(), "null".to_owned())),
                1 => (key(), scalar()),
            ],
            0..4,
        )
        .prop_map(|members| object(members, false))
        .boxed(),
        "loose" => prop::collection::vec(
            prop_oneof![
                3 => ".{0,6}".prop_map(|s| ("note".to_owned(), json!(s).to_string())),
                2 => any::<i32>().prop_map(|n| ("level".to_owned(), n.to_string())),
                1 => (key(), scalar()),
            ],
            0..4,
        )
        .prop_map(|members| object(members, false))
        .boxed(),
        "tags" | "labels" => prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "\u{202e}d"]), 0..4)
            .prop_map(|items| json!(items).to_string())
            .boxed(),
        // Mostly within 64 bits (what the map's way admits), now and then past them.
        "big" => {
            prop_oneof![4 => any::<u64>().prop_map(u128::from), 1 => any::<u128>()].prop_map(|n| n.to_string()).boxed()
        }
        "wide" => {
            prop_oneof![4 => any::<i64>().prop_map(i128::from), 1 => any::<i128>()].prop_map(|n| n.to_string()).boxed()
        }
        "extra" | "ignored" => value(),
        "either" => prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u128>().prop_map(|n| n.to_string()),
            ".{0,3}".prop_map(|s| json!(s).to_string())
        ]
        .boxed(),
        "pair" => (any::<u8>(), ".{0,3}").prop_map(|(n, s)| json!([n, s]).to_string()).boxed(),
        "letter" => ".{1,2}".prop_map(|s| json!(s).to_string()).boxed(),
        "small" => any::<f32>().prop_filter_map("finite", |f| f.is_finite().then(|| json!(f).to_string())).boxed(),
        "tagged" => prop_oneof![
            any::<i32>().prop_map(|x| format!(r#"{{"kind":"point","x":{x}}}"#)),
            Just(r#"{"kind":"empty"}"#.to_owned()),
            Just(r#"{"x":1,"kind":"point"}"#.to_owned()),
        ]
        .boxed(),
        "color" => prop::sample::select(vec!["\"red\"", "\"green\"", "\"red\"", "\"green\"", "\"blue\""])
            .prop_map(str::to_owned)
            .boxed(),
        "shape" => prop_oneof![
            any::<f32>().prop_filter_map("finite", |r| r.is_finite().then(|| format!("{{\"circle\":{{\"r\":{r}}}}}"))),
            any::<u32>().prop_map(|side| format!("{{\"square\":{{\"side\":{side}}}}}")),
        ]
        .boxed(),
        "scores" => {
            prop::collection::btree_map(".{0,3}", any::<i32>(), 0..3).prop_map(|m| json!(m).to_string()).boxed()
        }
        _ => unreachable!("{param}"),
    };
    prop_oneof![20 => typical, 1 => value()].boxed()
}

const PARAMS: [&str; 21] = [
    "name", "offset", "count", "ratio", "flag", "address", "loose", "tags", "labels", "big", "wide", "extra", "color",
    "shape", "scores", "ignored", "pair", "letter", "small", "either", "tagged",
];

/// The text of a call to `record`: the two required parameters usually there, others now and then, in
/// declaration order or shuffled, a ghost or a repeated key sometimes, compact or spaced; or any value.
fn record_text() -> BoxedStrategy<String> {
    let members = PARAMS.iter().map(|&key| {
        let weight = match key {
            "name" | "offset" => 0.95,
            // Each of these always leaves the text path: sent now and then.
            "labels" | "shape" => 0.08,
            _ => 0.15,
        };
        prop::option::weighted(weight, value_for(key).prop_map(move |value| (key.to_owned(), value)))
    });
    let members = members.collect::<Vec<_>>();
    let call = (
        members,
        prop::option::weighted(0.1, (key(), value())),
        prop::option::weighted(0.05, (prop::sample::select(PARAMS.to_vec()), scalar())),
        any::<bool>(),
        prop::bool::weighted(0.2),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(members, ghost, repeated, shuffle, spaced, at)| {
            let mut members: Vec<(String, String)> = members.into_iter().flatten().collect();
            if shuffle && !members.is_empty() {
                let first = at.index(members.len());
                members.rotate_left(first);
            }
            members.extend(ghost);
            members.extend(repeated.map(|(key, value)| (key.to_owned(), value)));
            let text = object(members, false);
            if spaced { text.replace(',', ", \n").replace(':', " : ") } else { text }
        });
    prop_oneof![12 => call, 1 => value()].boxed()
}

/// Every text is answered alike both ways, the typed values included, and both ways are taken often.
#[test]
fn a_call_prepared_from_its_text_is_answered_as_the_call_parsed_first() {
    let host = host(None);
    let dialects = [None, Some(Dialect::OpenAi), Some(Dialect::Gemini), Some(Dialect::Mcp)];
    let mut runner = TestRunner::new(Config::with_cases(agent_airlock_tests::proptest_cases(1024)));
    let (calls, succeeded) = (AtomicUsize::new(0), AtomicUsize::new(0));
    runner
        .run(&(record_text(), prop::sample::select(dialects.to_vec())), |(text, dialect)| {
            let cx = match dialect {
                Some(dialect) => CallContext::new().with_thread("t").with_dialect(dialect),
                None => CallContext::new().with_thread("t"),
            };
            let parsed = dispatch(&host, ToolCall::from_json_text("c1", "record", &text), &cx);
            let before = host.record.prepared_from_text();
            let lazy = dispatch(&host, ToolCallText::new("c1", "record", text.clone()), &cx);
            prop_assert_eq!(&lazy, &parsed, "{}", text);
            let from_text = host.record.prepared_from_text() - before;
            prop_assert!(from_text <= 1);
            // Prepared from its text only where the map's way runs the tool too, with nothing stripped.
            if from_text == 1 {
                prop_assert_eq!(parsed.status, Status::Success, "{}", text);
                prop_assert!(parsed.stripped_arguments.is_empty(), "{}", text);
            }
            calls.fetch_add(1, Ordering::SeqCst);
            succeeded.fetch_add(usize::from(parsed.status == Status::Success), Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    let (calls, succeeded) = (calls.into_inner(), succeeded.into_inner());
    let from_text = host.record.prepared_from_text();
    eprintln!("{calls} calls, {succeeded} ran, {from_text} prepared from their text");
    // Both ways taken often (about 15 % of the calls prepared from their text, 38 % run), and refusals too.
    assert!(from_text * 10 >= calls, "only {from_text} of {calls} calls were prepared from their text");
    assert!(succeeded >= from_text + calls / 10, "{succeeded} ran, {from_text} of them from text, of {calls}");
    assert!(calls - succeeded >= calls / 10, "only {} of {calls} refused", calls - succeeded);
}

/// Each reason a call leaves the text path, and the answer it gets then: the map's way, word for word.
#[test]
fn a_call_the_text_path_does_not_admit_as_it_is_takes_the_maps_way() {
    let host = host(None);
    let cx = CallContext::new().with_thread("t");
    let both = |name: &str, text: &str, cx: &CallContext| {
        let parsed = dispatch(&host, ToolCall::from_json_text("c", name, text), cx);
        let lazy = dispatch(&host, ToolCallText::new("c", name, text), cx);
        assert_eq!(lazy, parsed, "{text}");
        lazy
    };
    let from_text = |counting: &Counting, name: &str, text: &str, cx: &CallContext| {
        let before = counting.prepared_from_text();
        let message = both(name, text, cx);
        (counting.prepared_from_text() - before, message)
    };
    let record = |text: &str| from_text(&host.record, "record", text, &cx);

    // The text path, every kind of value in it.
    let (n, message) = record(
        r#"{"name": "n", "offset": -3, "count": 7, "ratio": 0.5, "flag": true, "address": {"street": "s", "zip": null},
            "loose": {"note": "x"}, "tags": ["a", "a"], "big": 18446744073709551615,
            "wide": -9223372036854775808, "extra": {"any": [1, {"thing": null}]},
            "color": "green", "scores": {"a": 1}}"#,
    );
    assert_eq!(n, 1, "{message:?}");
    assert_eq!(message.status, Status::Success);
    assert_eq!(
        message.content,
        r#""n" -3 Some(7) Some(0.5) Some(true) Some(Address { street: "s", zip: None }) Some(Loose { note: "x", level: None }) Some(["a", "a"]) None Some(18446744073709551615) Some(-9223372036854775808) Some(Object {"any": Array [Number(1), Object {"thing": Null}]}) Some(Green) None Some({"a": 1}) None None None None None None c"#
    );

    // Each value's text found between the keys around it, whatever blanks surround the punctuation.
    for text in [
        "{\"name\":\"n\",\"offset\":1,\"tags\":[\"a\"]}",
        "\r\n\t{ \"name\"\t:\n\"n\" \r,\n\t\"offset\" :-1 , \"tags\" : [ \"a\" ]\n\t}\r\n ",
        "{\"tags\":[\"a\"],\"offset\":1,\"name\":\"n\"}",
    ] {
        let (n, message) = record(text);
        assert_eq!((n, message.status), (1, Status::Success), "{text:?}: {message:?}");
        assert!(message.content.starts_with(r#""n" "#) && message.content.contains(r#"Some(["a"])"#), "{message:?}");
    }

    // Escapes decoded, anything a type skips read all the same.
    let (n, message) =
        record(r#"{"name": "a\"b\u00e9\ud83d\ude00", "offset": 1, "ignored": {"a": [1, "x\n", 2.5e3]}}"#);
    assert_eq!((n, message.status), (1, Status::Success), "{message:?}");
    assert!(
        message.content.starts_with(r#""a\"bé😀" 1 "#)
            && message.content.ends_with(" Some(Anything) None None None None None c"),
        "{message:?}"
    );
    // Text the map's parse refuses, where a type that skips it would not notice: refused as not JSON.
    for ignored in [r#""\ud800""#, r#""x\udc00""#, "1e400", "-1E+999", r#"{"a": ["\udc00"]}"#, r#"[1, {"b": 1e400}]"#] {
        let (n, message) = record(&format!(r#"{{"name": "n", "offset": 1, "ignored": {ignored}}}"#));
        assert_eq!(n, 0, "{ignored}: {message:?}");
        assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::MalformedArguments), "{ignored}");
    }

    // Each of these leaves it; each is answered as the parsed call is (checked in `both`).
    for (text, why) in [
        (r#"{"name": "n", "offset": 1, "ghost": 1}"#, "a ghost at the top"),
        (r#"{"name": "n", "offset": 1, "address": {"street": "s", "zipcode": "1"}}"#, "a ghost in a closed struct"),
        (r#"{"name": "n", "offset": 1, "loose": {"note": "s", "extra": 1}}"#, "a ghost the struct would ignore"),
        (r#"{"name": "n", "offset": 1, "offset": 2}"#, "a key sent twice"),
        (r#"{"name": "n", "offset": 1, "count": null}"#, "a top-level null"),
        (r#"{"name": "n", "offset": 1, "labels": ["a"]}"#, "a set"),
        (r#"{"name": "n", "offset": 1, "shape": {"circle": {"r": 1}}}"#, "a union of objects"),
        (r#"{"name": "n", "offset": 1, "big": 18446744073709551616}"#, "an integer past 64 bits"),
        (r#"{"name": "n", "offset": 1, "wide": -9223372036854775809}"#, "a negative one past 64 bits"),
        (r#"{"name": "n", "offset": 1, "wide": -0}"#, "-0, a float to serde_json"),
        (r#"{"name": "n", "offset": 1, "extra": [{"wide": -0}]}"#, "-0 nested"),
        (r#"{"name": "n", "offset": -0}"#, "-0 for a 64-bit integer"),
        (r#"{"n\u0061me": "n", "offset": 1}"#, "an escaped key"),
        (r#"{"name": "n", "offset": 1, "count": 300}"#, "a value out of its type's range"),
        (r#"{"name": "n", "offset": "1"}"#, "a value of the wrong type"),
        (r#"{"name": "n"}"#, "a required argument missing"),
        (r#"{"name": "n", "offset": 1"#, "cut text"),
        (r#"{"name": "n", "offset": 1} {}"#, "two values"),
        ("null", "no arguments"),
        ("[]", "not an object"),
    ] {
        let (n, message) = record(text);
        assert_eq!(n, 0, "{why}: {message:?}");
    }
    // Nesting past the screen's depth, and the deepest it admits.
    let deep = |levels: usize| {
        format!(r#"{{"name": "n", "offset": 1, "extra": {}1{}}}"#, "[".repeat(levels), "]".repeat(levels))
    };
    let (n, message) = record(&deep(63));
    assert_eq!((n, message.status), (1, Status::Success), "{message:?}");
    let (n, message) = record(&deep(64));
    assert_eq!(n, 0, "{message:?}");
    assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::MalformedArguments));

    // A dialect whose SDK holds integers as floats (Gemini) is screened on the map; the others are not.
    for (dialect, text_path) in [(Dialect::OpenAi, 1), (Dialect::Anthropic, 1), (Dialect::Mcp, 1), (Dialect::Gemini, 0)]
    {
        let cx = CallContext::new().with_thread("t").with_dialect(dialect);
        let (n, message) = from_text(&host.record, "record", r#"{"name": "n", "offset": 1}"#, &cx);
        assert_eq!((n, message.status), (text_path, Status::Success), "{dialect:?}: {message:?}");
        // A set's repeated item, counted once where the dialect cannot say `uniqueItems`, refused elsewhere.
        let (n, message) =
            from_text(&host.record, "record", r#"{"name": "n", "offset": 1, "labels": ["a", "a"]}"#, &cx);
        assert_eq!(n, 0, "{dialect:?}");
        assert_eq!(message.status == Status::Success, !dialect.says_unique_items(), "{dialect:?}: {message:?}");
    }

    // An injected value the host does not supply: the map's way says so.
    let (n, message) = from_text(&host.needs_workspace, "needs_workspace", r#"{"path": "p"}"#, &cx);
    assert_eq!(n, 0);
    assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::HostMisconfigured));
    // A tool whose effect key is rendered from its arguments never reads texts.
    assert!(!host.send.prepares_text(), "a tool with an effect template does not read texts");
    let message = dispatch(&host, ToolCallText::new("c", "send", r#"{"to": "x"}"#), &cx);
    assert_eq!((host.send.prepared_from_text(), message.status), (0, Status::Success));

    // With an audit log, whose records keep the admitted arguments, every call takes the map's way.
    let audited = host_with_audit();
    let before = audited.record.prepared_from_text();
    let message = dispatch(&audited, ToolCallText::new("c", "record", r#"{"name": "n", "offset": 1}"#), &cx);
    assert_eq!(message.status, Status::Success);
    assert_eq!(audited.record.prepared_from_text(), before);
}

fn host_with_audit() -> Host {
    host(Some(Arc::new(AuditLog::in_memory(AuditConfig::default()))))
}
