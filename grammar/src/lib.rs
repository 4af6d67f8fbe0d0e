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
