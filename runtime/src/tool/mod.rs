//! What a hand-written tool needs: the [`Tool`] trait `#[airlock_tool]` implements, the static description
//! of a tool ([`ToolSpec`], built with [`ToolSpec::builder`]), its arguments and what can be wrong with them
//! ([`Arguments`], [`ArgumentErrors`]), what a call produces ([`Prepared`], [`ToolOutput`]), the values a
//! tool can have injected ([`Inject`], [`Invocation`]), its effect keys ([`EffectTemplate`]) and the
//! rules for a tool's name ([`check_tool_name`]).
//!
//! A tool written with `#[airlock_tool]` needs none of these: the macro, [`ToolError`]
//! and the dispatcher are at the crate root.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::message::HostCommand;
use crate::schema::{ToolDefinition, input_schema};

mod arguments;
mod effect_key;
pub(crate) mod error;
mod spec;

pub(crate) use arguments::MAX_TEXT_PARAMS;
pub use arguments::{ArgumentError, ArgumentErrors, ArgumentTexts, Arguments, MAX_ARGUMENT_DEPTH};
pub(crate) use effect_key::render_effect_key;
pub use effect_key::{EffectKeyError, EffectSegment, EffectTemplate};
pub(crate) use error::ToolError;
pub use spec::{DEFAULT_TOOL_MASK, GhostPolicy, ParamSpec, ToolSpec, ToolSpecBuilder, ToolSpecError};

pub use crate::context::{Inject, InjectError, Invocation};
pub use agent_airlock_grammar::{MAX_TOOL_NAME_LEN, ToolNameError, check_tool_name};
pub(crate) use spec::{accepts_null, param_schema};

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

/// A guarded tool. `#[airlock_tool]` implements it; hand-written tools and tools defined at run time
/// ([`JsonTool`](crate::json_tool::JsonTool), feature `json-tool`) do too.
pub trait Tool: Send + Sync + 'static {
    /// What the tool is: name, description, parameters and the author's declared risk. The same spec on
    /// every call: the dispatcher reads it once, when it is built.
    ///
    /// The spec is borrowed from the tool, not `'static`: a tool defined at run time (an MCP upstream's
    /// tool, re-listed whenever the upstream changes it) owns its spec and is dropped with it, where a
    /// `&'static` contract would leak one spec per definition. `#[airlock_tool]` still returns a `static`,
    /// and a hand-written tool may keep the [`ToolSpec::builder`]'s result in a field.
    fn spec(&self) -> &ToolSpec;

    /// Deserializes every model-visible argument strictly and extracts every injected value, collecting all
    /// errors. Nothing runs until the returned future is polled, so the dispatcher can still refuse.
    /// A tool with an effect template should render the key from its typed arguments
    /// ([`Prepared::with_effect_key`]), so that two spellings of one value share one key.
    ///
    /// The arguments are [`Cow::Owned`] when no later gate reads them (no effect template, argument condition
    /// or escalation applies to the tool: the usual call), so a tool can move their values out instead of
    /// copying them; [`Cow::Borrowed`] otherwise. A tool that only reads them reads either through `Deref`
    /// (`arguments.get("id")`); [`Cow::into_owned`] copies only a borrowed map.
    fn prepare(&self, arguments: Cow<'_, Arguments>, invocation: &Invocation<'_>) -> Result<Prepared, ArgumentErrors>;

    /// Whether the tool implements [`prepare_text`](Self::prepare_text). `#[airlock_tool]` says yes for a
    /// tool without an effect template.
    fn prepares_text(&self) -> bool {
        false
    }

    /// Deserializes every model-visible argument from its JSON text, as the model sent it, and extracts
    /// every injected value; `None` when any of them fails (or the tool does not read texts), and the
    /// dispatcher then parses the arguments and calls [`prepare`](Self::prepare), which says what failed.
    /// The dispatcher asks only for a call whose arguments came as text, that gate 3's screen would admit
    /// unchanged, that no later gate reads and no audit log keeps (see [`ArgumentTexts`]); it saves building
    /// a JSON map only to take it apart.
    ///
    /// The contract: it succeeds only where `prepare`, given the map those texts parse to, would, and
    /// prepares the same call. A parameter not sent is deserialized from `null`, as `prepare` does.
    fn prepare_text(&self, texts: &ArgumentTexts<'_>, invocation: &Invocation<'_>) -> Option<Prepared> {
        let _ = (texts, invocation);
        None
    }
}

/// What a tool produced.
#[derive(Debug)]
pub enum ToolOutput {
    /// A result for the model.
    Content(Value),
    /// A result for the model, and the same result as structured content for a client that reads it (MCP's
    /// `structuredContent`, described by the tool's output schema). Both are masked.
    Structured {
        /// What the model reads.
        content: Value,
        /// The structured content.
        structured: Value,
    },
    /// A state update for the host's graph; it passes through untouched.
    Command(HostCommand),
    /// The tool returned an error.
    Failed(ToolError),
}

impl ToolDefinition {
    /// The definition of `tool`.
    pub fn of(tool: &dyn Tool) -> Self {
        let spec = tool.spec();
        ToolDefinition {
            name: spec.name().to_owned(),
            description: spec.description().to_owned(),
            input_schema: input_schema(spec),
        }
    }
}
