//! What every fuzz target checks, as plain functions: the libFuzzer targets in `fuzz_targets/` call them with
//! generated inputs, and `tests/tests/dispatch/fuzz_regressions.rs` (stable toolchain) includes this file and calls
//! them with the inputs that once failed. Each function panics when a property does not hold.
//!
//! Only public APIs of `agent-airlock` are used, so the targets keep compiling while its internals change.
#![allow(unreachable_pub, dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use agent_airlock::ledger::MemoryLedger;
use agent_airlock::mask::{MaskConfig, MaskSet, MaskStrategy, Masker};
use agent_airlock::{
    CallContext, Dispatcher, ManualClock, Policy, Status, ToolCall, ToolCallText, ToolMessage, airlock_tool,
    approval::{AdmitError, BindingInput, DecisionError, InterruptApprovals, InterruptRequest, KeyRing},
    keys::ApprovalKey,
    tool,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------------------
// Running futures without a runtime: the dispatcher and the memory ledger never wait on I/O.

/// Polls `future` to completion on the current thread (a busy loop: nothing here waits on I/O).
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

// ---------------------------------------------------------------------------------------------------------
// The tools: every parameter shape a tool author can declare.

/// A postal address (a nested struct).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Address {
    /// Street.
    pub street: String,
    /// City.
    pub city: String,
    /// Postal code.
    pub zip: Option<String>,
}

/// An externally tagged enum with every variant kind.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// A unit variant.
    Dot,
    /// A newtype variant.
    Circle(u16),
    /// A tuple variant.
    Segment(i8, u8),
    /// A struct variant.
    Rect {
        /// Width.
        w: f64,
        /// Height.
        h: f64,
        /// Where.
        at: Option<Address>,
    },
}

/// An internally tagged enum.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A click.
    Click {
        /// X.
        x: i32,
        /// Y.
        y: i32,
    },
    /// A key press.
    Key {
        /// Key code.
        code: u32,
        /// Modifiers.
        modifiers: Vec<String>,
    },
}

/// An untagged enum: the first variant that fits wins.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum IdOrName {
    /// A numeric id.
    Id(u64),
    /// A name.
    Name(String),
    /// A pair.
    Pair {
        /// First.
        a: i16,
        /// Second.
        b: i16,
    },
}

/// An adjacently tagged enum.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "t", content = "c", rename_all = "snake_case")]
pub enum Tagged {
    /// Text.
    Text(String),
    /// A count.
    Count(u8),
    /// Nothing.
    Empty,
}

/// A recursive type.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tree {
    /// The label.
    pub label: String,
    /// The weight.
    pub weight: Option<f64>,
    /// Children.
    pub children: Vec<Tree>,
}

/// Records a profile.
#[airlock_tool(mask = "none")]
fn profile(
    /// Name.
    name: String,
    /// Age.
    age: u8,
    /// Address.
    address: Address,
    /// Tags.
    tags: Vec<String>,
    /// Nickname.
    nickname: Option<String>,
    /// Active.
    active: bool,
    /// Score.
    score: f64,
) -> Value {
    json!({"name": name, "age": age, "address": address, "tags": tags, "nickname": nickname, "active": active, "score": score})
}

/// Takes an integer of every width.
#[allow(clippy::too_many_arguments)]
#[airlock_tool(mask = "none")]
fn integers(
    /// i8.
    a: i8,
    /// i16.
    b: i16,
    /// i32.
    c: i32,
    /// i64.
    d: i64,
    /// u8.
    e: u8,
    /// u16.
    f: u16,
    /// u32.
    g: u32,
    /// u64.
    h: u64,
    /// usize.
    i: Option<usize>,
    /// isize.
    j: Option<isize>,
    /// i128.
    k: Option<i128>,
    /// u128.
    l: Option<u128>,
) -> Value {
    // i128 and u128 as strings: serde_json cannot write a 128-bit integer into a `Value`.
    json!({"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "g": g, "h": h, "i": i, "j": j,
        "k": k.and_then(|k| i64::try_from(k).ok()), "l": l.and_then(|l| u64::try_from(l).ok())})
}

/// Takes every kind of enum.
#[airlock_tool(mask = "none")]
fn shapes(
    /// Externally tagged.
    shape: Shape,
    /// Internally tagged.
    event: Option<Event>,
    /// Untagged.
    id: IdOrName,
    /// Adjacently tagged.
    tagged: Option<Tagged>,
) -> Value {
    json!({"shape": shape, "event": event, "id": id, "tagged": tagged})
}

/// Takes collections.
#[airlock_tool(mask = "none")]
fn collections(
    /// An ordered map.
    labels: BTreeMap<String, u32>,
    /// A hash map.
    counts: Option<HashMap<String, i64>>,
    /// A set.
    unique: BTreeSet<String>,
    /// A matrix.
    matrix: Vec<Vec<f64>>,
    /// Pairs.
    pairs: Option<Vec<(String, bool)>>,
    /// Addresses by name.
    places: Option<BTreeMap<String, Address>>,
) -> Value {
    // The hash map written back in key order: its own order differs between two maps of the same keys, so two
    // calls given the same arguments would answer in different words.
    let counts = counts.map(|counts| counts.into_iter().collect::<BTreeMap<_, _>>());
    json!({"labels": labels, "counts": counts, "unique": unique, "matrix": matrix, "pairs": pairs, "places": places})
}

/// Takes a recursive type.
#[airlock_tool(mask = "none")]
fn tree(
    /// The root.
    root: Tree,
    /// Depth limit.
    depth: Option<u32>,
) -> Value {
    json!({"root": root, "depth": depth})
}

/// Takes nothing.
#[airlock_tool(mask = "none")]
fn nothing() -> Value {
    json!({})
}

/// Refuses ghost arguments instead of stripping them.
#[airlock_tool(mask = "none", ghost = "block")]
fn strict(
    /// A count.
    count: u32,
    /// A flag.
    flag: Option<bool>,
    /// An address.
    address: Option<Address>,
) -> Value {
    json!({"count": count, "flag": flag, "address": address})
}

