//! Canonical JSON: the JSON Canonicalization Scheme of RFC 8785 (JCS), for `serde_json` values.
//!
//! Two JSON texts that mean the same data canonicalize to the same bytes, so a digest of the canonical
//! form identifies the data, not its spelling: approvals bind the SHA-256 of the canonical arguments.
//!
//! What RFC 8785 asks, and how it is done here:
//! - object members are sorted by the UTF-16 code units of their names (not by UTF-8 bytes, which differ
//!   for names mixing characters above U+FFFF with characters in U+E000..=U+FFFF);
//! - numbers are written as ECMAScript's `Number.prototype.toString` writes the IEEE-754 double they are
//!   (via `ryu-js`): `1e21`, `1e-7`, `0.000001`, `-0` written `0`;
//! - strings escape only `"`, `\` and U+0000..=U+001F (`\b \t \n \f \r` by name, the rest as `\u00xx` in
//!   lower case); everything else, U+007F and U+2028 included, is written as UTF-8;
//! - no whitespace; `true`, `false` and `null` as literals, so `true` and `1` never collide.
//!
//! What this module refuses rather than rounds, each a [`CanonicalError`]:
//! - an integer outside ±(2^53 − 1): RFC 8785 would turn it into the nearest double, so
//!   `9007199254740993` and `9007199254740992` would share one canonical form and an approval for one
//!   would admit the other;
//! - a non-finite number. A `serde_json::Value` cannot hold one (`Number::from_f64(f64::NAN)` is `None`,
//!   and `serde_json::to_value(f64::NAN)` yields `null` before this module ever sees it), but with
//!   serde_json's `arbitrary_precision` feature switched on anywhere in the build, `1e400` parses into a
//!   `Number` whose `as_f64` is infinite: that path is refused;
//! - nesting deeper than [`MAX_CANONICAL_DEPTH`], so a hostile value cannot exhaust the stack.
//!
//! - a double of magnitude above 2^53 − 1 that ECMAScript writes as a plain integer small enough to be
//!   read back as a u64 or i64 (e.g. `9007199254740993.0`, written `9007199254740992`): its canonical
//!   text would parse back as an out-of-range integer, so the text would not be canonical of itself.
//!   (`2^68` is written `295147905179352830000`, which reads back as a double, and is accepted.)
//!
//! Any other float, integral or not, is written as the double it is (`1e300` as `1e+300`, `4.0` as `4`):
//! no rounding happens here beyond what parsing the float already did, and the value canonicalized is
//! the value the tool receives. `1` and `1.0`, and `0` and `-0.0`, share a canonical form, as RFC 8785
//! says they must. Canonical text is a fixed point: parsed and canonicalized again, it is unchanged.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// Deepest nesting of arrays and objects canonicalized. serde_json refuses to parse deeper than 128.
pub const MAX_CANONICAL_DEPTH: usize = 128;

/// Largest integer magnitude a double holds exactly, and therefore the largest RFC 8785 can write.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalError {
    /// An integer a double cannot hold exactly.
    #[error(
        "integer `{number}` at `{path}` is outside ±(2^53 − 1): canonical JSON (RFC 8785) would round it, so it is refused; send it as a string"
    )]
    IntegerOutOfRange {
        /// JSON pointer to the number (`""` for the root).
        path: String,
        /// The number as written.
        number: String,
    },
    /// A number that is not finite.
    #[error("number at `{path}` is not finite: canonical JSON (RFC 8785) has no form for it")]
    NonFiniteNumber {
        /// JSON pointer to the number (`""` for the root).
        path: String,
    },
    /// Arrays and objects nested too deep.
    #[error("value nested deeper than {MAX_CANONICAL_DEPTH} levels at `{path}`")]
    TooDeep {
        /// JSON pointer to the first value past the limit.
        path: String,
    },
}

impl CanonicalError {
    /// The JSON pointer of the offending value.
    pub fn path(&self) -> &str {
        match self {
            CanonicalError::IntegerOutOfRange { path, .. }
            | CanonicalError::NonFiniteNumber { path }
            | CanonicalError::TooDeep { path } => path,
        }
    }

    // Errors are built at the failing leaf and learn their path on the way back up, so the success path
    // never tracks one.
    fn within(mut self, segment: Segment<'_>) -> Self {
        let path = match &mut self {
            CanonicalError::IntegerOutOfRange { path, .. }
            | CanonicalError::NonFiniteNumber { path }
            | CanonicalError::TooDeep { path } => path,
        };
        let mut prefixed = String::with_capacity(path.len() + 8);
        prefixed.push('/');
        match segment {
            Segment::Key(key) => {
                for c in key.chars() {
                    match c {
                        '~' => prefixed.push_str("~0"),
                        '/' => prefixed.push_str("~1"),
                        c => prefixed.push(c),
                    }
                }
            }
            Segment::Index(index) => prefixed.push_str(&index.to_string()),
        }
        prefixed.push_str(path);
        *path = prefixed;
        self
    }
}

