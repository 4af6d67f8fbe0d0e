//! Gate 5, escalation: who is asked about an escalated call, and what their answer means for the gates
//! after it. An approval across an interrupt is only *verified* here; it is spent at gate 7, after every
//! gate that can still refuse, together with the effect reservation.

use serde_json::Value;

use super::call::Call;
use super::dispatcher::{Dispatcher, Entry, Escalation};
use super::refusal::{self, Refused};
use crate::approval::protocol::{
    BindingInput, InterruptApprovals, InterruptRequest, IssuedRequest, PreparedAdmission, RequestError,
};
use crate::approval::{ApprovalRequest, Approver, Decision, EscalationReason};
use crate::audit::AuditOutcome;
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

/// What gate 5 decided when it did not refuse.
pub(super) enum Cleared {
    /// Not escalated, or approved by a human during the call: go on to the rate limit.
    Go,
    /// The resume value approves exactly this call; its grant is spent at gate 7.
    Resumed(PreparedAdmission),
    /// Pause: the host stores the request and resumes later.
    Interrupt(Box<InterruptRequest>),
}

/// What a reviewer answered when they did not refuse.
enum Escalated {
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

/// Everything a reviewer needs about one call.
struct EscalatedCall<'a> {
    entry: &'a Entry,
    call: &'a Call<'a>,
    arguments: &'a Arguments,
    /// Every rule that asked for approval: the tool's, and the policy conditions this call met.
    escalations: &'a [EscalationReason],
    /// Their rules, comma-separated.
    rules: &'a str,
    /// Their reasons, `; `-separated.
    reasons: &'a str,
}

impl EscalatedCall<'_> {
    /// The binding input of the call now being made: never taken from the resume value.
    fn binding(&self) -> BindingInput<'_> {
        let context = self.call.context;
        BindingInput {
            thread_id: context.thread_id().unwrap_or(""),
            checkpoint_ns: context.checkpoint_ns(),
            checkpoint: context.checkpoint_map(),
            tool_call_id: self.call.id,
            tool: self.call.name,
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

    /// Gate 5: a call the tool's enforced rules or the conditions it `met` escalate goes to `reviewer`,
    /// once what no human can change (an empty bucket, a duplicate effect) has not refused it.
    #[inline]
    pub(super) async fn escalation(
        &self,
        call: &mut Call<'_>,
        entry: &Entry,
        met: Vec<EscalationReason>,
        arguments: &Arguments,
        effect_key: Option<&str>,
        reviewer: Reviewer<'_>,
    ) -> Result<Cleared, Refused> {
        let rules = &entry.enforced;
        // The tool's escalations as joined at build time, or with the conditions this call met.
        let with_met;
        let (escalations, joined_rules, reasons) = if met.is_empty() {
            (&rules.escalations, &rules.escalation_rules, &rules.escalation_reasons)
        } else {
            let all: Vec<EscalationReason> = rules.escalations.iter().cloned().chain(met).collect();
            let (joined_rules, reasons) = joined(&all);
            with_met = (all, joined_rules, reasons);
            (&with_met.0, &with_met.1, &with_met.2)
        };
        if escalations.is_empty() {
            return Ok(Cleared::Go);
        }
        call.trail.rule = Some(joined_rules.clone());
        self.refusal_before_asking(call, rules, effect_key).await?;
        let escalated = EscalatedCall { entry, call, arguments, escalations, rules: joined_rules, reasons };
        match self.escalate(&escalated, reviewer).await? {
            Escalated::Approved { detail } => {
                call.trail.detail = Some(detail);
                // Written with the admission, or with the settlement if nothing is admitted durably.
                if let Some(approved) = call.record(AuditOutcome::Approved) {
                    call.trail.pending.push(approved);
                }
                Ok(Cleared::Go)
            }
            Escalated::Resumed(admission) => Ok(Cleared::Resumed(admission)),
            Escalated::Interrupt(request, issued) => {
                tracing::info!(target: "agent_airlock", outcome = "interrupted", rules = %joined_rules, "approval requested");
                call.trail.outcome = Some(AuditOutcome::Interrupted);
                call.trail.detail = Some(format!("request {}", request.request_id()));
                call.trail.issued = Some(issued);
                Ok(Cleared::Interrupt(request))
            }
        }
    }

    async fn escalate(&self, escalated: &EscalatedCall<'_>, reviewer: Reviewer<'_>) -> Result<Escalated, Refused> {
        let escalation = match reviewer {
            Reviewer::Configured => &self.escalation,
            Reviewer::Given(approver) => return ask(approver, escalated).await,
            Reviewer::Nobody => &Escalation::Refuse,
        };
        match escalation {
            Escalation::Refuse => Err(refusal::no_approver(escalated.call.name, escalated.rules)),
            Escalation::Approver(approver) => ask(&**approver, escalated).await,
            Escalation::Interrupt(approvals) => {
                let binding = escalated.binding();
                let Some(resume) = escalated.call.context.resume() else {
                    // The approver (`airlock requests`, the console, an MCP client's human) sees who asked:
                    // the sealed request's reason names the caller.
                    let reasons = naming_caller(escalated.reasons, escalated.call.context);
                    return match approvals
                        .request_issued(
                            &binding,
                            escalated.call.context.caller(),
                            escalated.rules,
                            &reasons,
                            escalated.entry.approvals,
                        )
                        .await
                    {
                        Ok((request, issued)) => Ok(Escalated::Interrupt(Box::new(request), issued)),
                        Err(RequestError::Ledger(LedgerError::TooManyPending {
                            pending, oldest_expires_at, ..
                        })) => Err(refusal::too_many_pending(
                            escalated.call.name,
                            escalated.rules,
                            escalated.call.context.caller().is_some(),
                            pending,
                            oldest_expires_at,
                            self.clock.now(),
                        )),
                        Err(RequestError::CannotShow(error)) => Err(refusal::approval_not_obtained(
                            escalated.call.name,
                            escalated.rules,
                            &format!("{error}; a human is not asked about what they cannot be shown whole"),
                        )),
                        Err(err) => {
                            tracing::error!(target: "agent_airlock", error = %err, "approval request failed");
                            Err(refusal::request_not_recorded(escalated.call.name, escalated.rules))
                        }
                    };
                };
                approvals
                    .verify_resume(&binding, resume)
                    .map(Escalated::Resumed)
                    .map_err(|err| refusal::not_admitted(escalated.call.name, escalated.rules, err))
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
async fn ask(approver: &dyn Approver, escalated: &EscalatedCall<'_>) -> Result<Escalated, Refused> {
    let mut reasons = escalated.escalations.to_vec();
    if let Some(caller) = escalated.call.context.caller() {
        for reason in &mut reasons {
            reason.reason = format!("{} (asked by {caller})", reason.reason);
        }
    }
    let request = ApprovalRequest {
        tool: escalated.call.name.to_owned(),
        tool_call_id: escalated.call.id.to_owned(),
        thread_id: escalated.call.context.thread_id().map(str::to_owned),
        reasons,
        arguments: Value::Object(escalated.arguments.clone()),
    };
    match approver.review(request).await {
        Decision::Approve => {
            tracing::info!(target: "agent_airlock", outcome = "approved", rules = %escalated.rules, "human approved");
            Ok(Escalated::Approved { detail: "approver callback".to_owned() })
        }
        Decision::Deny { reason } => {
            Err(refusal::human_denied(escalated.call.name, escalated.rules, reason.as_deref()))
        }
        Decision::Unavailable { reason } => {
            Err(refusal::approval_not_obtained(escalated.call.name, escalated.rules, &reason))
        }
    }
}
