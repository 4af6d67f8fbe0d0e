//! One durable write per decision: where a dispatch writes what it decided.
//!
//! A dispatch writes durably at most twice:
//!
//! - **admit**: spend the grant (a resumed, approved call), reserve the effect key (a tool with
//!   `effect = "..."`) and append the "approved" audit record, atomically: if the grant or the key
//!   refuses, nothing is spent, reserved or recorded;
//! - **settle**: the effect's outcome (committed, failed, ambiguous) and the call's audit record.
//!
//! A `Decision` holds the parts of one such write; `decide` is the one state machine that applies
//! it, over any backend's tables (`DecisionTables`): the redb writer's transaction, a PostgreSQL
//! transaction. Every part that the backend of a dispatcher's stores shares is written in one
//! transaction; a [`StoreHandle`] names that backend, and two parts with equal handles are written
//! together.
//!
//! On redb, the handle is the database's one writer thread ([`RedbLedger`](crate::ledger::RedbLedger),
//! [`RedbEffectStore`](crate::effect::RedbEffectStore) and [`AuditLog::with_database`](crate::audit::AuditLog::with_database)
//! on one `Arc<Database>` share it): decisions of concurrent dispatches share commits, and the
//! dispatch future awaits its answer instead of blocking. On PostgreSQL (feature `postgres`), the
//! ledger's spend and effect steps are one transaction on the ledger's own runtime; the audit log stays
//! in redb or memory there, and is written after the admission. Stores in memory, and custom stores,
//! have no handle: the dispatcher runs each part through the store's own methods, in the same order and
//! with the same rules (a memory ledger spends and reserves under one lock).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::audit::{AuditAppend, AuditOutcome, AuditReceipt};
use crate::effect::{self, EffectError, EffectRecord, Reservation, Settle};
#[cfg(feature = "postgres")]
use crate::ledger::PostgresShared;
use crate::ledger::{EffectClaim, LedgerError, LedgerReply, LedgerTables, RedbWriter, SpendAttempt, SpentRecord};

/// The durable store a ledger, an effect store or an audit log writes through: parts of a decision whose
/// stores have the same handle are written in one transaction. Opaque; compare with [`same_store`](Self::same_store).
#[derive(Clone)]
pub struct StoreHandle(Backend);

#[derive(Clone)]
enum Backend {
    Redb(Arc<RedbWriter>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PostgresShared>),
}

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = match &self.0 {
            Backend::Redb(_) => "redb",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
        };
        f.debug_tuple("StoreHandle").field(&backend).finish()
    }
}

impl StoreHandle {
    pub(crate) fn redb(writer: Arc<RedbWriter>) -> Self {
        StoreHandle(Backend::Redb(writer))
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(shared: Arc<PostgresShared>) -> Self {
        StoreHandle(Backend::Postgres(shared))
    }

    /// Whether both write through the same store (one redb database, one PostgreSQL pool).
    pub fn same_store(&self, other: &StoreHandle) -> bool {
        match (&self.0, &other.0) {
            (Backend::Redb(a), Backend::Redb(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "postgres")]
            (Backend::Postgres(a), Backend::Postgres(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "postgres")]
            _ => false,
        }
    }

    /// Whether this store can keep the audit log (redb can; the PostgreSQL backend keeps none).
    pub(crate) fn keeps_audit(&self) -> bool {
        matches!(self.0, Backend::Redb(_))
    }

    /// For a dispatch dropped before its admission answered: queues, behind that admission, a write that
    /// marks the reservation it noted (if it made one) ambiguous, without waiting. `false` if this store
    /// cannot order writes so (PostgreSQL runs transactions concurrently): the caller then waits for the
    /// admission's answer elsewhere.
    pub(crate) fn abandon(&self, note: ReservationNote, now: Duration) -> bool {
        match &self.0 {
            // One writer, first in first out: this write runs after the admission, in its transaction
            // or a later one.
            Backend::Redb(writer) => {
                drop(writer.op(move |tables| {
                    let held = note.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    let Some(reservation) = held else { return Ok(()) };
                    tables.open_effects()?;
                    let step =
                        effect::settle_step(tables.effect(reservation.key())?, &reservation, Settle::Ambiguous, now);
                    if let Some(record) = &step.write {
                        tables.set_effect(record)?;
                    }
                    Ok(())
                }));
                true
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => false,
        }
    }

    /// Queues `decision` as one write; the reply answers once it is durable (or refused, or failed). The
    /// write is submitted before this returns: dropping the reply does not cancel it.
    pub(crate) fn decide(&self, decision: Decision) -> LedgerReply<Result<Decided, NotDecided>> {
        match &self.0 {
            Backend::Redb(writer) => writer.op(move |tables| {
                // The audit tables are opened by the append itself.
                if decision.spend.is_some() {
                    tables.open_ledger()?;
                } else if decision.reserve.is_some() || decision.settle.is_some() {
                    tables.open_effects()?;
                }
                decide(tables, &decision)
            }),
            #[cfg(feature = "postgres")]
            Backend::Postgres(shared) => crate::ledger::postgres_decide(shared, decision),
        }
    }
}

/// The parts of one durable write of a dispatch. Every part is optional; the ones present are applied in
/// one transaction, in this order: spend, reserve, settle, audit.
#[derive(Clone, Default)]
pub(crate) struct Decision {
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
    /// Where the reservation made is noted as soon as it is written, for a dispatch cancelled before it
    /// hears the answer ([`StoreHandle::abandon`]).
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
pub(crate) trait DecisionTables: LedgerTables {
    /// Appends audit records after the stored head, in this transaction. A fault aborts it.
    fn append_audit(&mut self, append: &AuditAppend) -> Result<Vec<AuditReceipt>, LedgerError>;
}

/// Applies `decision` to `tables`: the one state machine every backend runs. A refusal writes nothing
/// (but a lapsed lease, which is recorded as ambiguous for every later caller, as [`EffectStore::reserve`](crate::effect::EffectStore::reserve)
/// records it); a fault (`Err`) must abort the transaction.
pub(crate) fn decide(
    tables: &mut impl DecisionTables,
    decision: &Decision,
) -> Result<Result<Decided, NotDecided>, LedgerError> {
    let mut decided = Decided::default();
    match (&decision.spend, &decision.reserve) {
        (Some(attempt), Some(claim)) => match crate::ledger::spend_and_reserve_in(tables, attempt.clone(), claim) {
            Err(err) if err.is_fault() => return Err(err),
            Err(refused) => return Ok(Err(NotDecided::Spend(refused))),
            Ok(Err(refused)) => return Ok(Err(NotDecided::Effect(refused))),
            Ok(Ok(both)) => {
                decided.spent = Some(both.spent);
                decided.reservation = Some(both.reservation);
            }
        },
        (Some(attempt), None) => match crate::ledger::spend_in(tables, attempt.clone()) {
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
    if let Some((reservation, how)) = &decision.settle {
        let step = effect::settle_step(tables.effect(reservation.key())?, reservation, *how, decision.now);
        if let Some(record) = &step.write {
            tables.set_effect(record)?;
        }
        decided.settled = Some(step.answer);
    }
    if let Some(audit) = &decision.audit {
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