/// The registered tool names, with the number of parameters each declares.
pub const TOOLS: &[(&str, usize)] =
    &[("profile", 7), ("integers", 12), ("shapes", 4), ("collections", 6), ("tree", 2), ("nothing", 0), ("strict", 3)];

/// The dispatcher holding every tool, built once.
pub fn dispatcher() -> &'static Dispatcher {
    static DISPATCHER: OnceLock<Dispatcher> = OnceLock::new();
    DISPATCHER.get_or_init(|| {
        Dispatcher::builder()
            .tool(tool!(profile))
            .tool(tool!(integers))
            .tool(tool!(shapes))
            .tool(tool!(collections))
            .tool(tool!(tree))
            .tool(tool!(nothing))
            .tool(tool!(strict))
            .build()
            .expect("the fuzz tools build")
    })
}

// ---------------------------------------------------------------------------------------------------------
// Arguments.

/// Fixed part of the refusal bound: room for the wording, the schema's "expected …" phrases and hints.
pub const REFUSAL_BASE: usize = 16 * 1024;
/// Allowance per declared parameter: one line and one hint each, with capped fragments.
pub const REFUSAL_PER_PARAM: usize = 1024;
/// Allowance per object member of the input: a ghost key (capped) is named in the text and in a hint.
pub const REFUSAL_PER_MEMBER: usize = 512;

/// Object members at any depth of `value` (iterative: inputs nest deep).
pub fn member_count(value: &Value) -> usize {
    let mut count = 0;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                count += map.len();
                stack.extend(map.values());
            }
            _ => {}
        }
    }
    count
}

/// The most text (content and hints) a refusal may hold for `arguments` sent to a tool with `params`
/// parameters. It does not grow with the length of any string, key or number in the input: every echoed
/// fragment must be capped.
pub fn refusal_bound(params: usize, arguments: &Value) -> usize {
    REFUSAL_BASE + REFUSAL_PER_PARAM * params + REFUSAL_PER_MEMBER * member_count(arguments)
}

fn refusal_size(message: &ToolMessage) -> usize {
    message.content.len() + message.hints.iter().map(String::len).sum::<usize>()
}

/// A message that is not a success is a refusal (the tools here return no error of their own) whose text and
/// hints stay within `bound` bytes.
fn assert_refusal_in_bounds(message: &ToolMessage, bound: usize, tool: &str) {
    assert!(message.refusal.is_some(), "`{tool}` returns no error of its own: {message:?}");
    assert!(
        refusal_size(message) <= bound,
        "refusal of {} bytes exceeds the bound of {bound} bytes for `{tool}`: {:.2000}",
        refusal_size(message),
        message.content
    );
}

fn dispatch(tool: &str, arguments: Value) -> ToolMessage {
    let call = ToolCall::new("call_fuzz", tool, arguments);
    match block_on(dispatcher().dispatch(call, &CallContext::new())).message() {
        Some(message) => message.clone(),
        None => panic!("no tool here escalates, yet `{tool}` did not answer with a message"),
    }
}

/// Sends `arguments` to tool number `index` (modulo the tool count) and checks what comes back:
/// - a refusal's text and hints stay within [`refusal_bound`];
/// - an admitted call ran on deserialized arguments, and what the tool received, sent again, is admitted
///   as it is: nothing stripped, the same result (typed → JSON → typed is a fixed point);
/// - stripping is idempotent: the arguments with the stripped top-level keys removed give the same result
///   and strip nothing more (the same names, in any order).
pub fn check_arguments(index: usize, arguments: Value) {
    let (tool, params) = TOOLS[index % TOOLS.len()];
    let bound = refusal_bound(params, &arguments);
    let first = dispatch(tool, arguments.clone());
    assert_eq!(first.tool_call_id, "call_fuzz");
    if first.status != Status::Success {
        assert_refusal_in_bounds(&first, bound, tool);
        return;
    }
    let received: Value = serde_json::from_str(&first.content).expect("an admitted call's result is JSON");

    // What the tool received is admitted again, unchanged.
    let again = dispatch(tool, received.clone());
    assert_eq!(again.status, Status::Success, "`{tool}` refused what it had received: {received} → {again:?}");
    assert!(again.stripped_arguments.is_empty(), "`{tool}` stripped its own arguments: {again:?}");
    let received_again: Value = serde_json::from_str(&again.content).expect("an admitted call's result is JSON");
    assert_eq!(received_again, received, "`{tool}`: typed → JSON → typed is not a fixed point");

    // Removing what was stripped at the top level strips nothing more and changes nothing else.
    if let Value::Object(map) = &arguments {
        let mut remaining = first.stripped_arguments.clone();
        let mut admitted = map.clone();
        admitted.retain(|key, _| match remaining.iter().position(|stripped| stripped == key) {
            Some(at) => {
                remaining.remove(at);
                false
            }
            None => true,
        });
        let stripped_again = dispatch(tool, Value::Object(admitted));
        assert_eq!(stripped_again.status, Status::Success, "{stripped_again:?}");
        // Compared as multisets: the names are shown as a refusal shows them (control characters escaped, long
        // keys cut around `…`, nested keys as dotted paths), so two keys can show alike (a tab and a written
        // `\t`), and the entry removed above may be the other one's, in another place of the list.
        let mut again = stripped_again.stripped_arguments.clone();
        again.sort_unstable();
        remaining.sort_unstable();
        assert_eq!(again, remaining, "stripping is not idempotent for `{tool}`");
        let result: Value = serde_json::from_str(&stripped_again.content).expect("JSON");
        assert_eq!(result, received, "`{tool}`: removing stripped keys changed what the tool received");
    }
}

