//! What goes in (a model's tool call) and what comes out (a tool message, a host command, an interrupt).

use std::time::Duration;

use crate::approval::protocol::InterruptRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call; the answer carries it back.
    pub id: String,
    /// The tool the model asked for.
    pub name: String,
    /// The arguments: must be a JSON object.
    pub arguments: Value,
}

impl ToolCall {
    /// A call with arguments already parsed.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall { id: id.into(), name: name.into(), arguments }
    }

    /// A call whose arguments arrive as JSON text (OpenAI's `function.arguments`), parsed now. Text that is not
    /// JSON becomes a string value, which the dispatcher refuses with a message the model can act on.
    ///
    /// To have the dispatcher parse the text only if a gate reads it, dispatch a [`ToolCallText`] instead.
    pub fn from_json_text(id: impl Into<String>, name: impl Into<String>, arguments: &str) -> Self {
        let arguments = serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()));
        Self::new(id, name, arguments)
    }
}

/// A tool call whose arguments are still the model's JSON text, as OpenAI's `function.arguments` and hosts
/// that pass JSON along unparsed hold them. [`Dispatcher::dispatch`](crate::Dispatcher::dispatch) parses the
/// text only once a gate reads the arguments: a call to an unknown tool, or one the policy denies by its name
/// or its caller, is refused without the text being read, however large or deeply nested it is.
///
/// Past those gates it is the call [`ToolCall::from_json_text`] makes: text that is not JSON (or nests deeper
/// than the parser's limit) becomes a string value, which the dispatcher refuses with a message the model can
/// act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallText {
    /// The model's id for the call; the answer carries it back.
    pub id: String,
    /// The tool the model asked for.
    pub name: String,
    /// The arguments as the model wrote them: must be a JSON object.
    pub arguments: String,
}

impl ToolCallText {
    /// A call whose arguments are JSON text, to be parsed if a gate reads them.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCallText { id: id.into(), name: name.into(), arguments: arguments.into() }
    }
}

impl From<ToolCallText> for ToolCall {
    /// Parses the arguments now, as [`ToolCall::from_json_text`] does.
    fn from(call: ToolCallText) -> Self {
        ToolCall::new(call.id, call.name, parse_arguments(call.arguments))
    }
}

/// What [`Dispatcher::dispatch`](crate::Dispatcher::dispatch) takes: a [`ToolCall`] with its arguments parsed,
/// or a [`ToolCallText`] with them still text. Made with `From`; callers pass either call as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct IncomingCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: IncomingArguments,
}

/// An incoming call's arguments: parsed by the host, or text the dispatcher parses once a gate reads them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum IncomingArguments {
    Parsed(Value),
    Text(String),
}

impl IncomingArguments {
    /// The arguments as a value, parsing text now ([`parse_arguments`]).
    pub(crate) fn into_value(self) -> Value {
        match self {
            IncomingArguments::Parsed(value) => value,
            IncomingArguments::Text(text) => parse_arguments(text),
        }
    }

    /// Drops the arguments unread, a deep value without recursing ([`crate::args::discard`]).
    pub(crate) fn discard(self) {
        match self {
            IncomingArguments::Parsed(value) => crate::args::discard(value),
            IncomingArguments::Text(text) => drop(text),
        }
    }
}

impl From<ToolCall> for IncomingCall {
    fn from(call: ToolCall) -> Self {
        IncomingCall { id: call.id, name: call.name, arguments: IncomingArguments::Parsed(call.arguments) }
    }
}

impl From<ToolCallText> for IncomingCall {
    fn from(call: ToolCallText) -> Self {
        IncomingCall { id: call.id, name: call.name, arguments: IncomingArguments::Text(call.arguments) }
    }
}

