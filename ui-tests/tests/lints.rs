//! The expansion under a user's strictest lints, clippy's included: `cargo clippy --all-targets -D warnings`
//! lints this file, so generated code must never trip a lint the user turned on (thiserror's `test_lints`).

#![deny(
    warnings,
    missing_docs,
    unused,
    unused_qualifications,
    unused_results,
    unreachable_pub,
    missing_debug_implementations,
    rust_2018_idioms,
    elided_lifetimes_in_paths,
    single_use_lifetimes,
    trivial_casts,
    clippy::all,
    clippy::pedantic
)]

use agent_airlock::tool::{ParamSpec, Tool};
use agent_airlock::{CallContext, State, ToolCallId, ToolError, airlock_tool, input_schema, tool};
use agent_airlock_ui_tests::call;
use serde::Deserialize;
use serde_json::json;

/// An argument type of the user's own.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct Range {
    /// The lower bound.
    pub low: i64,
    /// The upper bound.
    pub high: i64,
}

/// Host state.
#[derive(Debug)]
pub struct Offset {
    /// Added to the value.
    pub by: i64,
}

/// Clamp a value into a range, shifted by the host's offset.
///
/// # Errors
///
/// If the shifted value overflows.
#[airlock_tool(rate = "100/second", escalate = "changes numbers")]
pub async fn clamp(
    /// The value.
    value: i64,
    /// The range.
    range: Range,
    /// An optional extra shift.
    shift: Option<i64>,
    #[inject] offset: State<Offset>,
    #[inject] id: ToolCallId,
) -> Result<String, ToolError> {
    let value = std::future::ready(value).await;
    let shifted = value.checked_add(offset.by).and_then(|v| v.checked_add(shift.unwrap_or(0)));
    let shifted = shifted.ok_or_else(|| ToolError::new("overflow"))?;
    Ok(format!("{}: {}", &*id, shifted.clamp(range.low, range.high)))
}

/// Do nothing.
#[airlock_tool]
pub fn nothing() {}

/// Reply with a constant.
#[airlock_tool(name = "constant-value")]
fn constant() -> u8 {
    7
}

#[test]
fn every_tool_expands_and_runs_under_strict_lints() {
    let spec = tool!(clamp).spec();
    assert_eq!(spec.params().iter().map(ParamSpec::name).collect::<Vec<_>>(), ["value", "range", "shift"]);
    assert_eq!(input_schema(spec)["required"], json!(["value", "range"]));
    assert_eq!(spec.escalate(), Some("changes numbers"));

    let context = CallContext::new().with_state(Offset { by: 1 });
    assert_eq!(call(tool!(nothing), json!({}), &context).content, "null");
    assert_eq!(call(tool!(constant), json!({}), &context).content, "7");
}
