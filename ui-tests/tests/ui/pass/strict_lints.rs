//! The expansion compiles cleanly under a user's strictest lints, as thiserror's `test_lints` checks.

#![deny(
    warnings,
    missing_docs,
    unused,
    unused_qualifications,
    unused_results,
    unreachable_pub,
    missing_debug_implementations,
    missing_copy_implementations,
    rust_2018_idioms,
    rust_2024_compatibility,
    elided_lifetimes_in_paths,
    single_use_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    unsafe_code,
    non_ascii_idents,
    let_underscore_drop,
    clippy::all,
    clippy::pedantic
)]

use agent_airlock::{CallContext, State, ToolError, airlock_tool, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

/// Settings the host supplies.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Added to every sum.
    pub bias: i64,
}

/// Add two numbers and the host's bias.
///
/// # Errors
///
/// When the sum overflows an `i64`.
// Async without an `.await` on purpose: the case covers the expansion of an async tool.
#[allow(clippy::unused_async)]
#[airlock_tool(escalate = "spends budget", rate = "10/minute", ghost = "strip")]
pub async fn add(
    /// The first addend.
    a: i64,
    /// The second addend, if any.
    b: Option<i64>,
    #[inject] settings: State<Settings>,
) -> Result<i64, ToolError> {
    a.checked_add(b.unwrap_or(0))
        .and_then(|sum| sum.checked_add(settings.bias))
        .ok_or_else(|| ToolError::new("overflow"))
}

/// Do nothing.
#[airlock_tool]
pub fn noop() {}

/// Echo a text.
#[airlock_tool(name = "echo-text", description = "Echo the text back.")]
pub(crate) fn echo(mut text: String) -> String {
    text.push('!');
    text
}

fn main() {
    let spec = tool!(add).spec();
    assert_eq!(spec.escalate(), Some("spends budget"));
    assert_eq!(spec.params().len(), 2);
    assert_eq!(tool!(noop).spec().params().len(), 0);
    assert_eq!(tool!(echo).spec().name(), "echo-text");
    assert_eq!(tool!(echo).spec().description(), "Echo the text back.");
    let context = CallContext::new().with_state(Settings { bias: 1 });
    assert_eq!(call(tool!(echo), json!({"text": "hi"}), &context).content, "hi!");
    assert_eq!(call(tool!(noop), json!({}), &context).content, "null");
}
