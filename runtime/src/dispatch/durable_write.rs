//! A dispatch's durable writes ([`DurableWrite`]: a spend, a reservation, a settlement, audit records),
//! written through a store: the one state machine that applies one ([`decide`]) over any backend's tables,
//! and how each backend runs it (see [`crate::store`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::audit::{self, AuditAppend, AuditOutcome, AuditReceipt};
use crate::effect::{self, EffectError, EffectRecord, Reservation, Settle};
use crate::ledger::{self, EffectClaim, LedgerError, LedgerReply, LedgerTables, SpendAttempt, SpentRecord};
use crate::store::StoreHandle;
use crate::store::redb::WriteTables;

/// How a store writes a decision.
pub(crate) trait Decide {
    /// Queues `decision` as one write; the reply answers once it is durable (or refused, or failed). The
    /// write is submitted before this returns: dropping the reply does not cancel it.
    fn decide(&self, decision: DurableWrite) -> LedgerReply<Result<Decided, NotDecided>>;

    /// Like [`decide`](Self::decide), for a decision that can be written any number of times with the
    /// same result (a settlement written again, its records only if it had not landed): a store that
    /// can lose its connection tries again after a fault, for up to `patience`.
    fn decide_again(&self, decision: DurableWrite, patience: Duration) -> LedgerReply<Result<Decided, NotDecided>>;

    /// For a dispatch dropped before its admission answered: queues, behind that admission, a write that
    /// marks the reservation it noted (if it made one) ambiguous, without waiting. `false` if this store
    /// cannot order writes so (PostgreSQL runs transactions concurrently): the caller then waits for the
    /// admission's answer elsewhere.
    fn abandon(&self, note: ReservationNote, now: Duration) -> bool;
}

impl Decide for StoreHandle {
    fn decide(&self, decision: DurableWrite) -> LedgerReply<Result<Decided, NotDecided>> {
        if let Some(writer) = self.redb_writer() {
            return writer.op(move |tables| {
                // The audit tables are opened by the append itself.
                if decision.spend.is_some() {
                    tables.open_ledger()?;
                } else if decision.reserve.is_some() || decision.settle.is_some() {
                    tables.open_effects()?;
                }
                decide(tables, &decision)
            });
        }
        #[cfg(feature = "postgres")]
        if let Some(shared) = self.postgres_shared() {
            return crate::store::postgres::write(shared, move |tables| decide(tables, &decision));
        }
        LedgerReply::ready(Err(LedgerError::WriterStopped))
    }

    fn decide_again(&self, decision: DurableWrite, patience: Duration) -> LedgerReply<Result<Decided, NotDecided>> {
        #[cfg(feature = "postgres")]
        if let Some(shared) = self.postgres_shared() {
            return crate::store::postgres::write_patiently(shared, move |tables| decide(tables, &decision), patience);
        }
        // redb's writer is in this process: a fault is not a lost connection, another try would fail alike.
        let _ = patience;
        self.decide(decision)
    }

    fn abandon(&self, note: ReservationNote, now: Duration) -> bool {
        // One writer, first in first out: this write runs after the admission, in its transaction or a
        // later one. PostgreSQL runs transactions concurrently, so it cannot order one behind another.
        let Some(writer) = self.redb_writer() else { return false };
        drop(writer.op(move |tables| -> Result<(), LedgerError> {
            let held = note.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let Some(reservation) = held else { return Ok(()) };
            tables.open_effects()?;
            let step = effect::settle_step(tables.effect(reservation.key())?, &reservation, Settle::Ambiguous, now);
            if let Some(record) = &step.write {
                tables.set_effect(record)?;
            }
            Ok(())
        }));
        true
    }
}

/// The parts of one durable write of a dispatch. Every part is optional; the ones present are applied in
/// one transaction, in this order: spend, reserve, settle, audit.
#[derive(Clone, Default)]
pub(crate) struct DurableWrite {
    /// Now, for the reservation's lease and the settlement's time.
    pub(crate) now: Duration,
    /// A verified approval to spend.
    pub(crate) spend: Option<SpendAttempt>,
    /// An effect key to reserve.
    pub(crate) reserve: Option<EffectClaim>,
    /// A reservation to settle, and how.
    pub(crate) settle: Option<(Reservation, Settle)>,
    /// Audit records to append. An `approved` record without a detail names the grant spent.
    pub(crate) audit: Option<AuditAppend>,
    /// Append `audit` only if this decision's settlement changes the effect record: a second write of a
    /// settlement whose first answer was lost (the first may have landed, records and all).
    pub(crate) audit_only_if_settled: bool,
    /// Where the reservation made is noted as soon as it is written, for a dispatch cancelled before it
    /// hears the answer ([`Decide::abandon`]).
    pub(crate) note: Option<ReservationNote>,
}

/// The reservation a decision made, noted inside its transaction.
pub(crate) type ReservationNote = Arc<Mutex<Option<Reservation>>>;