/// Raw bytes: the first picks the tool, the rest is JSON text (text that is not JSON is refused by the
/// host's parser, which is not ours to test, except through [`ToolCall::from_json_text`]). As text, the call
/// is answered word for word as the call parsed first: a [`ToolCallText`] is parsed only once a gate reads it.
pub fn check_argument_bytes(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    if let Ok(text) = std::str::from_utf8(rest) {
        let (tool, _) = TOOLS[usize::from(selector) % TOOLS.len()];
        let context = CallContext::new();
        let parsed = block_on(dispatcher().dispatch(ToolCall::from_json_text("call_fuzz", tool, text), &context))
            .expect_message();
        let lazy =
            block_on(dispatcher().dispatch(ToolCallText::new("call_fuzz", tool, text), &context)).expect_message();
        assert_eq!(lazy, parsed, "`{tool}`: the text call is answered otherwise than the call parsed first");
    }
    if let Ok(arguments) = serde_json::from_slice::<Value>(rest) {
        check_arguments(usize::from(selector), arguments);
    } else if let Ok(text) = std::str::from_utf8(rest) {
        // Not JSON: OpenAI-style argument text that did not parse becomes a string, which is refused, and
        // the refusal does not echo the text at full size.
        let (tool, params) = TOOLS[usize::from(selector) % TOOLS.len()];
        let message =
            block_on(dispatcher().dispatch(ToolCall::from_json_text("call_fuzz", tool, text), &CallContext::new()))
                .expect_message();
        assert_ne!(message.status, Status::Success, "`{tool}` admitted non-JSON text {text:?}");
        assert!(refusal_size(&message) <= REFUSAL_BASE + REFUSAL_PER_PARAM * params, "{message:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Canonical JSON.

/// Checks the canonical form of the value `text` parses to (if any):
/// - canonical text is a fixed point: parsed and canonicalized again, the same bytes;
/// - it parses back to a value equal to the input (numbers compared as the doubles they are);
/// - reordering object members or respelling numbers (`1`, `1.0`, `1e0`) never changes the bytes or
///   the digest;
/// - where `serde_json_canonicalizer` (a reference RFC 8785 implementation) also accepts the value, both
///   give the same bytes.
pub fn check_canonical(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(canonical) = agent_airlock::canonical::to_canonical_vec(&value) else {
        // Refused (integer beyond 2^53, too deep): the digest must refuse too, never round.
        assert!(agent_airlock::canonical::canonical_sha256(&value).is_err());
        return;
    };
    let text = std::str::from_utf8(&canonical).expect("canonical JSON is UTF-8");
    let reparsed: Value = serde_json::from_str(text).expect("canonical JSON parses");
    let recanonical = agent_airlock::canonical::to_canonical_vec(&reparsed).expect("canonical JSON canonicalizes");
    assert_eq!(recanonical, canonical, "canonical form is not a fixed point: {text}");
    assert!(same_data(&value, &reparsed), "canonical form changed the data: {value} → {text}");

    let digest = agent_airlock::canonical::canonical_sha256(&value).expect("canonicalizable");
    assert_eq!(digest, sha256(&canonical), "the streamed digest differs from the digest of the bytes");

    let respelled = respell(&value);
    let respelled_canonical =
        agent_airlock::canonical::to_canonical_vec(&respelled).expect("a respelled value canonicalizes");
    assert_eq!(
        respelled_canonical, canonical,
        "member order or number spelling changed the canonical form: {value} vs {respelled}"
    );
    if let Value::Object(map) = &respelled {
        let object_digest = agent_airlock::canonical::canonical_object_sha256(map).expect("canonicalizable");
        assert_eq!(object_digest, digest);
    }

    if let Ok(reference) = serde_json_canonicalizer::to_vec(&value) {
        assert_eq!(
            String::from_utf8_lossy(&canonical),
            String::from_utf8_lossy(&reference),
            "differs from serde_json_canonicalizer for {value}"
        );
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Same data: numbers compare as doubles (canonical JSON writes every number as the double it is).
fn same_data(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_data(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_data(v, w)))
        }
        (x, y) => x == y,
    }
}

/// The same data spelled differently: members in reverse order, integers as floats (`5` → `5.0`) where a
/// double holds them exactly, and floats that are whole numbers as integers.
fn respell(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(respell).collect()),
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.reverse();
            Value::Object(members.into_iter().map(|(k, v)| (k.clone(), respell(v))).collect::<Map<_, _>>())
        }
        Value::Number(number) => {
            if let Some(i) = number.as_i64() {
                let f = i as f64;
                if f as i64 == i && f.abs() < 9_007_199_254_740_992.0 {
                    // Through text, so the float is what a parser makes of `5.0`.
                    return serde_json::from_str(&format!("{f:?}")).unwrap_or_else(|_| value.clone());
                }
            } else if let Some(u) = number.as_u64() {
                let f = u as f64;
                if f as u64 == u && f < 9_007_199_254_740_992.0 {
                    return serde_json::from_str(&format!("{f:?}")).unwrap_or_else(|_| value.clone());
                }
            } else if let Some(f) = number.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9_007_199_254_740_992.0
            {
                let i = f as i64;
                return if i == 0 { json!(0) } else { json!(i) };
            }
            value.clone()
        }
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Approvals read back from a checkpoint.

/// One approval protocol over a memory ledger with one real, approved request.
pub struct ApprovalFixture {
    /// The protocol.
    pub approvals: InterruptApprovals,
    /// The real request, as the interrupt carries it.
    pub request: InterruptRequest,
    /// The resume value `approve` returned for it.
    pub resume: Value,
    /// The call the request binds.
    pub arguments: Map<String, Value>,
    /// Its checkpoint map.
    pub checkpoint: BTreeMap<String, String>,
}

/// The secret of the fixture's key, as hex.
pub const APPROVAL_SECRET_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

impl ApprovalFixture {
    /// A fresh ledger holding one request for `refund` and its approval.
    pub fn new() -> Self {
        let key = ApprovalKey::from_hex("k1", APPROVAL_SECRET_HEX).expect("a valid key");
        let clock = Arc::new(ManualClock::new(Duration::from_secs(1_767_225_600)));
        let approvals =
            InterruptApprovals::new(KeyRing::new(key), MemoryLedger::new(), Duration::from_secs(600)).with_clock(clock);
        let arguments = json!({"payment_id": "pi_1", "amount": 500}).as_object().cloned().unwrap_or_default();
        let checkpoint = BTreeMap::from([(String::new(), "c1".to_owned())]);
        let request = approvals
            .request(&binding(&checkpoint, "call_1", "refund", &arguments), "attribute", "moves money")
            .wait()
            .expect("the request is recorded");
        let resume = approvals.approve(request.as_value(), "alice").wait().expect("approved").into_value();
        ApprovalFixture { approvals, request, resume, arguments, checkpoint }
    }
}

impl Default for ApprovalFixture {
    fn default() -> Self {
        Self::new()
    }
}

fn binding<'a>(
    checkpoint: &'a BTreeMap<String, String>,
    tool_call_id: &'a str,
    tool: &'a str,
    arguments: &'a Map<String, Value>,
) -> BindingInput<'a> {
    BindingInput { thread_id: "t1", checkpoint_ns: "", checkpoint, tool_call_id, tool, arguments }
}

