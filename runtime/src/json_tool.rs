//! Tools defined at run time by a name, a description and a JSON Schema (an MCP upstream's
//! `inputSchema`), guarded by the [`Dispatcher`](crate::Dispatcher) exactly like `#[airlock_tool]` tools:
//! policy, escalation, rate limits, effects, masking and audit apply unchanged.
//!
//! What differs is where the arguments' rules come from. A typed tool's schema is generated from its Rust
//! types and serde enforces them; here the schema is given, compiled once by the `jsonschema` validator
//! when the tool is made, and every call's arguments are validated by it after the dispatcher's screen has
//! stripped (or, under [`GhostPolicy::Block`], refused) the keys it does not declare, at every depth the
//! schema closes. The tool publishes the schema it enforces ([`Tool::spec`], [`ToolDefinition`](crate::ToolDefinition)),
//! so what the model is shown and what the runtime admits are one schema.
//!
//! Many upstream schemas leave objects open (no `additionalProperties`), where nothing would be stripped.
//! By default ([`Closing::Unstated`]) such objects are closed before the schema is published and
//! enforced, which only ever narrows what the schema accepts (see [`Closing`]).
//!
//! The host says how a call runs ([`JsonExecutor`], any `async` closure taking a [`JsonCall`]): a gateway
//! forwards the admitted arguments to its upstream.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jsonschema::paths::LocationSegment;
use jsonschema::{ValidationError, Validator, error::ValidationErrorKind};
use serde_json::{Map, Value};

use crate::args::MAX_LISTED;
use crate::context::Invocation;
use crate::mask::MaskSet;
use crate::rate::Rate;
use crate::tool::{
    ArgumentError, ArgumentErrors, Arguments, GhostPolicy, ParamSpec, Prepared, Tool, ToolError, ToolOutput, ToolSpec,
    ToolSpecBuilder, ToolSpecError,
};

mod references;
mod regex_format;
mod unique_items;

pub use references::{MAX_IN_PLACE_DEPTH, MAX_REFERENCE_CHAIN};

/// How deep a given schema may nest. Deeper schemas are refused before they are compiled, so a hostile
/// upstream cannot exhaust the stack of the compiler or of the walks over the schema.
pub const MAX_SCHEMA_DEPTH: usize = 128;

/// The field named by an error about the arguments object as a whole (a top-level `anyOf`, say).
const WHOLE: &str = "arguments";

/// One admitted call, as the executor receives it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JsonCall {
    /// The registered name of the tool (one executor may serve many tools).
    pub tool: String,
    /// The model's id for this call.
    pub tool_call_id: String,
    /// The arguments after every gate: undeclared keys stripped, `null`s for optional ones dropped,
    /// validated against the tool's schema.
    pub arguments: Arguments,
}

/// What an executor returns: the result the model reads (masked by the dispatcher), or an error; a
/// [`ToolError::not_executed`] settles the call's effect as not having happened.
pub type JsonFuture = Pin<Box<dyn Future<Output = Result<JsonOutput, ToolError>> + Send + 'static>>;

/// The result of one [`JsonTool`] call: what the model reads and, for a tool with an output schema, the
/// structured content a client reads (masked like the rest). A [`Value`] converts into one without.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JsonOutput {
    /// What the model reads.
    pub content: Value,
    /// The structured content, if any.
    pub structured: Option<Value>,
}

impl JsonOutput {
    /// A result with structured content.
    pub fn structured(content: Value, structured: Value) -> Self {
        JsonOutput { content, structured: Some(structured) }
    }
}

impl From<Value> for JsonOutput {
    fn from(content: Value) -> Self {
        JsonOutput { content, structured: None }
    }
}

/// How a [`JsonTool`]'s admitted calls run. Implemented for every `Fn(JsonCall) -> impl Future<Output =
/// Result<T, ToolError>>` closure whose `T` is a [`JsonOutput`] or a [`Value`]. [`execute`](Self::execute) is called only once the call has passed
/// every gate, when the dispatcher runs it (gate 8), so even a closure's body acts only for admitted calls.
pub trait JsonExecutor: Send + Sync + 'static {
    /// Starts one admitted call.
    fn execute(&self, call: JsonCall) -> JsonFuture;
}

