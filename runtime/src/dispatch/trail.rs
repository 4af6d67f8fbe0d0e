//! The facts of one dispatch, gathered along the gates for its audit records and its settlement.

use serde_json::Value;

use crate::approval::protocol::IssuedRequest;
use crate::audit::{AuditEntry, AuditEvent, AuditLog, AuditOutcome};
use crate::context::CallContext;
use crate::effect::{Reservation, Settle};
use crate::message::RefusalKind;

/// What the audit record of one dispatch says, and what is still to be written.
#[derive(Default)]
pub(super) struct Trail {
    pub(super) outcome: Option<AuditOutcome>,
    pub(super) rule: Option<String>,
    pub(super) detail: Option<String>,
    pub(super) arguments: Option<Value>,
    pub(super) result: Option<Value>,
    /// Records prepared along the way (a human's approval during the call) and written with the next
    /// durable write of the dispatch: its admission, or its settlement.
    pub(super) pending: Vec<AuditEntry>,
    /// The reserved effect and how the tool's outcome settles it, written with the final record.
    pub(super) settle: Option<(Reservation, Settle)>,
    /// The approval request this dispatch recorded, until its interrupt reaches the host: dropped with
    /// the dispatch before that, it closes the request.
    pub(super) issued: Option<IssuedRequest>,
}

impl Trail {
    /// The record of this dispatch with `outcome`, as it stands now, prepared for `log`.
    pub(super) fn entry(
        &self,
        log: &AuditLog,
        tool: &str,
        id: &str,
        context: &CallContext,
        outcome: AuditOutcome,
    ) -> AuditEntry {
        let mut event = AuditEvent::new(tool, id, outcome)
            .thread_id(context.thread_id())
            .caller(context.caller())
            .rule(self.rule.as_deref())
            .detail(self.detail.as_deref());
        if let Some(arguments) = &self.arguments {
            event = event.arguments(arguments);
        }
        if let Some(result) = &self.result {
            event = event.result(result);
        }
        log.prepare(&event)
    }
}

/// How a refusal of `kind` is audited.
pub(super) fn audit_outcome_of(kind: RefusalKind) -> AuditOutcome {
    match kind {
        RefusalKind::Duplicate => AuditOutcome::Duplicate,
        RefusalKind::EffectUnresolved => AuditOutcome::Ambiguous,
        RefusalKind::EffectInFlight => AuditOutcome::InFlight,
        refusal => AuditOutcome::Refused { refusal },
    }
}
