//! Structure-aware inputs: JSON values built from fuzzer bytes through `arbitrary`, with a depth cap, a
//! vocabulary of the names the tools and the approval protocol use (so objects hit declared keys, enum
//! variants and protocol members, not only random strings), boundary numbers, long strings, and mutations
//! of a genuine value at a random path.

use arbitrary::{Arbitrary, Result, Unstructured};
use serde_json::{Map, Number, Value};

/// Deepest nesting generated: past the dispatcher's argument limit (64) and canonical JSON's (128).
pub const MAX_DEPTH: usize = 140;

/// Longest generated string or key, in bytes (about): four times the largest refusal bound of the argument
/// checks for a few members (16 KiB + 1 KiB per parameter + 512 B per member), so that an echo growing with
/// the input still breaks the bound, without the multi-megabyte strings that made an input take a second.
pub const MAX_LONG: usize = 64 * 1024;

/// Names the tools, their nested types and the approval protocol use.
pub const VOCABULARY: &[&str] = &[
    "name",
    "age",
    "address",
    "street",
    "city",
    "zip",
    "tags",
    "nickname",
    "active",
    "score",
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    "k",
    "l",
    "shape",
    "dot",
    "circle",
    "segment",
    "rect",
    "w",
    "at",
    "event",
    "kind",
    "click",
    "key",
    "x",
    "y",
    "code",
    "modifiers",
    "id",
    "tagged",
    "t",
    "text",
    "count",
    "empty",
    "labels",
    "counts",
    "unique",
    "matrix",
    "pairs",
    "places",
    "root",
    "label",
    "weight",
    "children",
    "depth",
    "flag",
    "payment_id",
    "amount",
    "airlock_grant",
    "airlock_approval",
    "airlock_denied",
    "key_id",
    "grant_id",
    "token",
    "seal",
    "version",
    "request_id",
    "binding",
    "arguments",
    "arguments_sha256",
    "call",
    "thread_id",
    "checkpoint_ns",
    "checkpoint",
    "tool_call_id",
    "requested_at_ms",
    "expires_at_ms",
    "tool",
    "rule",
    "reason",
    "k1",
    "password",
    "api_key",
    "value",
    "Key",
    "Value",
    "DB_PASSWORD",
    "AKIAIOSFODNN7QK4RW2Z",
    "jane.doe@example.com",
    "4111111111111111",
    "",
    "Adress",
    "zip_code",
    "\u{0}",
    "a\n- `x` is required",
];

/// Numbers at the edges of the integer widths, of doubles and of canonical JSON's safe range.
pub const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "1",
    "1.0",
    "1e0",
    "-1",
    "127",
    "128",
    "-128",
    "-129",
    "255",
    "256",
    "32767",
    "32768",
    "-32769",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "-9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "0.5",
    "1e21",
    "1e-7",
    "0.000001",
    "1e300",
    "1.7976931348623157e308",
    "5e-324",
    "2.5",
    "100.0",
    "3.0e2",
];

#[derive(Arbitrary, Debug)]
enum Node {
    Null,
    Bool(bool),
    Integer(i64),
    Unsigned(u64),
    Float(f64),
    Number(u8),
    Text(String),
    Word(u8),
    Long(u8, u16),
    Array,
    Object,
}

/// A key: mostly a known name, sometimes any string or a long one.
pub fn key(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => String::arbitrary(u)?,
        1 => {
            let unit = String::arbitrary(u)?;
            let times = usize::from(u.int_in_range(1..=200u8)?) * 8;
            unit.repeat(times.min(MAX_LONG / unit.len().max(1)).max(1))
        }
        _ => (*u.choose(VOCABULARY)?).to_owned(),
    })
}

