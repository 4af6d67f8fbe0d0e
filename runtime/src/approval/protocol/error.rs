//! Why an approval step refused. Messages name what went wrong and never contain key material.

use std::fmt;
use std::time::Duration;

use crate::approval::display::DisplayError;
use crate::audit::AuditError;
use crate::canonical::CanonicalError;
use crate::ledger::LedgerError;

/// Why [`InterruptApprovals::request`](super::InterruptApprovals::request) could not issue a request.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The arguments have no canonical form (e.g. an integer beyond ±(2^53 − 1)): the call is refused.
    #[error("the call's arguments cannot be bound: {0}")]
    Arguments(#[source] CanonicalError),
    /// The system random source failed.
    #[error("the system random source failed: {0}")]
    Randomness(String),
    /// The ledger did not record the request.
    #[error("the approval request was not recorded: {0}")]
    Ledger(#[source] LedgerError),
    /// The call cannot be shown to a human in full (it is too long), so no human is asked and nothing is
    /// recorded: the call is refused.
    #[error("the call cannot be shown to a human in full, so no approval is asked: {0}")]
    CannotShow(#[source] DisplayError),
}

/// Why a request's call cannot be shown to a human exactly and in full, and so cannot be approved
/// ([`InterruptRequest::render`](super::InterruptRequest::render)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShowError {
    /// A request of version 2 stored its arguments masked with the tool's mask set: what it holds is not
    /// what the grant would cover.
    #[error(
        "request version {version} stored its arguments masked, so the call cannot be shown exactly; it cannot be \
         approved (deny it, and let the call ask again)"
    )]
    MaskedArguments {
        /// The request's version.
        version: u64,
    },
    /// The arguments to be shown do not have the digest the binding covers.
    #[error("the arguments to be shown do not have the digest the binding covers")]
    DigestMismatch,
    /// Its text would exceed the display limit.
    #[error(transparent)]
    TooLong(#[from] DisplayError),
}

