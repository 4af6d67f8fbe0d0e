//! The ledger's state machine, written once and run by every ledger over its own tables, so the memory
//! and redb ledgers cannot drift apart.
//!
//! Each transition reads what it needs, decides, and only then writes: a refusal leaves no partial
//! change behind, so a ledger may run many transitions in one storage transaction and commit the lot.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::approval::ledger_credential;
use crate::effect::{self, EffectError, EffectRecord};

use super::{
    Approved, DenialRecord, EffectClaim, GrantEntry, GrantRecord, GrantState, LedgerError, PartialApproval,
    PruneReport, RequestRecord, RequestStatus, SpendAttempt, SpendReserved, SpentRecord,
};

/// The tables a ledger keeps. Reads and writes inside one atomic unit (a lock, a write transaction).
pub(crate) trait LedgerTables {
    fn request(&self, request_id: &str) -> Result<Option<RequestRecord>, LedgerError>;
    fn insert_request(&mut self, request: &RequestRecord) -> Result<(), LedgerError>;
    fn status(&self, request_id: &str) -> Result<Option<RequestStatus>, LedgerError>;
    fn set_status(&mut self, request_id: &str, status: &RequestStatus) -> Result<(), LedgerError>;
    fn grant(&self, grant_id: &str) -> Result<Option<GrantEntry>, LedgerError>;
    fn set_grant(&mut self, entry: &GrantEntry) -> Result<(), LedgerError>;
    /// The pending requests of one scope ([`RequestRecord::pending_scope`]): id and expiry.
    fn pending_in(&self, scope: &str) -> Result<Vec<(String, Option<Duration>)>, LedgerError>;
    fn add_pending(&mut self, scope: &str, request_id: &str, expires_at: Option<Duration>) -> Result<(), LedgerError>;
    fn remove_pending(&mut self, scope: &str, request_id: &str) -> Result<(), LedgerError>;
    fn effect(&self, key: &str) -> Result<Option<EffectRecord>, LedgerError>;
    fn set_effect(&mut self, record: &EffectRecord) -> Result<(), LedgerError>;
    /// Every request's status, by request id.
    fn statuses(&self) -> Result<Vec<(String, RequestStatus)>, LedgerError>;
    /// Every grant.
    fn grants(&self) -> Result<Vec<GrantEntry>, LedgerError>;
    /// Removes a request and its status.
    fn remove_request(&mut self, request_id: &str) -> Result<(), LedgerError>;
    /// Removes a grant.
    fn remove_grant(&mut self, grant_id: &str) -> Result<(), LedgerError>;
}

pub(crate) fn record_request(
    tables: &mut impl LedgerTables,
    request: RequestRecord,
    max_pending: Option<u32>,
) -> Result<(), LedgerError> {
    if let Some(existing) = tables.request(&request.request_id)? {
        return if existing == request {
            Ok(())
        } else {
            Err(LedgerError::DuplicateRequest { request_id: request.request_id })
        };
    }
    let scope = request.pending_scope();
    let now = request.requested_at;
    let (live, expired): (Vec<_>, Vec<_>) =
        tables.pending_in(&scope)?.into_iter().partition(|(_, expires_at)| expires_at.is_none_or(|at| now < at));
    if let Some(max) = max_pending
        && live.len() >= max as usize
    {
        return Err(LedgerError::TooManyPending {
            tool: request.tool,
            pending: u32::try_from(live.len()).unwrap_or(u32::MAX),
            max,
            oldest_expires_at: live.iter().filter_map(|(_, at)| *at).min(),
        });
    }
    // Expired requests can no longer be approved: they stop counting (their status stays `pending`).
    for (request_id, _) in expired {
        tables.remove_pending(&scope, &request_id)?;
    }
    tables.insert_request(&request)?;
    tables.add_pending(&scope, &request.request_id, request.expires_at())?;
    tables.set_status(&request.request_id, &RequestStatus::Pending)
}

