//! Gate 5, escalation: who is asked about an escalated call, and what their answer means for the gates
//! after it. An approval across an interrupt is only *verified* here; it is spent at gate 7, after every
//! gate that can still refuse, together with the effect reservation.

use serde_json::Value;

use super::dispatcher::{Dispatcher, Entry, Escalation};
use super::refusal::{self, Refused};
use crate::approval::protocol::{
    BindingInput, InterruptApprovals, InterruptRequest, IssuedRequest, PreparedAdmission, RequestError,
};
use crate::approval::{ApprovalRequest, Approver, Decision, EscalationReason};
use crate::context::CallContext;
use crate::ledger::LedgerError;
use crate::tool::Arguments;

/// Who reviews an escalated call in this dispatch.
#[derive(Clone, Copy)]
pub(super) enum Reviewer<'a> {
    /// What the dispatcher was built with.
    Configured,
    /// A per-call approver (e.g. the MCP client's human, through elicitation).
    Given(&'a dyn Approver),
    /// No one can be asked: escalated calls are refused.
    Nobody,
}

/// What the escalation gate decided when it did not refuse.
pub(super) enum Escalated {
    /// A human approved during the call: go on to the rate limit.
    Approved {
        /// How (for the audit record), without argument values.
        detail: String,
    },
    /// The resume value approves exactly this call; its grant is spent at gate 7.
    Resumed(PreparedAdmission),
    /// Pause: the host stores the request and resumes later. The guard closes the request if the
    /// dispatch is dropped before the interrupt reaches the host.
    Interrupt(Box<InterruptRequest>, IssuedRequest),
}

/// Everything gate 5 needs about one call.
pub(super) struct EscalatedCall<'a> {
    pub(super) entry: &'a Entry,
    pub(super) id: &'a str,
    pub(super) name: &'a str,
    pub(super) arguments: &'a Arguments,
    pub(super) context: &'a CallContext,
    /// Every rule that asked for approval: the tool's, and the policy conditions this call met.
    pub(super) escalations: &'a [EscalationReason],
    /// Their rules, comma-separated.
    pub(super) rules: &'a str,
    /// Their reasons, `; `-separated.
    pub(super) reasons: &'a str,
}

impl EscalatedCall<'_> {
    /// The binding input of the call now being made: never taken from the resume value.
    pub(super) fn binding(&self) -> BindingInput<'_> {
        BindingInput {
            thread_id: self.context.thread_id().unwrap_or(""),
            checkpoint_ns: self.context.checkpoint_ns(),
            checkpoint: self.context.checkpoint_map(),
            tool_call_id: self.id,
            tool: self.name,
            arguments: self.arguments,
        }
    }
}

/// The rules of `escalations`, comma-separated, and their reasons, `; `-separated: what a refusal, an
/// audit record and an approval request name.
pub(super) fn joined(escalations: &[EscalationReason]) -> (String, String) {
    let rules = escalations.iter().map(|e| e.rule.as_str()).collect::<Vec<_>>().join(", ");
    let reasons = escalations.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>().join("; ");
    (rules, reasons)
}

impl Dispatcher {
    /// The interrupt approvals, if escalated calls pause.
    pub(super) fn interrupt_approvals(&self) -> Option<&InterruptApprovals> {
        match &self.escalation {
            Escalation::Interrupt(approvals) => Some(approvals),
            _ => None,
        }
    }

    pub(super) async fn escalate(
        &self,
        call: &EscalatedCall<'_>,
        reviewer: Reviewer<'_>,
    ) -> Result<Escalated, Refused> {
        let escalation = match reviewer {
            Reviewer::Configured => &self.escalation,
            Reviewer::Given(approver) => return ask(approver, call).await,
            Reviewer::Nobody => &Escalation::Refuse,
        };
        match escalation {
            Escalation::Refuse => Err(refusal::no_approver(call.name, call.rules)),
            Escalation::Approver(approver) => ask(&**approver, call).await,
            Escalation::Interrupt(approvals) => {
                let binding = call.binding();
                let Some(resume) = call.context.resume() else {
                    // The approver (`airlock requests`, the console, an MCP client's human) sees who asked:
                    // the sealed request's reason names the caller.
                    let reasons = naming_caller(call.reasons, call.context);
                    return match approvals.request_issued(&binding, call.rules, &reasons, call.entry.approvals).await {
                        Ok((request, issued)) => Ok(Escalated::Interrupt(Box::new(request), issued)),
                        Err(RequestError::Ledger(LedgerError::TooManyPending {
                            pending, oldest_expires_at, ..
                        })) => Err(refusal::too_many_pending(
                            call.name,
                            call.rules,
                            pending,
                            oldest_expires_at,
                            self.clock.now(),
                        )),
                        Err(RequestError::CannotShow(error)) => Err(refusal::approval_not_obtained(
                            call.name,
                            call.rules,
                            &format!("{error}; a human is not asked about what they cannot be shown whole"),
                        )),
                        Err(err) => {
                            tracing::error!(target: "agent_airlock", error = %err, "approval request failed");
                            Err(refusal::request_not_recorded(call.name, call.rules))
                        }
                    };
                };
                approvals
                    .verify_resume(&binding, resume)
                    .map(Escalated::Resumed)
                    .map_err(|err| refusal::not_admitted(call.name, call.rules, err))
            }
        }
    }
}

/// The reasons a human is shown, followed by who asked when the host named the caller
/// ([`CallContext::with_caller`]): `moves money (asked by https://issuer.example#alice)`.
fn naming_caller<'a>(reasons: &'a str, context: &CallContext) -> std::borrow::Cow<'a, str> {
    match context.caller() {
        Some(caller) => format!("{reasons} (asked by {caller})").into(),
        None => reasons.into(),
    }
}

/// Asks an approver callback about one call.
async fn ask(approver: &dyn Approver, call: &EscalatedCall<'_>) -> Result<Escalated, Refused> {
    let mut reasons = call.escalations.to_vec();
    if let Some(caller) = call.context.caller() {
        for reason in &mut reasons {
            reason.reason = format!("{} (asked by {caller})", reason.reason);
        }
    }
    let request = ApprovalRequest {
        tool: call.name.to_owned(),
        tool_call_id: call.id.to_owned(),
        thread_id: call.context.thread_id().map(str::to_owned),
        reasons,
        arguments: Value::Object(call.arguments.clone()),
    };
    match approver.review(request).await {
        Decision::Approve => {
            tracing::info!(target: "agent_airlock", outcome = "approved", rules = %call.rules, "human approved");
            Ok(Escalated::Approved { detail: "approver callback".to_owned() })
        }
        Decision::Deny { reason } => Err(refusal::human_denied(call.name, call.rules, reason.as_deref())),
        Decision::Unavailable { reason } => Err(refusal::approval_not_obtained(call.name, call.rules, &reason)),
    }
}