/// Why a human's decision (approve or deny) on a request was not recorded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The approval is recorded, but the request needs more distinct approvers: no grant yet, and no
    /// resume value. The call waits until the last one needed approves (or anyone denies).
    #[error(
        "approval recorded ({} of {required}: {}); the request needs {} more distinct approver(s) before it can run",
        approvers.len(), approvers.join(", "), (*required as usize).saturating_sub(approvers.len())
    )]
    MoreApproversNeeded {
        /// Who approved so far, in order.
        approvers: Vec<String>,
        /// How many distinct approvers the request needs.
        required: u32,
    },
    /// The value is not `{"airlock_approval": {...}}`.
    #[error("not an approval request: expected an object with one member, `airlock_approval`")]
    NotARequest,
    /// A member is missing or has the wrong type.
    #[error("malformed approval request: {detail}")]
    Malformed {
        /// What is wrong.
        detail: String,
    },
    /// The request names a key the ring does not have.
    #[error("approval request made under unknown key `{key_id}`")]
    UnknownKey {
        /// The key id named.
        key_id: String,
    },
    /// The request was made under a retired key and the ring refuses those.
    #[error("approval request made under retired key `{key_id}`, which this key ring refuses")]
    RetiredKey {
        /// The key id named.
        key_id: String,
    },
    /// The seal does not match: the request was altered after it was issued, or not issued by this key.
    #[error(
        "approval request seal does not match: the request was altered after it was issued, or was not issued with this key"
    )]
    SealMismatch,
    /// A request version this build does not know.
    #[error("approval request version {version} is not supported (this build reads versions 1, 2 and 3 and issues 3)")]
    UnsupportedVersion {
        /// The version found.
        version: u64,
    },
    /// The sealed binding does not follow from the sealed call and arguments.
    #[error("approval request binding does not match its own call and arguments")]
    InconsistentBinding,
    /// The call cannot be shown to a human exactly and in full, so it cannot be approved (it can be denied).
    #[error("the call cannot be approved: {0}")]
    CannotShow(#[source] ShowError),
    /// The request is older than the request time-to-live.
    #[error("approval request expired at {} ms since the epoch; the call must be made again", .expired_at.as_millis())]
    RequestExpired {
        /// When it expired.
        expired_at: Duration,
    },
    /// No approver (or denier) was named.
    #[error("a decision needs the name of who made it")]
    MissingDecider,
    /// Operator mode: a decision must be signed with an operator's key
    /// ([`approve_signed`](super::InterruptApprovals::approve_signed)).
    #[error("this host counts only signed decisions: approve or deny with an operator's signing key")]
    SignatureRequired,
    /// The decision could not be signed.
    #[error("the decision could not be signed: {0}")]
    Signing(String),
    /// Operator mode: the recorded grant is not signed by as many distinct listed, unrevoked operator
    /// credentials as the request needs. It admits nothing.
    #[error("the recorded grant `{grant_id}` is not signed by enough operators, so it admits nothing: {detail}")]
    UnsignedGrant {
        /// The grant.
        grant_id: String,
        /// What is wrong (names, never key material).
        detail: String,
    },
    /// The ledger has no such request.
    #[error("approval request `{request_id}` is not in the ledger")]
    UnknownRequest {
        /// The request id.
        request_id: String,
    },
    /// The request was denied already.
    #[error("approval request `{request_id}` was already denied by `{denied_by}`")]
    AlreadyDenied {
        /// The request id.
        request_id: String,
        /// Who denied it.
        denied_by: String,
    },
    /// The request's grant was spent: its call already ran.
    #[error("approval request already used: grant `{grant_id}` was spent at {} ms since the epoch", .spent_at.as_millis())]
    AlreadySpent {
        /// The grant.
        grant_id: String,
        /// When.
        spent_at: Duration,
    },
    /// The ledger's entry for the request holds a grant that is not the request's (its id or binding differs
    /// from the sealed request's): the database was changed. With a revocation log
    /// ([`with_revocation_log`](super::InterruptApprovals::with_revocation_log)), nothing is recorded or denied.
    #[error(
        "the ledger's grant `{grant_id}` for request `{request_id}` is not that request's (its id or binding \
         differs): the database was changed; nothing was denied"
    )]
    ForeignGrant {
        /// The request denied.
        request_id: String,
        /// The grant its entry holds (cut short and escaped: it is the database's, not ours).
        grant_id: String,
    },
    /// The revocation of the request's grant could not be recorded in the revocation log: nothing was denied.
    #[error(
        "the revocation of grant `{grant_id}` could not be recorded in the audit file: {source}; nothing was denied"
    )]
    RevocationNotRecorded {
        /// The grant the denial would have revoked.
        grant_id: String,
        /// Why the record failed.
        #[source]
        source: AuditError,
    },
    /// The grant's revocation was recorded in the revocation log, then the ledger's denial failed: hosts
    /// writing that log refuse the grant all the same (a call admitted in between leaves it spent).
    #[error(
        "{source}. The audit file records grant `{grant_id}` revoked (written before the denial), so hosts writing \
         it refuse that grant"
    )]
    RevokedNotDenied {
        /// The grant recorded revoked.
        grant_id: String,
        /// Why the denial failed.
        #[source]
        source: Box<DecisionError>,
    },
    /// The request was denied, but the grant its denial revoked (issued after the log was read, by another
    /// approver) could not be recorded in the revocation log. The denial stands
    /// ([`recorded_decision_blocking`](super::InterruptApprovals::recorded_decision_blocking) answers it).
    #[error(
        "the request was denied, but the revocation of grant `{grant_id}` could not be recorded in the audit file: \
         {detail}"
    )]
    DeniedRevocationNotRecorded {
        /// The grant the denial revoked.
        grant_id: String,
        /// Why the record failed.
        detail: String,
    },
    /// The system random source failed.
    #[error("the system random source failed: {0}")]
    Randomness(String),
    /// The ledger failed.
    #[error("the decision was not recorded: {0}")]
    Ledger(#[source] LedgerError),
}

/// What part of a call differs from the call an approval was given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindingField {
    /// The tool name.
    Tool,
    /// The arguments.
    Arguments,
    /// The thread id.
    ThreadId,
    /// The checkpoint namespace.
    CheckpointNs,
    /// The checkpoint map (e.g. resumed from another checkpoint).
    Checkpoint,
    /// The tool call id.
    ToolCallId,
}

impl fmt::Display for BindingField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindingField::Tool => "tool",
            BindingField::Arguments => "arguments",
            BindingField::ThreadId => "thread id",
            BindingField::CheckpointNs => "checkpoint namespace",
            BindingField::Checkpoint => "checkpoint",
            BindingField::ToolCallId => "tool call id",
        })
    }
}