/// A request leaves `pending`: it no longer counts against its scope's limit.
fn decided(tables: &mut impl LedgerTables, request: &RequestRecord) -> Result<(), LedgerError> {
    tables.remove_pending(&request.pending_scope(), &request.request_id)
}

fn recorded_status(tables: &impl LedgerTables, request_id: &str) -> Result<RequestStatus, LedgerError> {
    tables.status(request_id)?.ok_or_else(|| LedgerError::CorruptRecord {
        table: "status",
        key: request_id.to_owned(),
        detail: "the request has no status".to_owned(),
    })
}

pub(crate) fn grant(
    tables: &mut impl LedgerTables,
    mut grant: GrantRecord,
    now: Duration,
) -> Result<Approved, LedgerError> {
    let Some(request) = tables.request(&grant.request_id)? else {
        return Err(LedgerError::UnknownRequest { request_id: grant.request_id });
    };
    if request.binding != grant.binding || request.key_id != grant.key_id {
        return Err(LedgerError::RequestMismatch { request_id: grant.request_id });
    }
    if tables.grant(&grant.grant_id)?.is_some() {
        // Grant ids are 128 random bits: a collision means a caller reused an id, never honour it.
        return Err(LedgerError::DuplicateGrant { grant_id: grant.grant_id });
    }
    let required = request.approvals_required();
    match recorded_status(tables, &grant.request_id)? {
        RequestStatus::Pending if required > 1 => {
            return waiting(tables, &grant.request_id, vec![first_of_round(&grant, now)], required, None);
        }
        RequestStatus::Pending => decided(tables, &request)?,
        RequestStatus::Approving { mut approvals, replaces } => {
            let signature = grant.signatures.first().cloned();
            let credential = ledger_credential(&grant.approver, signature.as_ref());
            if !approvals.iter().any(|a| ledger_credential(&a.approver, a.signature.as_ref()) == credential) {
                approvals.push(PartialApproval { approver: grant.approver.clone(), approved_at: now, signature });
            }
            if approvals.len() < required as usize {
                return waiting(tables, &grant.request_id, approvals, required, replaces);
            }
            decided(tables, &request)?;
            if let Some(expired) = replaces {
                let entry = live_grant(tables, &expired, &grant.request_id)?;
                tables.set_grant(&GrantEntry {
                    grant: entry.grant,
                    state: GrantState::Replaced { replaced_at: now, by_grant: grant.grant_id.clone() },
                })?;
            }
            grant.signatures = approvals.iter().filter_map(|approval| approval.signature.clone()).collect();
            grant.co_approvers = approvals
                .into_iter()
                .map(|approval| approval.approver)
                .filter(|name| *name != grant.approver)
                .collect();
        }
        RequestStatus::Granted(existing) => {
            let entry = live_grant_of_status(tables, &existing)?;
            if now < entry.grant.expires_at {
                return Ok(Approved::Granted(entry.grant));
            }
            if required > 1 {
                // The approvals that issued the expired grant approved that grant: the next one needs as many
                // distinct approvers again, this one first. The expired grant stays until the round ends.
                let round = vec![first_of_round(&grant, now)];
                return waiting(tables, &grant.request_id, round, required, Some(entry.grant.grant_id));
            }
            tables.set_grant(&GrantEntry {
                grant: entry.grant,
                state: GrantState::Replaced { replaced_at: now, by_grant: grant.grant_id.clone() },
            })?;
        }
        RequestStatus::Denied(denial) => return Err(LedgerError::AlreadyDenied(Box::new(denial))),
        RequestStatus::Spent(spent) => {
            return Err(LedgerError::AlreadySpent { grant_id: spent.grant.grant_id, spent_at: spent.spent_at });
        }
    }
    tables.set_grant(&GrantEntry { grant: grant.clone(), state: GrantState::Live })?;
    tables.set_status(&grant.request_id, &RequestStatus::Granted(grant.clone()))?;
    Ok(Approved::Granted(grant))
}

