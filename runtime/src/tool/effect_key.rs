//! Effect keys: an [`EffectTemplate`] rendered for one call, each value in its canonical form and
//! percent-encoded so a value cannot forge the template's separators.

use std::borrow::Cow;

use agent_airlock_grammar::Segment;
use serde_json::Value;

use super::Arguments;
use crate::canonical::{CanonicalError, MAX_CANONICAL_DEPTH, to_canonical_string};

/// An idempotency key template, checked when the tool is built (at compile time for `#[airlock_tool]`):
/// every placeholder names a model-visible parameter.
#[derive(Debug, Clone)]
pub struct EffectTemplate {
    template: Cow<'static, str>,
    segments: Cow<'static, [EffectSegment]>,
}

/// One piece of an [`EffectTemplate`]: borrowed from the binary for `#[airlock_tool]`, owned for a tool
/// defined at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectSegment {
    /// Text copied into the key.
    Literal(Cow<'static, str>),
    /// The value of the named argument.
    Param(Cow<'static, str>),
}

impl EffectTemplate {
    /// A template the macro has already parsed and checked.
    pub(crate) const fn from_checked_parts(template: &'static str, segments: &'static [EffectSegment]) -> Self {
        EffectTemplate { template: Cow::Borrowed(template), segments: Cow::Borrowed(segments) }
    }

    /// A template [`ToolSpecBuilder`](super::ToolSpecBuilder) has parsed and checked at run time.
    pub(super) fn from_owned_parts(template: Cow<'static, str>, segments: Vec<EffectSegment>) -> Self {
        EffectTemplate { template, segments: Cow::Owned(segments) }
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Its pieces.
    pub fn segments(&self) -> &[EffectSegment] {
        &self.segments
    }

    /// The key for one call, from the values of the parameters the template names: each value is the
    /// parameter's typed value serialized back to JSON (`serde_json::to_value(&amount)`), so what the model
    /// spelled differently but the type reads the same (`100` and `100.0` for an `f64`, object keys in
    /// another order, a field the type ignores) gives one key. Each value is written in its canonical form
    /// (RFC 8785, see [`crate::canonical`]; an integer beyond ±(2^53 − 1) as its exact decimal text), a
    /// string as its text, `null` or an absent value as `~`; then percent-encoded (all but ASCII letters,
    /// digits, `-`, `_`, `.`), so a value cannot forge the template's separators.
    pub fn render_values(&self, values: &[(&str, Value)]) -> Result<String, EffectKeyError> {
        let mut key = String::with_capacity(self.template.len() + 16);
        for segment in self.segments.iter() {
            match segment {
                EffectSegment::Literal(text) => key.push_str(text),
                EffectSegment::Param(name) => {
                    let value = values.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
                    let text = match value {
                        Some(value) => effect_text(value)
                            .map_err(|error| EffectKeyError { param: name.clone().into_owned(), error })?,
                        None => None,
                    };
                    match text {
                        Some(text) => percent_encode(&text, &mut key),
                        None => key.push('~'),
                    }
                }
            }
        }
        Ok(key)
    }

    /// The key for one call from its admitted JSON arguments, for a tool that gives no key of its own
    /// ([`Prepared::new`](super::Prepared::new)): as [`EffectTemplate::render_values`] over the values as the
    /// model sent them, so number spelling and key order do not matter but a field the parameter's type
    /// ignores does. A value with no canonical form (nested too deep) is written as sent.
    pub fn render(&self, arguments: &Arguments) -> String {
        let segments = self.segments.iter().map(|segment| match segment {
            EffectSegment::Literal(text) => Segment::Literal(text.as_ref()),
            EffectSegment::Param(name) => Segment::Param(name.as_ref()),
        });
        render_effect_key(segments, arguments, self.template.len())
    }
}

/// [`EffectTemplate::render`] over any template's segments: a policy's templates are not `'static`.
pub(crate) fn render_effect_key<'a>(
    segments: impl Iterator<Item = Segment<'a>>,
    arguments: &Arguments,
    template_len: usize,
) -> String {
    let mut key = String::with_capacity(template_len + 16);
    for segment in segments {
        match segment {
            Segment::Literal(text) => key.push_str(text),
            Segment::Param(name) => match arguments.get(name) {
                Some(value) => match effect_text(value) {
                    Ok(Some(text)) => percent_encode(&text, &mut key),
                    Ok(None) => key.push('~'),
                    Err(_) => percent_encode(&value.to_string(), &mut key),
                },
                None => key.push('~'),
            },
        }
    }
    key
}

/// A parameter value that cannot be part of an effect key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the value of `{param}` cannot be part of the effect key: {error}")]
pub struct EffectKeyError {
    param: String,
    error: CanonicalError,
}

impl EffectKeyError {
    /// The parameter.
    pub fn param(&self) -> &str {
        &self.param
    }
}

/// The text one value contributes to a key, before percent-encoding; `None` for `null`.
fn effect_text(value: &Value) -> Result<Option<String>, CanonicalError> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text.clone())),
        Value::Number(number) => Ok(Some(number_text(number))),
        other => {
            let exact = exact_large_numbers(other, 0)?;
            to_canonical_string(exact.as_ref().unwrap_or(other)).map(Some)
        }
    }
}

