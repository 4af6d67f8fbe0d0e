//! Keeping the leases of running calls alive.
//!
//! A reservation's lease is how long its holder may run before it is presumed dead (the key then reads as
//! ambiguous, and an operator may say the effect did not happen and let a retry run). A call that simply
//! runs longer than the lease must not be presumed dead: while its tool runs, one thread per dispatcher
//! renews its lease every third of the lease, with the time of the dispatcher's [`Clock`]. The thread
//! starts with the first lease to keep and stops once none has been held for a while. Renewal stops when
//! the call's [`LeaseTicket`] is dropped (the call settled, or was cancelled); a process that dies stops
//! renewing, so its lease lapses as before.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{EffectError, EffectStore, Reservation};
use crate::clock::Clock;

/// How long the renewal thread waits for a new lease once it holds none, before it stops.
const LINGER: Duration = Duration::from_secs(30);
/// The shortest interval between two renewals of one lease.
const MIN_INTERVAL: Duration = Duration::from_millis(5);

/// The renewal thread of one dispatcher, shared by its calls.
#[derive(Clone, Default)]
pub(crate) struct LeaseKeeper {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    next_id: u64,
    held: HashMap<u64, Held>,
    /// Whether the renewal thread runs.
    running: bool,
}

/// A lease being kept.
struct Held {
    store: Arc<dyn EffectStore>,
    reservation: Reservation,
    lease: Duration,
    clock: Arc<dyn Clock>,
    /// When it is renewed next (on the monotonic clock: the thread's own schedule).
    due: Instant,
}

impl Held {
    fn interval(&self) -> Duration {
        (self.lease / 3).max(MIN_INTERVAL)
    }
}

/// While held, the lease of one reservation is renewed; dropped, renewal stops.
pub(crate) struct LeaseTicket {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for LeaseTicket {
    fn drop(&mut self) {
        lock(&self.shared).held.remove(&self.id);
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // Every change is one insert or remove: a poisoned map is whole.
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LeaseKeeper {
    /// Keeps `reservation`'s lease (of length `lease`) renewed in `store` until the ticket is dropped.
    pub(crate) fn keep(
        &self,
        store: Arc<dyn EffectStore>,
        reservation: Reservation,
        lease: Duration,
        clock: Arc<dyn Clock>,
    ) -> LeaseTicket {
        let mut state = lock(&self.shared);
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1);
        let mut held = Held { store, reservation, lease, clock, due: Instant::now() };
        held.due += held.interval();
        state.held.insert(id, held);
        if !state.running {
            let shared = Arc::clone(&self.shared);
            let started = std::thread::Builder::new()
                .name("airlock-lease-renewal".into())
                .spawn(move || renew_while_held(&shared));
            match started {
                Ok(_) => state.running = true,
                // The lease then lapses as it would without renewal: the key becomes ambiguous, never
                // silently re-runnable.
                Err(err) => tracing::error!(target: "agent_airlock", error = %err, "effect leases not renewed"),
            }
        } else {
            self.shared.wake.notify_one();
        }
        LeaseTicket { shared: Arc::clone(&self.shared), id }
    }
}

/// The renewal thread: renews each held lease when due; stops once nothing was held for [`LINGER`].
fn renew_while_held(shared: &Shared) {
    let mut state = lock(shared);
    loop {
        let now = Instant::now();
        let Some(next) = state.held.values().map(|held| held.due).min() else {
            let (woken, timeout) = shared.wake.wait_timeout(state, LINGER).unwrap_or_else(PoisonError::into_inner);
            state = woken;
            if timeout.timed_out() && state.held.is_empty() {
                state.running = false;
                return;
            }
            continue;
        };
        if next > now {
            state = shared.wake.wait_timeout(state, next - now).unwrap_or_else(PoisonError::into_inner).0;
            continue;
        }
        // Renew what is due outside the lock (a store waits for its database), then keep the new leases
        // of the calls still running.
        let due: Vec<_> = state
            .held
            .iter_mut()
            .filter(|(_, held)| held.due <= now)
            .map(|(id, held)| {
                held.due = now + held.interval();
                (*id, Arc::clone(&held.store), held.reservation.clone(), held.lease, Arc::clone(&held.clock))
            })
            .collect();
        drop(state);
        let renewed: Vec<_> = due
            .into_iter()
            .map(|(id, store, reservation, lease, clock)| {
                // A custom store that panics must not end the renewal of every other call.
                let renewed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    store.renew(&reservation, lease, clock.now())
                }));
                (id, renewed)
            })
            .collect();
        state = lock(shared);
        for (id, outcome) in renewed {
            match outcome {
                Err(_panicked) => {
                    tracing::error!(target: "agent_airlock", "renewing an effect lease panicked; retrying");
                }
                Ok(Ok(reservation)) => {
                    if let Some(held) = state.held.get_mut(&id) {
                        held.reservation = reservation;
                    }
                }
                // Settled meanwhile, or superseded: nothing left to keep.
                Ok(Err(EffectError::Stale { .. })) => {
                    state.held.remove(&id);
                }
                Ok(Err(err)) => {
                    tracing::warn!(target: "agent_airlock", error = %err, "an effect lease was not renewed; retrying");
                }
            }
        }
    }
}
