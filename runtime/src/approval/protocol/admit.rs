//! Step 3 of the protocol, the admission: derive the binding again from the call now being made, check the
//! token, spend the grant once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use super::InterruptApprovals;
use super::error::{AdmitError, BindingField};
use super::key_ring::KeyLookupError;
use super::mac::{self, Binding, BindingInput};
use super::message::{Admission, DENIED_MEMBER, GRANT_MEMBER, REQUEST_MEMBER, RequestBody};
use crate::canonical;
use crate::keys::{ApprovalKey, MAC_LEN, decode_lower_hex};
use crate::ledger::{GrantRecord, LedgerError, RequestStatus, SpendAttempt, SpentRecord};
use crate::store::Reply;

impl InterruptApprovals {
    /// Admits the call now being made if `resume` approves exactly this call and its grant is unspent
    /// and unexpired; the grant is spent (durably) before this returns `Ok`. Run the call only then.
    ///
    /// The spend is sent to the ledger when this is called; dropping the reply does not undo it: the grant
    /// may be spent without the call running (at most once, never twice).
    pub fn admit(&self, call: &BindingInput<'_>, resume: &Value) -> Reply<Admission, AdmitError> {
        match self.prepare_admission(call, resume) {
            Ok(prepared) => self
                .ledger
                .spend(prepared.attempt.clone())
                .then(move |spent| finish_admission(prepared, spent), admit_writer_stopped),
            Err(error) => Reply::ready_or(Err(error), admit_writer_stopped),
        }
    }

    /// Checks that `resume` approves exactly this call (token, key, binding) without spending anything:
    /// the dispatcher verifies first, runs every gate that can still refuse, and only then spends, so a
    /// later refusal leaves the grant live.
    pub(crate) fn verify_resume(
        &self,
        call: &BindingInput<'_>,
        resume: &Value,
    ) -> Result<PreparedAdmission, AdmitError> {
        self.prepare_admission(call, resume)
    }

