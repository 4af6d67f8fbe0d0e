//! Shared pieces of the benchmarks.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Polls a future that completes without waiting (every sync tool's dispatch does) on a no-op waker, so the
/// benchmark measures the dispatcher and not an executor. Falls back to spinning for futures that yield.
pub fn run_ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::hint::spin_loop();
    }
}