impl<F, Fut, T> JsonExecutor for F
where
    F: Fn(JsonCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, ToolError>> + Send + 'static,
    T: Into<JsonOutput>,
{
    fn execute(&self, call: JsonCall) -> JsonFuture {
        let future = self(call);
        Box::pin(async move { future.await.map(Into::into) })
    }
}

/// Which objects of a given schema are closed (take no keys beyond their `properties`), so that keys the
/// model invents there are stripped (or refused) rather than forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Closing {
    /// Every object subschema that lists `properties` and says nothing about other keys gets
    /// `additionalProperties: false`, as typed tools' structs do. Only places where closing narrows what
    /// the schema accepts are touched: the root, `properties`, `items`, `prefixItems`, map values and
    /// `anyOf` branches, and `$defs`/`definitions` when nothing in the schema could combine or negate them
    /// (`allOf`, `oneOf`, `not`, `if`, `dependentSchemas`, `unevaluatedProperties`, dynamic references).
    /// An object beside `$ref`, `allOf`, `anyOf`, `oneOf`, `if`, `dependentSchemas` or `patternProperties`
    /// is left as written, since those may declare its other keys.
    #[default]
    Unstated,
    /// The schema as written: only objects it closes itself are closed.
    AsWritten,
}

/// A tool that cannot be made from the definition given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonToolError {
    /// The name, description, escalation reason or effect template breaks a rule of every tool.
    #[error(transparent)]
    Spec(#[from] ToolSpecError),
    /// The schema's root is not a JSON object.
    #[error("the input schema of `{tool}` must be a JSON object, not {found}")]
    NotAnObject {
        /// The tool.
        tool: String,
        /// What the root is (`an array`, `a boolean`, ...).
        found: &'static str,
    },
    /// The schema's root does not describe an object (`"type": "object"`).
    #[error("the input schema of `{tool}` must have `\"type\": \"object\"`: tool arguments are a JSON object")]
    RootNotObjectType {
        /// The tool.
        tool: String,
    },
    /// The schema nests deeper than [`MAX_SCHEMA_DEPTH`].
    #[error("the input schema of `{tool}` nests deeper than {MAX_SCHEMA_DEPTH} levels")]
    TooDeep {
        /// The tool.
        tool: String,
    },
    /// A reference of the schema does not resolve inside it, or references and combinators lead back where
    /// they started or nest more than [`MAX_IN_PLACE_DEPTH`] deep at one place of a value: the validator would
    /// recurse without end or out of stack.
    #[error("the input schema of `{tool}` is refused: {reason}")]
    References {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// The validator could not compile the schema (an unknown draft, a bad keyword value, an unresolvable
    /// or remote `$ref`, a bad `pattern`).
    #[error("the input schema of `{tool}` is not a schema the validator can compile: {message}")]
    Invalid {
        /// The tool.
        tool: String,
        /// What the validator said.
        message: String,
    },
}

/// A tool defined at run time by a name, a description and a JSON Schema, whose admitted calls run
/// through a [`JsonExecutor`]. Register it like any tool:
///
/// ```
/// use agent_airlock::json_tool::{JsonCall, JsonTool};
/// use agent_airlock::{Dispatcher, ToolError};
/// use serde_json::{Value, json};
///
/// let schema = json!({
///     "type": "object",
///     "properties": {"path": {"type": "string", "description": "The file to read."}},
///     "required": ["path"]
/// });
/// let read_file = JsonTool::builder("read_file", "Read a file.", schema)
///     .build(|call: JsonCall| async move {
///         Ok::<Value, ToolError>(json!({"read": call.arguments["path"]}))
///     })
///     .expect("a valid definition");
/// assert_eq!(read_file.definition_schema()["additionalProperties"], false);
/// let dispatcher = Dispatcher::builder().tool(read_file).build().expect("a dispatcher");
/// # drop(dispatcher);
/// ```
pub struct JsonTool {
    spec: ToolSpec,
    validator: Validator,
    executor: Arc<dyn JsonExecutor>,
}

impl std::fmt::Debug for JsonTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonTool").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl JsonTool {
    /// A builder for the tool `name` (the strictest provider rule), described by `description`, whose
    /// arguments `input_schema` describes.
    pub fn builder(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> JsonToolBuilder {
        JsonToolBuilder {
            spec: ToolSpec::builder(name.into(), description.into()),
            schema: input_schema,
            closing: Closing::default(),
        }
    }

    /// The schema the tool publishes and enforces (after [`Closing`]).
    pub fn definition_schema(&self) -> &Value {
        // Always set by the builder.
        self.spec.given_input_schema().unwrap_or(&Value::Null)
    }
}

/// Builds a [`JsonTool`]; [`JsonToolBuilder::build`] checks the definition and compiles the schema.
///
/// The tool's declared risk (escalation, rate, ghost mode, effect key, masking) is set as on a
/// hand-written tool's [`ToolSpecBuilder`], which this builder wraps; the parameters come from the schema.
#[derive(Debug)]
#[must_use]
pub struct JsonToolBuilder {
    spec: ToolSpecBuilder,
    schema: Value,
    closing: Closing,
}

impl JsonToolBuilder {
    /// Every call needs a human's approval, for this reason.
    pub fn escalate(self, reason: impl Into<String>) -> Self {
        self.with_spec(|spec| spec.escalate(reason.into()))
    }

    /// The tool's own rate limit.
    pub fn rate(self, rate: Rate) -> Self {
        self.with_spec(|spec| spec.rate(rate))
    }

    /// What happens to arguments the schema does not declare where it is closed (default
    /// [`GhostPolicy::Strip`]).
    pub fn ghost(self, ghost: GhostPolicy) -> Self {
        self.with_spec(|spec| spec.ghost(ghost))
    }

    /// The idempotency key template (`"refund:{payment_id}"`); every placeholder must name a top-level
    /// property of the schema. The key is rendered from the admitted JSON values in canonical form
    /// ([`EffectTemplate::render`](crate::tool::EffectTemplate::render)).
    pub fn effect(self, template: impl Into<String>) -> Self {
        self.with_spec(|spec| spec.effect(template.into()))
    }

    /// The result masking (default [`DEFAULT_TOOL_MASK`](crate::tool::DEFAULT_TOOL_MASK)).
    pub fn mask(self, mask: MaskSet) -> Self {
        self.with_spec(|spec| spec.mask(mask))
    }

    fn with_spec(mut self, set: impl FnOnce(ToolSpecBuilder) -> ToolSpecBuilder) -> Self {
        self.spec = set(self.spec);
        self
    }

    /// Which objects of the schema are closed (default [`Closing::Unstated`]).
    pub fn closing(mut self, closing: Closing) -> Self {
        self.closing = closing;
        self
    }

    /// The tool, running admitted calls with `executor`.
    pub fn build(self, executor: impl JsonExecutor) -> Result<JsonTool, JsonToolError> {
        self.build_shared(Arc::new(executor))
    }

    /// The tool, running admitted calls with a shared `executor` (one upstream serving many tools).
    pub fn build_shared(self, executor: Arc<dyn JsonExecutor>) -> Result<JsonTool, JsonToolError> {
        let JsonToolBuilder { spec: mut builder, mut schema, closing } = self;
        let name = builder.name().to_owned();
        let root = match &schema {
            Value::Object(root) => root,
            other => return Err(JsonToolError::NotAnObject { tool: name, found: kind(other) }),
        };
        let object_type = match root.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(types)) => types.len() == 1 && types[0] == "object",
            _ => false,
        };
        if !object_type {
            return Err(JsonToolError::RootNotObjectType { tool: name });
        }
        if crate::args::nests_deeper_than([(&schema, 0)], MAX_SCHEMA_DEPTH) {
            return Err(JsonToolError::TooDeep { tool: name });
        }
        // Before the validator compiles it: its compiler recurses through the references too.
        references::check(&schema)
            .map_err(|fault| JsonToolError::References { tool: name.clone(), reason: fault.to_string() })?;
        let compile = |schema: &Value| {
            jsonschema::options()
                .offline()
                .with_keyword("uniqueItems", unique_items::compile)
                // Drafts 4 to 7 assert `format`: the crate's own `regex` check is quadratic in group names.
                .with_format("regex", regex_format::is_valid)
                .build(schema)
                .map_err(|err| JsonToolError::Invalid { tool: name.clone(), message: err.to_string() })
        };
        // The schema as given must compile, before closing could hide a fault in it.
        compile(&schema)?;
        if closing == Closing::Unstated {
            close_unstated(&mut schema);
        }
        let validator = compile(&schema)?;
        // Each property's null probe below validates `{name: null}` against the root: one that requires many
        // names lists every one missing in each probe's errors (quadratic: 16,000 took over a minute). A null
        // never meets `required` (it applies to objects, at the root or wherever a `$ref` leads), so the probes
        // use the schema without the root's.
        let probing = match schema.get("required") {
            Some(Value::Array(names)) if names.len() > MAX_LISTED => {
                let mut without = schema.clone();
                if let Some(root) = without.as_object_mut() {
                    root.remove("required");
                }
                Some(compile(&without)?)
            }
            _ => None,
        };

        for param in params(&schema, probing.as_ref().unwrap_or(&validator)) {
            builder = builder.param(param);
        }
        let spec = builder.input_schema(schema).build()?;
        Ok(JsonTool { spec, validator, executor })
    }
}

