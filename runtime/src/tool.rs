//! The tool trait the macro implements, and the static description of a tool.

use std::future::Future;
use std::pin::Pin;

use schemars::{Schema, SchemaGenerator};
use serde_json::Value;

use crate::args::ArgumentErrors;
use crate::context::Invocation;
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