/// Why a resumed call was not admitted. Every variant is a refusal: the call does not run.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AdmitError {
    /// The resume value is not an approval (e.g. `false`, `"no"`): any other value is a no.
    #[error("the resume value is not an approval (expected `{{\"airlock_grant\": {{...}}}}`), so the call is refused")]
    NotAnApproval,
    /// A human denied this call: the denial is recorded in the ledger, for a request whose binding is this
    /// call's.
    #[error("a human denied this call{}", reason_suffix(.reason))]
    Denied {
        /// The denied request.
        request_id: Option<String>,
        /// Why, in the human's words, as the ledger recorded them (never the resume value's).
        reason: Option<String>,
    },
    /// The resume value claims a denial the ledger does not hold for this call (forged, altered, or
    /// another call's): a no, but nobody's words.
    #[error("the resume value claims a denial that is not recorded for this call, so the call is refused")]
    UnverifiedDenial,
    /// `airlock_grant` is present but a member is missing or malformed.
    #[error("malformed approval in the resume value: {detail}")]
    MalformedGrant {
        /// What is wrong.
        detail: String,
    },
    /// The approval names a key the ring does not have.
    #[error("approval made under unknown key `{key_id}`")]
    UnknownKey {
        /// The key id named.
        key_id: String,
    },
    /// The approval was made under a retired key and the ring refuses those.
    #[error("approval made under retired key `{key_id}`, which this key ring refuses")]
    RetiredKey {
        /// The key id named.
        key_id: String,
    },
    /// The call's arguments have no canonical form.
    #[error("the call's arguments cannot be bound: {0}")]
    Arguments(#[source] CanonicalError),
    /// The token is not valid for this call under the named key, and matches no grant in the ledger:
    /// forged, or altered.
    #[error("the approval token is invalid: it was not issued by this key for any recorded grant")]
    InvalidToken,
    /// A genuine approval, given for another call.
    #[error("the approval was given for another call: {} differ{}", list(.differs), if .differs.len() == 1 { "s" } else { "" })]
    DifferentCall {
        /// The grant presented.
        grant_id: String,
        /// What differs between the approved call and this one (empty when the ledger no longer shows).
        differs: Vec<BindingField>,
    },
    /// The grant was spent already: a replay, or a resume from before the call ran.
    #[error("the approval was already used: grant `{grant_id}` was spent at {} ms since the epoch", .spent_at.as_millis())]
    AlreadySpent {
        /// The grant.
        grant_id: String,
        /// When.
        spent_at: Duration,
    },
    /// The ledger has no such grant.
    #[error("approval grant `{grant_id}` is not in the ledger")]
    UnknownGrant {
        /// The grant.
        grant_id: String,
    },
    /// A later denial revoked the grant.
    #[error("approval grant `{grant_id}` was revoked by a denial")]
    Revoked {
        /// The grant.
        grant_id: String,
    },
    /// The grant was spent, but the admission's record could not be appended to the append-only audit file
    /// that shows whether the grant was spent or revoked before (by another host, or an operator), so that
    /// could not be checked: the call is refused, and the grant stays spent.
    #[error(
        "approval grant `{grant_id}` was spent, but its admission could not be recorded in the audit file that shows \
         whether it was spent or revoked before, so the call is refused"
    )]
    Unrecorded {
        /// The grant.
        grant_id: String,
    },
    /// The grant expired and the request was approved again: the newer approval is the one to use.
    #[error("approval grant `{grant_id}` expired and was replaced by grant `{by_grant}`")]
    Replaced {
        /// The grant.
        grant_id: String,
        /// The newer grant.
        by_grant: String,
    },
    /// The grant expired unspent.
    #[error("the approval expired at {} ms since the epoch", .expired_at.as_millis())]
    Expired {
        /// The grant.
        grant_id: String,
        /// When.
        expired_at: Duration,
    },
    /// Operator mode: the grant is not signed by as many distinct listed, unrevoked operator credentials
    /// as its request needs (unsigned, forged, revoked, or signed for another request): it admits nothing.
    #[error("approval grant `{grant_id}` is not signed by enough operators: {detail}")]
    UnsignedGrant {
        /// The grant.
        grant_id: String,
        /// What is wrong (names, never key material).
        detail: String,
    },
    /// The ledger failed. Nothing was spent, unless the failure hid the answer of a spend that took
    /// effect (a connection lost during `COMMIT`): the grant is then spent and its call never ran.
    #[error("the approval could not be checked against the ledger: {0}")]
    Ledger(#[source] LedgerError),
}

fn reason_suffix(reason: &Option<String>) -> String {
    match reason {
        Some(reason) => format!(": {reason}"),
        None => String::new(),
    }
}

fn list(fields: &[BindingField]) -> String {
    if fields.is_empty() {
        return "its binding".to_owned();
    }
    fields.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// A ledger's refusal of a decision, as the decision's error (a request already decided or spent says so).
pub(super) fn decision_ledger_error(error: LedgerError) -> DecisionError {
    match error {
        LedgerError::UnknownRequest { request_id } => DecisionError::UnknownRequest { request_id },
        LedgerError::AlreadyDenied(denial) => {
            DecisionError::AlreadyDenied { request_id: denial.request_id, denied_by: denial.denied_by }
        }
        LedgerError::AlreadySpent { grant_id, spent_at } => DecisionError::AlreadySpent { grant_id, spent_at },
        other => DecisionError::Ledger(other),
    }
}
