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

/// Names of definitions a generated schema declares and refers to (some need escaping in a JSON pointer).
pub const DEFINITIONS: &[&str] = &["A", "B", "Node", "a b", "x/y", "t~0", ""];

/// References as upstream servers write them: into `$defs` (escaped or percent-encoded), the root, a property,
/// draft 7's `definitions`, inside a definition.
const REFERENCES: &[&str] = &[
    "#/$defs/A",
    "#/$defs/B",
    "#/$defs/Node",
    "#/$defs/A",
    "#/$defs/B",
    "#/$defs/Node",
    "#/$defs/a%20b",
    "#/$defs/x~1y",
    "#/$defs/t~00",
    "#/$defs/",
    "#",
];

/// References to places that exist only in some schemas: a property, draft 7's `definitions`, inside a
/// definition.
const SOMETIMES: &[&str] = &["#/properties/a", "#/properties/name/items", "#/definitions/A", "#/$defs/A/properties/a"];

/// References no tool can be made with: to nothing, an anchor, another document, a bad escape, empty.
const BAD_REFERENCES: &[&str] = &["#/$defs/Missing", "#node", "other.json#/$defs/A", "#/$defs/A%zz", ""];

/// A reference: one in 64 of them bad, one in 32 to a place only some schemas have.
fn reference(u: &mut Unstructured<'_>) -> Result<Value> {
    let list = match u.int_in_range(0..=63u8)? {
        0 => BAD_REFERENCES,
        1 | 2 => SOMETIMES,
        _ => REFERENCES,
    };
    Ok(Value::String((*u.choose(list)?).to_owned()))
}

const TYPES: &[&str] = &["object", "string", "integer", "number", "boolean", "array", "null"];

/// A type name: one in 64 not one.
fn type_name(u: &mut Unstructured<'_>) -> Result<Value> {
    let name = if u.ratio(1u8, 64u8)? { "bogus" } else { *u.choose(TYPES)? };
    Ok(Value::String(name.to_owned()))
}
const PATTERNS: &[&str] = &["^a", "[a-z]+$", "\\d{3}", ".*", "(", "^(a|b)*$", "\\p{L}+"];
const FORMATS: &[&str] = &["date-time", "date", "email", "uuid", "uri", "int32", "float", "bogus", "regex"];
const SCHEMAS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://example.com/unknown",
];

/// Deepest nesting of generated subschemas (references and combinators nest further through `$defs`).
pub const MAX_SCHEMA_DEPTH: usize = 6;

/// A tool's input schema as an upstream server could declare it: an object root (usually) with properties of
/// known names, `$defs` referred to from anywhere (cycles, chains, dangling), and every keyword the validator
/// and the dialects read.
pub fn schema(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut root = match u.int_in_range(0..=15u8)? {
        0 => return subschema(u, 0),
        _ => object_schema(u, 0)?,
    };
    // Every name a reference may use is declared (one is left out at times), so most references resolve.
    for keyword in ["$defs", "definitions"] {
        if keyword == "$defs" || u.ratio(1u8, 8u8)? {
            let mut defs = Map::new();
            for name in DEFINITIONS {
                if !u.ratio(1u8, 64u8)? {
                    defs.insert((*name).to_owned(), subschema(u, 1)?);
                }
            }
            root.insert(keyword.to_owned(), Value::Object(defs));
        }
    }
    if u.ratio(1u8, 4u8)? {
        let known = if u.ratio(1u8, 8u8)? { SCHEMAS.len() } else { SCHEMAS.len() - 1 };
        root.insert("$schema".to_owned(), Value::String(SCHEMAS[u.choose_index(known)?].to_owned()));
    }
    Ok(Value::Object(root))
}