/// A number's canonical text, or (an integer RFC 8785 would round) its exact decimal text.
fn number_text(number: &serde_json::Number) -> String {
    to_canonical_string(&Value::Number(number.clone())).unwrap_or_else(|_| number.to_string())
}

/// `value` with every number that has no canonical form replaced by its exact text, or `None` if it has
/// none: a `u64` id above 2^53 must still make a key, and one typed parameter always serializes it as the
/// same integer.
fn exact_large_numbers(value: &Value, depth: usize) -> Result<Option<Value>, CanonicalError> {
    if depth > MAX_CANONICAL_DEPTH {
        return Err(CanonicalError::TooDeep { path: String::new() });
    }
    Ok(match value {
        Value::Number(number) if to_canonical_string(value).is_err() => Some(Value::String(number.to_string())),
        Value::Array(items) => {
            let mut changed: Option<Vec<Value>> = None;
            for (index, item) in items.iter().enumerate() {
                if let Some(replaced) = exact_large_numbers(item, depth + 1)? {
                    changed.get_or_insert_with(|| items.clone())[index] = replaced;
                }
            }
            changed.map(Value::Array)
        }
        Value::Object(fields) => {
            let mut changed: Option<serde_json::Map<String, Value>> = None;
            for (name, field) in fields {
                if let Some(replaced) = exact_large_numbers(field, depth + 1)? {
                    changed.get_or_insert_with(|| fields.clone()).insert(name.clone(), replaced);
                }
            }
            changed.map(Value::Object)
        }
        _ => None,
    })
}

fn percent_encode(text: &str, out: &mut String) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(byte >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(byte & 0xF)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEMPLATE: EffectTemplate = EffectTemplate::from_checked_parts(
        "refund:{a}:{b}",
        &[
            EffectSegment::Literal(Cow::Borrowed("refund:")),
            EffectSegment::Param(Cow::Borrowed("a")),
            EffectSegment::Literal(Cow::Borrowed(":")),
            EffectSegment::Param(Cow::Borrowed("b")),
        ],
    );

    fn key(arguments: Value) -> String {
        TEMPLATE.render(arguments.as_object().unwrap())
    }

    #[test]
    fn renders_values_so_different_arguments_never_collide() {
        assert_eq!(key(json!({"a": "pi_1", "b": 500})), "refund:pi_1:500");
        assert_ne!(key(json!({"a": "1:2", "b": "3"})), key(json!({"a": "1", "b": "2:3"})));
        assert_ne!(key(json!({"a": "~", "b": 1})), key(json!({"b": 1})));
        assert_eq!(key(json!({"a": "é/ü", "b": true})), "refund:%C3%A9%2F%C3%BC:true");
    }

    fn typed(a: Value, b: Value) -> String {
        TEMPLATE.render_values(&[("a", a), ("b", b)]).unwrap()
    }

    #[test]
    fn renders_each_value_in_its_canonical_form() {
        assert_eq!(typed(json!("pi_1"), json!(100.0)), "refund:pi_1:100");
        assert_eq!(typed(json!(1e2), json!(100)), typed(json!(100), json!(100.0)));
        assert_eq!(
            typed(json!({"y": 1.0, "x": [2, "z"]}), json!(null)),
            "refund:%7B%22x%22%3A%5B2%2C%22z%22%5D%2C%22y%22%3A1%7D:~"
        );
        assert_eq!(typed(json!({"x": 1, "y": 2}), json!(0)), typed(json!({"y": 2, "x": 1.0}), json!(-0.0)));
        // Integers a double cannot hold keep their exact value, at the top and inside values.
        assert_eq!(
            typed(json!(9_007_199_254_740_993u64), json!([18_446_744_073_709_551_615u64])),
            "refund:9007199254740993:%5B%2218446744073709551615%22%5D"
        );
        assert_ne!(typed(json!(9_007_199_254_740_993u64), json!(1)), typed(json!(9_007_199_254_740_992u64), json!(1)));
        // Absent and `null` are one; the string `~` is not.
        assert_eq!(TEMPLATE.render_values(&[("b", json!(1))]).unwrap(), typed(json!(null), json!(1)));
        assert_ne!(typed(json!("~"), json!(1)), typed(json!(null), json!(1)));
        assert_ne!(typed(json!("1:2"), json!("3")), typed(json!("1"), json!("2:3")));
    }

    #[test]
    fn a_value_nested_too_deep_names_its_parameter() {
        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let err = TEMPLATE.render_values(&[("a", deep.clone()), ("b", json!(1))]).unwrap_err();
        assert_eq!(err.param(), "a");
        // The fallback for tools without typed keys writes it as sent rather than fail.
        assert!(TEMPLATE.render(json!({"a": deep, "b": 1}).as_object().unwrap()).starts_with("refund:%5B%5B"));
    }

    #[test]
    fn the_json_fallback_ignores_number_spelling_and_key_order() {
        assert_eq!(key(json!({"a": {"q": 1, "p": 2}, "b": 100.0})), key(json!({"a": {"p": 2, "q": 1.0}, "b": 100})));
    }
}
