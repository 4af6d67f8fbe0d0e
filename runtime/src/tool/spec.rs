//! What a tool is: [`ToolSpec`] (name, description, parameters, the author's declared risk), the builder
//! that checks a hand-written one as the attribute checks its own, and each parameter's [`ParamSpec`].

use std::borrow::Cow;

use agent_airlock_grammar::{EffectTemplateError, Segment, ToolNameError, check_tool_name, parse_effect_template};
use schemars::JsonSchema;
use schemars::{Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::effect_key::{EffectSegment, EffectTemplate};
use crate::mask::MaskSet;
use crate::rate::Rate;

/// The static description of a tool: what the model is offered and the author's declared risk.
///
/// `#[airlock_tool]` generates one in a `static`. A hand-written tool builds one with
/// [`ToolSpec::builder`], which checks what the attribute checks at compile time, and keeps it:
///
/// ```
/// use agent_airlock::tool::{ParamSpec, ToolSpec};
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

    /// The name given to [`ToolSpec::builder`].
    #[cfg_attr(not(feature = "json-tool"), allow(dead_code))]
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
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
        // A set, not a look at every earlier name: a tool defined by an upstream's schema can have tens of
        // thousands of parameters (32,000 took 2.3 s to check, quadratic).
        let mut names = std::collections::HashSet::with_capacity(spec.params.len());
        if let Some(param) = spec.params.iter().find(|param| !names.insert(&*param.name)) {
            return Err(ToolSpecError::DuplicateParam(param.name.clone().into_owned()));
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
            spec.effect = Some(EffectTemplate::from_owned_parts(template, segments));
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
        // Among many (a tool defined by an upstream's schema), the first name given twice, where it repeats.
        let names: Vec<&'static str> = (0..40_000).map(|i| &*format!("p{i}").leak()).collect();
        let many =
            || names.iter().fold(ToolSpec::builder("r", "d"), |b, name| b.param(ParamSpec::of::<u8>(name, None)));
        assert_eq!(many().build().unwrap().params().len(), 40_000);
        let repeated = many().param(ParamSpec::of::<u8>("p17", None)).param(ParamSpec::of::<u8>("p3", None));
        assert_eq!(err(repeated), "two parameters are named `p17`");
        assert!(err(ToolSpec::builder("r", "d").effect("refund:{id")).contains("unclosed"));
        assert_eq!(err(ToolSpec::builder("r", "d").effect("refund:{id}")), "unknown parameter `id` in effect template");
    }
}
