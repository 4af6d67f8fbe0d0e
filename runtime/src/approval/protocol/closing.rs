//! Closing a request nobody will decide: the call was cancelled, its wait timed out, or the answer could
//! not be recorded. The denial that closes it also revokes a grant recorded meanwhile, so it is a closing
//! write (see `store::closing`): retried until it lands, never dropped after one failure.
//!
//! Two ways in. A host that holds the interrupt value and gives up on it calls
//! [`InterruptApprovals::close`]. And a dispatch dropped after its request was recorded but before the
//! interrupt reached the host (a client cancelling while the request or its audit record is being
//! written) leaves a request nobody can resume, yet an operator can still approve: the dispatcher holds
//! an [`IssuedRequest`] from the moment the request is written until the interrupt is handed over, and
//! dropped still armed it closes the request.

use std::sync::Arc;
use std::time::Duration;

use super::error::decision_ledger_error;
use super::message::denied_resume;
use super::revocation::{after_the_denial, on_a_thread, record_after, record_first};
use super::{DecisionError, InterruptApprovals, ResumeValue};
use crate::audit::AuditLog;
use crate::clock::Clock;
use crate::ledger::{ApprovalLedger, DenialRecord, LedgerError};
use crate::store::closing::Closing;

/// Who closes a request in the ledger's records.
pub(crate) const CLOSED_BY: &str = "agent-airlock";

/// Whether a failed closing denial may land if written again: a fault of the storage, or a request not
/// (yet) found, whose own write may still be on its way (PostgreSQL runs transactions concurrently).
fn worth_retrying(error: &LedgerError) -> bool {
    error.is_fault() || matches!(error, LedgerError::UnknownRequest { .. })
}

fn closing(
    ledger: Arc<dyn ApprovalLedger>,
    denial: DenialRecord,
    patience: Duration,
) -> Closing<DenialRecord, LedgerError> {
    let subject = format!("approval request `{}`", denial.request_id);
    Closing::new(subject, move || ledger.deny(denial.clone()), worth_retrying, patience)
}

