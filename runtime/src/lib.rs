//! # agent-airlock
//!
//! Guards the tool calls of LLM agents. A model picks a tool and fills in its arguments, so every tool
//! call is untrusted input. A tool author writes an ordinary function and declares its risk in one
//! attribute; a [`Dispatcher`] runs every model tool call through the gates before the function runs:
//!
//! 1. unknown tool → refusal (without listing hidden tools);
//! 2. [`Policy`] on the registered name: deny and allow globs;
//! 3. ghost arguments (keys the tool does not declare) stripped and reported, or refused;
//! 4. strict validation: every bad field named, with a hint the model can act on;
//! 5. escalation to a human through an [`Approver`];
//! 6. rate limits: one token from every applicable bucket, or none;
//! 7. execution, with injected host values.
//!
//! ```
//! use agent_airlock::{airlock_tool, tool, CallContext, Dispatcher, ToolCall, ToolError};
//! use serde_json::json;
//!
//! /// Add two numbers.
//! #[airlock_tool(rate = "100/minute")]
//! fn add(
//!     /// The first addend.
//!     a: i64,
//!     /// The second addend.
//!     b: i64,
//! ) -> Result<i64, ToolError> {
//!     a.checked_add(b).ok_or_else(|| ToolError::new("overflow"))
//! }
//!
//! # futures_executor_block_on(async {
//! let dispatcher = Dispatcher::builder().tool(tool!(add)).build().unwrap();
//! let call = ToolCall::new("call_1", "add", json!({"a": 2, "b": 3, "c": 4}));
//! let message = dispatcher.dispatch(call, &CallContext::new()).await.expect_message();
//! assert_eq!(message.content, "5");
//! assert_eq!(message.stripped_arguments, ["c"]);
//! # });
//! # fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![warn(missing_docs)]

mod approval;
mod args;
pub mod audit;
pub mod canonical;
mod clock;
mod context;
mod dialect;
mod dispatch;
pub mod display;
pub mod effect;
#[cfg(any(feature = "mcp", feature = "rig"))]
pub mod integrations;
mod interrupt;
pub mod ledger;
mod mask;
mod message;
mod policy;
mod rate;
mod schema;
mod tool;

pub use agent_airlock_macros::{airlock_tool, tool};
pub use approval::{ApprovalRequest, Approver, Decision, EscalationReason};
pub use args::{ArgumentError, ArgumentErrors, MAX_ARGUMENT_DEPTH};
pub use clock::{Clock, ManualClock, SystemClock};
pub use context::{CallContext, Inject, InjectError, Invocation, State, Store, ToolCallId};
pub use dialect::{Dialect, DialectError, Inexpressible, definitions_for};
pub use dispatch::{BuildError, DEFAULT_EFFECT_LEASE, Dispatcher, DispatcherBuilder};
pub use interrupt::{
    Admission, AdmitError, ApprovalKey, Binding, BindingField, BindingInput, CallSite, DEFAULT_MAX_PENDING,
    DecisionError, InterruptApprovals, InterruptRequest, KeyError, KeyLookupError, KeyRing, RequestError, ResumeValue,
    RetiredKeys,
};
pub use mask::{
    Detection, FULL_MASK, HASH_HEX_LEN, HashKey, HashKeyError, MASK_SET_NAMES, MaskConfig, MaskKind, MaskReport,
    MaskSet, MaskSetParseError, MaskStrategy, Masker,
};
pub use message::{HostCommand, Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};
pub use policy::{Policy, PolicyBuilder, PolicyError, ToolPolicy};
pub use rate::{Rate, RateParseError, RateScope};
pub use schema::{ToolDefinition, input_schema};
pub use tool::{
    Arguments, DEFAULT_TOOL_MASK, EffectSegment, EffectTemplate, GhostPolicy, ParamSpec, PreparedCall, Tool, ToolError,
    ToolOutput, ToolSpec,
};

/// Tool definitions the model may be offered under `policy`: denied tools dropped, escalated tools kept.
pub fn filter_tools<'a>(tools: impl IntoIterator<Item = &'a dyn Tool>, policy: &Policy) -> Vec<ToolDefinition> {
    tools
        .into_iter()
        .filter(|tool| policy.for_tool(tool.spec().name).denied_by.is_none())
        .map(ToolDefinition::of)
        .collect()
}

/// Used by the code `#[airlock_tool]` generates. Not a public API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    use std::any::Any;
    use std::fmt::Display;
    use std::future::Future;

    use serde::Serialize;
    use serde::de::DeserializeOwned;

    pub use crate::args::ArgumentErrors;
    use crate::context::{Inject, Invocation};
    use crate::message::HostCommand;
    pub use crate::tool::{Arguments, PreparedCall};
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
        pub argument: fn(&Arguments, &str, &mut ArgumentErrors) -> Option<T>,
    }

    pub const fn visible_param<T: ToolArgument>() -> VisibleParam<T> {
        VisibleParam { schema: param_schema::<T>, accepts_null: accepts_null::<T>, argument: argument::<T> }
    }

    pub fn param_schema<T: ToolArgument>(generator: &mut SchemaGenerator) -> Schema {
        crate::schema::param_schema::<T>(generator)
    }

    pub fn accepts_null<T: ToolArgument>() -> bool {
        crate::schema::accepts_null::<T>()
    }

    pub fn argument<T: ToolArgument>(args: &Arguments, key: &str, errors: &mut ArgumentErrors) -> Option<T> {
        crate::args::argument(args, key, errors)
    }

    pub fn inject<T: Inject>(invocation: &Invocation<'_>, param: &str, errors: &mut ArgumentErrors) -> Option<T> {
        crate::args::inject(invocation, param, errors)
    }

    pub fn prepared<F: Future<Output = ToolOutput> + Send + 'static>(future: F) -> PreparedCall {
        Box::pin(future)
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
    impl<T: Serialize> PlainReturn for &T {}

    impl FallibleTag {
        pub fn into_output<T: Serialize + 'static, E: Display + 'static>(self, returned: Result<T, E>) -> ToolOutput {
            match returned {
                Ok(value) => output_of(value),
                Err(error) => match (&error as &dyn Any).downcast_ref::<ToolError>() {
                    Some(tool_error) => ToolOutput::Failed(tool_error.clone()),
                    None => ToolOutput::Failed(ToolError::new(error.to_string())),
                },
            }
        }
    }

    impl PlainTag {
        pub fn into_output<T: Serialize + 'static>(self, returned: T) -> ToolOutput {
            output_of(returned)
        }
    }

    fn output_of<T: Serialize + 'static>(value: T) -> ToolOutput {
        let mut slot = Some(value);
        // A `HostCommand` is passed through; everything else is serialized (`Some(v)` serializes as `v`).
        if let Some(command) = (&mut slot as &mut dyn Any).downcast_mut::<Option<HostCommand>>().and_then(Option::take)
        {
            return ToolOutput::Command(command);
        }
        match serde_json::to_value(&slot) {
            Ok(value) => ToolOutput::Content(value),
            Err(err) => ToolOutput::Failed(ToolError::new(format!("the tool's result could not be serialized: {err}"))),
        }
    }
}
