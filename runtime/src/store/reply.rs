//! The answer to a write of a store's writer: awaited by async callers, waited for by blocking ones.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::{Fault, StoreError};

/// The answer to a write, available once the write is durable (or refused): `Ok` with the write's
/// answer, or `Err` with a refusal or a fault of type `E`. The ledger's writes answer a
/// [`LedgerReply`](crate::ledger::LedgerReply), which is this reply with [`LedgerError`](crate::ledger::LedgerError).
///
/// Await it from async code, or call [`wait`](Self::wait) from a thread that may block. Dropping it does
/// not cancel the write: a write that was sent is applied (or refused) whether anyone listens or not.
#[must_use = "a reply says whether the write happened"]
pub struct Reply<T, E> {
    state: ReplyState<T, E>,
    /// The answer when the sender went away unfilled (the writer stopped).
    stopped: fn() -> E,
}

enum ReplyState<T, E> {
    Ready(Option<Result<T, E>>),
    Waiting(Arc<Slot<T, E>>),
    /// Another reply whose answer is turned into this one's ([`Reply::then`]).
    Then(Box<dyn Then<T, E>>),
}

/// A reply of another type and what turns its answer into this one's: `None` once the answer was taken.
trait Then<T, E>: Send {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, E>>>;
    fn wait(self: Box<Self>) -> Option<Result<T, E>>;
}

struct Mapped<U, D, F> {
    inner: Reply<U, D>,
    finish: Option<F>,
}

