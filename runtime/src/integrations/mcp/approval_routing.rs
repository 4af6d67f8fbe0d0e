//! Where an escalated call served over MCP is decided, as the server's [`McpApprovals`] say: the client's
//! human (bound in a ledger or not), an operator deciding in a shared ledger, or the dispatcher's own
//! approver; and what the model is told when no answer is obtained.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, Either, select};
use rmcp::service::{ElicitationMode, RequestContext, RoleServer};
use serde_json::Value;

pub(super) use rmcp;

use crate::approval::protocol::{CLOSED_BY, DecisionError, InterruptApprovals, ResumeValue};
use crate::approval::{ApprovalRequest, Approver, Decision, EscalationReason};
use crate::context::CallContext;
use crate::dispatch::Dispatcher;
use crate::message::{Outcome, ToolCall};

use super::RoutedApprovals;
use super::elicitation::{CANCELLED, ElicitationApprover};
use super::server::{GuardedMcpServer, unless_cancelled};

impl GuardedMcpServer {
    /// Interrupt, ask the client's human, record the answer bound to the call, resume with it.
    pub(super) async fn dispatch_bound(
        &self,
        dispatcher: &Dispatcher,
        cx: &CallContext,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        bound: &InterruptApprovals,
    ) -> Outcome {
        let Some(approver) = self.approver_for(context) else {
            // Nobody can be asked in-band: escalated calls are refused before any request is recorded.
            let call_id = call.clone();
            return unless_cancelled(context, &call_id, dispatcher.dispatch_with_approver(call, cx, None)).await;
        };
        // Without an escalation the tool runs here: a cancellation stops it.
        let request = match unless_cancelled(context, &call, dispatcher.dispatch(call.clone(), cx)).await {
            Outcome::Interrupt { request, .. } => request,
            done => return done,
        };
        // What the human is shown comes from the sealed request: exactly what will be admitted.
        let question = ApprovalRequest {
            tool: request.tool().to_owned(),
            tool_call_id: call.id.clone(),
            thread_id: Some(self.connection_id.to_string()),
            reasons: vec![EscalationReason { rule: request.rule().to_owned(), reason: request.reason().to_owned() }],
            arguments: Value::Object(request.arguments().clone()),
        };
        let interrupt = request.into_value();
        let by = format!("mcp-client:{}", self.connection_id);
        let resume = match approver.ask(question, Some(&interrupt)).await {
            Decision::Approve if context.ct.is_cancelled() => {
                return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, CANCELLED).await;
            }
            Decision::Approve => match bound.approve(&interrupt, &by).await {
                Ok(resume) => resume.into_value(),
                Err(error) => {
                    tracing::error!(target: "agent_airlock", %error, "recording an MCP approval failed");
                    return self
                        .close_unanswered(dispatcher, cx, call, bound, &interrupt, "the approval could not be recorded")
                        .await;
                }
            },
            Decision::Deny { reason } => {
                // A recorded denial refuses through the dispatcher (and its audit log) with the human's words.
                let resume = match bound.deny(&interrupt, &by, reason.as_deref()).await {
                    Ok(denied) => denied.into_value(),
                    Err(error) => {
                        tracing::error!(target: "agent_airlock", %error, "recording an MCP denial failed");
                        return self
                            .close_unanswered(
                                dispatcher,
                                cx,
                                call,
                                bound,
                                &interrupt,
                                "the denial could not be recorded",
                            )
                            .await;
                    }
                };
                return dispatcher.dispatch(call, &cx.clone().with_resume(resume)).await;
            }
            Decision::Unavailable { reason } => {
                return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, &reason).await;
            }
        };
        if context.ct.is_cancelled() {
            // Cancelled between the answer and the run: the denial revokes the unspent grant.
            return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, CANCELLED).await;
        }
        self.run_approved(dispatcher, call, context, bound, &interrupt, cx.clone().with_resume(resume)).await
    }

    /// Runs an approved call in `resumed` (the call's context with its resume value), unless the client
    /// cancels it first. Cancelled before the grant was spent, the grant is revoked, so the request is
    /// closed rather than left granted.
    pub(super) async fn run_approved(
        &self,
        dispatcher: &Dispatcher,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        bound: &InterruptApprovals,
        interrupt: &Value,
        resumed: CallContext,
    ) -> Outcome {
        let call_id = call.clone();
        let outcome = unless_cancelled(context, &call_id, dispatcher.dispatch(call, &resumed)).await;
        if context.ct.is_cancelled() {
            // A grant already spent stays spent (the call was admitted); the ledger says so and nothing changes.
            match bound.close(interrupt, CLOSED_BY, Some("closed: the client cancelled the call before it ran")).await {
                Ok(_) | Err(DecisionError::AlreadySpent { .. }) => {}
                Err(error) => {
                    tracing::error!(target: "agent_airlock", %error, "a cancelled call's request could not be closed");
                }
            }
        }
        outcome
    }

    /// Interrupt, wait for an operator's decision in the shared ledger, resume with it.
    pub(super) async fn dispatch_operator(
        &self,
        dispatcher: &Dispatcher,
        cx: &CallContext,
        call: ToolCall,
        context: &RequestContext<RoleServer>,
        routed: &RoutedApprovals,
    ) -> Outcome {
        // Without an escalation the tool runs here: a cancellation stops it.
        let request = match unless_cancelled(context, &call, dispatcher.dispatch(call.clone(), cx)).await {
            Outcome::Interrupt { request, .. } => request,
            done => return done,
        };
        let bound = &routed.approvals;
        tracing::info!(
            target: "agent_airlock", tool = %call.name, request_id = %request.request_id(),
            "an escalated call waits for an operator: `airlock approve {}`", request.request_id()
        );
        let interrupt = request.into_value();
        let waited = tokio::time::timeout(
            self.approval_timeout,
            wait_for_decision(bound, &interrupt, routed.poll_interval, context),
        )
        .await;
        let resume = match waited {
            Ok(Ok(resume)) => resume,
            Ok(Err(reason)) => return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, &reason).await,
            Err(_elapsed) => {
                let reason = format!("no operator decided within {} s", self.approval_timeout.as_secs());
                return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, &reason).await;
            }
        };
        if context.ct.is_cancelled() {
            // Cancelled as the decision came: the denial revokes the unspent grant.
            return self.close_unanswered(dispatcher, cx, call, bound, &interrupt, CANCELLED).await;
        }
        let resumed = cx.clone().with_resume(resume.into_value());
        self.run_approved(dispatcher, call, context, bound, &interrupt, resumed).await
    }

    /// No human's answer was obtained for a recorded request: close it in the ledger (so it neither stays
    /// pending nor can be approved out of band later; an unspent grant is revoked), and refuse the call as
    /// unavailable, through the dispatcher and its audit log.
    pub(super) async fn close_unanswered(
        &self,
        dispatcher: &Dispatcher,
        cx: &CallContext,
        call: ToolCall,
        bound: &InterruptApprovals,
        interrupt: &Value,
        reason: &str,
    ) -> Outcome {
        let note = format!("closed unanswered: {reason}");
        if let Err(error) = bound.close(interrupt, CLOSED_BY, Some(&note)).await {
            tracing::error!(target: "agent_airlock", %error, "closing an unanswered MCP approval request failed");
        }
        let unavailable = Unavailable(reason.to_owned());
        dispatcher.dispatch_with_approver(call, cx, Some(&unavailable)).await
    }

    /// The approver for one request: its client's human, if the client can be asked.
    pub(super) fn approver_for(&self, context: &RequestContext<RoleServer>) -> Option<ElicitationApprover> {
        context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form).then(|| ElicitationApprover {
            context: context.clone(),
            timeout: self.approval_timeout,
            eliciting: Arc::clone(&self.eliciting),
        })
    }
}

