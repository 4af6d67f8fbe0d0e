//! Used by the code `#[airlock_tool]` generates. Not a public API: it changes without notice.
//!
//! Generated code reaches the runtime only through these constructors, which take typed values.

use std::any::Any;
pub use std::borrow::Cow;

pub use crate::args::ArgumentSlot;
use std::fmt::Display;
use std::future::Future;
use std::num::{NonZeroU32, NonZeroU64};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Inject;
use crate::message::HostCommand;
use crate::tool::ArgumentError;
pub use crate::tool::ArgumentErrors;
use crate::tool::PreparedCall;
pub use crate::tool::{ArgumentTexts, Arguments, Prepared};
use crate::tool::{ToolError, ToolOutput};
use schemars::{JsonSchema, Schema, SchemaGenerator};

/// A type a model-visible parameter can have.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool parameter",
    label = "the model's arguments cannot be turned into this type",
    note = "derive `serde::Deserialize` and `schemars::JsonSchema` for `{Self}` (or for the types it contains), or mark the parameter `#[inject]` if the host supplies it"
)]
pub trait ToolArgument: DeserializeOwned + JsonSchema {}
// Without `do_not_recommend` rustc reports each missing supertrait on its own instead of the message above.
#[diagnostic::do_not_recommend]
impl<T: DeserializeOwned + JsonSchema> ToolArgument for T {}

/// Everything the generated code needs for one model-visible parameter, behind a single `ToolArgument`
/// bound, so a type that cannot be a parameter is reported once.
pub struct VisibleParam<T> {
    pub schema: fn(&mut SchemaGenerator) -> Schema,
    pub accepts_null: fn() -> bool,
    pub argument: fn(Option<ArgumentSlot<'_>>, &str, &mut ArgumentErrors) -> Option<T>,
    /// The value from its JSON text (`Tool::prepare_text`).
    pub text: fn(Option<&str>) -> Option<T>,
}

pub const fn visible_param<T: ToolArgument>() -> VisibleParam<T> {
    VisibleParam {
        schema: param_schema::<T>,
        accepts_null: accepts_null::<T>,
        argument: argument::<T>,
        text: argument_text::<T>,
    }
}

fn param_schema<T: ToolArgument>(generator: &mut SchemaGenerator) -> Schema {
    crate::tool::param_schema::<T>(generator)
}

fn accepts_null<T: ToolArgument>() -> bool {
    crate::tool::accepts_null::<T>()
}

pub fn argument<T: ToolArgument>(value: Option<ArgumentSlot<'_>>, key: &str, errors: &mut ArgumentErrors) -> Option<T> {
    crate::args::argument_value(value, key, errors)
}

/// The value of one argument from its JSON text, strictly; one not sent is deserialized from `null`, as
/// [`argument`] does. `None` on any error: the dispatcher then takes the arguments' map path, which words it.
///
/// A string without escapes is not parsed again: the text between its quotes is the string, given to the type
/// as the map's walk gives a string it holds (`args::plain_string_argument`).
pub fn argument_text<T: ToolArgument>(text: Option<&str>) -> Option<T> {
    match text {
        Some(text) => match plain_string(text) {
            Some(unquoted) => crate::args::plain_string_argument(unquoted),
            None => serde_json::from_str(text).ok(),
        },
        None => T::deserialize(&serde_json::Value::Null).ok(),
    }
}

/// The text between the quotes of `text`, a whole JSON value as the screen read it, when it is a string without
/// escapes (so that text is the string itself).
fn plain_string(text: &str) -> Option<&str> {
    let unquoted = text.strip_prefix('"')?.strip_suffix('"')?;
    (!unquoted.as_bytes().contains(&b'\\')).then_some(unquoted)
}

/// The value sent for each of `params`, at its position: one pass over the arguments, each value given by
/// owned arguments and lent by borrowed ones.
pub fn argument_slots<'a, const N: usize>(
    args: &'a mut Cow<'_, Arguments>,
    params: &[ParamSpec; N],
) -> [Option<ArgumentSlot<'a>>; N] {
    crate::args::slots(args, params)
}

pub fn inject<T: Inject>(invocation: &Invocation<'_>, param: &str, errors: &mut ArgumentErrors) -> Option<T> {
    crate::args::inject(invocation, param, errors)
}

pub use crate::context::Invocation;
pub use crate::mask::{MaskKind, MaskSet};
pub use crate::tool::{DEFAULT_TOOL_MASK, EffectSegment, EffectTemplate, GhostPolicy, ParamSpec, Tool, ToolSpec};

