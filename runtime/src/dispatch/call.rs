//! One call on its way through the gates: what every gate reads about it, and the trail it leaves. Observe
//! mode lives here, in one place: what a tool's observed rules refuse is recorded, never enforced.

use serde_json::Value;

use super::refusal::Refused;
use super::trail::{Trail, audit_outcome_of};
use crate::audit::{AuditEntry, AuditLog, AuditOutcome};
use crate::context::CallContext;
use crate::message::{Status, ToolMessage};
use crate::tool::Arguments;

/// One model tool call being dispatched.
pub(super) struct Call<'a> {
    /// The registered tool name the model asked for.
    pub(super) name: &'a str,
    /// The model's tool call id.
    pub(super) id: &'a str,
    pub(super) context: &'a CallContext,
    /// What its audit records will say, and what is still to be written.
    pub(super) trail: Trail,
    /// Where its records go, if the dispatcher keeps an audit log.
    pub(super) audit: Option<&'a AuditLog>,
}

impl Call<'_> {
    /// The record of this call with `outcome`, as its trail stands now; none without an audit log.
    #[inline]
    pub(super) fn record(&self, outcome: AuditOutcome) -> Option<AuditEntry> {
        self.audit.map(|log| self.trail.entry(log, self.name, self.id, self.context, outcome))
    }

    /// Whether the call's dialect holds integers to bounds a float holds exactly (which gate 3's screen checks
    /// on the parsed map).
    #[inline]
    pub(super) fn float_bounds(&self) -> bool {
        self.context.dialect().is_some_and(crate::dialect::Dialect::float_bounds)
    }

    /// Gate 3's result noted: the keys it stripped traced, the arguments it admitted kept for the call's
    /// audit records (copied only when there is an audit log).
    #[inline]
    pub(super) fn screened(&mut self, arguments: &Arguments, stripped: &[String]) {
        if !stripped.is_empty() {
            tracing::warn!(target: "agent_airlock", stripped = ?stripped, "undeclared arguments stripped");
        }
        if self.audit.is_some() {
            self.trail.arguments = Some(Value::Object(arguments.clone()));
        }
    }

    /// A gate's verdict under the tool's observed rules: a refusal is traced and audited as "would refuse"
    /// (written with the dispatch's next durable write, like a human's approval) and the call goes on.
    /// Whether the call passed.
    #[inline]
    pub(super) fn observe(&mut self, verdict: Result<(), Refused>) -> bool {
        match verdict {
            Ok(()) => true,
            Err(refused) => {
                self.would_refuse(refused);
                false
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn would_refuse(&mut self, refused: Refused) {
        tracing::warn!(
            target: "agent_airlock",
            outcome = "would_refuse",
            kind = ?refused.kind,
            rule = refused.rule.as_deref().unwrap_or(""),
            text = %refused.text,
            "observe mode: the policy would refuse this call; not enforced"
        );
        if let Some(log) = self.audit {
            let observed = Trail {
                rule: refused.rule,
                detail: Some(format!("observe mode: would refuse, not enforced: {}", refused.text)),
                arguments: self.trail.arguments.clone(),
                ..Trail::default()
            };
            let record = observed.entry(log, self.name, self.id, self.context, audit_outcome_of(refused.kind));
            self.trail.pending.push(record);
        }
    }

    /// The message answering this call, its id and tool name left empty: the dispatch moves the call's own
    /// into it at the end (`address`), instead of copying them here.
    pub(super) fn message(&self, status: Status, content: String, stripped: Vec<String>) -> ToolMessage {
        ToolMessage {
            tool_call_id: String::new(),
            name: String::new(),
            content,
            status,
            hints: Vec::new(),
            stripped_arguments: stripped,
            refusal: None,
            structured_content: None,
        }
    }
}