    fn prepare_admission(&self, call: &BindingInput<'_>, resume: &Value) -> Result<PreparedAdmission, AdmitError> {
        let grant = match resume.as_object().filter(|outer| outer.len() == 1) {
            Some(outer) => {
                if let Some(grant) = outer.get(GRANT_MEMBER) {
                    grant.as_object().ok_or_else(|| malformed("`airlock_grant` is not an object"))?
                } else if let Some(denied) = outer.get(DENIED_MEMBER) {
                    return Err(self.recorded_denial(call, denied));
                } else {
                    return Err(AdmitError::NotAnApproval);
                }
            }
            None => return Err(AdmitError::NotAnApproval),
        };
        if let Some(unknown) = grant.keys().find(|k| !matches!(k.as_str(), "key_id" | "grant_id" | "token")) {
            return Err(malformed(&format!("unknown member `{unknown}`")));
        }
        let member = |name: &str| {
            grant
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(&format!("`{name}` is missing or not a string")))
        };
        let key_id = member("key_id")?;
        let grant_id = member("grant_id")?;
        if decode_lower_hex::<16>(grant_id).is_none() {
            return Err(malformed("`grant_id` is not 32 lowercase hex characters"));
        }
        let token = decode_lower_hex::<MAC_LEN>(member("token")?)
            .ok_or_else(|| malformed("`token` is not 64 lowercase hex characters"))?;
        let key = self.keys.find(key_id).map_err(|err| match err {
            KeyLookupError::Retired { key_id } => AdmitError::RetiredKey { key_id },
            KeyLookupError::Unknown { key_id } => AdmitError::UnknownKey { key_id },
        })?;
        let binding = mac::binding(key, call).map_err(AdmitError::Arguments)?;
        if !mac::verify_token(key, &binding, grant_id, &token) {
            return Err(self.diagnose_token(key, call, grant_id, &token));
        }
        // Operator mode: a token the shared key minted is not enough; the grant must be signed.
        let verified = self.verified_grant(grant_id, &binding)?;
        Ok(PreparedAdmission {
            attempt: SpendAttempt { grant_id: grant_id.to_owned(), binding: binding.to_hex(), now: self.clock.now() },
            key_id: key_id.to_owned(),
            verified,
            spent_here: Arc::clone(&self.spent),
        })
    }

    /// A resume value that says "denied" is believed only as far as the ledger backs it: the request it
    /// names must be denied there, and bound to the call now being made. The reason is the ledger's.
    fn recorded_denial(&self, call: &BindingInput<'_>, denied: &Value) -> AdmitError {
        let Some(request_id) = denied.get("request_id").and_then(Value::as_str) else {
            return AdmitError::UnverifiedDenial;
        };
        let entry = match self.ledger.find_request(request_id) {
            Ok(Some(entry)) => entry,
            Ok(None) => return AdmitError::UnverifiedDenial,
            Err(err) => return AdmitError::Ledger(err),
        };
        let RequestStatus::Denied(denial) = entry.status else {
            return AdmitError::UnverifiedDenial;
        };
        let Ok(key) = self.keys.find(&entry.request.key_id) else {
            return AdmitError::UnverifiedDenial;
        };
        match mac::binding(key, call) {
            Ok(binding) if binding.to_hex() == entry.request.binding => {
                AdmitError::Denied { request_id: Some(denial.request_id), reason: denial.reason }
            }
            _ => AdmitError::UnverifiedDenial,
        }
    }

    /// The token does not fit this call. Tell a genuine approval for another call (which fields differ)
    /// from a forged or altered token, using only what the ledger recorded.
    fn diagnose_token(&self, key: &ApprovalKey, call: &BindingInput<'_>, grant_id: &str, token: &[u8]) -> AdmitError {
        let grant = match self.ledger.find_grant(grant_id) {
            Ok(Some(entry)) => entry.grant,
            Ok(None) => return AdmitError::InvalidToken,
            Err(err) => return AdmitError::Ledger(err),
        };
        let Some(granted_binding) = decode_lower_hex::<MAC_LEN>(&grant.binding).map(Binding) else {
            return AdmitError::InvalidToken;
        };
        if grant.key_id != key.id() || !mac::verify_token(key, &granted_binding, grant_id, token) {
            return AdmitError::InvalidToken;
        }
        let differs = match self.ledger.find_request(&grant.request_id) {
            Ok(Some(entry)) => entry
                .request
                .interrupt
                .get(REQUEST_MEMBER)
                .and_then(|body| serde_json::from_value::<RequestBody>(body.clone()).ok())
                .map(|body| differing_fields(&body, call))
                .unwrap_or_default(),
            Ok(None) => Vec::new(),
            Err(err) => return AdmitError::Ledger(err),
        };
        AdmitError::DifferentCall { grant_id: grant_id.to_owned(), differs }
    }
}

/// A resume value verified against the call now being made, not yet spent.
#[derive(Debug, Clone)]
pub(crate) struct PreparedAdmission {
    attempt: SpendAttempt,
    key_id: String,
    /// Operator mode: the grant whose signatures were verified; the spend must spend exactly it.
    verified: Option<Box<GrantRecord>>,
    /// The grants this process spent: a spend the ledger answers for one of them again is refused.
    spent_here: Arc<SpentGrants>,
}

/// The longest a spent grant is remembered: its expiry as the ledger kept it when it was spent, at least the
/// grant time-to-live after the spend, and at most this (a bound on the memory a busy host keeps).
pub(crate) const REMEMBER_AT_MOST: Duration = Duration::from_secs(7 * 24 * 3600);