impl Tool for JsonTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn prepare(&self, arguments: Cow<'_, Arguments>, invocation: &Invocation<'_>) -> Result<Prepared, ArgumentErrors> {
        // Copied only when a later gate still reads the arguments.
        let instance = Value::Object(arguments.into_owned());
        let mut errors = ArgumentErrors::new();
        let mut found = self.validator.iter_errors(&instance);
        for error in found.by_ref().take(MAX_LISTED) {
            errors.push(argument_error(&error));
        }
        if found.next().is_some() {
            errors.push(ArgumentError::Invalid {
                field: WHOLE.to_owned(),
                message: format!("more problems than the {MAX_LISTED} listed; fix these and call again"),
            });
        }
        drop(found);
        if !errors.errors().is_empty() {
            return Err(errors);
        }
        let Value::Object(arguments) = instance else { unreachable!("built as an object above") };
        let call =
            JsonCall { tool: invocation.tool.to_owned(), tool_call_id: invocation.tool_call_id.to_owned(), arguments };
        // The executor is called when the dispatcher polls, after every gate: an executor that acts before
        // returning its future (a closure's body) must not act for a call that is then refused.
        let executor = Arc::clone(&self.executor);
        Ok(Prepared::new(Box::pin(async move {
            match executor.execute(call).await {
                Ok(JsonOutput { content, structured: None }) => ToolOutput::Content(content),
                Ok(JsonOutput { content, structured: Some(structured) }) => {
                    ToolOutput::Structured { content, structured }
                }
                Err(error) => ToolOutput::Failed(error),
            }
        })))
    }
}