/// Polls the ledger until an operator decided the request `interrupt` stands for; an error (the reason no
/// decision is used) when the call is cancelled first or the ledger cannot answer.
pub(super) async fn wait_for_decision(
    approvals: &InterruptApprovals,
    interrupt: &Value,
    every: Duration,
    context: &RequestContext<RoleServer>,
) -> Result<ResumeValue, String> {
    let cancelled = &context.ct;
    loop {
        let (approvals, interrupt) = (approvals.clone(), interrupt.clone());
        // The ledger's reads block (a redb transaction, a PostgreSQL round trip).
        let read = tokio::task::spawn_blocking(move || approvals.recorded_decision_blocking(&interrupt));
        match select(pin!(cancelled.cancelled()), read).await {
            Either::Left(((), _)) => return Err(CANCELLED.to_owned()),
            Either::Right((Ok(Ok(Some(resume))), _)) => return Ok(resume),
            Either::Right((Ok(Ok(None)), _)) => {}
            Either::Right((Ok(Err(error)), _)) => {
                tracing::error!(target: "agent_airlock", %error, "reading an operator's decision failed");
                return Err(format!("the operator's decision could not be read ({error})"));
            }
            Either::Right((Err(error), _)) => {
                return Err(format!("the operator's decision could not be read ({error})"));
            }
        }
        if let Either::Left(((), _)) = select(pin!(cancelled.cancelled()), pin!(tokio::time::sleep(every))).await {
            return Err(CANCELLED.to_owned());
        }
    }
}

/// An approver that answers [`Decision::Unavailable`], to refuse a call through the dispatcher's gates.
pub(super) struct Unavailable(String);

impl Approver for Unavailable {
    fn review(&self, _request: ApprovalRequest) -> BoxFuture<'static, Decision> {
        Box::pin(std::future::ready(Decision::Unavailable { reason: self.0.clone() }))
    }
}