/// Untrusted JSON from a checkpoint, used as a resume value and as an interrupt request:
/// - as a resume value for the real call: admitted only if it is, member for member, the genuine resume
///   value (and then only once);
/// - as a resume value for a call with other arguments: never admitted;
/// - as an interrupt: `verify_request` accepts it only if it carries the real request's seal over the real
///   request's content, and approving or denying anything else fails;
/// - nothing panics.
pub fn check_resume(fixture: &ApprovalFixture, untrusted: &Value) {
    let approvals = &fixture.approvals;
    let genuine = untrusted == &fixture.resume;

    let other_arguments = json!({"payment_id": "pi_1", "amount": 501}).as_object().cloned().unwrap_or_default();
    let other = binding(&fixture.checkpoint, "call_1", "refund", &other_arguments);
    match approvals.admit(&other, untrusted).wait() {
        Ok(admission) => panic!("a resume value admitted a call with other arguments: {untrusted} → {admission:?}"),
        Err(AdmitError::Ledger(err)) => panic!("the memory ledger failed: {err}"),
        Err(_) => {}
    }

    let real = binding(&fixture.checkpoint, "call_1", "refund", &fixture.arguments);
    match approvals.admit(&real, untrusted).wait() {
        Ok(_) => assert!(genuine, "admitted without the genuine token: {untrusted}"),
        Err(err) => assert!(
            !genuine || matches!(err, AdmitError::AlreadySpent { .. }),
            "the genuine resume value was refused: {err}"
        ),
    }

    match approvals.verify_request(untrusted) {
        Ok(request) => {
            // Only our own sealed content verifies; a second copy under a different spelling may too, as
            // long as it means the same request.
            assert_eq!(request.request_id(), fixture.request.request_id(), "a forged request verified: {untrusted}");
            assert_eq!(request.binding(), fixture.request.binding());
            let canonical = |arguments: &Map<String, Value>| {
                agent_airlock::canonical::to_canonical_vec(&Value::Object(arguments.clone())).ok()
            };
            assert_eq!(canonical(request.arguments()), canonical(fixture.request.arguments()));
        }
        Err(DecisionError::SealMismatch | DecisionError::NotARequest | DecisionError::Malformed { .. }) => {}
        Err(DecisionError::UnknownKey { .. } | DecisionError::RetiredKey { .. }) => {}
        Err(err) => panic!("unexpected verification error for {untrusted}: {err}"),
    }
    if untrusted != fixture.request.as_value() {
        let same_request = approvals.verify_request(untrusted).is_ok();
        if !same_request {
            assert!(approvals.approve(untrusted, "mallory").wait().is_err(), "approved a forged request");
            assert!(approvals.deny(untrusted, "mallory", Some("no")).wait().is_err(), "denied a forged request");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Masking.

/// Secrets the masking target seeds into its inputs; none of them may survive masking.
pub const SEEDED_SECRETS: &[&str] = &[
    "AKIAIOSFODNN7QK4RW2Z",
    "sk-proj-Zq3xW9vT1bN4mK8pL2rY6sD0fG5hJ7aQ",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "jane.doe@example.com",
    "4111111111111111",
    "GB82WEST12345698765432",
];

/// A masker writing type tags (the default, which [`reference_mask_text`] follows), one writing
/// [`agent_airlock::mask::FULL_MASK`] for every kind, and one keeping part of each value (`AKIA...RW2Z`,
/// `j***@example.com`), whose output holds text a later masking reads again.
fn maskers() -> &'static [Masker; 3] {
    static MASKERS: OnceLock<[Masker; 3]> = OnceLock::new();
    MASKERS.get_or_init(|| {
        [
            Masker::new(MaskConfig::new(MaskStrategy::TypeTag)),
            Masker::new(MaskConfig::new(MaskStrategy::Full)),
            Masker::new(MaskConfig::new(MaskStrategy::Partial)),
        ]
    })
}

#[path = "mask_reference.rs"]
mod mask_reference;
pub use mask_reference::reference_mask_text;

/// Masks `text` with every set and with the type-tag, full and partial strategies, and checks: masking the
/// result again changes nothing; with type tags, the result is what the slow reference
/// ([`reference_mask_text`]) gives; a seeded secret planted between spaces does not survive masking with
/// every kind, whatever the strategy.
pub fn check_mask_text(text: &str, secret: Option<usize>) {
    let around = secret.map(|_| text);
    let text = match secret {
        Some(index) => {
            let secret = SEEDED_SECRETS[index % SEEDED_SECRETS.len()];
            format!("{text} {secret} {text}")
        }
        None => text.to_owned(),
    };
    for (masker, writes_type_tags) in maskers().iter().zip([true, false, false]) {
        for set in [MaskSet::SECRETS, MaskSet::PII, MaskSet::ALL] {
            let once = masker.mask_text(&text, set).into_owned();
            let twice = masker.mask_text(&once, set);
            assert_eq!(twice, once, "masking is not idempotent for {text:?} with {set:?}");
            if writes_type_tags {
                let reference = reference_mask_text(masker, &text, set);
                assert_eq!(once, reference, "one pass and the slow reference disagree on {text:?} with {set:?}");
            }
            // The planted copy stands between spaces; the fuzzer's own text may hold the secret glued to
            // other characters (`AKIA…EXAMPLEAKIA…`), which is not that secret.
            if set == MaskSet::ALL
                && let Some((index, around)) = secret.zip(around)
                && !around.contains(SEEDED_SECRETS[index % SEEDED_SECRETS.len()])
            {
                let secret = SEEDED_SECRETS[index % SEEDED_SECRETS.len()];
                assert!(!once.contains(secret), "`{secret}` survived masking of {text:?}: {once:?}");
            }
        }
    }
}

/// Masks a JSON value and checks idempotence, and that a seeded secret planted as string leaves (beside
/// the value) is gone.
pub fn check_mask_value(value: &Value, secret: Option<usize>) {
    let mut value = value.clone();
    if let Some(index) = secret {
        let secret = SEEDED_SECRETS[index % SEEDED_SECRETS.len()];
        value = json!({"payload": value, "leaked": secret, "list": [secret]});
    }
    for masker in maskers() {
        for set in [MaskSet::SECRETS, MaskSet::ALL] {
            let mut once = value.clone();
            masker.mask_value(&mut once, set);
            let mut twice = once.clone();
            masker.mask_value(&mut twice, set);
            assert_eq!(twice, once, "masking a value is not idempotent with {set:?}");
            if set == MaskSet::ALL
                && let Some(index) = secret
            {
                // The planted leaves, not the payload: the fuzzer's payload may hold the secret glued to other
                // characters, which is not that secret.
                let secret = SEEDED_SECRETS[index % SEEDED_SECRETS.len()];
                let planted = json!([once["leaked"], once["list"]]).to_string();
                assert!(!planted.contains(secret), "`{secret}` survived masking: {once}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Policy.

/// Builds a policy from untrusted globs and rate strings: an error or a policy, never a panic; a built
/// policy answers for any tool name, and a name matching a deny glob is denied.
pub fn check_policy(deny: &str, allow: &str, escalate: &str, rate: &str, masks: &str, tool: &str) {
    let built = Policy::builder()
        .deny(deny)
        .allow(allow)
        .escalate(escalate, "fuzz")
        .rate_limit(allow, rate)
        .rate_limit_per_thread(deny, rate)
        .mask(escalate, masks)
        .build();
    if let Ok(policy) = built {
        let _ = policy.for_tool(tool);
        let _ = policy.for_tool("");
        // A glob without metacharacters matches exactly itself, and deny beats every other rule.
        if !deny.is_empty() && !deny.contains(['*', '?', '[', ']', '{', '}', '\\', ',']) {
            assert!(policy.for_tool(deny).denied_by.is_some(), "`{deny}` is not denied by the glob `{deny}`");
        }
    }
    let _ = rate.parse::<agent_airlock::Rate>();
}

// ---------------------------------------------------------------------------------------------------------
// Policy files and effect templates: one input is a text and, after its first NUL byte, optional JSON
// arguments (TOML and templates have no use for a NUL, and the fuzzer finds the split).

/// Splits a fuzz input at its first NUL byte: the text before it, and the arguments after it when they are a
/// JSON object.
pub fn split_input(data: &[u8]) -> (String, Option<Map<String, Value>>) {
    let (text, rest) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], Some(&data[nul + 1..])),
        None => (data, None),
    };
    let arguments = rest.and_then(|rest| match serde_json::from_slice::<Value>(rest) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    });
    (String::from_utf8_lossy(text).into_owned(), arguments)
}

/// Tool names every built policy is asked about, beside the names its `[tools.…]` tables give.
pub const POLICY_TOOL_NAMES: &[&str] = &["refund", "write_file", "delete_all", "read_file", "t", "", "a/b", "é", "*"];

/// Argument sets every condition and effect template is evaluated on, beside the input's own.
fn argument_sets(own: Option<Map<String, Value>>) -> Vec<Map<String, Value>> {
    let typical = json!({
        "amount": 20000, "path": "/home/u/.ssh/id_rsa", "payment_id": "p_1", "currency": "usd",
        "items": [{"sku": "a", "qty": 2}], "address": {"zip": "12345"}, "flag": true, "ratio": 0.5,
    });
    let mut sets = vec![Map::new()];
    if let Value::Object(map) = typical {
        sets.push(map);
    }
    sets.extend(own);
    sets
}

/// The tables a policy file names (`[tools.refund]`, `[[tools."write_*".when]]`), read loosely from the text.
fn table_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches('[');
        let Some(rest) = line.strip_prefix("tools.") else { continue };
        let rest = rest.trim_start();
        let name = if let Some(quoted) = rest.strip_prefix('"') {
            quoted.split('"').next().unwrap_or_default()
        } else if let Some(quoted) = rest.strip_prefix('\'') {
            quoted.split('\'').next().unwrap_or_default()
        } else {
            rest.split(['.', ']', ' ']).next().unwrap_or_default()
        };
        names.push(name.to_owned());
    }
    names
}

/// Reads a policy file from untrusted text: a policy or an error at a line and column inside the text, the
/// same either way when read twice, never a panic. A built policy answers every tool name (the fixed ones and
/// its own tables'), and each condition that applies to a name answers every argument set; a condition on a
/// missing argument always applies, and so does one on an argument of another type than its literal's (fail
/// closed: a deny rule then denies); each effect template renders a key for every argument set.
pub fn check_policy_file(data: &[u8]) {
    let (text, own) = split_input(data);
    let first = Policy::from_toml(&text);
    match (&first, Policy::from_toml(&text)) {
        (Err(a), Err(b)) => assert_eq!(a, &b, "a policy file gives two different errors"),
        (Ok(_), Ok(_)) => {}
        _ => panic!("a policy file is read once as a policy and once as an error"),
    }
    let policy = match first {
        Ok(policy) => policy,
        Err(err) => {
            let lines: Vec<&str> = text.split('\n').collect();
            assert!(err.line >= 1 && err.line <= lines.len(), "line {} outside the text: {err}", err.line);
            let columns = lines[err.line - 1].chars().count() + 1;
            assert!(err.column >= 1 && err.column <= columns, "column {} outside line {}: {err}", err.column, err.line);
            assert!(!err.message.trim().is_empty(), "an empty error message");
            assert!(!err.message.ends_with(['.', '\n']), "an error message ends with a period: {err}");
            return;
        }
    };
    let _ = policy.summary();
    let sets = argument_sets(own);
    let names = table_names(&text);
    for name in POLICY_TOOL_NAMES.iter().copied().chain(names.iter().map(String::as_str)) {
        let answer = policy.for_tool(name);
        if let Some((_, effect)) = &answer.effect {
            for arguments in &sets {
                let _ = effect.render(arguments);
            }
        }
        for rule in &answer.conditions {
            check_condition_fails_closed(rule.condition(), &sets);
        }
    }
}

/// A condition answers every argument set; it applies when its argument is missing, and when the argument
/// has a type other than the literal's: only values of one scalar type can make it not hold.
pub fn check_condition_fails_closed(
    condition: &agent_airlock::policy::condition::Condition,
    sets: &[Map<String, Value>],
) {
    let source = condition.source();
    for arguments in sets {
        let _ = condition.evaluate(arguments);
    }
    assert!(condition.evaluate(&Map::new()).applies(), "`{source}` does not apply when its argument is missing");
    let root_len = source
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && (c.is_ascii_digit() || c == '-'))))
        .map_or(source.len(), |(i, _)| i);
    let root = &source[..root_len];
    let nested = source[root_len..].starts_with(['.', '[']);
    let probes = [
        ("null", json!(null)),
        ("a boolean", json!(true)),
        ("a boolean", json!(false)),
        ("a number", json!(0)),
        ("a number", json!(-1.5)),
        ("a number", json!(20000)),
        ("a string", json!("")),
        ("a string", json!("x")),
        ("a list", json!([])),
        ("a list", json!([1, "a"])),
        ("an object", json!({})),
        ("an object", json!({"zip": "1"})),
    ];
    let mut kinds_that_decide = BTreeSet::new();
    for (kind, value) in probes {
        let mut arguments = Map::new();
        arguments.insert(root.to_owned(), value.clone());
        let evaluation = condition.evaluate(&arguments);
        if nested && !value.is_object() && !value.is_array() {
            assert!(evaluation.applies(), "`{source}` does not apply when `{root}` is {value} (fail closed)");
        }
        if !nested && !evaluation.applies() {
            kinds_that_decide.insert(kind);
        }
    }
    assert!(
        kinds_that_decide.len() <= 1
            && !kinds_that_decide.iter().any(|k| matches!(*k, "null" | "a list" | "an object")),
        "`{source}` does not apply for arguments of types {kinds_that_decide:?}: only its literal's type may decide"
    );
}

