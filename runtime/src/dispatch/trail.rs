//! The facts of one dispatch, gathered along the gates for its audit record.

use serde_json::Value;

use crate::audit::{AuditEvent, AuditLog, AuditOutcome};
use crate::context::CallContext;
use crate::message::RefusalKind;

/// What the audit record of one dispatch says.
#[derive(Default)]
pub(super) struct Trail {
    pub(super) outcome: Option<AuditOutcome>,
    pub(super) rule: Option<String>,
    pub(super) detail: Option<String>,
    pub(super) arguments: Option<Value>,
    pub(super) result: Option<Value>,
}

impl Trail {
    /// Appends one record to `log`. A failed append is logged, never hidden.
    pub(super) fn record(&self, log: &AuditLog, tool: &str, id: &str, context: &CallContext, outcome: AuditOutcome) {
        let mut event = AuditEvent::new(tool, id, outcome)
            .thread_id(context.thread_id())
            .rule(self.rule.as_deref())
            .detail(self.detail.as_deref());
        if let Some(arguments) = &self.arguments {
            event = event.arguments(arguments);
        }
        if let Some(result) = &self.result {
            event = event.result(result);
        }
        if let Err(err) = log.append(event) {
            tracing::error!(target: "agent_airlock", error = %err, "audit append failed");
        }
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
