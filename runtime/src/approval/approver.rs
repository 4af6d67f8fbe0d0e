//! Escalation to a human: the request a human sees and the approver that answers it.

use std::future::Future;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A call waiting for a human's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The registered tool name.
    pub tool: String,
    /// The model's id for the call.
    pub tool_call_id: String,
    /// The thread the call belongs to.
    pub thread_id: Option<String>,
    /// Why approval is needed: one entry per rule that asked for it.
    pub reasons: Vec<EscalationReason>,
    /// The admitted arguments (ghosts stripped, nulls dropped), exactly what will run.
    pub arguments: Value,
}

/// One rule that asks for a human's approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscalationReason {
    /// `attribute` for the tool author's `escalate`, or the policy glob.
    pub rule: String,
    /// The reason given.
    pub reason: String,
}

/// A human's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Run the call.
    Approve,
    /// Do not run it; the reason (if any) is shown to the model.
    Deny {
        /// Why, in the human's words.
        reason: Option<String>,
    },
    /// No human's answer could be obtained (the request could not be shown in full, could not be
    /// delivered, went unanswered, or the call was cancelled). The call does not run; the model is told the
    /// approval could not be obtained, not that a human refused.
    Unavailable {
        /// Why, for the model and the audit log.
        reason: String,
    },
}

/// Asks a human about escalated calls, e.g. through a UI, a chat message or MCP elicitation.
pub trait Approver: Send + Sync + 'static {
    /// The decision for one request.
    fn review(&self, request: ApprovalRequest) -> BoxFuture<'static, Decision>;
}

impl<F, Fut> Approver for F
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Decision> + Send + 'static,
{
    fn review(&self, request: ApprovalRequest) -> BoxFuture<'static, Decision> {
        Box::pin(self(request))
    }
}