/// Nesting depth of a JSON value (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Deeper than this, a value has no canonical form and a template writes it as sent (`EffectTemplate::render`).
const CANONICAL_DEPTH: usize = 128;

/// The effect template renderer on an untrusted template and untrusted arguments: the template is refused
/// or gives a policy whose effect renders a key for every argument set, never a panic; the same arguments with
/// object members in reverse order and numbers respelled (`5` ↔ `5.0`) give the same key; a template that
/// names a string argument gives another key when that string changes.
pub fn check_effect_template(data: &[u8]) {
    let (template, own) = split_input(data);
    let Ok(policy) = Policy::builder().effect("t", &template).build() else { return };
    let Some((_, effect)) = policy.for_tool("t").effect else {
        panic!("a policy built with the effect template `{template}` gives none for its tool")
    };
    let params: Vec<String> = effect.params().map(str::to_owned).collect();
    assert!(!params.is_empty(), "the template `{template}` was accepted without a placeholder");
    for arguments in argument_sets(own) {
        let key = effect.render(&arguments);
        assert_eq!(key, effect.render(&arguments), "rendering `{template}` twice gives two keys");
        let canonical = params.iter().all(|p| arguments.get(p).is_none_or(|v| depth(v) <= CANONICAL_DEPTH));
        if canonical {
            let Value::Object(respelled) = respell(&Value::Object(arguments.clone())) else { unreachable!() };
            assert_eq!(
                effect.render(&respelled),
                key,
                "`{template}`: the same arguments respelled give another key: {arguments:?}"
            );
        }
        if let Some((param, Value::String(text))) =
            params.iter().find_map(|p| arguments.get(p).map(|v| (p, v)).filter(|(_, v)| v.is_string()))
        {
            let mut changed = arguments.clone();
            changed.insert(param.clone(), Value::String(format!("{text}/x")));
            assert_ne!(effect.render(&changed), key, "`{template}`: `{param}` changed and the key did not");
        }
    }
}