/// The grants spent through one [`InterruptApprovals`] (and its clones), each remembered until it would have
/// expired. The ledger spends a grant once; a second spend it answers can only come from its row having been
/// set back to live by whoever can write the database, and is refused here. (Another process, or this one
/// restarted, does not know what this one spent: there, a dispatcher whose audit log is an append-only file
/// they share refuses a grant the file records spent, and an operator-mode grant's signed expiry bounds it.)
#[derive(Debug)]
pub(crate) struct SpentGrants {
    /// The approvals' grant time-to-live: the least time a spent grant is remembered.
    grant_ttl: Duration,
    inner: Mutex<SpentInner>,
}

#[derive(Debug, Default)]
struct SpentInner {
    /// Grant id → (when it was spent, until when it is remembered).
    grants: HashMap<String, (Duration, Duration)>,
    /// The number kept after the last sweep of the expired ones: the next sweep comes at twice as many.
    after_sweep: usize,
}

impl SpentGrants {
    pub(super) fn new(grant_ttl: Duration) -> Self {
        SpentGrants { grant_ttl, inner: Mutex::default() }
    }

    /// Records the spend of `spent`; if this process spent that grant before (and still remembers it), when.
    fn first_spend(&self, spent: &SpentRecord) -> Result<(), Duration> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = spent.spent_at;
        if inner.grants.len() >= inner.after_sweep.max(64) * 2 {
            inner.grants.retain(|_, (_, until)| *until > now);
            inner.after_sweep = inner.grants.len();
        }
        if let Some(&(spent_at, until)) = inner.grants.get(&spent.grant.grant_id)
            && until > now
        {
            return Err(spent_at);
        }
        let until = spent
            .grant
            .expires_at
            .max(now.saturating_add(self.grant_ttl))
            .min(now.saturating_add(REMEMBER_AT_MOST.max(self.grant_ttl)));
        inner.grants.insert(spent.grant.grant_id.clone(), (now, until));
        Ok(())
    }
}

impl PreparedAdmission {
    /// The spend to write (the dispatcher writes it with the call's effect reservation and audit record).
    pub(crate) fn attempt(&self) -> &SpendAttempt {
        &self.attempt
    }

    /// What the ledger's answer to the spend means for the call.
    pub(crate) fn admitted(self, spent: Result<SpentRecord, LedgerError>) -> Result<Admission, AdmitError> {
        finish_admission(self, spent)
    }
}