/// An object schema: `type: object`, properties, `required`, sometimes closed or open.
fn object_schema(u: &mut Unstructured<'_>, depth: usize) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    map.insert("type".to_owned(), Value::String("object".to_owned()));
    let mut properties = Map::new();
    u.arbitrary_loop(Some(0), Some(6), |u| {
        let name = key(u)?;
        properties.insert(name, subschema(u, depth + 1)?);
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    let names: Vec<String> = properties.keys().cloned().collect();
    map.insert("properties".to_owned(), Value::Object(properties));
    if !names.is_empty() && u.arbitrary()? {
        let required: Vec<Value> =
            names.into_iter().filter(|_| u.arbitrary().unwrap_or(false)).map(Value::String).collect();
        map.insert("required".to_owned(), Value::Array(required));
    }
    match u.int_in_range(0..=3u8)? {
        0 => {
            map.insert("additionalProperties".to_owned(), Value::Bool(false));
        }
        1 if depth < MAX_SCHEMA_DEPTH => {
            map.insert("additionalProperties".to_owned(), subschema(u, depth + 1)?);
        }
        _ => {}
    }
    Ok(map)
}

/// Any subschema, nested at most [`MAX_SCHEMA_DEPTH`] deep.
pub fn subschema(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    if depth >= MAX_SCHEMA_DEPTH {
        return Ok(match u.int_in_range(0..=2u8)? {
            0 => serde_json::json!({"type": "string"}),
            1 => serde_json::json!({"$ref": reference(u)?}),
            _ => Value::Bool(u.arbitrary()?),
        });
    }
    let mut map = Map::new();
    match u.int_in_range(0..=13u8)? {
        0 => return Ok(Value::Bool(u.arbitrary()?)),
        1 | 2 => {
            map.insert("$ref".to_owned(), reference(u)?);
        }
        3 => return object_schema(u, depth).map(Value::Object),
        4 => {
            let keyword = *u.choose(&["allOf", "anyOf", "oneOf"])?;
            let mut branches = Vec::new();
            u.arbitrary_loop(Some(1), Some(4), |u| {
                branches.push(subschema(u, depth + 1)?);
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            map.insert(keyword.to_owned(), Value::Array(branches));
        }
        5 => {
            let keyword = *u.choose(&["not", "if", "then", "else", "contains", "propertyNames"])?;
            map.insert(keyword.to_owned(), subschema(u, depth + 1)?);
        }
        6 => {
            map.insert("type".to_owned(), Value::String("array".to_owned()));
            if u.ratio(1u8, 4u8)? {
                let mut items = Vec::new();
                u.arbitrary_loop(Some(1), Some(3), |u| {
                    items.push(subschema(u, depth + 1)?);
                    Ok(std::ops::ControlFlow::Continue(()))
                })?;
                map.insert("prefixItems".to_owned(), Value::Array(items));
            } else {
                map.insert("items".to_owned(), subschema(u, depth + 1)?);
            }
            if u.arbitrary()? {
                map.insert("uniqueItems".to_owned(), Value::Bool(true));
            }
        }
        7 => {
            let values: Vec<Value> =
                (0..u.int_in_range(1..=4u8)?).map(|_| value(u, MAX_DEPTH - 2)).collect::<Result<_>>()?;
            map.insert("enum".to_owned(), Value::Array(values));
        }
        8 => {
            map.insert("const".to_owned(), value(u, MAX_DEPTH - 2)?);
        }
        9 => {
            let types: Vec<Value> = (0..u.int_in_range(1..=3u8)?).map(|_| type_name(u)).collect::<Result<_>>()?;
            map.insert("type".to_owned(), Value::Array(types));
        }
        10 => {
            map.insert("type".to_owned(), Value::String((*u.choose(&["integer", "number"])?).to_owned()));
            for keyword in ["minimum", "maximum", "exclusiveMinimum", "multipleOf"] {
                if u.ratio(1u8, 3u8)? {
                    let number = NUMBERS[u.choose_index(NUMBERS.len())?];
                    map.insert(keyword.to_owned(), serde_json::from_str(number).unwrap_or(Value::Null));
                }
            }
        }
        _ => {
            map.insert("type".to_owned(), type_name(u)?);
            if u.ratio(1u8, 3u8)? {
                map.insert("pattern".to_owned(), Value::String((*u.choose(PATTERNS)?).to_owned()));
            }
            if u.ratio(1u8, 3u8)? {
                map.insert("format".to_owned(), Value::String((*u.choose(FORMATS)?).to_owned()));
            }
            if u.ratio(1u8, 4u8)? {
                map.insert("minLength".to_owned(), Value::from(u.int_in_range(0..=4u8)?));
            }
        }
    }
    // Sometimes beside the keyword: a description, a default, rarely an `$id`, an anchor or a `$dynamicRef`.
    match u.int_in_range(0..=47u8)? {
        0..=5 => {
            let description = match value(u, MAX_DEPTH - 1)? {
                Value::String(text) => text,
                other => other.to_string(),
            };
            map.insert("description".to_owned(), Value::String(description));
        }
        6 => {
            map.insert("$id".to_owned(), Value::String("other".to_owned()));
        }
        7 => {
            map.insert("$anchor".to_owned(), Value::String("node".to_owned()));
        }
        8..=11 => {
            map.insert("default".to_owned(), value(u, MAX_DEPTH - 2)?);
        }
        12 => {
            map.insert("$dynamicRef".to_owned(), reference(u)?);
        }
        _ => {}
    }
    Ok(Value::Object(map))
}