#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Somewhere canonical bytes go: a buffer, or a hash fed as the bytes are produced.
pub trait CanonicalSink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);
}

impl CanonicalSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl CanonicalSink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// The canonical form of `value`, as UTF-8 bytes.
pub fn to_canonical_vec(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(128);
    write_canonical(value, &mut out)?;
    Ok(out)
}

/// The canonical form of `value`, as a string.
pub fn to_canonical_string(value: &Value) -> Result<String, CanonicalError> {
    let bytes = to_canonical_vec(value)?;
    // Every byte written is either ASCII or copied whole from a `str`.
    Ok(String::from_utf8(bytes).unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned()))
}

/// SHA-256 of the canonical form of `value`, hashed as it is produced (no intermediate buffer).
pub fn canonical_sha256(value: &Value) -> Result<[u8; 32], CanonicalError> {
    let mut hasher = Sha256::new();
    write_canonical(value, &mut hasher)?;
    Ok(hasher.finalize().into())
}

/// SHA-256 of the canonical form of a JSON object given as its map.
pub fn canonical_object_sha256(object: &Map<String, Value>) -> Result<[u8; 32], CanonicalError> {
    let mut hasher = Sha256::new();
    write_object(object, &mut hasher, 1)?;
    Ok(hasher.finalize().into())
}

/// Writes the canonical form of `value` into `sink`. On error, `sink` holds a partial text.
pub(crate) fn write_canonical(value: &Value, sink: &mut impl CanonicalSink) -> Result<(), CanonicalError> {
    write_value(value, sink, 0)
}

fn write_value(value: &Value, sink: &mut impl CanonicalSink, depth: usize) -> Result<(), CanonicalError> {
    match value {
        Value::Null => sink.put(b"null"),
        Value::Bool(true) => sink.put(b"true"),
        Value::Bool(false) => sink.put(b"false"),
        Value::Number(number) => write_number(number, sink)?,
        Value::String(string) => write_string(string, sink),
        Value::Array(items) => {
            if depth >= MAX_CANONICAL_DEPTH {
                return Err(CanonicalError::TooDeep { path: String::new() });
            }
            sink.put(b"[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    sink.put(b",");
                }
                write_value(item, sink, depth + 1).map_err(|err| err.within(Segment::Index(index)))?;
            }
            sink.put(b"]");
        }
        Value::Object(object) => {
            if depth >= MAX_CANONICAL_DEPTH {
                return Err(CanonicalError::TooDeep { path: String::new() });
            }
            write_object(object, sink, depth + 1)?;
        }
    }
    Ok(())
}

fn write_object(
    object: &Map<String, Value>,
    sink: &mut impl CanonicalSink,
    depth: usize,
) -> Result<(), CanonicalError> {
    sink.put(b"{");
    // serde_json's map iterates in code point order (or insertion order with `preserve_order`); the two
    // orders agree for almost every real key set, so sort only when they do not.
    let in_order = object.keys().zip(object.keys().skip(1)).all(|(a, b)| utf16_cmp(a, b) == Ordering::Less);
    if in_order {
        for (index, (key, value)) in object.iter().enumerate() {
            write_member(index, key, value, sink, depth)?;
        }
    } else {
        let mut members: Vec<(&String, &Value)> = object.iter().collect();
        members.sort_by(|a, b| utf16_cmp(a.0, b.0));
        for (index, (key, value)) in members.into_iter().enumerate() {
            write_member(index, key, value, sink, depth)?;
        }
    }
    sink.put(b"}");
    Ok(())
}

fn write_member(
    index: usize,
    key: &str,
    value: &Value,
    sink: &mut impl CanonicalSink,
    depth: usize,
) -> Result<(), CanonicalError> {
    if index > 0 {
        sink.put(b",");
    }
    write_string(key, sink);
    sink.put(b":");
    write_value(value, sink, depth).map_err(|err| err.within(Segment::Key(key)))
}

/// Orders two strings by their UTF-16 code units, as RFC 8785 §3.2.3 sorts member names.
pub(crate) fn utf16_cmp(a: &str, b: &str) -> Ordering {
    // Byte order equals code point order; it differs from UTF-16 order only where a surrogate pair
    // (a code point above U+FFFF) meets a code unit in U+E000..=U+FFFF. Compare bytes until the first
    // difference and fall back to code units only there.
    let prefix = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    if prefix == a.len() || prefix == b.len() {
        return a.len().cmp(&b.len());
    }
    // Back up to the start of the character that differs.
    let mut start = prefix;
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    a[start..].encode_utf16().cmp(b[start..].encode_utf16())
}

