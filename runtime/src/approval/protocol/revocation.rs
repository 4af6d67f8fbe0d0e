//! Denials that record the grant they revoke in the hosts' append-only audit file, **before** the ledger's
//! write ([`InterruptApprovals::with_revocation_log`]).
//!
//! A denial of an approved, unspent request revokes its grant in the ledger. Whoever holds the database can
//! set that row back to live; a host sharing an append-only audit file refuses a grant whose revocation a
//! record of that file names (as it refuses one whose spend it names). So the revocation is written to the
//! file first, then the ledger's denial: recorded after, a holder who revives the row the instant it is
//! denied (a trigger) would have the window between the two for a host to admit it. The cost of this
//! order: if the grant's call is admitted between the two, the file says "revoked" for a grant the ledger
//! shows spent and the denial fails; refusing is the safe side. A grant issued between the ledger read and
//! the denial (another approver's) is recorded right after the denial.
//!
//! The steps read the ledger and write the file, both blocking, so a denial runs them on a thread of its
//! own and answers through a [`Reply`]: awaited, it does not block the executor, and dropped, it does not
//! cancel the denial.

use std::sync::Arc;

use super::decide::decision_writer_stopped;
use super::error::{DecisionError, decision_ledger_error};
use super::message::denied_resume;
use super::{InterruptApprovals, ResumeValue};
use crate::approval::display::escape;
use crate::audit::AuditLog;
use crate::echo::fragment;
use crate::ledger::{ApprovalLedger, DenialRecord, RequestStatus};
use crate::store::Reply;

impl InterruptApprovals {
    /// Denials and closings through these approvals (and their clones, and a dispatcher holding them)
    /// record the grant they revoke in `log` before the ledger's write (see the module docs): give it the
    /// append-only audit file the hosts share ([`AuditLog::open_append_only`]), so that they refuse the grant
    /// even if the ledger's row is later set back to live by whoever holds the database. In a log of another
    /// store the record is written all the same, for the history, but no host reads it back.
    ///
    /// A denial (or closing) of a request whose ledger entry holds a grant that is not the request's (its
    /// id or binding differs from the sealed request's) is then refused with nothing written
    /// ([`DecisionError::ForeignGrant`]); one whose revocation cannot be recorded denies nothing
    /// ([`DecisionError::RevocationNotRecorded`]).
    pub fn with_revocation_log(mut self, log: Arc<AuditLog>) -> Self {
        self.revocations = Some(log);
        self
    }

    /// The ledger's denial of `denial`, its grant's revocation recorded in `log` first (and any grant the
    /// denial revoked that was issued meanwhile, after), on a thread of its own.
    pub(super) fn revoke_and_deny(
        &self,
        log: &Arc<AuditLog>,
        binding: String,
        denial: DenialRecord,
    ) -> Reply<ResumeValue, DecisionError> {
        let (ledger, log) = (Arc::clone(&self.ledger), Arc::clone(log));
        on_a_thread(move || {
            let recorded = record_first(&log, &*ledger, &binding, &denial)?;
            let denied = ledger.deny(denial).wait().map_err(decision_ledger_error);
            let denied = after_the_denial(recorded.as_deref(), denied)?;
            record_after(&log, &*ledger, &denied, recorded.as_deref())?;
            Ok(denied_resume(&denied))
        })
    }
}

/// Runs `job` on a thread of its own; the reply answers with its outcome (a "writer stopped" fault if the
/// thread could not be started).
pub(super) fn on_a_thread<T: Send + 'static>(
    job: impl FnOnce() -> Result<T, DecisionError> + Send + 'static,
) -> Reply<T, DecisionError> {
    let (sender, reply) = Reply::channel_or(decision_writer_stopped);
    let spawned = std::thread::Builder::new().name("airlock-revocation".into()).spawn(move || sender.send(job()));
    if let Err(error) = spawned {
        // The sender went with the closure: the reply answers "stopped", and the job did not run.
        tracing::error!(target: "agent_airlock", %error, "cannot start a thread to record a revocation");
    }
    reply
}

/// Before `denial`'s ledger write: records the revocation of the request's grant, if the ledger shows one
/// approved and unspent (the grant a denial revokes); returns its id. The grant must be the sealed request's
/// (its id and `binding`), else nothing is written.
pub(super) fn record_first(
    log: &AuditLog,
    ledger: &dyn ApprovalLedger,
    binding: &str,
    denial: &DenialRecord,
) -> Result<Option<String>, DecisionError> {
    let request_id = &denial.request_id;
    let entry = ledger
        .find_request(request_id)
        .map_err(decision_ledger_error)?
        .ok_or_else(|| DecisionError::UnknownRequest { request_id: request_id.clone() })?;
    let RequestStatus::Granted(grant) = &entry.status else { return Ok(None) };
    if grant.request_id != *request_id || grant.binding != binding {
        return Err(DecisionError::ForeignGrant { request_id: request_id.clone(), grant_id: shown(&grant.grant_id) });
    }
    log.append_revocation(&entry.request, &grant.grant_id, &escape(&denial.denied_by))
        .map_err(|source| DecisionError::RevocationNotRecorded { grant_id: shown(&grant.grant_id), source })?;
    Ok(Some(grant.grant_id.clone()))
}

/// The ledger's answer to a denial made after `recorded`'s revocation was written: a failure says that the
/// file names the grant revoked all the same.
pub(super) fn after_the_denial(
    recorded: Option<&str>,
    denied: Result<DenialRecord, DecisionError>,
) -> Result<DenialRecord, DecisionError> {
    match (recorded, denied) {
        (Some(grant_id), Err(error)) => {
            Err(DecisionError::RevokedNotDenied { grant_id: grant_id.to_owned(), source: Box::new(error) })
        }
        (_, denied) => denied,
    }
}

/// After the ledger's denial: records the grant it revoked if it is not `recorded` (a grant issued between
/// the ledger read and the denial).
pub(super) fn record_after(
    log: &AuditLog,
    ledger: &dyn ApprovalLedger,
    denied: &DenialRecord,
    recorded: Option<&str>,
) -> Result<(), DecisionError> {
    let Some(revoked) = &denied.revoked_grant else { return Ok(()) };
    if recorded == Some(revoked.as_str()) {
        return Ok(());
    }
    let unrecorded = |detail: String| DecisionError::DeniedRevocationNotRecorded { grant_id: shown(revoked), detail };
    let entry = ledger.find_request(&denied.request_id).map_err(|error| unrecorded(error.to_string()))?;
    let entry = entry.ok_or_else(|| unrecorded("the request is no longer in the ledger".to_owned()))?;
    log.append_revocation(&entry.request, revoked, &escape(&denied.denied_by))
        .map(drop)
        .map_err(|error| unrecorded(error.to_string()))
}

/// A grant id as the ledger holds it, for an error: cut short and escaped (whoever holds the database wrote it).
fn shown(grant_id: &str) -> String {
    escape(fragment(grant_id).as_ref()).into_owned()
}