/// Any JSON value, nested at most `MAX_DEPTH - depth` deeper.
pub fn value(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    let node = Node::arbitrary(u)?;
    Ok(match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Integer(i) => Value::from(i),
        Node::Unsigned(n) => Value::from(n),
        Node::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        Node::Number(index) => serde_json::from_str(NUMBERS[usize::from(index) % NUMBERS.len()]).unwrap_or(Value::Null),
        Node::Text(text) => Value::String(text),
        Node::Word(index) => Value::String(VOCABULARY[usize::from(index) % VOCABULARY.len()].to_owned()),
        // Long strings: a refusal must not echo them at full size.
        Node::Long(index, times) => {
            let unit = VOCABULARY[usize::from(index) % VOCABULARY.len()];
            let unit = if unit.is_empty() { "x" } else { unit };
            // One in sixteen is long (up to `MAX_LONG` bytes), the rest a few dozen repetitions: long strings
            // are slow to dispatch and mask, and one is enough to show an unbounded echo.
            let times = usize::from(times);
            let repeat = if times % 16 == 0 { (times / 16 + 1) * MAX_LONG / 4096 / unit.len() } else { times % 64 } + 1;
            Value::String(unit.repeat(repeat))
        }
        Node::Array if depth < MAX_DEPTH => {
            let mut items = Vec::new();
            u.arbitrary_loop(Some(0), Some(16), |u| {
                items.push(value(u, depth + 1)?);
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            Value::Array(items)
        }
        Node::Object if depth < MAX_DEPTH => object(u, depth).map(Value::Object)?,
        Node::Array | Node::Object => Value::Null,
    })
}

/// A JSON object of generated members.
pub fn object(u: &mut Unstructured<'_>, depth: usize) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    u.arbitrary_loop(Some(0), Some(16), |u| {
        let key = key(u)?;
        map.insert(key, value(u, depth + 1)?);
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    Ok(map)
}

/// Mutates `value` at a random path: replaces, removes or adds a member, edits a string (one character,
/// case, truncation), respells a number, or wraps the value.
pub fn mutate(u: &mut Unstructured<'_>, target: &mut Value) -> Result<()> {
    // Choose a random path first, then walk it (a loop that both descends and breaks out does not borrow
    // check).
    let mut path = Vec::new();
    let mut probe: &Value = target;
    while u.ratio(3u8, 4u8)? {
        let len = match probe {
            Value::Array(items) => items.len(),
            Value::Object(map) => map.len(),
            _ => 0,
        };
        if len == 0 {
            break;
        }
        let at = u.choose_index(len)?;
        path.push(at);
        probe = match probe {
            Value::Array(items) => &items[at],
            Value::Object(map) => map.values().nth(at).unwrap_or(&Value::Null),
            _ => break,
        };
    }
    let mut node = target;
    for at in path {
        node = match node {
            Value::Array(items) => &mut items[at],
            Value::Object(map) => match map.values_mut().nth(at) {
                Some(child) => child,
                None => return Ok(()),
            },
            _ => return Ok(()),
        };
    }
    match u.int_in_range(0..=7u8)? {
        0 => *node = value(u, 1)?,
        1 => match node {
            Value::Object(map) if !map.is_empty() => {
                let at = u.choose_index(map.len())?;
                if let Some(key) = map.keys().nth(at).cloned() {
                    map.remove(&key);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                let at = u.choose_index(items.len())?;
                items.remove(at);
            }
            _ => *node = Value::Null,
        },
        2 => match node {
            Value::Object(map) => {
                let key = key(u)?;
                map.insert(key, value(u, 1)?);
            }
            Value::Array(items) => items.push(value(u, 1)?),
            other => *other = Value::Array(vec![other.take()]),
        },
        3 => {
            if let Value::String(text) = node {
                let mut chars: Vec<char> = text.chars().collect();
                if !chars.is_empty() {
                    let at = u.choose_index(chars.len())?;
                    chars[at] = char::arbitrary(u)?;
                }
                *text = chars.into_iter().collect();
            }
        }
        4 => {
            if let Value::String(text) = node {
                *text = if u.arbitrary()? { text.to_uppercase() } else { text.chars().rev().collect() };
            }
        }
        5 => {
            if let Value::String(text) = node {
                let keep = u.int_in_range(0..=text.chars().count())?;
                *text = text.chars().take(keep).collect();
            }
        }
        6 => {
            if let Value::Number(number) = node {
                let spelled = match (number.as_u64(), number.as_f64()) {
                    (Some(n), _) => format!("{n}.0"),
                    (None, Some(f)) => format!("{f:e}"),
                    _ => number.to_string(),
                };
                if let Ok(respelled) = serde_json::from_str(&spelled) {
                    *node = respelled;
                }
            }
        }
        _ => {
            let key = key(u)?;
            let inner = node.take();
            *node = Value::Object(Map::from_iter([(key, inner)]));
        }
    }
    Ok(())
}
