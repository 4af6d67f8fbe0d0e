//! The tool trait the macro implements, and the static description of a tool.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use agent_airlock_grammar::{EffectTemplateError, Segment, ToolNameError, check_tool_name, parse_effect_template};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use schemars::{Schema, SchemaGenerator};
use serde_json::Value;

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

/// Every problem found while preparing a call's arguments and injected values.
#[derive(Debug, Default)]
pub struct ArgumentErrors {
    errors: Vec<ArgumentError>,
}

/// One bad argument or missing injected value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgumentError {
    /// A required argument is absent (or `null`).
    Missing {
        /// The argument's key.
        field: String,
    },
    /// An argument did not deserialize into the declared type.
    Invalid {
        /// The argument's key, with the path inside it where the error is (`address.zip`).
        field: String,
        /// What serde said, e.g. ``invalid type: string "5", expected u32``.
        message: String,
    },
    /// The host did not supply an injected value.
    Injection {
        /// The parameter's name.
        param: String,
        /// What was missing.
        message: String,
    },
}

impl ArgumentErrors {
    /// No errors yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one error.
    pub fn push(&mut self, error: ArgumentError) {
        self.errors.push(error);
    }

    /// The errors, in parameter order.
    pub fn errors(&self) -> &[ArgumentError] {
        &self.errors
    }

    /// Whether any error is the host's, not the model's.
    pub fn is_host_error(&self) -> bool {
        self.errors.iter().any(|e| matches!(e, ArgumentError::Injection { .. }))
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
    fn prepare(&self, arguments: &Arguments, invocation: &Invocation<'_>) -> Result<Prepared, ArgumentErrors>;
}

/// The static description of a tool: what the model is offered and the author's declared risk.
///
/// `#[airlock_tool]` generates one in a `static`. A hand-written tool builds one with
/// [`ToolSpec::builder`], which checks what the attribute checks at compile time, and keeps it:
///
/// ```
/// use agent_airlock::{ParamSpec, ToolSpec};
///
/// let spec = ToolSpec::builder("refund", "Refund a payment.")
///     .param(ParamSpec::of::<String>("payment_id", Some("The payment to refund.")))
///     .escalate("moves money")
///     .rate("10/minute".parse().expect("a rate"))
///     .effect("refund:{payment_id}")
///     .build()
///     .expect("a valid tool spec");
///
/// assert_eq!(spec.name(), "refund");
/// assert_eq!(spec.params()[0].name(), "payment_id");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolSpec {
    name: Cow<'static, str>,
    description: Cow<'static, str>,
    params: Cow<'static, [ParamSpec]>,
    escalate: Option<Cow<'static, str>>,
    rate: Option<Rate>,
    ghost: GhostPolicy,
    effect: Option<EffectTemplate>,
    mask: MaskSet,
    /// The published schema of a tool defined by one (a [`JsonTool`](crate::json_tool::JsonTool)); `None`
    /// for a typed tool, whose schema is generated from its parameters' types.
    input_schema: Option<Value>,
}

impl ToolSpec {
    /// A builder for a hand-written tool's spec named `name` (the strictest provider rule, see
    /// [`check_tool_name`]) with the description the model reads.
    pub fn builder(name: impl Into<Cow<'static, str>>, description: impl Into<Cow<'static, str>>) -> ToolSpecBuilder {
        ToolSpecBuilder {
            spec: ToolSpec {
                name: name.into(),
                description: description.into(),
                params: Cow::Owned(Vec::new()),
                escalate: None,
                rate: None,
                ghost: GhostPolicy::Strip,
                effect: None,
                mask: DEFAULT_TOOL_MASK,
                input_schema: None,
            },
            effect: None,
        }
    }

