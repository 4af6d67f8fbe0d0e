//! Gate 7, admission: one durable write that spends a verified approval and reserves the call's effect
//! key, all or nothing, after every gate that can still refuse. A refusal here leaves the grant live and
//! gives the rate tokens back; but for a spend that landed and turned out to have spent another grant than
//! the one verified, or a grant a shared append-only audit file records spent or revoked before, or whose
//! record that file could not take, which leaves the grant spent and settles the reservation as not run.

use std::sync::Arc;

use super::call::Call;
use super::dispatcher::{Dispatcher, Entry};
use super::durable_write::{self, DurableWrite, NotDecided};
use super::effect_guard::EffectGuard;
use super::refusal::{self, Refused};
use crate::approval::AdmitError;
use crate::approval::protocol::PreparedAdmission;
use crate::audit::{AuditOutcome, AuditReceipt, Closed};
use crate::effect::{Reservation, Settle};
use crate::ledger::{EffectClaim, LedgerError, SpentRecord};

impl Dispatcher {
    /// Whether gate 7 writes anything: an effect key to reserve in an effect store, or an approval across
    /// an interrupt to spend. Otherwise a human's approval is recorded with the settlement.
    #[inline]
    pub(super) fn admission_writes(&self, effect_key: Option<&String>, resumed: Option<&PreparedAdmission>) -> bool {
        (effect_key.is_some() && self.effects.is_some()) || (resumed.is_some() && self.interrupt_approvals().is_some())
    }

    /// Gate 7: the admission's write, its reservation held by a guard while the tool runs. A refusal gives
    /// back gate 6's tokens: the enforced rules' and, if it took them, the observed ones'.
    pub(super) async fn admit(
        &self,
        call: &mut Call<'_>,
        entry: &Entry,
        effect_key: Option<String>,
        resumed: Option<PreparedAdmission>,
        observed_taken: bool,
    ) -> Result<Option<EffectGuard>, Refused> {
        match self.admission(call, effect_key, resumed).await {
            Ok(reservation) => Ok(reservation.zip(self.effects.as_ref()).map(|(reservation, store)| {
                EffectGuard::new(Arc::clone(store), reservation, Arc::clone(&self.clock))
                    .renewed_by(&self.lease_keeper, self.effect_lease)
            })),
            Err(refused) => {
                let (thread, now) = (call.context.rate_subject(), self.clock.now());
                self.give_back(&entry.enforced, thread, now).await;
                if observed_taken {
                    self.give_back(&entry.observed, thread, now).await;
                }
                Err(refused)
            }
        }
    }