fn write_number(number: &Number, sink: &mut impl CanonicalSink) -> Result<(), CanonicalError> {
    if let Some(n) = number.as_u64() {
        if n > MAX_SAFE_INTEGER {
            return Err(out_of_range(number));
        }
        write_decimal(n, false, sink);
        return Ok(());
    }
    if let Some(n) = number.as_i64() {
        // `as_u64` took every non-negative i64, so `n` is negative here.
        if n.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(out_of_range(number));
        }
        write_decimal(n.unsigned_abs(), n < 0, sink);
        return Ok(());
    }
    let Some(float) = number.as_f64() else {
        return Err(CanonicalError::NonFiniteNumber { path: String::new() });
    };
    if !float.is_finite() {
        return Err(CanonicalError::NonFiniteNumber { path: String::new() });
    }
    if float.abs() > MAX_SAFE_INTEGER as f64 {
        // With `arbitrary_precision`, an integer too large for u64/i64 arrives here as written; its text
        // has no fraction or exponent. Without it, a float's text always has one of the two.
        if is_integer_literal(&number.to_string()) {
            return Err(out_of_range(number));
        }
    }
    let mut buffer = ryu_js::Buffer::new();
    let text = buffer.format_finite(float);
    // ECMAScript writes integral doubles below 1e21 without an exponent, so a double beyond 2^53 − 1 may
    // come out as an integer literal that serde_json reads back as a u64 or i64, out of range: the
    // canonical text would not be canonical text of itself. Refuse it like the integer it looks like.
    if float.abs() > MAX_SAFE_INTEGER as f64 && (text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok()) {
        return Err(CanonicalError::IntegerOutOfRange { path: String::new(), number: text.to_owned() });
    }
    sink.put(text.as_bytes());
    Ok(())
}

fn is_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn out_of_range(number: &Number) -> CanonicalError {
    CanonicalError::IntegerOutOfRange { path: String::new(), number: number.to_string() }
}

fn write_decimal(mut n: u64, negative: bool, sink: &mut impl CanonicalSink) {
    let mut buffer = [0u8; 21];
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        buffer[at] = b'-';
    }
    sink.put(&buffer[at..]);
}

fn write_string(string: &str, sink: &mut impl CanonicalSink) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    sink.put(b"\"");
    let bytes = string.as_bytes();
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => &[b'\\', b'u', b'0', b'0', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]],
            _ => continue,
        };
        sink.put(&bytes[start..at]);
        sink.put(escape);
        start = at + 1;
    }
    sink.put(&bytes[start..]);
    sink.put(b"\"");
}

/// Displays a value's canonical form, or `<not canonicalizable: …>`.
pub struct DisplayCanonical<'a>(pub &'a Value);

impl fmt::Display for DisplayCanonical<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match to_canonical_string(self.0) {
            Ok(text) => f.write_str(&text),
            Err(err) => write!(f, "<not canonicalizable: {err}>"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// Object keys sort by UTF-16 code units (RFC 8785 §3.2.3), whatever the characters.
        #[test]
        fn utf16_order_matches_encode_utf16(a in "\\PC{0,8}", b in "\\PC{0,8}") {
            prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn utf16_order_differs_from_byte_order_where_rfc_says() {
        // U+1F600 (surrogates D83D DE00) sorts before U+FB33 in UTF-16, after it in UTF-8.
        assert_eq!(utf16_cmp("\u{1F600}", "\u{FB33}"), Ordering::Less);
        assert_eq!(utf16_cmp("a\u{1F600}", "a\u{FB33}"), Ordering::Less);
        assert_eq!(utf16_cmp("ab", "a"), Ordering::Greater);
        assert_eq!(utf16_cmp("a", "a"), Ordering::Equal);
        assert_eq!(utf16_cmp("\u{e9}", "\u{e8}"), Ordering::Greater);
    }

    #[test]
    fn paths_are_json_pointers() {
        let value = json!({"a/b": [1, {"c~": 9007199254740993u64}]});
        let err = to_canonical_vec(&value).unwrap_err();
        assert_eq!(err.path(), "/a~1b/1/c~0");
    }

    #[test]
    fn integer_literal_detection() {
        assert!(is_integer_literal("123"));
        assert!(is_integer_literal("-123"));
        assert!(!is_integer_literal("1e300"));
        assert!(!is_integer_literal("1.0"));
        assert!(!is_integer_literal("-"));
    }
}