    /// A spec from values the macro has already checked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) const fn from_checked_parts(
        name: &'static str,
        description: &'static str,
        params: &'static [ParamSpec],
        escalate: Option<&'static str>,
        rate: Option<Rate>,
        ghost: GhostPolicy,
        effect: Option<EffectTemplate>,
        mask: MaskSet,
    ) -> ToolSpec {
        let escalate = match escalate {
            Some(reason) => Some(Cow::Borrowed(reason)),
            None => None,
        };
        ToolSpec {
            name: Cow::Borrowed(name),
            description: Cow::Borrowed(description),
            params: Cow::Borrowed(params),
            escalate,
            rate,
            ghost,
            effect,
            mask,
            input_schema: None,
        }
    }

    /// The registered name: what the model calls and what policy globs match.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description the model reads.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The model-visible parameters (injected ones are not here), in declaration order.
    pub fn params(&self) -> &[ParamSpec] {
        &self.params
    }

    /// The parameter called `name`, if the tool declares one.
    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Why a human must approve each call, if the author said so.
    pub fn escalate(&self) -> Option<&str> {
        self.escalate.as_deref()
    }

    /// The author's rate limit for this tool.
    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    /// What happens to arguments the tool does not declare.
    pub fn ghost(&self) -> GhostPolicy {
        self.ghost
    }

    /// The idempotency key template of a tool with a side effect (`effect = "refund:{payment_id}"`).
    pub fn effect(&self) -> Option<&EffectTemplate> {
        self.effect.as_ref()
    }

    /// Which result masking the author chose (`mask = "secrets,pii"`), or [`DEFAULT_TOOL_MASK`].
    pub fn mask(&self) -> MaskSet {
        self.mask
    }

    /// The schema the tool was defined by, if it was defined by one rather than by typed parameters.
    pub(crate) fn given_input_schema(&self) -> Option<&Value> {
        self.input_schema.as_ref()
    }
}

/// Builds the [`ToolSpec`] of a hand-written tool; [`ToolSpecBuilder::build`] checks it.
#[derive(Debug)]
#[must_use]
pub struct ToolSpecBuilder {
    spec: ToolSpec,
    effect: Option<Cow<'static, str>>,
}

impl ToolSpecBuilder {
    /// Adds a model-visible parameter, after those added before.
    pub fn param(mut self, param: ParamSpec) -> Self {
        self.spec.params.to_mut().push(param);
        self
    }

    /// Every call needs a human's approval, for this reason.
    pub fn escalate(mut self, reason: impl Into<Cow<'static, str>>) -> Self {
        self.spec.escalate = Some(reason.into());
        self
    }

    /// The tool's own rate limit.
    pub fn rate(mut self, rate: Rate) -> Self {
        self.spec.rate = Some(rate);
        self
    }

    /// What happens to arguments the tool does not declare (default [`GhostPolicy::Strip`]).
    pub fn ghost(mut self, ghost: GhostPolicy) -> Self {
        self.spec.ghost = ghost;
        self
    }

    /// The idempotency key template (`"refund:{payment_id}"`); every placeholder must name a parameter.
    pub fn effect(mut self, template: impl Into<Cow<'static, str>>) -> Self {
        self.effect = Some(template.into());
        self
    }

    /// The result masking (default [`DEFAULT_TOOL_MASK`]).
    pub fn mask(mut self, mask: MaskSet) -> Self {
        self.spec.mask = mask;
        self
    }

    /// The published schema of a tool defined by one; its parameters must be the schema's properties.
    #[cfg_attr(not(feature = "json-tool"), allow(dead_code))]
    pub(crate) fn input_schema(mut self, schema: Value) -> Self {
        self.spec.input_schema = Some(schema);
        self
    }

    /// The spec, or the first rule it breaks.
    pub fn build(self) -> Result<ToolSpec, ToolSpecError> {
        let ToolSpecBuilder { mut spec, effect } = self;
        check_tool_name(&spec.name)?;
        if spec.description.trim().is_empty() {
            return Err(ToolSpecError::EmptyDescription);
        }
        if spec.escalate.as_ref().is_some_and(|reason| reason.trim().is_empty()) {
            return Err(ToolSpecError::EmptyEscalation);
        }
        for (index, param) in spec.params.iter().enumerate() {
            if spec.params[..index].iter().any(|earlier| earlier.name == param.name) {
                return Err(ToolSpecError::DuplicateParam(param.name.clone().into_owned()));
            }
        }
        if let Some(template) = effect {
            let mut segments = Vec::new();
            for segment in parse_effect_template(&template)? {
                segments.push(match segment {
                    Segment::Literal(text) => EffectSegment::Literal(Cow::Owned(text.to_owned())),
                    Segment::Param(name) => match spec.param(name) {
                        Some(param) => EffectSegment::Param(param.name.clone()),
                        None => return Err(ToolSpecError::UnknownEffectParam(name.to_owned())),
                    },
                });
            }
            spec.effect = Some(EffectTemplate { template, segments: Cow::Owned(segments) });
        }
        Ok(spec)
    }
}