pub(super) fn differing_fields(approved: &RequestBody, call: &BindingInput<'_>) -> Vec<BindingField> {
    let mut differs = Vec::new();
    if approved.tool != call.tool {
        differs.push(BindingField::Tool);
    }
    let same_arguments = match (approved.arguments_digest(), canonical::canonical_object_sha256(call.arguments)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same_arguments {
        differs.push(BindingField::Arguments);
    }
    if approved.call.thread_id != call.thread_id {
        differs.push(BindingField::ThreadId);
    }
    if approved.call.checkpoint_ns != call.checkpoint_ns {
        differs.push(BindingField::CheckpointNs);
    }
    if &approved.call.checkpoint != call.checkpoint {
        differs.push(BindingField::Checkpoint);
    }
    if approved.call.tool_call_id != call.tool_call_id {
        differs.push(BindingField::ToolCallId);
    }
    differs
}

pub(super) fn finish_admission(
    prepared: PreparedAdmission,
    spent: Result<SpentRecord, LedgerError>,
) -> Result<Admission, AdmitError> {
    let grant_id = prepared.attempt.grant_id;
    match spent {
        // The grant spent must be the one whose signatures were checked (not one swapped in since).
        Ok(spent) if prepared.verified.as_deref().is_some_and(|verified| *verified != spent.grant) => {
            tracing::warn!(target: "agent_airlock", %grant_id, "the grant spent differs from the one verified; the call is refused");
            Err(AdmitError::UnsignedGrant { grant_id, detail: "the grant changed while it was being spent".to_owned() })
        }
        Ok(spent) => {
            // Spent before by this process: the ledger's row was set back to live.
            if let Err(first) = prepared.spent_here.first_spend(&spent) {
                tracing::warn!(
                    target: "agent_airlock", %grant_id,
                    "a grant this process spent was spent again (its ledger row was set back to live); the call is refused"
                );
                return Err(AdmitError::AlreadySpent { grant_id, spent_at: first });
            }
            Ok(Admission {
                request_id: spent.grant.request_id,
                grant_id: spent.grant.grant_id,
                key_id: prepared.key_id,
                approver: spent.grant.approver,
                granted_at: spent.grant.granted_at,
                spent_at: spent.spent_at,
            })
        }
        Err(LedgerError::AlreadySpent { grant_id, spent_at }) => Err(AdmitError::AlreadySpent { grant_id, spent_at }),
        Err(LedgerError::UnknownGrant { grant_id }) => Err(AdmitError::UnknownGrant { grant_id }),
        Err(LedgerError::GrantRevoked { grant_id }) => Err(AdmitError::Revoked { grant_id }),
        Err(LedgerError::GrantReplaced { grant_id, by_grant }) => Err(AdmitError::Replaced { grant_id, by_grant }),
        Err(LedgerError::GrantExpired { grant_id, expired_at }) => Err(AdmitError::Expired { grant_id, expired_at }),
        // The token matched the binding, so the ledger's binding differs only if the ledger is not the one
        // that recorded this grant's request.
        Err(LedgerError::BindingMismatch { .. }) => Err(AdmitError::DifferentCall { grant_id, differs: Vec::new() }),
        Err(other) => Err(AdmitError::Ledger(other)),
    }
}

/// What a reply of an admission answers when polled again after its answer was taken.
pub(super) fn admit_writer_stopped() -> AdmitError {
    AdmitError::Ledger(LedgerError::WriterStopped)
}

pub(super) fn malformed(detail: &str) -> AdmitError {
    AdmitError::MalformedGrant { detail: detail.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(grant_id: &str, at_secs: u64, expires_secs: u64) -> SpentRecord {
        let (at, expires_at) = (Duration::from_secs(at_secs), Duration::from_secs(expires_secs));
        SpentRecord { grant: crate::ledger::test_grant(grant_id, at, expires_at), spent_at: at }
    }

    /// A grant spent twice in one process is answered with its first spend while it is remembered (until its
    /// expiry, at least the time-to-live after the spend, at most `REMEMBER_AT_MOST`); the ones no longer
    /// remembered are swept, so what a busy host keeps stays bounded.
    #[test]
    fn a_grant_spent_again_is_refused_while_remembered_and_the_memory_is_swept() {
        let grants = SpentGrants::new(Duration::from_secs(600));
        assert_eq!(grants.first_spend(&spent("g", 1_000, 1_600)), Ok(()));
        assert_eq!(grants.first_spend(&spent("g", 1_500, 1_600)), Err(Duration::from_secs(1_000)));
        // Remembered for the time-to-live after the spend even when the row's expiry was pulled in...
        assert_eq!(grants.first_spend(&spent("h", 1_000, 1_001)), Ok(()));
        assert_eq!(grants.first_spend(&spent("h", 1_599, 1_001)), Err(Duration::from_secs(1_000)));
        // ...and no longer than `REMEMBER_AT_MOST` when it was pushed out.
        assert_eq!(grants.first_spend(&spent("i", 1_000, u64::MAX / 4)), Ok(()));
        let forgotten = 1_000 + REMEMBER_AT_MOST.as_secs();
        assert_eq!(grants.first_spend(&spent("i", forgotten, u64::MAX / 4)), Ok(()));
        // Many spends, then later ones: the forgotten are swept.
        for n in 0..1_000 {
            assert_eq!(grants.first_spend(&spent(&format!("many{n}"), 2_000, 2_600)), Ok(()));
        }
        for n in 0..200 {
            assert_eq!(grants.first_spend(&spent(&format!("late{n}"), 10_000, 10_600)), Ok(()));
        }
        let kept = grants.inner.lock().unwrap().grants.len();
        assert!(kept < 400, "{kept} remembered");
    }
}
