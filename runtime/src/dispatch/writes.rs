//! The durable writes of one dispatch: at most two (admit, settle), each one transaction where the
//! stores share one (see [`crate::store`]), awaited, never blocking the dispatch future on a disk.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::dispatcher::Dispatcher;
use super::durable_write::{Decide as _, Decided, DurableWrite, NotDecided, ReservationNote, name_grant};
use super::effect_guard::EffectGuard;
use crate::audit::{AuditAppend, AuditEntry, AuditError, AuditReceipt};
use crate::clock::Clock;
use crate::effect::{EffectError, EffectRecord, EffectStore, Reservation, Settle};
use crate::ledger::{ApprovalLedger as _, LedgerError, LedgerReply, SpendReserved};
use crate::store::{Reply, StoreHandle};

/// A decision's answer: written (`Ok(Ok)`), refused with nothing written (`Ok(Err)`), or a fault.
pub(super) type Answer = Result<Result<Decided, NotDecided>, LedgerError>;

/// How long a settlement whose first write failed is tried again (its store unreachable) before the
/// effect is left reserved (ambiguous once its lease lapses).
const SETTLEMENT_PATIENCE: Duration = Duration::from_secs(10);

impl Dispatcher {
    /// Writes `decision`: in one transaction if its parts live in one store, otherwise the spend and
    /// effect steps first and the audit records after them (only if the admission was not refused).
    pub(super) async fn decide(&self, mut decision: DurableWrite) -> Answer {
        let has_state = decision.spend.is_some() || decision.reserve.is_some() || decision.settle.is_some();
        let state_store =
            if decision.spend.is_some() { self.stores.ledger.as_ref() } else { self.stores.effects.as_ref() };
        let together = match (has_state, decision.audit.is_some()) {
            (true, true) => state_store
                .zip(self.stores.audit.as_ref())
                .filter(|(state, audit)| state.same_store(audit))
                .map(|(state, _)| state),
            (true, false) => state_store,
            (false, true) => self.stores.audit.as_ref(),
            (false, false) => return Ok(Ok(Decided::default())),
        };
        if let Some(store) = together {
            let audit = decision.audit.clone().filter(|_| !decision.audit_only_if_settled);
            let answer = self.watched(store, decision).await;
            if let Some(mut audit) = audit {
                let decided = answer.as_ref().ok().and_then(|answer| answer.as_ref().ok());
                name_grant(&mut audit, decided.and_then(|decided| decided.spent.as_ref()));
                match &answer {
                    Ok(Ok(decided)) => audit.trace(&Ok(decided.receipts.clone())),
                    Ok(Err(_)) => {}
                    Err(fault) => audit.trace(&Err(AuditError::from_store(fault.clone().into()))),
                }
            }
            return answer;
        }

        let audit = decision.audit.take();
        // A settlement cannot be refused: its records need not wait for it.
        let can_refuse = decision.spend.is_some() || decision.reserve.is_some();
        let early = match &audit {
            Some(audit) if !can_refuse => Some(self.append(audit.clone())),
            _ => None,
        };
        let mut decided = if has_state {
            match self.decide_state(decision).await {
                Ok(Ok(decided)) => decided,
                refused_or_fault => return refused_or_fault,
            }
        } else {
            Decided::default()
        };
        if let Some(mut audit) = audit {
            name_grant(&mut audit, decided.spent.as_ref());
            let written = match early {
                Some(reply) => reply.await,
                None => self.append(audit.clone()).await,
            };
            audit.trace(&written);
            decided.receipts = written.unwrap_or_default();
        }
        Ok(Ok(decided))
    }

    /// `decision` written by `store`, to await; if it reserves an effect and the dispatch is dropped
    /// before the answer, the reservation it makes is marked ambiguous (the tool never ran, but the key
    /// must neither look in flight until its lease lapses nor ever run again unseen).
    fn watched(&self, store: &StoreHandle, mut decision: DurableWrite) -> Admitting {
        let watch = decision.reserve.is_some().then(ReservationNote::default);
        decision.note.clone_from(&watch);
        let reply = store.decide(decision);
        Admitting {
            reply: Some(reply),
            watch: watch.zip(self.effects.clone()).map(|(note, effects)| (note, store.clone(), effects)),
            clock: Arc::clone(&self.clock),
        }
    }

