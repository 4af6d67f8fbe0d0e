//! The deployment's policy: deny and allow globs, extra escalation, rate limits, masking, ghost mode,
//! effect templates, argument conditions and tool definition pins. A policy can tighten what a tool's
//! author declared, never loosen it.
//!
//! A policy is built in code with [`PolicyBuilder`](crate::PolicyBuilder) or read from a TOML file with
//! [`Policy::from_toml`](crate::Policy::from_toml)
//! (the format is described in [`mod@file`]); the file goes through the same builder, so both follow one set
//! of rules.

pub(crate) mod builder;
pub mod condition;
pub mod file;
mod findings;
// Named for what it holds, as tower's `limit/rate/rate.rs`.
#[allow(clippy::module_inception)]
pub(crate) mod policy;
pub(crate) mod uri;

pub use self::findings::FindingKind;
pub use self::policy::{
    ApprovalRoute, ConditionAction, ConditionRule, PolicyEffect, PolicyMode, Surface, SurfacePolicy, UnmatchedTable,
};
// `Policy`, its builder and its error are at the crate root only (one path per name).
pub(crate) use self::policy::Policy;