/// JSON text parsed as a call's arguments; text that does not parse is kept whole as a string value, which
/// gate 3 refuses (a call's arguments must be an object), as [`ToolCall::from_json_text`] does.
fn parse_arguments(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The answer to a tool call, for the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolMessage {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool the model asked for.
    pub name: String,
    /// The text the model reads.
    pub content: String,
    /// `success`, or `error` for refusals and failures.
    pub status: Status,
    /// What the model can do next, for refusals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
    /// Argument keys the tool does not declare, removed before the call, named for display as a refusal names
    /// them: by path (`address.zipcode`, `items[2].note`), control, invisible and bidirectional characters
    /// escaped (`\t`, `\u{202e}`), at most 64 characters (a longer key keeps its ends around `…`). Two keys can
    /// be named alike (a tab and a written `\t`); the names are for people and logs, not to look keys up by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stripped_arguments: Vec<String>,
    /// Why the call was refused, for the host (the model reads `content`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
    /// The result as structured content, masked, when the tool gave one
    /// ([`ToolOutput::Structured`](crate::tool::ToolOutput::Structured)): MCP's `structuredContent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
}

impl ToolMessage {
    /// Whether the call was refused before the tool ran.
    pub fn is_refusal(&self) -> bool {
        self.refusal.is_some()
    }
}

/// Whether a tool message reports success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The tool ran and returned a result.
    Success,
    /// The call was refused or the tool failed.
    Error,
}

/// Why a call was refused, and by what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// Which gate refused.
    pub kind: RefusalKind,
    /// The policy rule or attribute that decided, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// When a retry can succeed, for rate limits.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration_millis")]
    pub retry_after: Option<Duration>,
}

/// The gate that refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalKind {
    /// No tool of that name is registered.
    UnknownTool,
    /// The policy denies the tool, or does not allow it.
    Denied,
    /// The arguments were not a JSON object, were too deep, or carried undeclared keys under `ghost = "block"`.
    MalformedArguments,
    /// The arguments did not deserialize into the declared types.
    InvalidArguments,
    /// The host did not supply a value an `#[inject]` parameter needs.
    HostMisconfigured,
    /// The call needs a human's approval and none can be asked.
    ApprovalUnavailable,
    /// A human refused the call (an approver said no, or a denial recorded in the ledger for this call).
    HumanDenied,
    /// The resume value carried an approval that does not admit this call (forged, for another call,
    /// already spent, expired, revoked, or under a refused key), or was no recorded approval or denial at all.
    ApprovalInvalid,
    /// A rate limit is exhausted.
    RateLimited,
    /// The call's effect already happened (same idempotency key).
    Duplicate,
    /// An earlier call with the same effect key may or may not have taken effect; an operator must resolve it.
    EffectUnresolved,
    /// The same effect is running in another call.
    EffectInFlight,
    /// Storage the call needs (effect records, the approval ledger) failed.
    Unavailable,
}

/// A state update a tool returns for the host's graph (LangGraph's `Command`). It passes through the
/// dispatcher untouched: not masked, not rewritten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCommand {
    /// The state update.
    pub update: Value,
    /// Nodes to go to next, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub goto: Vec<String>,
}

/// What the dispatcher returns for one call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// A message for the model: the tool's result, its error, or a refusal.
    Message(ToolMessage),
    /// A host command the tool returned, untouched.
    Command {
        /// The command.
        command: HostCommand,
        /// The call's id.
        tool_call_id: String,
        /// Argument keys removed before the call.
        stripped_arguments: Vec<String>,
    },
    /// The call needs a human's approval: the host stores the request's value
    /// ([`InterruptRequest::to_value`], `{"airlock_approval": {...}}`), shows it to a human, and dispatches
    /// the same call again with the approval as the resume value.
    Interrupt {
        /// The call's id.
        tool_call_id: String,
        /// The sealed approval request.
        request: Box<InterruptRequest>,
    },
}

impl Outcome {
    /// The tool message, if the outcome is one.
    pub fn message(&self) -> Option<&ToolMessage> {
        match self {
            Outcome::Message(message) => Some(message),
            _ => None,
        }
    }

    /// The tool message; panics with the outcome if it is something else (for tests and examples).
    #[track_caller]
    pub fn expect_message(self) -> ToolMessage {
        match self {
            Outcome::Message(message) => message,
            other => panic!("expected a tool message, got {other:?}"),
        }
    }
}

mod duration_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
