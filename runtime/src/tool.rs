//! The tool trait the macro implements, and the static description of a tool.

use std::future::Future;
use std::pin::Pin;

use schemars::{Schema, SchemaGenerator};
use serde_json::Value;

use crate::args::ArgumentErrors;
use crate::canonical::{CanonicalError, MAX_CANONICAL_DEPTH, to_canonical_string};
use crate::context::Invocation;
use crate::mask::MaskSet;
use crate::message::HostCommand;
use crate::rate::Rate;

/// The arguments of one call: a JSON object, after ghost stripping.
pub type Arguments = serde_json::Map<String, Value>;

/// A tool call that passed validation and injection but has not started: polling it runs the tool.
pub type PreparedCall = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'static>>;

/// What [`Tool::prepare`] returns: the call, not yet started, and the key of its effect.
pub struct Prepared {
    call: PreparedCall,
    effect_key: Option<String>,
}

impl Prepared {
    /// A call without an effect key of its own. For a tool with an effect template the dispatcher then
    /// renders the key from the admitted JSON arguments ([`EffectTemplate::render`]), which cannot see
    /// fields a type ignores: a tool with typed parameters should give [`Prepared::with_effect_key`].
    pub fn new(call: PreparedCall) -> Prepared {
        Prepared { call, effect_key: None }
    }

    /// The call's effect key, rendered from its typed arguments ([`EffectTemplate::render_values`]).
    #[must_use]
    pub fn with_effect_key(mut self, key: String) -> Prepared {
        self.effect_key = Some(key);
        self
    }

    /// The effect key the tool gave, if any.
    pub fn effect_key(&self) -> Option<&str> {
        self.effect_key.as_deref()
    }

    /// The call and the effect key.
    pub fn into_parts(self) -> (PreparedCall, Option<String>) {
        (self.call, self.effect_key)
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("effect_key", &self.effect_key).finish_non_exhaustive()
    }
}

/// A guarded tool. `#[airlock_tool]` implements it; hand-written tools may too.
pub trait Tool: Send + Sync + 'static {
    /// What the tool is: name, description, parameters and the author's declared risk.
    fn spec(&self) -> &'static ToolSpec;

    /// Deserializes every model-visible argument strictly and extracts every injected value, collecting all
    /// errors. Nothing runs until the returned future is polled, so the dispatcher can still refuse.
    /// A tool with an effect template should render the key from its typed arguments
    /// ([`Prepared::with_effect_key`]), so that two spellings of one value share one key.
    fn prepare(&self, arguments: &Arguments, invocation: &Invocation<'_>) -> Result<Prepared, ArgumentErrors>;
}

/// The static description of a tool, generated from the function and its attribute.
#[derive(Debug)]
pub struct ToolSpec {
    /// The registered name: what the model calls and what policy globs match.
    pub name: &'static str,
    /// The description the model reads.
    pub description: &'static str,
    /// The model-visible parameters (injected ones are not here), in declaration order.
    pub params: &'static [ParamSpec],
    /// Why a human must approve each call, if the author said so.
    pub escalate: Option<&'static str>,
    /// The author's rate limit for this tool.
    pub rate: Option<Rate>,
    /// What happens to arguments the tool does not declare.
    pub ghost: GhostPolicy,
    /// The idempotency key template of a tool with a side effect (`effect = "refund:{payment_id}"`).
    pub effect: Option<EffectTemplate>,
    /// Which result masking the author chose (`mask = "secrets,pii"`, checked at compile time); `None` means
    /// the default, [`DEFAULT_TOOL_MASK`].
    pub mask: Option<&'static str>,
}

/// The masking a tool gets when its attribute says nothing: secrets (keys, tokens, passwords).
pub const DEFAULT_TOOL_MASK: MaskSet = MaskSet::SECRETS;

/// An idempotency key template, checked at compile time: every placeholder names a model-visible parameter.
#[derive(Debug, Clone, Copy)]
pub struct EffectTemplate {
    /// The template as written.
    pub template: &'static str,
    /// Its pieces.
    pub segments: &'static [EffectSegment],
}