/// A genuine append-only audit file (`AuditLog::open_append_only`): its bytes, and each whole batch's end
/// (offset, records so far) and the hashes of its records, built once.
struct AuditFileFixture {
    bytes: Vec<u8>,
    ends: Vec<(u64, u64)>,
    hashes: Vec<agent_airlock::audit::Digest>,
}

fn audit_file_fixture() -> &'static AuditFileFixture {
    static FIXTURE: OnceLock<AuditFileFixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        use agent_airlock::audit::{AuditEvent, AuditLog, AuditOutcome};
        let path = scratch_path("fixture");
        let log = AuditLog::open_append_only(&path, audit_file_config()).expect("the fixture's log opens");
        let mut ends = Vec::new();
        for batch in 0..4u64 {
            let arguments = json!({"batch": batch, "note": "x".repeat(batch as usize * 7)});
            for i in 0..=batch % 2 {
                let call = format!("call-{batch}-{i}");
                log.append(AuditEvent::new("tool", &call, AuditOutcome::Executed).arguments(&arguments))
                    .expect("the fixture's record is appended");
            }
            let records = log.head().expect("a head").seq;
            ends.push((std::fs::metadata(&path).expect("the fixture's file").len(), records));
        }
        let hashes = log.records(1, 100).expect("the fixture's records").into_iter().map(|r| r.hash).collect();
        drop(log);
        let bytes = std::fs::read(&path).expect("the fixture's file is read");
        let _ = std::fs::remove_file(&path);
        AuditFileFixture { bytes, ends, hashes }
    })
}