/// What a decision wrote.
#[derive(Debug, Default)]
pub(crate) struct Decided {
    /// The grant spent.
    pub(crate) spent: Option<SpentRecord>,
    /// The effect key reserved.
    pub(crate) reservation: Option<Reservation>,
    /// The settlement's answer (a stale reservation changes nothing and says so).
    pub(crate) settled: Option<Result<EffectRecord, EffectError>>,
    /// Where the audit records landed.
    pub(crate) receipts: Vec<AuditReceipt>,
}

/// Why an admission wrote nothing: the grant or the effect key refused.
#[derive(Debug)]
pub(crate) enum NotDecided {
    /// The spend was refused by the ledger's rules.
    Spend(LedgerError),
    /// The reservation was refused (a duplicate, an ambiguous or in-flight key).
    Effect(EffectError),
}

/// A backend's tables inside one transaction: the ledger's and the effect records, and the audit log.
pub(crate) trait DurableWriteTables: LedgerTables {
    /// Appends audit records after the stored head, in this transaction. A fault aborts it.
    fn append_audit(&mut self, append: &AuditAppend) -> Result<Vec<AuditReceipt>, LedgerError>;
}

impl DurableWriteTables for WriteTables<'_> {
    fn append_audit(&mut self, append: &AuditAppend) -> Result<Vec<AuditReceipt>, LedgerError> {
        audit::append_in(self, append).map_err(LedgerError::from)
    }
}

#[cfg(feature = "postgres")]
impl DurableWriteTables for crate::store::postgres::PgTables<'_, '_> {
    fn append_audit(&mut self, append: &AuditAppend) -> Result<Vec<AuditReceipt>, LedgerError> {
        audit::append_in_postgres(self, append).map_err(LedgerError::from)
    }
}

/// A fault of a decision's write, as an effect-store fault.
pub(crate) fn effect_fault(err: LedgerError) -> EffectError {
    effect::store_fault(err.into())
}

/// Applies `decision` to `tables`: the one state machine every backend runs. A refusal writes nothing
/// (but a lapsed lease, which is recorded as ambiguous for every later caller, as [`EffectStore::reserve`](crate::effect::EffectStore::reserve)
/// records it); a fault (`Err`) must abort the transaction.
pub(crate) fn decide(
    tables: &mut impl DurableWriteTables,
    decision: &DurableWrite,
) -> Result<Result<Decided, NotDecided>, LedgerError> {
    let mut decided = Decided::default();
    match (&decision.spend, &decision.reserve) {
        (Some(attempt), Some(claim)) => match ledger::spend_and_reserve_in(tables, attempt.clone(), claim) {
            Err(err) if err.is_fault() => return Err(err),
            Err(refused) => return Ok(Err(NotDecided::Spend(refused))),
            Ok(Err(refused)) => return Ok(Err(NotDecided::Effect(refused))),
            Ok(Ok(both)) => {
                decided.spent = Some(both.spent);
                decided.reservation = Some(both.reservation);
            }
        },
        (Some(attempt), None) => match ledger::spend_in(tables, attempt.clone()) {
            Err(err) if err.is_fault() => return Err(err),
            Err(refused) => return Ok(Err(NotDecided::Spend(refused))),
            Ok(spent) => decided.spent = Some(spent),
        },
        (None, Some(claim)) => {
            let step = effect::reserve_step(tables.effect(&claim.key)?, &claim.key, claim.lease, decision.now);
            if let Some(record) = &step.write {
                tables.set_effect(record)?;
            }
            match step.answer {
                Ok(reservation) => decided.reservation = Some(reservation),
                Err(refused) => return Ok(Err(NotDecided::Effect(refused))),
            }
        }
        (None, None) => {}
    }
    if let (Some(note), Some(reservation)) = (&decision.note, &decided.reservation) {
        *note.lock().unwrap_or_else(PoisonError::into_inner) = Some(reservation.clone());
    }
    let mut settled_now = false;
    if let Some((reservation, how)) = &decision.settle {
        let step = effect::settle_step(tables.effect(reservation.key())?, reservation, *how, decision.now);
        if let Some(record) = &step.write {
            tables.set_effect(record)?;
            settled_now = true;
        }
        decided.settled = Some(step.answer);
    }
    if let Some(audit) = decision.audit.as_ref().filter(|_| settled_now || !decision.audit_only_if_settled) {
        let mut audit = audit.clone();
        name_grant(&mut audit, decided.spent.as_ref());
        decided.receipts = tables.append_audit(&audit)?;
    }
    Ok(Ok(decided))
}

/// The `approved` records of a spend name the grant and who approved it.
pub(crate) fn name_grant(audit: &mut AuditAppend, spent: Option<&SpentRecord>) {
    let Some(spent) = spent else { return };
    for entry in &mut audit.entries {
        if entry.outcome == AuditOutcome::Approved && entry.detail.is_none() {
            entry.detail = Some(format!("grant {} by {}", spent.grant.grant_id, spent.grant.approver));
        }
    }
}
