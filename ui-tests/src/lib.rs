//! Support for the trybuild cases in `tests/ui`: this crate gives them their dependencies and a way to run
//! a generated tool through a real [`Dispatcher`] without an async runtime, so a pass case proves that the
//! expansion works, not only that it compiles.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use agent_airlock::{CallContext, Dispatcher, ToolCall, ToolMessage, tool::Tool};
use serde_json::Value;

/// Polls `future` to completion on the current thread, parking it while the future is pending.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

/// Dispatches one call to `tool` (under its registered name, with id `call_1`) through a dispatcher that
/// holds only that tool, and returns the message the model would read.
///
/// # Panics
///
/// If the dispatcher cannot be built or the outcome is not a message: both are bugs in the case.
pub fn call(tool: impl Tool, arguments: Value, context: &CallContext) -> ToolMessage {
    let name = tool.spec().name().to_owned();
    let dispatcher = match Dispatcher::builder().tool(tool).build() {
        Ok(dispatcher) => dispatcher,
        Err(err) => panic!("a dispatcher with one tool must build: {err}"),
    };
    block_on(dispatcher.dispatch(ToolCall::new("call_1", name, arguments), context)).expect_message()
}