    /// The spend and effect steps of `decision` alone, in their own store.
    async fn decide_state(&self, decision: DurableWrite) -> Answer {
        let store = if decision.spend.is_some() { self.stores.ledger.as_ref() } else { self.stores.effects.as_ref() };
        if let Some(store) = store {
            return self.watched(store, decision).await;
        }
        // Stores without a handle (in memory, custom): their own methods, which answer at once.
        let mut decided = Decided::default();
        let ledger = self.interrupt_approvals().map(|approvals| Arc::clone(approvals.ledger()));
        match (decision.spend, decision.reserve, ledger) {
            (Some(attempt), Some(claim), Some(ledger)) => match ledger.spend_and_reserve(attempt, claim).await {
                Ok(Ok(SpendReserved { spent, reservation })) => {
                    decided.spent = Some(spent);
                    decided.reservation = Some(reservation);
                }
                Ok(Err(refused)) => return Ok(Err(NotDecided::Effect(refused))),
                Err(fault) if fault.is_fault() => return Err(fault),
                Err(refused) => return Ok(Err(NotDecided::Spend(refused))),
            },
            (Some(attempt), None, Some(ledger)) => match ledger.spend(attempt).await {
                Ok(spent) => decided.spent = Some(spent),
                Err(fault) if fault.is_fault() => return Err(fault),
                Err(refused) => return Ok(Err(NotDecided::Spend(refused))),
            },
            (Some(_), _, None) => return Err(LedgerError::WriterStopped),
            (None, Some(claim), _) => {
                match self.effects.as_ref().map(|effects| effects.reserve(&claim.key, claim.lease, decision.now)) {
                    Some(Ok(reservation)) => decided.reservation = Some(reservation),
                    Some(Err(refused)) => return Ok(Err(NotDecided::Effect(refused))),
                    None => {}
                }
            }
            (None, None, _) => {}
        }
        if let (Some((reservation, how)), Some(effects)) = (decision.settle, &self.effects) {
            decided.settled = Some(settle_now(&**effects, &reservation, how, decision.now));
        }
        Ok(Ok(decided))
    }

    /// Queues audit records in the audit log's store (before it returns), or, for a log without a shared
    /// store, appends them at once (memory) or hands them to the log's thread (an append-only file); the
    /// future answers when they are written.
    fn append(&self, audit: AuditAppend) -> impl Future<Output = Result<Vec<AuditReceipt>, AuditError>> + use<> {
        let written: Result<LedgerReply<_>, _> = match (&self.stores.audit, &self.audit) {
            (Some(store), _) => Ok(store.decide(DurableWrite { audit: Some(audit), ..DurableWrite::default() })),
            (None, Some(log)) => Err(log.append_reply(audit.entries)),
            (None, None) => Err(Reply::ready_or(Ok(Vec::new()), || AuditError::Abandoned)),
        };
        async move {
            match written {
                Ok(reply) => match reply.await {
                    Ok(Ok(decided)) => Ok(decided.receipts),
                    Ok(Err(_)) => Err(AuditError::Abandoned),
                    Err(fault) => Err(AuditError::from_store(fault.into())),
                },
                Err(appended) => appended.await,
            }
        }
    }

