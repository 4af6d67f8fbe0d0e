//! `async fn` and `fn` tools, each run through a dispatcher.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use agent_airlock::{CallContext, ToolError, airlock_tool, tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

/// Pending once, so the tool really suspends.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Double a number, later.
#[airlock_tool]
async fn double_later(value: i64) -> Result<i64, ToolError> {
    YieldOnce(false).await;
    value.checked_mul(2).ok_or_else(|| ToolError::new("overflow"))
}

/// Double a number, now.
#[airlock_tool]
fn double_now(value: i64) -> Result<i64, String> {
    value.checked_mul(2).ok_or_else(|| "overflow".to_owned())
}

fn main() {
    let context = CallContext::new();
    assert_eq!(call(tool!(double_later), json!({"value": 21}), &context).content, "42");
    assert_eq!(call(tool!(double_now), json!({"value": 21}), &context).content, "42");

    let failed = call(tool!(double_now), json!({"value": i64::MAX}), &context);
    assert_eq!(failed.content, "overflow", "{failed:?}");
    assert_eq!(failed.status, agent_airlock::Status::Error);
}