/// One piece of an [`EffectTemplate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectSegment {
    /// Text copied into the key.
    Literal(&'static str),
    /// The value of the named argument.
    Param(&'static str),
}

impl EffectTemplate {
    /// The key for one call, from the values of the parameters the template names: each value is the
    /// parameter's typed value serialized back to JSON (`serde_json::to_value(&amount)`), so what the model
    /// spelled differently but the type reads the same (`100` and `100.0` for an `f64`, object keys in
    /// another order, a field the type ignores) gives one key. Each value is written in its canonical form
    /// (RFC 8785, see [`crate::canonical`]; an integer beyond ±(2^53 − 1) as its exact decimal text), a
    /// string as its text, `null` or an absent value as `~`; then percent-encoded (all but ASCII letters,
    /// digits, `-`, `_`, `.`), so a value cannot forge the template's separators.
    pub fn render_values(&self, values: &[(&str, Value)]) -> Result<String, EffectKeyError> {
        let mut key = String::with_capacity(self.template.len() + 16);
        for segment in self.segments {
            match segment {
                EffectSegment::Literal(text) => key.push_str(text),
                EffectSegment::Param(name) => {
                    let value = values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
                    let text = match value {
                        Some(value) => effect_text(value)
                            .map_err(|error| EffectKeyError { param: (*name).to_owned(), error })?,
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
    /// ([`Prepared::new`]): as [`EffectTemplate::render_values`] over the values as the model sent them, so
    /// number spelling and key order do not matter but a field the parameter's type ignores does. A value
    /// with no canonical form (nested too deep) is written as sent.
    pub fn render(&self, arguments: &Arguments) -> String {
        let mut key = String::with_capacity(self.template.len() + 16);
        for segment in self.segments {
            match segment {
                EffectSegment::Literal(text) => key.push_str(text),
                EffectSegment::Param(name) => match arguments.get(*name) {
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

impl ToolSpec {
    /// The parameter called `name`, if the tool declares one.
    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// One model-visible parameter.
pub struct ParamSpec {
    /// The argument's key.
    pub name: &'static str,
    /// The parameter's doc comment.
    pub description: Option<&'static str>,
    /// The JSON schema of the parameter's type.
    pub schema: fn(&mut SchemaGenerator) -> Schema,
    /// Whether `null` (or absence) is a valid value: true for `Option<T>`.
    pub accepts_null: fn() -> bool,
}

impl std::fmt::Debug for ParamSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamSpec").field("name", &self.name).field("description", &self.description).finish()
    }
}

/// What happens to arguments the model sent that the tool does not declare ("ghost" arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GhostPolicy {
    /// Remove them, report them on the message, and go on.
    #[default]
    Strip,
    /// Refuse the call.
    Block,
}

/// What a tool produced.
#[derive(Debug)]
pub enum ToolOutput {
    /// A result for the model.
    Content(Value),
    /// A state update for the host's graph; it passes through untouched.
    Command(HostCommand),
    /// The tool returned an error.
    Failed(ToolError),
}

/// An error a tool returns. Any `Display` error works as a tool's `Err`; this one also says whether the
/// side effect certainly did not happen, which makes a retry safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    message: String,
    not_executed: bool,
}

impl ToolError {
    /// A failure whose side effects are unknown.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError { message: message.into(), not_executed: false }
    }

    /// A failure before the side effect happened: a retry is safe.
    pub fn not_executed(message: impl Into<String>) -> Self {
        ToolError { message: message.into(), not_executed: true }
    }

    /// The text the model sees.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the tool said its side effect certainly did not happen.
    pub fn is_not_executed(&self) -> bool {
        self.not_executed
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEMPLATE: EffectTemplate = EffectTemplate {
        template: "refund:{a}:{b}",
        segments: &[
            EffectSegment::Literal("refund:"),
            EffectSegment::Param("a"),
            EffectSegment::Literal(":"),
            EffectSegment::Param("b"),
        ],
    };

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
        assert_eq!(typed(json!({"y": 1.0, "x": [2, "z"]}), json!(null)), "refund:%7B%22x%22%3A%5B2%2C%22z%22%5D%2C%22y%22%3A1%7D:~");
        assert_eq!(typed(json!({"x": 1, "y": 2}), json!(0)), typed(json!({"y": 2, "x": 1.0}), json!(-0.0)));
        // Integers a double cannot hold keep their exact value, at the top and inside values.
        assert_eq!(typed(json!(9_007_199_254_740_993u64), json!([18_446_744_073_709_551_615u64])), "refund:9007199254740993:%5B%2218446744073709551615%22%5D");
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