fn audit_file_config() -> agent_airlock::audit::AuditConfig {
    let key = agent_airlock::keys::AuditKey::new("fuzz", b"0123456789abcdef0123456789abcdef").expect("a valid key");
    agent_airlock::audit::AuditConfig { key: Some(key), ..Default::default() }
}

/// A fresh path under the system's temporary directory, named by this process and a counter (fuzzing runs
/// processes side by side).
fn scratch_path(name: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join("airlock-fuzz-audit");
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("{name}-{}-{n}.log", std::process::id()))
}

/// An append-only audit file from untrusted bytes: `edits` false, the bytes after the file's magic; true, a
/// genuine file edited as `data` says (flip, zero, insert, truncate, append at offsets it picks). Opened to read
/// and to write, it never panics. Opened to write, an edited file is refused as damaged (and left as it was) or
/// keeps exactly the genuine records of the whole batches before the first byte changed, and takes an append.
/// With `under_a_writer`, the edit is made after a writer opened the genuine file: its next append is refused
/// as damaged (the file left as it was), or refused otherwise, or lands; an edit that only added bytes leaves
/// every genuine record readable, and one that only cut the file short is refused as damaged.
pub fn check_audit_file(data: &[u8], edits: bool, under_a_writer: bool) {
    use agent_airlock::audit::{AuditError, AuditEvent, AuditLog, AuditOutcome, verify};
    let fixture = audit_file_fixture();
    let (file, first) = if edits {
        let mut u = arbitrary::Unstructured::new(data);
        let mut bytes = fixture.bytes.clone();
        let mut first = bytes.len();
        for _ in 0..u.int_in_range(1..=3u8).unwrap_or(1) {
            let Ok(at) = u.int_in_range(16..=bytes.len()) else { break };
            let op = u.int_in_range(0..=4u8).unwrap_or(0);
            let len = u.int_in_range(1..=64usize).unwrap_or(1);
            let changed = match op {
                0 if at < bytes.len() => {
                    let x = u.int_in_range(1..=255u8).unwrap_or(1);
                    bytes[at] ^= x;
                    Some(at)
                }
                1 => {
                    let end = (at + len).min(bytes.len());
                    let changed = bytes[at..end].iter().position(|&b| b != 0).map(|p| at + p);
                    bytes[at..end].fill(0);
                    changed
                }
                2 => {
                    let inserted = u.bytes(len.min(u.len())).unwrap_or(&[]).to_vec();
                    let changed = (!inserted.is_empty()).then_some(at);
                    bytes.splice(at..at, inserted);
                    changed
                }
                3 => {
                    let changed = (at < bytes.len()).then_some(at);
                    bytes.truncate(at);
                    changed
                }
                _ => {
                    let end = bytes.len();
                    bytes.extend_from_slice(u.bytes(len.min(u.len())).unwrap_or(&[]));
                    (bytes.len() > end).then_some(end)
                }
            };
            if let Some(changed) = changed {
                first = first.min(changed);
            }
        }
        (bytes, first)
    } else {
        let mut bytes = b"airlock-audit\0v1".to_vec();
        bytes.extend_from_slice(data);
        (bytes, 16)
    };
    let path = scratch_path("input");
    if under_a_writer {
        check_audit_file_under_a_writer(&path, &fixture.bytes, &file, first);
        remove_audit_files(&path);
        return;
    }
    std::fs::write(&path, &file).expect("the input file is written");
    if let Ok(reader) = AuditLog::read_append_only(&path, audit_file_config()) {
        let _ = verify(&reader, None);
        let _ = reader.records(0, 64);
        let _ = reader.head();
    }
    let kept = fixture.ends.iter().take_while(|(end, _)| *end as usize <= first).last().map_or(0, |(_, r)| *r);
    match AuditLog::open_append_only(&path, audit_file_config()) {
        Ok(log) => {
            if edits {
                // The genuine records before the first change are read back as they were.
                let records = log.records(1, kept as usize).expect("the records before an edit are readable");
                let hashes: Vec<_> = records.iter().map(|record| record.hash).collect();
                assert_eq!(hashes, fixture.hashes[..kept as usize], "the records before an edit changed");
            }
            let verified = verify(&log, None);
            let appended = log.append(AuditEvent::new("tool", "after", AuditOutcome::Executed));
            // Whole frames of made-up content (a CRC can be written to match) open but do not verify, and
            // their head may not be readable: an append may then be refused, never panic.
            if let Ok(report) = verified {
                assert!(!edits || report.records >= kept, "a verified file lost whole batches before an edit");
                let seq = appended.map(|receipt| receipt.seq);
                assert_eq!(seq.ok(), Some(report.records + 1), "a verified file takes the next append");
            }
        }
        Err(AuditError::Damaged { .. }) => {
            assert_eq!(std::fs::read(&path).expect("readable"), file, "a file refused as damaged was changed");
        }
        Err(other) => panic!("an audit file is refused with an unexpected error: {other}"),
    }
    remove_audit_files(&path);
}

