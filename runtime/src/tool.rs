//! The tool trait the macro implements, and the static description of a tool.

use std::future::Future;
use std::pin::Pin;

use schemars::{Schema, SchemaGenerator};
use serde_json::Value;

use crate::args::ArgumentErrors;
use crate::context::Invocation;
use crate::mask::MaskSet;
use crate::message::HostCommand;
use crate::rate::Rate;

/// The arguments of one call: a JSON object, after ghost stripping.
pub type Arguments = serde_json::Map<String, Value>;

/// A tool call that passed validation and injection but has not started: polling it runs the tool.
pub type PreparedCall = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'static>>;

/// A guarded tool. `#[airlock_tool]` implements it; hand-written tools may too.
pub trait Tool: Send + Sync + 'static {
    /// What the tool is: name, description, parameters and the author's declared risk.
    fn spec(&self) -> &'static ToolSpec;

    /// Deserializes every model-visible argument strictly and extracts every injected value, collecting all
    /// errors. Nothing runs until the returned future is polled, so the dispatcher can still refuse.
    fn prepare(&self, arguments: &Arguments, invocation: &Invocation<'_>) -> Result<PreparedCall, ArgumentErrors>;
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
    /// The key for one call's admitted arguments. Argument values are percent-encoded (all but ASCII
    /// letters, digits, `-`, `_`, `.`), so a value cannot forge the template's separators: two different
    /// argument sets never render the same key. An absent argument renders as `~`. A string renders like a
    /// number with the same text (`"5"` and `5`); after validation one parameter always has one JSON type.
    pub fn render(&self, arguments: &Arguments) -> String {
        let mut key = String::with_capacity(self.template.len() + 16);
        for segment in self.segments {
            match segment {
                EffectSegment::Literal(text) => key.push_str(text),
                EffectSegment::Param(name) => match arguments.get(*name) {
                    None | Some(Value::Null) => key.push('~'),
                    Some(Value::String(text)) => percent_encode(text, &mut key),
                    Some(other) => percent_encode(&other.to_string(), &mut key),
                },
            }
        }
        key
    }
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
}