/// A hand-written [`ToolSpec`] that breaks a rule the attribute checks at compile time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSpecError {
    /// The name breaks the tool-name rule.
    #[error(transparent)]
    Name(#[from] ToolNameError),
    /// The description is blank.
    #[error("a tool's description must not be empty: the model reads it to pick the tool")]
    EmptyDescription,
    /// The escalation reason is blank.
    #[error("`escalate` must give the reason a human must approve, e.g. `moves money`")]
    EmptyEscalation,
    /// Two parameters share a name.
    #[error("two parameters are named `{0}`")]
    DuplicateParam(String),
    /// The effect template does not parse.
    #[error(transparent)]
    Effect(#[from] EffectTemplateError),
    /// The effect template names no parameter of the tool.
    #[error("unknown parameter `{0}` in effect template")]
    UnknownEffectParam(String),
}

/// The masking a tool gets when its attribute says nothing: secrets (keys, tokens, passwords).
pub const DEFAULT_TOOL_MASK: MaskSet = MaskSet::SECRETS;

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
    /// ([`Prepared::new`]): as [`EffectTemplate::render_values`] over the values as the model sent them, so
    /// number spelling and key order do not matter but a field the parameter's type ignores does. A value
    /// with no canonical form (nested too deep) is written as sent.
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

/// One model-visible parameter.
#[derive(Clone)]
#[non_exhaustive]
pub struct ParamSpec {
    name: Cow<'static, str>,
    description: Option<Cow<'static, str>>,
    kind: ParamKind,
}

/// Where a parameter's schema comes from.
#[derive(Clone)]
enum ParamKind {
    /// A Rust type: its schema is generated, and it is required unless `null` deserializes into it.
    Typed { schema: fn(&mut SchemaGenerator) -> Schema, accepts_null: fn() -> bool },
    /// A property of a schema given at run time.
    Json { schema: Value, required: bool, accepts_null: bool },
}

impl ParamSpec {
    /// A parameter named `name` whose value the model sends as a `T`, with its doc text.
    pub fn of<T: DeserializeOwned + JsonSchema>(name: &'static str, description: Option<&'static str>) -> ParamSpec {
        ParamSpec::from_checked_parts(name, description, param_schema::<T>, accepts_null::<T>)
    }

    /// A parameter from what the macro generated for its type.
    pub(crate) const fn from_checked_parts(
        name: &'static str,
        description: Option<&'static str>,
        schema: fn(&mut SchemaGenerator) -> Schema,
        accepts_null: fn() -> bool,
    ) -> ParamSpec {
        let description = match description {
            Some(text) => Some(Cow::Borrowed(text)),
            None => None,
        };
        ParamSpec { name: Cow::Borrowed(name), description, kind: ParamKind::Typed { schema, accepts_null } }
    }

    /// A property of a schema given at run time: its subschema, whether the schema requires it, and
    /// whether `null` is one of its values.
    #[cfg_attr(not(feature = "json-tool"), allow(dead_code))]
    pub(crate) fn from_json_property(
        name: String,
        description: Option<String>,
        schema: Value,
        required: bool,
        accepts_null: bool,
    ) -> ParamSpec {
        ParamSpec {
            name: Cow::Owned(name),
            description: description.map(Cow::Owned),
            kind: ParamKind::Json { schema, required, accepts_null },
        }
    }

    /// The argument's key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parameter's doc comment (for a tool defined by a schema, the property's `description`).
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The JSON schema of the parameter's type (for a tool defined by a schema, the property's subschema,
    /// whose `$ref`s resolve against the tool's whole schema).
    pub fn schema(&self, generator: &mut SchemaGenerator) -> Schema {
        match &self.kind {
            ParamKind::Typed { schema, .. } => schema(generator),
            // The tool's schema compiled, so each property is an object or a boolean.
            ParamKind::Json { schema, .. } => Schema::try_from(schema.clone()).unwrap_or_default(),
        }
    }

    /// Whether `null` is a valid value: true for `Option<T>`, and for a property whose schema allows it.
    pub fn accepts_null(&self) -> bool {
        match &self.kind {
            ParamKind::Typed { accepts_null, .. } => accepts_null(),
            ParamKind::Json { accepts_null, .. } => *accepts_null,
        }
    }

    /// Whether the model must send the argument: for a typed parameter, unless `null` (absence) is valid;
    /// for a property of a given schema, when the schema lists it in `required`.
    pub fn is_required(&self) -> bool {
        match &self.kind {
            ParamKind::Typed { accepts_null, .. } => !accepts_null(),
            ParamKind::Json { required, .. } => *required,
        }
    }
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

/// The schema of one parameter type (generated code passes this as a function pointer).
pub(crate) fn param_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// Whether `null` deserializes into `T`: absent and `null` arguments are then valid.
pub(crate) fn accepts_null<T: DeserializeOwned>() -> bool {
    T::deserialize(&Value::Null).is_ok()
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
    fn the_builder_checks_what_the_attribute_checks() {
        let ok = ToolSpec::builder("refund", "Refund a payment.")
            .param(ParamSpec::of::<String>("payment_id", None))
            .param(ParamSpec::of::<Option<u64>>("cents", Some("Amount")))
            .escalate("moves money")
            .ghost(GhostPolicy::Block)
            .mask(MaskSet::ALL)
            .effect("refund:{ payment_id }")
            .build()
            .unwrap();
        assert_eq!(ok.name(), "refund");
        assert_eq!(ok.params().iter().map(ParamSpec::name).collect::<Vec<_>>(), ["payment_id", "cents"]);
        assert!(!ok.params()[0].accepts_null() && ok.params()[1].accepts_null());
        assert_eq!(ok.escalate(), Some("moves money"));
        assert_eq!((ok.ghost(), ok.mask(), ok.rate()), (GhostPolicy::Block, MaskSet::ALL, None));
        let effect = ok.effect().unwrap();
        assert_eq!(
            effect.segments(),
            [EffectSegment::Literal("refund:".into()), EffectSegment::Param("payment_id".into())]
        );
        assert_eq!(effect.render(json!({"payment_id": "pi_1"}).as_object().unwrap()), "refund:pi_1");
        assert_eq!(ToolSpec::builder("r", "d").build().unwrap().mask(), DEFAULT_TOOL_MASK);

        let err = |b: ToolSpecBuilder| b.build().unwrap_err().to_string();
        assert!(err(ToolSpec::builder("has space", "d")).contains("contains ` `"));
        assert!(err(ToolSpec::builder("r", " ")).contains("description must not be empty"));
        assert!(err(ToolSpec::builder("r", "d").escalate("")).contains("`escalate`"));
        let twice =
            ToolSpec::builder("r", "d").param(ParamSpec::of::<u8>("a", None)).param(ParamSpec::of::<u8>("a", None));
        assert_eq!(err(twice), "two parameters are named `a`");
        assert!(err(ToolSpec::builder("r", "d").effect("refund:{id")).contains("unclosed"));
        assert_eq!(err(ToolSpec::builder("r", "d").effect("refund:{id}")), "unknown parameter `id` in effect template");
    }

    #[test]
    fn the_json_fallback_ignores_number_spelling_and_key_order() {
        assert_eq!(key(json!({"a": {"q": 1, "p": 2}, "b": 100.0})), key(json!({"a": {"p": 2, "q": 1.0}, "b": 100})));
    }
}
