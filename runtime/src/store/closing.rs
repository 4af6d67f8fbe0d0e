//! Closing writes, retried until they land.
//!
//! Most writes have someone to answer: a refused spend is the caller's refusal, a failed approval is the
//! operator's error message. A *closing* write has nobody: it ends something that must not outlive the
//! call it belonged to (the denial that closes a request whose call was cancelled or timed out, and so
//! revokes an unspent grant; the settlement that marks a cut-short effect ambiguous). If it is dropped
//! after one failed attempt, the request stays approvable out of band and a grant outlives its call.
//!
//! So a closing write is written, and written again after every fault (with a growing pause, at most
//! one second), until it lands, the store's rules refuse it (there is nothing left to close), or its
//! patience runs out; then it is reported loudly, naming what stays open. The first attempt is always
//! queued before the caller goes on, so a store that drains its queue on close (the redb writer) applies
//! it even if the process is on its way out.

use std::fmt::Display;
use std::time::{Duration, Instant};

use super::{Fault, Reply};

/// How long a closing write is retried before it is reported as lost.
pub const DEFAULT_CLOSING_PATIENCE: Duration = Duration::from_secs(60);

/// The longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// One closing write: what it closes (for the reports), how to write it again, which failures are worth
/// another attempt, and for how long.
pub(crate) struct Closing<T, E> {
    /// What the write closes, e.g. ``approval request `abc` ``.
    subject: String,
    /// Writes it (again).
    write: Box<dyn FnMut() -> Reply<T, E> + Send>,
    /// Whether a failure may go away if the write is tried again.
    retry: fn(&E) -> bool,
    /// How long to keep trying.
    patience: Duration,
}

impl<T, E> Closing<T, E>
where
    T: Send + 'static,
    E: Fault + Display,
{
    /// A closing write of `subject`, tried again after failures `retry` accepts, for `patience`.
    pub(crate) fn new(
        subject: String,
        write: impl FnMut() -> Reply<T, E> + Send + 'static,
        retry: fn(&E) -> bool,
        patience: Duration,
    ) -> Self {
        Closing { subject, write: Box::new(write), retry, patience }
    }

    /// Waits for `first` (an attempt already queued) and writes again while it fails in a way worth
    /// retrying; blocks the current thread.
    pub(crate) fn land_blocking(mut self, first: Reply<T, E>) -> Result<T, E> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(10);
        let mut attempts = 1_u32;
        let mut attempt = first;
        loop {
            match attempt.wait() {
                Ok(answer) => {
                    if attempts > 1 {
                        tracing::info!(target: "agent_airlock", subject = %self.subject, attempts, "closing write landed");
                    }
                    return Ok(answer);
                }
                Err(error) if !(self.retry)(&error) => return Err(error),
                Err(error) if started.elapsed() >= self.patience => {
                    tracing::error!(
                        target: "agent_airlock",
                        subject = %self.subject,
                        attempts,
                        waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        %error,
                        "a closing write did not land: it stays open until it expires or an operator closes it"
                    );
                    return Err(error);
                }
                Err(error) => {
                    tracing::warn!(target: "agent_airlock", subject = %self.subject, attempts, %error, "closing write failed; writing it again");
                    std::thread::sleep(pause.min(self.patience.saturating_sub(started.elapsed())));
                    pause = (pause * 2).min(MAX_PAUSE);
                    attempts += 1;
                    attempt = (self.write)();
                }
            }
        }
    }

    /// Writes now (the first attempt is queued before this returns) and lands the write on a thread of
    /// its own, for callers that cannot wait (a destructor) or must not block (async code); the reply
    /// answers with the final outcome.
    pub(crate) fn land_in_background(mut self) -> Reply<T, E> {
        let first = (self.write)();
        self.land_in_background_after(first)
    }

    /// [`land_in_background`](Self::land_in_background) for a first attempt already made.
    pub(crate) fn land_in_background_after(self, first: Reply<T, E>) -> Reply<T, E> {
        let (sender, reply) = Reply::fault_channel();
        let subject = self.subject.clone();
        let spawned = std::thread::Builder::new()
            .name("airlock-closing-write".into())
            .spawn(move || sender.send(self.land_blocking(first)));
        if let Err(error) = spawned {
            // The first attempt is queued all the same; only its retries are lost.
            tracing::error!(target: "agent_airlock", %subject, %error, "cannot start a thread to retry a closing write");
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::store::StoreError;

    fn failing_until(succeed_at: u32, tries: &Arc<AtomicU32>) -> impl FnMut() -> Reply<u32, StoreError> + use<> {
        let tries = Arc::clone(tries);
        move || {
            let attempt = tries.fetch_add(1, Ordering::SeqCst) + 1;
            let (sender, reply) = Reply::fault_channel();
            if attempt >= succeed_at {
                sender.send(Ok(attempt));
            } else {
                sender.send(Err(StoreError::storage(std::io::Error::other("disk on fire"))));
            }
            reply
        }
    }

    #[test]
    fn a_closing_write_is_written_again_until_it_lands() {
        let tries = Arc::new(AtomicU32::new(0));
        let closing = Closing::new("request `r`".into(), failing_until(4, &tries), |_| true, Duration::from_secs(30));
        let landed = closing.land_in_background().wait().expect("it lands on the fourth attempt");
        assert_eq!(landed, 4);
        assert_eq!(tries.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn a_refusal_is_not_written_again() {
        let tries = Arc::new(AtomicU32::new(0));
        let closing = Closing::new("request `r`".into(), failing_until(4, &tries), |_| false, Duration::from_secs(30));
        assert!(closing.land_in_background().wait().is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_closing_write_gives_up_when_its_patience_runs_out() {
        let tries = Arc::new(AtomicU32::new(0));
        let closing =
            Closing::new("request `r`".into(), failing_until(u32::MAX, &tries), |_| true, Duration::from_millis(500));
        let started = Instant::now();
        assert!(closing.land_in_background().wait().is_err());
        assert!(started.elapsed() >= Duration::from_millis(500));
        // Pauses of 10, 20, 40, ... ms up to the deadline: a handful of attempts, not a spin.
        let tries = tries.load(Ordering::SeqCst);
        assert!((2..=10).contains(&tries), "{tries} attempts");
    }
}