    /// Gate 7, one durable write: spends a verified approval, reserves the effect key and records the
    /// approval, all or nothing.
    async fn admission(
        &self,
        call: &mut Call<'_>,
        effect_key: Option<String>,
        resumed: Option<PreparedAdmission>,
    ) -> Result<Option<Reservation>, Refused> {
        let name = call.name;
        let now = self.clock.now();
        // `run_gates` comes here only when there is something to write (`admission_writes`); a call without
        // one skips gate 7, and a human's approval is recorded with the settlement.
        debug_assert!(self.admission_writes(effect_key.as_ref(), resumed.as_ref()), "gate 7 with nothing to write");
        let claim =
            effect_key.filter(|_| self.effects.is_some()).map(|key| EffectClaim { key, lease: self.effect_lease });
        let resumed = resumed.zip(self.interrupt_approvals());
        let earlier = std::mem::take(&mut call.trail.pending);
        let mut entries = earlier.clone();
        if resumed.is_some() {
            // Its detail names the grant, once the write has spent it.
            entries.extend(call.record(AuditOutcome::Approved));
        }
        let audited = self.audit.is_some() && !entries.is_empty();
        let decision = DurableWrite {
            now,
            spend: resumed.as_ref().map(|(prepared, _)| prepared.attempt().clone()),
            reserve: claim,
            audit: self.audit.as_ref().filter(|_| !entries.is_empty()).map(|log| log.appending(entries)),
            ..DurableWrite::default()
        };
        let answer = self.decide(decision).await;
        let refused = |call: &mut Call<'_>, refused: Refused| {
            // Nothing was written: what happened before the admission is recorded with the refusal.
            call.trail.pending = earlier.clone();
            Err(refused)
        };
        let Some((prepared, _)) = resumed else {
            return match answer {
                Ok(Ok(decided)) => Ok(decided.reservation),
                Ok(Err(NotDecided::Effect(err))) => refused(call, refusal::effect(name, err, now)),
                Ok(Err(NotDecided::Spend(err))) | Err(err) => {
                    refused(call, refusal::effect(name, durable_write::effect_fault(err), now))
                }
            };
        };
        let rules = call.trail.rule.clone().unwrap_or_default();
        let (spent, reservation, written, unchecked) = match answer {
            Ok(Ok(decided)) => {
                // The admission's record is what a shared append-only file is checked by: without it, whether
                // the grant was spent or revoked before (its ledger row set back to live) cannot be told.
                let unchecked = audited
                    && decided.receipts.is_empty()
                    && self.audit.as_ref().is_some_and(|log| log.knows_closings());
                let spent = decided.spent.ok_or(LedgerError::WriterStopped);
                let spent = spent.and_then(|spent| self.not_spent_before(spent, decided.receipts.last()));
                (spent, decided.reservation, true, unchecked)
            }
            Ok(Err(NotDecided::Effect(err))) => return refused(call, refusal::effect(name, err, now)),
            Ok(Err(NotDecided::Spend(err))) | Err(err) => (Err(err), None, false, false),
        };
        let admitted = prepared.admitted(spent).and_then(|admission| {
            if !unchecked {
                return Ok(admission);
            }
            tracing::error!(
                target: "agent_airlock", grant_id = %admission.grant_id,
                "an approved call's admission could not be recorded in the append-only audit file; the call is refused"
            );
            Err(AdmitError::Unrecorded { grant_id: admission.grant_id })
        });
        match admitted {
            Ok(admission) => {
                tracing::info!(
                    target: "agent_airlock",
                    outcome = "approved",
                    rules = %rules,
                    grant_id = %admission.grant_id,
                    approver = %admission.approver,
                    "approval spent"
                );
                call.trail.detail = Some(format!("grant {} by {}", admission.grant_id, admission.approver));
                Ok(reservation)
            }
            // The write landed (the spend, the reservation, the records), but what it spent is not what was
            // verified (a grant swapped in between): the call does not run. Its reservation is settled as not
            // run with the refusal's record, so the key stays free for a properly approved call rather than
            // held until its lease lapses and then blocked as ambiguous; the records written are not queued
            // again.
            Err(not_admitted) if written => {
                call.trail.settle = reservation.map(|reservation| (reservation, Settle::Fail));
                Err(refusal::not_admitted(name, &rules, not_admitted))
            }
            Err(not_admitted) => refused(call, refusal::not_admitted(name, &rules, not_admitted)),
        }
    }

    /// The grant just spent, unless the audit log records its spend or its revocation before `ours` (the
    /// `approved` record this spend appended): an append-only file another host or an operator
    /// (`airlock deny --audit-file`) shares, or that this host wrote before it restarted, where the spend or
    /// revocation of a grant whose ledger row was since set back to live is still written. The file's lock
    /// orders the writers' records: of two hosts spending one revived grant, the one whose record comes first
    /// runs the call, the other has read that record before appending its own.
    fn not_spent_before(&self, spent: SpentRecord, ours: Option<&AuditReceipt>) -> Result<SpentRecord, LedgerError> {
        let grant_id = &spent.grant.grant_id;
        let earlier = ours.zip(self.audit.as_ref()).and_then(|(ours, log)| log.closed_before(grant_id, ours.seq));
        let Some(closed) = earlier else { return Ok(spent) };
        let (how, error) = match closed {
            Closed::Spent { at } => ("spent", LedgerError::AlreadySpent { grant_id: grant_id.clone(), spent_at: at }),
            Closed::Revoked { .. } => ("revoked", LedgerError::GrantRevoked { grant_id: grant_id.clone() }),
        };
        tracing::warn!(
            target: "agent_airlock",
            grant_id = %grant_id,
            recorded = how,
            "the audit log records this grant spent or revoked before (its ledger row was set back to live); the call is refused"
        );
        Err(error)
    }
}
