//! A reserved effect held by a running call: settled from the tool's outcome, or marked ambiguous if the
//! call is cancelled (the dispatch future dropped while the tool ran).

use std::sync::Arc;

use super::transition::Settle;
use super::{EffectStore, Reservation};
use crate::clock::Clock;

/// Settles its reservation exactly once: explicitly, or as ambiguous when dropped unsettled.
pub(crate) struct EffectGuard {
    store: Arc<dyn EffectStore>,
    reservation: Reservation,
    clock: Arc<dyn Clock>,
    settled: bool,
}

impl EffectGuard {
    pub(crate) fn new(store: Arc<dyn EffectStore>, reservation: Reservation, clock: Arc<dyn Clock>) -> Self {
        EffectGuard { store, reservation, clock, settled: false }
    }

    pub(crate) fn settle(&mut self, how: Settle) {
        self.settled = true;
        let now = self.clock.now();
        let result = match how {
            Settle::Commit => self.store.commit(&self.reservation, now),
            Settle::Fail => self.store.fail(&self.reservation, now),
            Settle::Ambiguous => self.store.mark_ambiguous(&self.reservation, now),
        };
        if let Err(err) = result {
            // The lease will lapse and the key become ambiguous: never silently re-runnable.
            tracing::error!(target: "agent_airlock", error = %err, settle = ?how, "effect record not settled");
        }
    }
}

impl Drop for EffectGuard {
    fn drop(&mut self) {
        if !self.settled {
            tracing::warn!(target: "agent_airlock", key = %self.reservation.key(), "call cancelled while its effect ran");
            self.settle(Settle::Ambiguous);
        }
    }
}