/// The first approval of a round, by the approver of `grant`.
fn first_of_round(grant: &GrantRecord, now: Duration) -> PartialApproval {
    PartialApproval { approver: grant.approver.clone(), approved_at: now, signature: grant.signatures.first().cloned() }
}

/// Records the approvals so far of a request that needs more (and the expired grant the round replaces);
/// a request approved for the first time stays counted as pending.
fn waiting(
    tables: &mut impl LedgerTables,
    request_id: &str,
    approvals: Vec<PartialApproval>,
    required: u32,
    replaces: Option<String>,
) -> Result<Approved, LedgerError> {
    let approvers = approvals.iter().map(|approval| approval.approver.clone()).collect();
    tables.set_status(request_id, &RequestStatus::Approving { approvals, replaces })?;
    Ok(Approved::Waiting { approvers, required })
}

fn live_grant_of_status(tables: &impl LedgerTables, grant: &GrantRecord) -> Result<GrantEntry, LedgerError> {
    live_grant(tables, &grant.grant_id, &grant.request_id)
}

/// The grant `grant_id` of `request_id`, which the request's status says is live (it may have expired).
fn live_grant(tables: &impl LedgerTables, grant_id: &str, request_id: &str) -> Result<GrantEntry, LedgerError> {
    match tables.grant(grant_id)? {
        Some(entry) if entry.state == GrantState::Live => Ok(entry),
        _ => Err(LedgerError::CorruptRecord {
            table: "grants",
            key: grant_id.to_owned(),
            detail: format!("request `{request_id}` holds the grant but it is not live"),
        }),
    }
}

pub(crate) fn deny(tables: &mut impl LedgerTables, mut denial: DenialRecord) -> Result<DenialRecord, LedgerError> {
    let Some(request) = tables.request(&denial.request_id)? else {
        return Err(LedgerError::UnknownRequest { request_id: denial.request_id });
    };
    denial.revoked_grant = None;
    match recorded_status(tables, &denial.request_id)? {
        RequestStatus::Pending | RequestStatus::Approving { replaces: None, .. } => decided(tables, &request)?,
        RequestStatus::Approving { replaces: Some(expired), .. } => {
            let entry = live_grant(tables, &expired, &denial.request_id)?;
            tables.set_grant(&GrantEntry {
                grant: entry.grant,
                state: GrantState::Revoked { revoked_at: denial.denied_at },
            })?;
            denial.revoked_grant = Some(expired);
        }
        RequestStatus::Granted(grant) => {
            let entry = live_grant_of_status(tables, &grant)?;
            tables.set_grant(&GrantEntry {
                grant: entry.grant,
                state: GrantState::Revoked { revoked_at: denial.denied_at },
            })?;
            denial.revoked_grant = Some(grant.grant_id);
        }
        RequestStatus::Denied(first) => return Ok(first),
        RequestStatus::Spent(spent) => {
            return Err(LedgerError::AlreadySpent { grant_id: spent.grant.grant_id, spent_at: spent.spent_at });
        }
    }
    tables.set_status(&denial.request_id, &RequestStatus::Denied(denial.clone()))?;
    Ok(denial)
}