    /// The final write of a dispatch: the effect settled as the tool's outcome says, and the records.
    pub(super) async fn settle_and_record(&self, settle: Option<(Reservation, Settle)>, entries: Vec<AuditEntry>) {
        let audit = self.audit.as_ref().filter(|_| !entries.is_empty()).map(|log| log.appending(entries));
        if settle.is_none() && audit.is_none() {
            return;
        }
        let how = settle.as_ref().map(|(_, how)| *how);
        let retry = settle.clone().zip(audit.clone());
        let now = self.clock.now();
        let answer = self.decide(DurableWrite { now, settle, audit, ..DurableWrite::default() }).await;
        let answer = match (answer, retry) {
            (Err(fault), Some((settle, audit))) => {
                // One store keeps both, and its answer may have been lost (a connection dropped during
                // `COMMIT`): written again, the records go with the settlement only if it had not landed,
                // so they are never appended twice.
                // The tool's outcome is known, so the write is worth waiting for (a server restarting).
                let again = match (&self.stores.effects, &self.stores.audit) {
                    (Some(effects), Some(log)) if effects.same_store(log) => {
                        tracing::warn!(target: "agent_airlock", error = %fault, "call's settlement not written; writing it again");
                        let decision = DurableWrite {
                            now,
                            settle: Some(settle.clone()),
                            audit: Some(audit),
                            audit_only_if_settled: true,
                            ..DurableWrite::default()
                        };
                        effects.decide_again(decision, SETTLEMENT_PATIENCE).await
                    }
                    _ => Err(fault),
                };
                match again {
                    // The records could not be written, and with them went the settlement: the effect's
                    // outcome is worth keeping on its own.
                    Err(fault) => {
                        tracing::error!(target: "agent_airlock", error = %fault, "call's records not written; settling its effect alone");
                        self.decide(DurableWrite { now, settle: Some(settle), ..DurableWrite::default() }).await
                    }
                    written => written,
                }
            }
            (answer, _) => answer,
        };
        match answer {
            Ok(Ok(Decided { settled: Some(Err(err)), .. })) => {
                // The lease will lapse and the key become ambiguous: never silently re-runnable.
                tracing::error!(target: "agent_airlock", error = %err, settle = ?how, "effect record not settled");
            }
            Ok(_) => {}
            Err(fault) => {
                tracing::error!(target: "agent_airlock", error = %fault, settle = ?how, "call's settlement not written");
            }
        }
    }
}

/// A settlement through an effect store's own (synchronous) methods.
fn settle_now(
    effects: &dyn EffectStore,
    reservation: &Reservation,
    how: Settle,
    now: Duration,
) -> Result<EffectRecord, EffectError> {
    match how {
        Settle::Commit => effects.commit(reservation, now),
        Settle::Fail => effects.fail(reservation, now),
        Settle::Ambiguous => effects.mark_ambiguous(reservation, now),
    }
}

/// A write awaited by a dispatch. See [`Dispatcher::watched`].
pub(super) struct Admitting {
    reply: Option<LedgerReply<Result<Decided, NotDecided>>>,
    /// Set if the write reserves an effect: where it notes the reservation, its store, the effect records.
    watch: Option<(ReservationNote, StoreHandle, Arc<dyn EffectStore>)>,
    clock: Arc<dyn Clock>,
}

impl Future for Admitting {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let Some(reply) = self.reply.as_mut() else { return Poll::Ready(Err(LedgerError::WriterStopped)) };
        match Pin::new(reply).poll(cx) {
            Poll::Ready(answer) => {
                self.reply = None;
                Poll::Ready(answer)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Admitting {
    fn drop(&mut self) {
        let (Some(reply), Some((note, store, effects))) = (self.reply.take(), self.watch.take()) else { return };
        if store.abandon(note, self.clock.now()) {
            return;
        }
        let clock = Arc::clone(&self.clock);
        // A destructor cannot await: a short-lived thread waits for the write and, if it reserved the
        // key, hands the reservation to a guard that is dropped at once (marking it ambiguous).
        let waiter = std::thread::Builder::new().name("airlock-cancelled-admission".into()).spawn(move || {
            if let Ok(Ok(Decided { reservation: Some(reservation), .. })) = reply.wait() {
                drop(EffectGuard::new(effects, reservation, clock));
            }
        });
        if let Err(err) = waiter {
            // The lease will lapse and the key become ambiguous: never silently re-runnable.
            tracing::error!(target: "agent_airlock", error = %err, "cancelled admission not settled");
        }
    }
}