/// One validation error as an argument error: a required top-level property missing is
/// [`ArgumentError::Missing`]; anything else is [`ArgumentError::Invalid`] at its path (`address.zip`,
/// `items[2]`), with a nested missing key worded as serde words it (``missing field `zip` ``), so the
/// refusal's hints treat both kinds of tool alike.
fn argument_error(error: &ValidationError<'_>) -> ArgumentError {
    let path = field_path(error);
    if let ValidationErrorKind::Required { property } = error.kind() {
        let key = property.as_str().map_or_else(|| property.to_string(), str::to_owned);
        return match path {
            None => ArgumentError::Missing { field: key },
            Some(field) => ArgumentError::Invalid { field, message: format!("missing field `{key}`") },
        };
    }
    // The refusal caps and escapes the text (`echo::message`); the instance it quotes is model input.
    ArgumentError::Invalid { field: path.unwrap_or_else(|| WHOLE.to_owned()), message: error.to_string() }
}

/// The error's place in the arguments as a path (`address.zip`, `items[2]`), or `None` for the object
/// itself.
fn field_path(error: &ValidationError<'_>) -> Option<String> {
    let mut path = String::new();
    for segment in error.instance_path().segments() {
        match segment {
            LocationSegment::Property(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
            }
            LocationSegment::Index(index) => {
                path.push('[');
                path.push_str(&index.to_string());
                path.push(']');
            }
        }
    }
    (!path.is_empty()).then_some(path)
}

