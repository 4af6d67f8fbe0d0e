//! Which items of an array are equal as JSON Schema compares them, in time linear in the array however its items
//! were chosen: numbers by value (`1`, `1.0` and `1e0` alike; 2^63 and 2^63 + 1 not), an object's members in any
//! order. Each item is written once as bytes that two items share exactly when they are equal, and the bytes are
//! looked up in a set with the standard library's keyed hash, so no choice of items makes them collide. Used where
//! a schema says `uniqueItems`: the screen's check and its collapse of a set's repeats ([`super::nested`]), and the
//! JSON Schema tools' validator (`json_tool`).

use std::collections::{HashMap, HashSet};

use serde_json::{Number, Value};

/// The first item that equals one before it, as `(the earlier one's index, its index)`.
pub(crate) fn first_repeat(items: &[Value]) -> Option<(usize, usize)> {
    if items.len() < 2 {
        return None;
    }
    let encoded = Encoded::new(items);
    let mut seen: HashMap<&[u8], usize> = HashMap::with_capacity(items.len());
    for (index, item) in encoded.items().enumerate() {
        if let Some(&first) = seen.get(item) {
            return Some((first, index));
        }
        seen.insert(item, index);
    }
    None
}

/// Removes every item that equals one before it: a set holds each item once.
pub(crate) fn remove_repeats(items: &mut Vec<Value>) {
    if items.len() < 2 {
        return;
    }
    let encoded = Encoded::new(items);
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(items.len());
    let mut keep = encoded.items().map(|item| seen.insert(item)).collect::<Vec<bool>>().into_iter();
    items.retain(|_| keep.next().unwrap_or(true));
}

/// Every item of an array [encoded](encode), one after the other in one buffer.
struct Encoded {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Encoded {
    fn new(items: &[Value]) -> Self {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(items.len());
        for item in items {
            encode(item, &mut bytes);
            ends.push(bytes.len());
        }
        Encoded { bytes, ends }
    }

    /// Each item's bytes, in the array's order.
    fn items(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter()).map(|(start, &end)| &self.bytes[start..end])
    }
}

/// One step of [`encode`]'s walk.
enum Step<'a> {
    Value(&'a Value),
    Member(&'a str, &'a Value),
}