/// A writer opens the genuine file `genuine`, which is then rewritten in place as `edited` (its first change at
/// byte `first`), and the writer appends.
fn check_audit_file_under_a_writer(path: &std::path::Path, genuine: &[u8], edited: &[u8], first: usize) {
    use std::io::Write as _;

    use agent_airlock::audit::{AuditError, AuditEvent, AuditLog, AuditOutcome};
    std::fs::write(path, genuine).expect("the genuine file is written");
    let writer = AuditLog::open_append_only(path, audit_file_config()).expect("a genuine file opens");
    let genuine_records = audit_file_fixture().hashes.len() as u64;
    // In place (the writer's open file sees it), under the file's lock as a writer's own write would be.
    {
        let file = std::fs::OpenOptions::new().write(true).open(path).expect("opens");
        file.lock().expect("the file's lock");
        file.set_len(0).expect("emptied");
        (&file).write_all(edited).expect("written");
        file.unlock().expect("let go");
    }
    let appended = writer.append(AuditEvent::new("tool", "after", AuditOutcome::Executed));
    if edited.len() < genuine.len() && genuine.starts_with(edited) {
        // Cut back past whole batches the writer read: nothing it can append after.
        assert!(matches!(appended, Err(AuditError::Damaged { .. })), "a truncated file took an append: {appended:?}");
    }
    match appended {
        Err(AuditError::Damaged { .. }) => {
            assert_eq!(std::fs::read(path).expect("readable"), edited, "a file refused as damaged was changed");
        }
        // Whole frames of made-up content may hold a head that does not decode: refused, never a panic.
        Err(_) => {}
        // (Whole frames appended with made-up content read as another writer's batch: what the append's seq is
        // then is theirs to say, and `verify` tells them apart.)
        Ok(_) if first >= genuine.len() => {
            let reader = AuditLog::read_append_only(path, audit_file_config()).expect("the file opens to read");
            let records = reader.records(1, genuine_records as usize).expect("the genuine records are readable");
            let hashes: Vec<_> = records.iter().map(|record| record.hash).collect();
            assert_eq!(hashes, audit_file_fixture().hashes, "a genuine record changed");
        }
        Ok(_) => {}
    }
}

/// Removes the file at `path` and anything kept aside from it.
fn remove_audit_files(path: &std::path::Path) {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let name = name.to_string_lossy().into_owned();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Tool schemas an upstream declares.

/// Allowance per parameter of a tool made from a schema, beside [`REFUSAL_PER_PARAM`]: what it expects is read
/// from a schema an upstream wrote (enum values, keys, alternatives), capped at 240 characters, up to 4 bytes
/// each, twice.
pub const PHRASE_ALLOWANCE: usize = 2 * 240 * 4;

/// Makes a tool of `schema` (as the gateway makes one of each upstream tool) and checks:
/// - making it never panics, and a refusal says why in one line;
/// - every dialect converts its published schema or says why, never panics (Gemini inlines every `$ref`);
/// - each of `calls` is admitted or refused, never a panic; a refusal stays within [`refusal_bound`];
/// - what an admitted call's executor received is valid under the published schema (the schema a client
///   reads, validated by `jsonschema` here), and sent again is admitted as it is: nothing stripped, the same
///   arguments received.
pub fn check_tool_schema(schema: Value, calls: &[Value]) {
    use agent_airlock::dialect::Dialect;
    use agent_airlock::json_tool::{JsonCall, JsonTool};

    // What the executor received, kept as it was given (the result the model reads is masked: a `password` key's
    // value comes back as a tag).
    let slot: Arc<std::sync::Mutex<Option<Value>>> = Arc::default();
    let kept = Arc::clone(&slot);
    let made = JsonTool::builder("t", "A tool an upstream declared.", schema).build(move |call: JsonCall| {
        let kept = Arc::clone(&kept);
        async move {
            *kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Value::Object(call.arguments));
            Ok::<Value, agent_airlock::ToolError>(json!("ran"))
        }
    });
    let take = || slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let tool = match made {
        Ok(tool) => tool,
        Err(err) => {
            let text = err.to_string();
            assert!(!text.is_empty() && !text.ends_with('.'), "{text:?}");
            return;
        }
    };
    let dispatcher = Dispatcher::builder().tool(tool).build().expect("one tool");
    let definitions = dispatcher.offered_tools();
    let [definition] = definitions.as_slice() else { panic!("one tool offered: {definitions:?}") };
    for dialect in [Dialect::Mcp, Dialect::Anthropic, Dialect::OpenAi, Dialect::OpenAiNonStrict, Dialect::Gemini] {
        match definition.to_dialect(dialect) {
            Ok(converted) => assert!(converted.is_object(), "{dialect:?}: {converted}"),
            Err(err) => assert!(!err.to_string().is_empty(), "{dialect:?}"),
        }
    }
    let published = jsonschema::options().build(&definition.input_schema).expect("the published schema compiles");
    let params = definition.input_schema.get("properties").and_then(Value::as_object).map_or(0, Map::len);
    let run = |arguments: Value| {
        let call = ToolCall::new("call_fuzz", "t", arguments);
        match block_on(dispatcher.dispatch(call, &CallContext::new())).message() {
            Some(message) => message.clone(),
            None => panic!("the tool does not escalate, yet it did not answer with a message"),
        }
    };
    for arguments in calls {
        take();
        // A phrase read from the upstream's schema (what a parameter expects) is at most 240 characters, said
        // twice (the line and the hint).
        let bound = refusal_bound(params, arguments) + PHRASE_ALLOWANCE * params;
        let first = run(arguments.clone());
        if first.status != Status::Success {
            assert_refusal_in_bounds(&first, bound, "t");
            continue;
        }
        let received = take().expect("an admitted call ran its executor");
        if let Some(error) = published.iter_errors(&received).next() {
            panic!(
                "admitted arguments the published schema refuses ({error}): {received}\nschema: {}",
                definition.input_schema
            );
        }
        let again = run(received.clone());
        assert_eq!(again.status, Status::Success, "refused what it had received: {received} → {again:?}");
        assert!(again.stripped_arguments.is_empty(), "stripped its own arguments: {again:?}");
        assert_eq!(take(), Some(received), "admitting what was received changed it");
    }
}