/// The top-level properties of `schema` as parameters: described by their `description`, required when
/// `required` lists them, and accepting `null` when the validator accepts it there.
fn params(schema: &Value, validator: &Validator) -> Vec<ParamSpec> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    let required: HashSet<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    properties
        .iter()
        .map(|(name, property)| {
            let description = property.get("description").and_then(Value::as_str).map(str::to_owned);
            let mut probe = Map::new();
            probe.insert(name.clone(), Value::Null);
            let probe = Value::Object(probe);
            let accepts_null = !validator.iter_errors(&probe).any(|error| {
                matches!(error.instance_path().segments().next(), Some(LocationSegment::Property(key)) if key == name.as_str())
            });
            ParamSpec::from_json_property(
                name.clone(),
                description,
                property.clone(),
                required.contains(&name.as_str()),
                accepts_null,
            )
        })
        .collect()
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "`null`",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Keywords that can combine, negate or extend a subschema from elsewhere: where any appears, a
/// definition may be used in a way closing it would widen or break, so definitions are left as written.
const COMBINING: &[&str] = &[
    "allOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "$dynamicRef",
    "$recursiveRef",
];

/// Keywords beside which an object's other keys may be declared elsewhere, or are stated already.
const KEEP_OPEN: &[&str] = &[
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
];

/// [`Closing::Unstated`]: closes the objects where closing narrows what `schema` accepts.
fn close_unstated(schema: &mut Value) {
    let definitions_too = !uses_any(schema, COMBINING);
    close(schema, definitions_too);
}

/// Whether any schema position in `schema` uses one of `keywords`, or a `$ref` beside `properties` (which
/// applies both, as `allOf` would). Property names and the values of `const`, `enum`, `default` and
/// `examples` are not keywords.
fn uses_any(schema: &Value, keywords: &[&str]) -> bool {
    let Value::Object(map) = schema else { return false };
    if keywords.iter().any(|keyword| map.contains_key(*keyword))
        || (map.contains_key("$ref") && map.contains_key("properties"))
    {
        return true;
    }
    subschemas(map).any(|child| uses_any(child, keywords))
}

/// Every subschema directly inside a schema object, in any keyword that holds schemas.
fn subschemas(map: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    map.iter().flat_map(|(keyword, value)| -> Box<dyn Iterator<Item = &Value> + '_> {
        match keyword.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                Box::new(value.as_object().into_iter().flat_map(|named| named.values()))
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => Box::new(value.as_array().into_iter().flatten()),
            "items" => match value {
                Value::Array(items) => Box::new(items.iter()),
                other => Box::new(std::iter::once(other)),
            },
            "additionalProperties"
            | "additionalItems"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "contains"
            | "propertyNames"
            | "not"
            | "if"
            | "then"
            | "else" => Box::new(std::iter::once(value)),
            _ => Box::new(std::iter::empty()),
        }
    })
}

/// Closes `schema` if it is an object schema that lists `properties` and states nothing else about other
/// keys, then the subschemas where closing narrows (see [`Closing::Unstated`]).
fn close(schema: &mut Value, definitions_too: bool) {
    let Value::Object(map) = schema else { return };
    let describes_object = match map.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        Some(_) => false,
    };
    if describes_object
        && map.get("properties").is_some_and(Value::is_object)
        && !KEEP_OPEN.iter().any(|keyword| map.contains_key(*keyword))
    {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for (keyword, value) in map.iter_mut() {
        match keyword.as_str() {
            "properties" => {
                value.as_object_mut().into_iter().flat_map(|p| p.values_mut()).for_each(|s| close(s, definitions_too))
            }
            "$defs" | "definitions" if definitions_too => {
                value.as_object_mut().into_iter().flat_map(|d| d.values_mut()).for_each(|s| close(s, definitions_too));
            }
            "anyOf" | "prefixItems" => {
                value.as_array_mut().into_iter().flatten().for_each(|s| close(s, definitions_too));
            }
            "items" => match value {
                Value::Array(items) => items.iter_mut().for_each(|s| close(s, definitions_too)),
                other => close(other, definitions_too),
            },
            "additionalProperties" => close(value, definitions_too),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