/// Appends `value` as bytes that two values share exactly when JSON Schema calls them equal: a tag per kind, every
/// string and count length-prefixed (so no two values' bytes run into each other), numbers by value (`1`, `1.0`
/// and `1e0` alike; 2^63 and 2^63 + 1 not), an object's members in the order of their keys. The walk is
/// iterative: the value may nest as deep as anything that reached the validator.
fn encode(value: &Value, out: &mut Vec<u8>) {
    let mut stack = vec![Step::Value(value)];
    while let Some(step) = stack.pop() {
        let value = match step {
            Step::Value(value) => value,
            Step::Member(key, value) => {
                push_text(out, key);
                value
            }
        };
        match value {
            Value::Null => out.push(b'n'),
            Value::Bool(false) => out.push(b'f'),
            Value::Bool(true) => out.push(b't'),
            Value::Number(number) => push_number(out, number),
            Value::String(text) => {
                out.push(b's');
                push_text(out, text);
            }
            Value::Array(items) => {
                out.push(b'a');
                push_len(out, items.len());
                stack.extend(items.iter().rev().map(Step::Value));
            }
            Value::Object(members) => {
                out.push(b'o');
                push_len(out, members.len());
                let mut sorted: Vec<(&str, &Value)> = members.iter().map(|(k, v)| (k.as_str(), v)).collect();
                sorted.sort_unstable_by(|a, b| b.0.cmp(a.0));
                stack.extend(sorted.into_iter().map(|(key, value)| Step::Member(key, value)));
            }
        }
    }
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn push_text(out: &mut Vec<u8>, text: &str) {
    push_len(out, text.len());
    out.extend_from_slice(text.as_bytes());
}

/// A number by its value: an integer (however it was spelled, and a float with no fraction below 2^127) as its
/// 128-bit two's complement, any other float by its bits, and a number no `f64` holds (only with serde_json's
/// `arbitrary_precision`) by its text.
fn push_number(out: &mut Vec<u8>, number: &Number) {
    /// 2^127: every `f64` with no fraction below it converts to an `i128` exactly.
    const I128_BOUND: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    let integer = if let Some(n) = number.as_u64() {
        Some(i128::from(n))
    } else if let Some(n) = number.as_i64() {
        Some(i128::from(n))
    } else {
        number.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < I128_BOUND).map(|f| f as i128)
    };
    match (integer, number.as_f64()) {
        (Some(n), _) => {
            out.push(b'i');
            out.extend_from_slice(&n.to_le_bytes());
        }
        (None, Some(f)) => {
            out.push(b'd');
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        (None, None) => {
            out.push(b'x');
            push_text(out, &number.to_string());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use serde_json::json;

    use super::*;

    fn repeat(items: Value) -> Option<(usize, usize)> {
        first_repeat(items.as_array().unwrap())
    }

    #[test]
    fn equal_items_are_found_as_json_schema_compares_them() {
        assert_eq!(repeat(json!([1, 2, 1.0])), Some((0, 2)));
        assert_eq!(repeat(json!([-0.0, 0])), Some((0, 1)));
        assert_eq!(repeat(json!([{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}])), Some((0, 1)));
        assert_eq!(repeat(json!(["a", "b", "c", "b", "a"])), Some((1, 3)));
        assert_eq!(repeat(json!([null, false, null])), Some((0, 2)));
        let big = json!([9_223_372_036_854_775_808_u64, 9_223_372_036_854_775_808.0_f64]);
        assert_eq!(repeat(big), Some((0, 1)), "2^63 as an integer and as a float");
        assert_eq!(repeat(json!([-9_223_372_036_854_775_808_i64, -9_223_372_036_854_775_808.0_f64])), Some((0, 1)));
        assert_eq!(repeat(json!([1e300, 1e300])), Some((0, 1)));
        // Past 2^53 canonical JSON refuses the integer; the screen compared raw text there, in the members' order.
        let reordered =
            json!([{"a": 9_223_372_036_854_775_808_u64, "b": 1}, {"b": 1, "a": 9_223_372_036_854_775_808_u64}]);
        assert_eq!(repeat(reordered), Some((0, 1)));
    }

    #[test]
    fn removing_repeats_keeps_each_items_first_place() {
        let mut items =
            json!([1, {"a": 1, "b": 2}, 1.0, "x", {"b": 2, "a": 1}, [], "x", [[]]]).as_array().unwrap().clone();
        remove_repeats(&mut items);
        assert_eq!(Value::Array(items), json!([1, {"a": 1, "b": 2}, "x", [], [[]]]));
    }

    #[test]
    fn items_that_differ_are_not_confused_however_they_resemble_each_other() {
        let differ = [
            json!([1, 1.5, "1", [1], {"1": 1}, true, null, [], {}]),
            json!([9_223_372_036_854_775_808_u64, 9_223_372_036_854_775_809_u64, 18_446_744_073_709_551_615_u64]),
            json!([-9_007_199_254_740_993_i64, -9_007_199_254_740_992.0_f64]),
            json!([[], [[]], [[], []], [[[]]]]),
            json!([["ab"], "ab", ["a", "b"], [["a"], ["b"]]]),
            json!([{"a": "bc"}, {"ab": "c"}, {"a": {"b": "c"}}, {"a": ["b", "c"]}]),
            json!([{"a": 1, "b": 2}, {"a": 2, "b": 1}, {"a": 1}, {"b": 2}]),
            json!([false, 0, "", [], {}, null]),
            json!([1e300, 1e299, 0.1, 0.30000000000000004, 0.3]),
        ];
        for items in differ {
            assert_eq!(repeat(items.clone()), None, "{items}");
        }
    }
}
