//! The value grammars of agent-airlock's `#[airlock_tool]` attribute, in one home.
//!
//! The macro checks each value at compile time and the runtime parses the same values from policies and
//! hand-written tools; both depend on this crate (as `serde_derive` and `serde` share
//! `serde_derive_internals`), so each rule and each error message exists once:
//!
//! | grammar | example | here |
//! |---|---|---|
//! | rate | `"10/minute"` | [`Rate`], [`RateParseError`] |
//! | mask set | `"secrets,pii"` | [`MaskSet`], [`MaskKind`], [`MASK_SET_NAMES`], [`MaskSetParseError`] |
//! | tool name | `"search_docs"` | [`check_tool_name`], [`ToolNameError`] |
//! | effect template | `"refund:{payment_id}"` | [`parse_effect_template`], [`Segment`], [`EffectTemplateError`] |
//!
//! Every error's `Display` is a complete message: lower-case, no trailing period, code in backticks, the
//! valid set named. Std only; the `serde` feature adds (de)serialization of mask sets for the runtime.
//! Users depend on `agent-airlock`, which re-exports what they need.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod effect;
mod mask;
mod rate;
mod tool_name;

pub use effect::{EffectTemplateError, Segment, parse_effect_template};
pub use mask::{MASK_SET_NAMES, MaskKind, MaskSet, MaskSetParseError};
pub use rate::{Rate, RateParseError};
pub use tool_name::{MAX_TOOL_NAME_LEN, ToolNameError, check_tool_name};

/// The first paragraphs of `#[airlock_tool]`'s documentation, its key table included: written once, shown
/// by the macro crate and by the runtime's re-export (`#[doc = agent_airlock_grammar::airlock_tool_keys!()]`).
#[doc(hidden)]
#[macro_export]
macro_rules! airlock_tool_keys {
    () => {
        "Turns a free `fn` or `async fn` into a guarded tool; `tool!(path::to::f)` names the tool.\n\
\n\
The function stays as written. Its doc comment is the tool's description and each parameter's doc\n\
comment that parameter's; a parameter marked `#[inject]` is supplied by the host (through the call's\n\
context) and never seen by the model. Every key is optional and takes a string literal:\n\
\n\
| key | what it declares | example |\n\
|---|---|---|\n\
| `name` | the registered name, default the fn name; 1 to 64 ASCII letters, digits, `_`, `-` | `name = \"search_docs\"` |\n\
| `description` | what the model reads, default the doc comment; not blank | `description = \"Search the documentation\"` |\n\
| `escalate` | why a human must approve each call; not blank | `escalate = \"moves money\"` |\n\
| `rate` | at most `N` calls per unit (`second`, `minute`, `hour`, `day`; `s`, `sec`, `m`, `min`, `h`, `d`); `N` ≥ 1 | `rate = \"10/minute\"` |\n\
| `ghost` | what happens to arguments the tool does not declare: `strip` (default) or `block` | `ghost = \"block\"` |\n\
| `effect` | the idempotency key; each `{param}` names a model-visible parameter whose type is `Serialize` | `effect = \"refund:{payment_id}\"` |\n\
| `mask` | what is masked in the result: `none`, `all`, `secrets` (default), `pii` or kind names, comma-separated | `mask = \"secrets,pii\"` |\n\
| `crate` | the path of the runtime crate, when it is renamed or re-exported | `crate = \"::my_runtime::airlock\"` |\n\
"
    };
}
