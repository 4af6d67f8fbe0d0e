//! The answer to a ledger write: awaited by async callers, waited for by blocking ones.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::LedgerError;

/// The answer to a ledger write, available once the write is durable (or refused).
///
/// Await it from async code, or call [`LedgerReply::wait`] from a thread that may block. Dropping it does
/// not cancel the write: a write that was sent is applied (or refused) whether anyone listens or not.
#[must_use = "a ledger reply says whether the write happened"]
pub struct LedgerReply<T> {
    state: ReplyState<T>,
}

enum ReplyState<T> {
    Ready(Option<Result<T, LedgerError>>),
    Waiting(Arc<Slot<T>>),
}

struct Slot<T> {
    inner: Mutex<SlotInner<T>>,
    filled: Condvar,
}

struct SlotInner<T> {
    value: Option<Result<T, LedgerError>>,
    closed: bool,
    waker: Option<Waker>,
}

impl<T> Slot<T> {
    fn lock(&self) -> MutexGuard<'_, SlotInner<T>> {
        // The critical sections below cannot panic, so a poisoned lock still holds consistent data.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> std::fmt::Debug for LedgerReply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            ReplyState::Ready(_) => "ready",
            ReplyState::Waiting(_) => "waiting",
        };
        f.debug_struct("LedgerReply").field("state", &state).finish()
    }
}

impl<T> LedgerReply<T> {
    /// A reply that is already known (ledgers that answer synchronously).
    pub fn ready(result: Result<T, LedgerError>) -> Self {
        LedgerReply { state: ReplyState::Ready(Some(result)) }
    }

    /// A reply to be filled in later by the returned sender. If the sender is dropped unfilled, the reply
    /// is [`LedgerError::WriterStopped`].
    pub fn channel() -> (ReplySender<T>, LedgerReply<T>) {
        let slot = Arc::new(Slot {
            inner: Mutex::new(SlotInner { value: None, closed: false, waker: None }),
            filled: Condvar::new(),
        });
        (ReplySender { slot: Some(slot.clone()) }, LedgerReply { state: ReplyState::Waiting(slot) })
    }

    /// Blocks the current thread until the answer is known. Do not call it on an async executor's thread.
    pub fn wait(self) -> Result<T, LedgerError> {
        match self.state {
            ReplyState::Ready(mut value) => value.take().unwrap_or(Err(LedgerError::WriterStopped)),
            ReplyState::Waiting(slot) => {
                let mut inner = slot.lock();
                loop {
                    if let Some(value) = inner.value.take() {
                        return value;
                    }
                    if inner.closed {
                        return Err(LedgerError::WriterStopped);
                    }
                    inner = slot.filled.wait(inner).unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}

// The reply never pins its content: it holds an `Option` or an `Arc`.
impl<T> Unpin for LedgerReply<T> {}

impl<T> Future for LedgerReply<T> {
    type Output = Result<T, LedgerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            ReplyState::Ready(value) => Poll::Ready(value.take().unwrap_or(Err(LedgerError::WriterStopped))),
            ReplyState::Waiting(slot) => {
                let mut inner = slot.lock();
                if let Some(value) = inner.value.take() {
                    return Poll::Ready(value);
                }
                if inner.closed {
                    return Poll::Ready(Err(LedgerError::WriterStopped));
                }
                match &inner.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => inner.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

/// Fills in a [`LedgerReply`]. Dropping it unfilled answers [`LedgerError::WriterStopped`].
pub struct ReplySender<T> {
    slot: Option<Arc<Slot<T>>>,
}

impl<T> std::fmt::Debug for ReplySender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplySender").finish_non_exhaustive()
    }
}

impl<T> ReplySender<T> {
    /// Answers the reply.
    pub fn send(mut self, result: Result<T, LedgerError>) {
        if let Some(slot) = self.slot.take() {
            Self::finish(&slot, Some(result));
        }
    }

    fn finish(slot: &Slot<T>, value: Option<Result<T, LedgerError>>) {
        let waker = {
            let mut inner = slot.lock();
            inner.value = value;
            inner.closed = true;
            inner.waker.take()
        };
        slot.filled.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            Self::finish(&slot, None);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn waits_across_threads() {
        let (sender, reply) = LedgerReply::<u32>::channel();
        let handle = std::thread::spawn(move || reply.wait());
        sender.send(Ok(7));
        assert_eq!(handle.join().unwrap().unwrap(), 7);
    }

    #[test]
    fn a_dropped_sender_is_a_stopped_writer() {
        let (sender, reply) = LedgerReply::<u32>::channel();
        drop(sender);
        assert!(matches!(reply.wait(), Err(LedgerError::WriterStopped)));
    }

    #[test]
    fn ready_replies_are_ready() {
        assert_eq!(LedgerReply::ready(Ok(3)).wait().unwrap(), 3);
    }
}
