//! A reserved effect held by a running call: its lease renewed while the tool runs, handed back to be
//! settled with the call's audit record, or marked ambiguous if the call is cancelled (the dispatch future
//! dropped while the tool ran).

use std::sync::Arc;
use std::time::Duration;

use super::durable_write::{Decide as _, DurableWrite};
use crate::clock::Clock;
use crate::effect::{EffectStore, LeaseKeeper, LeaseTicket, Reservation, Settle};
use crate::ledger::LedgerError;
use crate::store::StoreHandle;
use crate::store::closing::{Closing, DEFAULT_CLOSING_PATIENCE};

/// Holds a reservation until the dispatcher takes it to settle; dropped still holding it, it marks the
/// effect ambiguous.
pub(crate) struct EffectGuard {
    store: Arc<dyn EffectStore>,
    handle: Option<StoreHandle>,
    reservation: Option<Reservation>,
    clock: Arc<dyn Clock>,
    /// Keeps the lease renewed while the guard holds the reservation.
    renewal: Option<LeaseTicket>,
}

impl EffectGuard {
    pub(crate) fn new(store: Arc<dyn EffectStore>, reservation: Reservation, clock: Arc<dyn Clock>) -> Self {
        EffectGuard { handle: store.store_handle(), store, reservation: Some(reservation), clock, renewal: None }
    }

    /// Renews the lease (of length `lease`) through `keeper` while the guard holds the reservation: a call
    /// that runs longer than its lease is not presumed dead.
    pub(crate) fn renewed_by(mut self, keeper: &LeaseKeeper, lease: Duration) -> Self {
        if let Some(reservation) = &self.reservation {
            let store = Arc::clone(&self.store);
            self.renewal = Some(keeper.keep(store, reservation.clone(), lease, Arc::clone(&self.clock)));
        }
        self
    }

    /// The reservation, to settle `how`: the guard no longer settles it, nor renews its lease.
    pub(crate) fn take(&mut self, how: Settle) -> Option<(Reservation, Settle)> {
        self.renewal = None;
        self.reservation.take().map(|reservation| (reservation, how))
    }
}

impl Drop for EffectGuard {
    fn drop(&mut self) {
        self.renewal = None;
        let Some(reservation) = self.reservation.take() else { return };
        tracing::warn!(target: "agent_airlock", key = %reservation.key(), "call cancelled while its effect ran");
        let now = self.clock.now();
        match &self.handle {
            // A closing write: queued now (a destructor cannot wait), then landed on a thread of its own,
            // written again after faults. Should it never land, the lease lapses and the key becomes
            // ambiguous all the same: never silently re-runnable.
            Some(handle) => {
                let subject = format!("effect `{}`", reservation.key());
                let decision =
                    DurableWrite { now, settle: Some((reservation, Settle::Ambiguous)), ..DurableWrite::default() };
                let handle = handle.clone();
                let write = move || handle.decide(decision.clone());
                drop(
                    Closing::new(subject, write, LedgerError::is_fault, DEFAULT_CLOSING_PATIENCE).land_in_background(),
                );
            }
            None => {
                if let Err(err) = self.store.mark_ambiguous(&reservation, now) {
                    tracing::error!(target: "agent_airlock", error = %err, "effect record not settled");
                }
            }
        }
    }
}