/// The spec of a generated tool, from values the macro checked.
#[allow(clippy::too_many_arguments)]
pub const fn tool_spec(
    name: &'static str,
    description: &'static str,
    params: &'static [ParamSpec],
    escalate: Option<&'static str>,
    rate: Option<crate::Rate>,
    ghost: GhostPolicy,
    effect: Option<EffectTemplate>,
    mask: MaskSet,
) -> ToolSpec {
    ToolSpec::from_checked_parts(name, description, params, escalate, rate, ghost, effect, mask)
}

/// One model-visible parameter of a generated tool.
pub const fn param_spec<T>(
    name: &'static str,
    description: Option<&'static str>,
    visible: VisibleParam<T>,
) -> ParamSpec {
    ParamSpec::from_checked_parts(name, description, visible.schema, visible.accepts_null)
}

/// Literal text of a generated tool's effect template.
pub const fn effect_literal(text: &'static str) -> EffectSegment {
    EffectSegment::Literal(std::borrow::Cow::Borrowed(text))
}

/// A parameter named in a generated tool's effect template.
pub const fn effect_param(name: &'static str) -> EffectSegment {
    EffectSegment::Param(std::borrow::Cow::Borrowed(name))
}

/// The effect template of a generated tool, parsed by the macro.
pub const fn effect_template(template: &'static str, segments: &'static [EffectSegment]) -> EffectTemplate {
    EffectTemplate::from_checked_parts(template, segments)
}

/// The mask set holding `kinds`.
pub const fn mask_set(kinds: &[MaskKind]) -> MaskSet {
    let mut set = MaskSet::NONE;
    let mut index = 0;
    while index < kinds.len() {
        set = set.union(MaskSet::of(kinds[index]));
        index += 1;
    }
    set
}

/// A tool's rate; a zero count or period does not compile.
pub const fn rate<const COUNT: u32, const PERIOD_SECS: u64>() -> crate::Rate {
    const {
        match (NonZeroU32::new(COUNT), NonZeroU64::new(PERIOD_SECS)) {
            (Some(count), Some(period_secs)) => crate::Rate::new(count, period_secs),
            _ => panic!("a rate's count and period must be at least 1"),
        }
    }
}

pub fn prepared<F: Future<Output = ToolOutput> + Send + 'static>(future: F) -> PreparedCall {
    Box::pin(future)
}

/// A type of a parameter named in an effect template.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of an effect key",
    label = "this parameter is named in the `effect` template, so its value must be serializable",
    note = "derive `serde::Serialize` for `{Self}`: the effect key is rendered from the argument's typed value serialized back, so two spellings of one value share one key"
)]
pub trait EffectArgument: Serialize {}
#[diagnostic::do_not_recommend]
impl<T: Serialize> EffectArgument for T {}

/// The typed value of a parameter named in the effect template, serialized back to JSON.
pub fn effect_value<T: EffectArgument>(value: &T) -> Result<serde_json::Value, String> {
    serde_json::to_value(value).map_err(|err| err.to_string())
}

/// The prepared call with the key of its effect, rendered from the typed values; a value that cannot
/// be part of a key is an argument error.
pub fn prepared_with_effect<const N: usize>(
    template: &EffectTemplate,
    call: PreparedCall,
    values: [(&'static str, Result<serde_json::Value, String>); N],
) -> Result<Prepared, ArgumentErrors> {
    let mut errors = ArgumentErrors::new();
    let mut serialized = Vec::with_capacity(N);
    for (param, value) in values {
        match value {
            Ok(value) => serialized.push((param, value)),
            Err(message) => errors.push(ArgumentError::Invalid {
                field: param.to_owned(),
                message: format!("the value cannot be part of the effect key: {message}"),
            }),
        }
    }
    if !errors.errors().is_empty() {
        return Err(errors);
    }
    match template.render_values(&serialized) {
        Ok(key) => Ok(Prepared::new(call).with_effect_key(key)),
        Err(err) => {
            errors.push(ArgumentError::Invalid { field: err.param().to_owned(), message: err.to_string() });
            Err(errors)
        }
    }
}

// Return values: `Result<T, E>` becomes a result or an error message; anything else `Serialize` is the
// result. Told apart by autoref method resolution (as `anyhow!` does), never by the type's name.
pub struct FallibleTag;
pub struct PlainTag;

pub trait FallibleReturn {
    #[inline]
    fn __airlock_return_kind(&self) -> FallibleTag {
        FallibleTag
    }
}
impl<T, E> FallibleReturn for Result<T, E> {}

pub trait PlainReturn {
    #[inline]
    fn __airlock_return_kind(&self) -> PlainTag {
        PlainTag
    }
}
// For every type, so that a type that cannot be a result is reported by `ToolResult`'s message.
impl<T> PlainReturn for &T {}

/// What a tool may return (or return in `Ok`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's result",
    label = "the model reads the tool's result as JSON",
    note = "derive `serde::Serialize` for `{Self}`, or return `Result<T, E>` with a `Serialize` `T` and a `Display` `E`"
)]
pub trait ToolResult: Serialize + 'static {}
#[diagnostic::do_not_recommend]
impl<T: Serialize + 'static> ToolResult for T {}

