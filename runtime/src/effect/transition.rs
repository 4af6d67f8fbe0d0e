//! The state machine of an effect key, as pure functions from the current record to the record to write
//! and the answer. Both stores run these inside their atomic step, so they cannot disagree.

use std::time::Duration;

use super::{AmbiguityCause, EffectError, EffectRecord, EffectState, EffectStatus, Reservation, Resolution};

/// What to write (if anything) and what to answer.
pub(crate) struct Step<T> {
    pub(crate) write: Option<EffectRecord>,
    pub(crate) answer: Result<T, EffectError>,
}

impl<T> Step<T> {
    fn answer(answer: Result<T, EffectError>) -> Self {
        Step { write: None, answer }
    }
}

/// How a reservation is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    Commit,
    Fail,
    Ambiguous,
}

pub(crate) fn reserve(current: Option<EffectRecord>, key: &str, lease: Duration, now: Duration) -> Step<Reservation> {
    if key.is_empty() {
        return Step::answer(Err(EffectError::EmptyKey));
    }
    let attempt = match current {
        None => 1,
        Some(record) => match record.state {
            EffectState::Failed { .. } => record.attempt.saturating_add(1),
            EffectState::Committed { at } => {
                return Step::answer(Err(EffectError::Duplicate { key: key.to_owned(), committed_at: at }));
            }
            EffectState::Ambiguous { since, .. } => {
                return Step::answer(Err(EffectError::Ambiguous { key: key.to_owned(), since }));
            }
            EffectState::Reserved { lease_until } if now < lease_until => {
                return Step::answer(Err(EffectError::InFlight { key: key.to_owned(), lease_until }));
            }
            // The holder died or hung: whether the effect happened is unknown. Recorded, so the answer
            // stays the same after the lease's holder (or its clock) comes back.
            EffectState::Reserved { lease_until } => {
                let lapsed = EffectRecord {
                    state: EffectState::Ambiguous { since: lease_until, cause: AmbiguityCause::LeaseLapsed },
                    updated_at: now,
                    ..record
                };
                return Step {
                    write: Some(lapsed),
                    answer: Err(EffectError::Ambiguous { key: key.to_owned(), since: lease_until }),
                };
            }
        },
    };
    let lease_until = now.saturating_add(lease);
    let record = EffectRecord {
        key: key.to_owned(),
        state: EffectState::Reserved { lease_until },
        attempt,
        reserved_at: now,
        updated_at: now,
        resolution: None,
        resolved_by: None,
    };
    Step {
        write: Some(record),
        answer: Ok(Reservation { key: key.to_owned(), attempt, reserved_at: now, lease_until }),
    }
}

/// Settles `reservation` if it is still the key's current one.
///
/// - `Commit` is accepted from any state but `Committed` (where it is a no-op): the holder knows the
///   effect happened, and a committed key only blocks more than an ambiguous or failed one.
/// - `Fail` only from `Reserved` (a no-op on `Failed`): once the key is ambiguous, an operator decides.
/// - `Ambiguous` only from `Reserved` (a no-op on `Ambiguous`).
pub(crate) fn settle(
    current: Option<EffectRecord>,
    reservation: &Reservation,
    how: Settle,
    now: Duration,
) -> Step<EffectRecord> {
    let stale = || Step::answer(Err(EffectError::Stale { key: reservation.key.clone() }));
    let Some(record) = current else { return stale() };
    if record.attempt != reservation.attempt || record.reserved_at != reservation.reserved_at {
        return stale();
    }
    let state = match (how, record.state) {
        (Settle::Commit, EffectState::Committed { .. })
        | (Settle::Fail, EffectState::Failed { .. })
        | (Settle::Ambiguous, EffectState::Ambiguous { .. }) => return Step::answer(Ok(record)),
        (Settle::Commit, _) => EffectState::Committed { at: now },
        (Settle::Fail, EffectState::Reserved { .. }) => EffectState::Failed { at: now },
        (Settle::Ambiguous, EffectState::Reserved { .. }) => {
            EffectState::Ambiguous { since: now, cause: AmbiguityCause::OutcomeUnknown }
        }
        (Settle::Fail | Settle::Ambiguous, _) => return stale(),
    };
    let updated = EffectRecord { state, updated_at: now, ..record };
    Step { write: Some(updated.clone()), answer: Ok(updated) }
}

/// Extends the lease of `reservation` to `now + lease` while its call runs, if it is still the key's
/// current reservation and its lease has not lapsed (once lapsed, the key may already have been seen as
/// ambiguous, and an operator may be deciding it). A lease is never shortened.
pub(crate) fn renew(
    current: Option<EffectRecord>,
    reservation: &Reservation,
    lease: Duration,
    now: Duration,
) -> Step<Reservation> {
    let stale = || Step::answer(Err(EffectError::Stale { key: reservation.key.clone() }));
    let Some(record) = current else { return stale() };
    if record.attempt != reservation.attempt || record.reserved_at != reservation.reserved_at {
        return stale();
    }
    let EffectState::Reserved { lease_until } = record.state else { return stale() };
    if now >= lease_until {
        return stale();
    }
    let lease_until = now.saturating_add(lease).max(lease_until);
    let updated = EffectRecord { state: EffectState::Reserved { lease_until }, updated_at: now, ..record };
    Step { write: Some(updated), answer: Ok(Reservation { lease_until, ..reservation.clone() }) }
}

pub(crate) fn resolve(
    current: Option<EffectRecord>,
    key: &str,
    resolution: Resolution,
    operator: &str,
    now: Duration,
) -> Step<EffectRecord> {
    let Some(record) = current else { return Step::answer(Err(EffectError::NotFound { key: key.to_owned() })) };
    if operator.trim().is_empty() {
        return Step::answer(Err(EffectError::NoOperator));
    }
    let status = record.status_at(now);
    if let EffectState::Reserved { lease_until } = record.state
        && status == EffectStatus::Reserved
    {
        return Step::answer(Err(EffectError::StillRunning { key: key.to_owned(), lease_until }));
    }
    if status != EffectStatus::Ambiguous {
        return Step::answer(Err(EffectError::NotAmbiguous { key: key.to_owned(), status }));
    }
    let state = match resolution {
        Resolution::Committed => EffectState::Committed { at: now },
        Resolution::Failed => EffectState::Failed { at: now },
    };
    let updated = EffectRecord {
        state,
        updated_at: now,
        resolution: Some(resolution),
        resolved_by: Some(operator.to_owned()),
        ..record
    };
    Step { write: Some(updated.clone()), answer: Ok(updated) }
}