impl<U: Send, D: Send, T, E, F> Then<T, E> for Mapped<U, D, F>
where
    F: FnOnce(Result<U, D>) -> Result<T, E> + Send,
{
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, E>>> {
        if self.finish.is_none() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll(cx) {
            Poll::Ready(answer) => Poll::Ready(self.finish.take().map(|finish| finish(answer))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn wait(self: Box<Self>) -> Option<Result<T, E>> {
        let Mapped { inner, finish } = *self;
        finish.map(|finish| finish(inner.wait()))
    }
}

struct Slot<T, E> {
    inner: Mutex<SlotInner<T, E>>,
    filled: Condvar,
}

struct SlotInner<T, E> {
    value: Option<Result<T, E>>,
    closed: bool,
    waker: Option<Waker>,
    /// Whether a thread sleeps on `filled` ([`Reply::wait`]): only then is it notified, since a notification is a
    /// system call whether anyone sleeps or not, and most replies are awaited.
    blocked: bool,
}

impl<T, E> Slot<T, E> {
    fn lock(&self) -> MutexGuard<'_, SlotInner<T, E>> {
        // The critical sections below cannot panic, so a poisoned lock still holds consistent data.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T, E> std::fmt::Debug for Reply<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            ReplyState::Ready(_) => "ready",
            ReplyState::Waiting(_) | ReplyState::Then(_) => "waiting",
        };
        f.debug_struct("Reply").field("state", &state).finish()
    }
}

impl<T, E> Reply<T, E> {
    /// A reply that is already known.
    pub(crate) fn ready_or(result: Result<T, E>, stopped: fn() -> E) -> Self {
        Reply { state: ReplyState::Ready(Some(result)), stopped }
    }

    /// A reply to be filled in later by the returned sender. If the sender is dropped unfilled, the reply
    /// is `stopped()`.
    pub(crate) fn channel_or(stopped: fn() -> E) -> (ReplySender<T, E>, Reply<T, E>) {
        let slot = Arc::new(Slot {
            inner: Mutex::new(SlotInner { value: None, closed: false, waker: None, blocked: false }),
            filled: Condvar::new(),
        });
        (ReplySender { slot: Some(slot.clone()) }, Reply { state: ReplyState::Waiting(slot), stopped })
    }

    /// A reply whose fault type is a store fault: `StoreError::Stopped` if unfilled.
    pub(crate) fn fault_channel() -> (ReplySender<T, E>, Reply<T, E>)
    where
        E: Fault,
    {
        Reply::channel_or(|| E::from_store(StoreError::Stopped))
    }

    /// This reply's answer, once known, turned into another by `finish` (which runs on the thread that
    /// awaits or waits for the answer). The write is already under way: dropping the result does not
    /// cancel it. `stopped` answers a reply polled again after its answer was taken.
    pub(crate) fn then<T2, E2>(
        self,
        finish: impl FnOnce(Result<T, E>) -> Result<T2, E2> + Send + 'static,
        stopped: fn() -> E2,
    ) -> Reply<T2, E2>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        Reply { state: ReplyState::Then(Box::new(Mapped { inner: self, finish: Some(finish) })), stopped }
    }

    /// Blocks the current thread until the answer is known. Do not call it on an async executor's thread.
    pub fn wait(self) -> Result<T, E> {
        let stopped = self.stopped;
        match self.state {
            ReplyState::Ready(mut value) => value.take().unwrap_or_else(|| Err(stopped())),
            ReplyState::Then(then) => then.wait().unwrap_or_else(|| Err(stopped())),
            ReplyState::Waiting(slot) => {
                let mut inner = slot.lock();
                loop {
                    if let Some(value) = inner.value.take() {
                        return value;
                    }
                    if inner.closed {
                        return Err(stopped());
                    }
                    // Set under the lock that `finish` takes to fill the value, so it cannot miss this sleeper.
                    inner.blocked = true;
                    inner = slot.filled.wait(inner).unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}

// The reply never pins its content: it holds an `Option` or an `Arc`.
impl<T, E> Unpin for Reply<T, E> {}

impl<T, E> Future for Reply<T, E> {
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let stopped = this.stopped;
        match &mut this.state {
            ReplyState::Ready(value) => Poll::Ready(value.take().unwrap_or_else(|| Err(stopped()))),
            ReplyState::Then(then) => then.poll(cx).map(|answer| answer.unwrap_or_else(|| Err(stopped()))),
            ReplyState::Waiting(slot) => {
                let mut inner = slot.lock();
                if let Some(value) = inner.value.take() {
                    return Poll::Ready(value);
                }
                if inner.closed {
                    return Poll::Ready(Err(stopped()));
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

/// Fills in a [`Reply`]. Dropping it unfilled answers the reply's "stopped" fault (for a
/// [`LedgerReply`](crate::ledger::LedgerReply), [`LedgerError::WriterStopped`](crate::ledger::LedgerError::WriterStopped)).
pub struct ReplySender<T, E> {
    slot: Option<Arc<Slot<T, E>>>,
}

impl<T, E> std::fmt::Debug for ReplySender<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplySender").finish_non_exhaustive()
    }
}

impl<T, E> ReplySender<T, E> {
    /// Answers the reply.
    pub fn send(mut self, result: Result<T, E>) {
        if let Some(slot) = self.slot.take() {
            Self::finish(&slot, Some(result));
        }
    }

    fn finish(slot: &Slot<T, E>, value: Option<Result<T, E>>) {
        let (waker, blocked) = {
            let mut inner = slot.lock();
            inner.value = value;
            inner.closed = true;
            (inner.waker.take(), inner.blocked)
        };
        if blocked {
            slot.filled.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T, E> Drop for ReplySender<T, E> {
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
        let (sender, reply) = Reply::<u32, StoreError>::fault_channel();
        let handle = std::thread::spawn(move || reply.wait());
        sender.send(Ok(7));
        assert_eq!(handle.join().unwrap().unwrap(), 7);
    }

    #[test]
    fn a_thread_already_asleep_is_woken_by_the_answer_and_by_a_stopped_writer() {
        let patience = std::time::Duration::from_secs(30);
        for answer in [Some(7), None] {
            let (sender, reply) = Reply::<u32, StoreError>::fault_channel();
            let ReplyState::Waiting(slot) = &reply.state else { unreachable!("a channel's reply waits") };
            let slot = Arc::clone(slot);
            let (done, result) = std::sync::mpsc::channel();
            std::thread::spawn(move || done.send(reply.wait()));
            // The answer comes only once the waiter sleeps on the condition variable.
            let started = std::time::Instant::now();
            while !slot.lock().blocked {
                assert!(started.elapsed() < patience, "the waiter never went to sleep");
                std::thread::yield_now();
            }
            match answer {
                Some(n) => sender.send(Ok(n)),
                None => drop(sender),
            }
            match (answer, result.recv_timeout(patience).expect("the sleeping waiter is woken")) {
                (Some(n), Ok(got)) => assert_eq!(got, n),
                (None, Err(StoreError::Stopped)) => {}
                (answer, got) => panic!("{answer:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_dropped_sender_is_a_stopped_writer() {
        let (sender, reply) = Reply::<u32, StoreError>::fault_channel();
        drop(sender);
        assert!(matches!(reply.wait(), Err(StoreError::Stopped)));
    }

    #[test]
    fn a_reply_turned_into_another_answers_once_awaited_or_waited_for() {
        let (sender, reply) = Reply::<u32, StoreError>::fault_channel();
        let doubled = reply.then(|answer| answer.map(|n| n * 2).map_err(|_| "stopped"), || "taken");
        let handle = std::thread::spawn(move || doubled.wait());
        sender.send(Ok(21));
        assert_eq!(handle.join().unwrap(), Ok(42));

        let (sender, reply) = Reply::<u32, StoreError>::fault_channel();
        let mut doubled = reply.then(|answer| answer.map(|n| n * 2).map_err(|_| "stopped"), || "taken");
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(Pin::new(&mut doubled).poll(&mut cx).is_pending());
        drop(sender);
        assert_eq!(Pin::new(&mut doubled).poll(&mut cx), Poll::Ready(Err("stopped")));
        // Polled again after its answer was taken: the reply's own "stopped" answer, not a panic.
        assert_eq!(Pin::new(&mut doubled).poll(&mut cx), Poll::Ready(Err("taken")));
    }

    #[test]
    fn ready_replies_are_ready() {
        assert_eq!(Reply::ready_or(Ok(3), || StoreError::Stopped).wait().unwrap(), 3);
    }
}