/// What a tool may return in `Err`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's error",
    label = "the model reads the tool's error as text",
    note = "implement `std::fmt::Display` for `{Self}`, or return `agent_airlock::ToolError`"
)]
pub trait ToolErrorMessage: Display + 'static {}
#[diagnostic::do_not_recommend]
impl<E: Display + 'static> ToolErrorMessage for E {}

impl FallibleTag {
    pub fn into_output<T: ToolResult, E: ToolErrorMessage>(self, returned: Result<T, E>) -> ToolOutput {
        match returned {
            Ok(value) => ok_output(value),
            Err(error) => err_output(error),
        }
    }
}

impl FallibleTag {
    /// For a signature spelled `Result<T, E>`: `ok` and `err` are [`ok_output`] and [`err_output`],
    /// named at `T` and at `E`, so each bound is reported at its own type.
    pub fn into_output_split<T, E>(
        self,
        returned: Result<T, E>,
        ok: fn(T) -> ToolOutput,
        err: fn(E) -> ToolOutput,
    ) -> ToolOutput {
        match returned {
            Ok(value) => ok(value),
            Err(error) => err(error),
        }
    }
}

impl PlainTag {
    pub fn into_output<T: ToolResult>(self, returned: T) -> ToolOutput {
        output_of(returned)
    }

    /// A type named `Result` with two arguments that is not `core::result::Result`: an ordinary result.
    pub fn into_output_split<R: ToolResult, O, F>(self, returned: R, _ok: O, _err: F) -> ToolOutput {
        output_of(returned)
    }
}

/// The value in `Ok`, as the tool's result.
pub fn ok_output<T: ToolResult>(value: T) -> ToolOutput {
    output_of(value)
}

/// The error in `Err`, as the tool's failure (a [`ToolError`] passes through as it is).
pub fn err_output<E: ToolErrorMessage>(error: E) -> ToolOutput {
    match (&error as &dyn Any).downcast_ref::<ToolError>() {
        Some(tool_error) => ToolOutput::Failed(tool_error.clone()),
        None => ToolOutput::Failed(ToolError::new(error.to_string())),
    }
}

fn output_of<T: Serialize + 'static>(value: T) -> ToolOutput {
    let mut slot = Some(value);
    // A `HostCommand` is passed through; a `String` or a `Value` is moved in as the value it serializes to
    // (no copy of the result); everything else is serialized (`Some(v)` serializes as `v`).
    let any = &mut slot as &mut dyn Any;
    if let Some(command) = any.downcast_mut::<Option<HostCommand>>().and_then(Option::take) {
        return ToolOutput::Command(command);
    }
    if let Some(text) = any.downcast_mut::<Option<String>>().and_then(Option::take) {
        return ToolOutput::Content(serde_json::Value::String(text));
    }
    if let Some(value) = any.downcast_mut::<Option<serde_json::Value>>().and_then(Option::take) {
        return ToolOutput::Content(value);
    }
    match serde_json::to_value(&slot) {
        Ok(value) => ToolOutput::Content(value),
        Err(err) => ToolOutput::Failed(ToolError::new(format!("the tool's result could not be serialized: {err}"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::output_of;
    use crate::tool::ToolOutput;

    fn content(output: ToolOutput) -> Value {
        match output {
            ToolOutput::Content(value) => value,
            other => panic!("expected content, got {other:?}"),
        }
    }

    #[test]
    fn a_string_or_value_result_is_moved_in_as_the_value_it_serializes_to() {
        // Moved, not serialized: the content is what serializing it gave, keys in the order the tool wrote them.
        let values =
            [json!("ticket 2/false"), json!({"b": 1, "a": [1, "x", null, {"z": true, "y": 2.5}]}), json!(null)];
        for value in values {
            let serialized = serde_json::to_value(&value).expect("a value serializes");
            let moved = content(output_of(value));
            assert_eq!(moved, serialized);
            assert_eq!(moved.to_string(), serialized.to_string(), "the same keys in the same order");
        }
        assert_eq!(content(output_of(String::from("ticket"))), json!("ticket"));
        assert_eq!(content(output_of(String::new())), json!(""));
        // Any other type is serialized as before: `Some(v)` as `v`, `None` as `null`.
        assert_eq!(content(output_of(Some(String::from("x")))), json!("x"));
        assert_eq!(content(output_of(None::<String>)), json!(null));
        assert_eq!(content(output_of(vec![1, 2])), json!([1, 2]));
        assert_eq!(content(output_of("borrowed")), json!("borrowed"));
    }
}