pub(crate) fn spend(tables: &mut impl LedgerTables, attempt: SpendAttempt) -> Result<SpentRecord, LedgerError> {
    let Some(entry) = tables.grant(&attempt.grant_id)? else {
        return Err(LedgerError::UnknownGrant { grant_id: attempt.grant_id });
    };
    match entry.state {
        GrantState::Live => {}
        GrantState::Spent { spent_at } => {
            return Err(LedgerError::AlreadySpent { grant_id: attempt.grant_id, spent_at });
        }
        GrantState::Revoked { .. } => {
            return Err(LedgerError::GrantRevoked { grant_id: attempt.grant_id });
        }
        GrantState::Replaced { by_grant, .. } => {
            return Err(LedgerError::GrantReplaced { grant_id: attempt.grant_id, by_grant });
        }
    }
    if entry.grant.binding != attempt.binding {
        return Err(LedgerError::BindingMismatch { grant_id: attempt.grant_id });
    }
    if attempt.now >= entry.grant.expires_at {
        return Err(LedgerError::GrantExpired { grant_id: attempt.grant_id, expired_at: entry.grant.expires_at });
    }
    let spent = SpentRecord { grant: entry.grant, spent_at: attempt.now };
    tables.set_grant(&GrantEntry { grant: spent.grant.clone(), state: GrantState::Spent { spent_at: attempt.now } })?;
    tables.set_status(&spent.grant.request_id, &RequestStatus::Spent(spent.clone()))?;
    Ok(spent)
}

/// A spend and an effect reservation, both or neither. The reservation is decided first (without
/// writing), then the spend (which decides before it writes), then the reservation is written.
pub(crate) fn spend_and_reserve(
    tables: &mut impl LedgerTables,
    attempt: SpendAttempt,
    claim: &EffectClaim,
) -> Result<Result<SpendReserved, EffectError>, LedgerError> {
    let current = tables.effect(&claim.key)?;
    let step = effect::reserve_step(current, &claim.key, claim.lease, attempt.now);
    let reservation = match step.answer {
        Ok(reservation) => reservation,
        Err(refused) => {
            // A lapsed lease is recorded as ambiguous even though nothing is reserved: the answer stays
            // the same for every later caller.
            if let Some(record) = &step.write {
                tables.set_effect(record)?;
            }
            return Ok(Err(refused));
        }
    };
    let spent = spend(tables, attempt)?;
    if let Some(record) = &step.write {
        tables.set_effect(record)?;
    }
    Ok(Ok(SpendReserved { spent, reservation }))
}

/// When a request was settled, if it is: spent, denied, or granted under a grant that expired unspent
/// (at `now`). A pending request, or one whose grant can still be spent, is not settled.
pub(crate) fn settled_at(status: &RequestStatus, now: Duration) -> Option<Duration> {
    match status {
        RequestStatus::Pending | RequestStatus::Approving { .. } => None,
        RequestStatus::Granted(grant) => (now >= grant.expires_at).then_some(grant.expires_at),
        RequestStatus::Denied(denial) => Some(denial.denied_at),
        RequestStatus::Spent(spent) => Some(spent.spent_at),
    }
}

/// Whether a grant can still be spent at `now`.
fn spendable(entry: &GrantEntry, now: Duration) -> bool {
    entry.state == GrantState::Live && now < entry.grant.expires_at
}

pub(crate) fn prune(
    tables: &mut impl LedgerTables,
    cutoff: Duration,
    now: Duration,
) -> Result<PruneReport, LedgerError> {
    let mut doomed: BTreeSet<String> = tables
        .statuses()?
        .into_iter()
        .filter(|(_, status)| settled_at(status, now).is_some_and(|at| at < cutoff))
        .map(|(request_id, _)| request_id)
        .collect();
    let grants = tables.grants()?;
    // The statuses say no grant of these requests can be spent; the grants are asked too, so that a
    // disagreement between the tables keeps the records rather than dropping a spendable grant.
    for entry in &grants {
        if spendable(entry, now) {
            doomed.remove(&entry.grant.request_id);
        }
    }
    let mut report = PruneReport::default();
    for entry in grants {
        if doomed.contains(&entry.grant.request_id) {
            tables.remove_grant(&entry.grant.grant_id)?;
            report.grants.push(entry.grant.grant_id);
        }
    }
    for request_id in doomed {
        tables.remove_request(&request_id)?;
        report.requests.push(request_id);
    }
    report.grants.sort();
    Ok(report)
}