impl InterruptApprovals {
    /// Closes a request whose call will not be resumed (cancelled, timed out, its answer lost): records a
    /// denial by `closed_by` with `reason`, revoking an unspent grant, so that nobody can approve it later
    /// out of band. Unlike [`deny`](Self::deny), a fault of the ledger does not end it: the denial is
    /// written again until it lands, for up to the closing patience
    /// ([`with_closing_patience`](Self::with_closing_patience)), and then reported as an error.
    ///
    /// With a [revocation log](Self::with_revocation_log), a grant the closing revokes is recorded there
    /// before the ledger's write, as a denial's is; unlike a denial, a closing whose record fails still closes
    /// the request (then records the grant if it can, else answers
    /// [`DecisionError::DeniedRevocationNotRecorded`]).
    ///
    /// A request whose grant was already spent cannot be closed: its call was admitted
    /// ([`DecisionError::AlreadySpent`]).
    pub async fn close(
        &self,
        interrupt: &serde_json::Value,
        closed_by: &str,
        reason: Option<&str>,
    ) -> Result<ResumeValue, DecisionError> {
        let (denial, request) = self.prepare_denial(interrupt, closed_by, reason)?;
        // With a revocation log, the grant the closing revokes is recorded there first (`revocation`). A closing
        // must land, so one whose record fails (the file, or the ledger's read) closes the request all the same,
        // and the grant is recorded after the denial if it can be.
        let recorded = match &self.revocations {
            Some(log) => {
                let (ledger, log, first) = (Arc::clone(&self.ledger), Arc::clone(log), denial.clone());
                match on_a_thread(move || record_first(&log, &*ledger, &request.binding, &first)).await {
                    Ok(recorded) => recorded,
                    Err(error) => {
                        tracing::error!(
                            target: "agent_airlock", request_id = %denial.request_id, %error,
                            "a closing's revocation could not be recorded first; the request is closed all the same"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let first = self.ledger.deny(denial.clone()).await;
        let denied = match first {
            Err(error) if worth_retrying(&error) => {
                tracing::warn!(target: "agent_airlock", request_id = %denial.request_id, %error, "closing an approval request failed; writing it again");
                let retry = closing(Arc::clone(&self.ledger), denial, self.closing_patience);
                retry.land_in_background().await
            }
            answered => answered,
        };
        let denied = after_the_denial(recorded.as_deref(), denied.map_err(decision_ledger_error))?;
        if let Some(log) = &self.revocations {
            let (ledger, log, after) = (Arc::clone(&self.ledger), Arc::clone(log), denied.clone());
            on_a_thread(move || record_after(&log, &*ledger, &after, recorded.as_deref())).await?;
        }
        Ok(denied_resume(&denied))
    }

    /// How long a closing denial ([`close`](Self::close), and the one that ends a request whose dispatch
    /// was dropped) is written again after faults before it is reported as lost
    /// ([`DEFAULT_CLOSING_PATIENCE`](crate::approval::DEFAULT_CLOSING_PATIENCE) unless set).
    pub fn with_closing_patience(mut self, patience: Duration) -> Self {
        self.closing_patience = patience;
        self
    }

    /// A guard for request `request_id`, about to be written: armed until [`IssuedRequest::handed_over`].
    pub(crate) fn issued(&self, request_id: &str) -> IssuedRequest {
        IssuedRequest {
            ledger: Arc::clone(&self.ledger),
            clock: Arc::clone(&self.clock),
            patience: self.closing_patience,
            request_id: Some(request_id.to_owned()),
            revocations: self.revocations.clone(),
        }
    }
}

/// A recorded request whose interrupt has not reached the host yet. Dropped before
/// [`handed_over`](Self::handed_over), it closes the request (see the module docs).
pub(crate) struct IssuedRequest {
    ledger: Arc<dyn ApprovalLedger>,
    clock: Arc<dyn Clock>,
    patience: Duration,
    request_id: Option<String>,
    /// Where the grant the closing revokes is recorded, if it revokes one (issued in the instant between the
    /// request's write and the dispatch's drop): after the denial, as a destructor cannot read the ledger first.
    revocations: Option<Arc<AuditLog>>,
}

impl IssuedRequest {
    /// The interrupt reached the host, which now decides what becomes of the request.
    pub(crate) fn handed_over(mut self) {
        self.request_id = None;
    }

    /// The request was not recorded: there is nothing to close.
    pub(crate) fn not_recorded(mut self) {
        self.request_id = None;
    }
}

impl Drop for IssuedRequest {
    fn drop(&mut self) {
        let Some(request_id) = self.request_id.take() else { return };
        tracing::warn!(
            target: "agent_airlock", %request_id,
            "a dispatch was dropped before its approval request reached the host; closing the request"
        );
        let denial = DenialRecord {
            request_id,
            denied_by: CLOSED_BY.to_owned(),
            reason: Some("closed: the call was cancelled before its approval was asked".to_owned()),
            denied_at: self.clock.now(),
            revoked_grant: None,
            signature: None,
        };
        // Queued now, behind the request's own write; a destructor cannot wait, so the retries run on a
        // thread of their own, which reports if the denial never lands.
        let landing = closing(Arc::clone(&self.ledger), denial, self.patience).land_in_background();
        if let Some(log) = self.revocations.take() {
            let ledger = Arc::clone(&self.ledger);
            drop(on_a_thread(move || {
                // A closing that never lands is reported by its own thread.
                let Ok(denied) = landing.wait() else { return Ok(()) };
                let recorded = record_after(&log, &*ledger, &denied, None);
                if let Err(error) = &recorded {
                    tracing::error!(target: "agent_airlock", %error, "closing a dropped dispatch's request revoked a grant the revocation log does not record");
                }
                recorded
            }));
        }
    }
}
