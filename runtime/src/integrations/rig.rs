//! Guarded tools for [rig](https://docs.rs/rig-core) agents (feature `rig`, rig-core 0.44).
//!
//! [`GuardedRigTools::tools`] turns every tool a [`Dispatcher`] offers into an ordinary rig tool
//! ([`DynamicTool`], registered with rig-agent's `AgentBuilder::dynamic_tools`). Each call the model makes goes
//! through [`Dispatcher::dispatch`] with all its gates, escalation through the dispatcher's
//! [`Approver`](crate::approval::Approver) included. What the model reads back:
//!
//! - a result: the tool's content, as text;
//! - a refusal: a failed rig tool result whose model output is the refusal text and its hints. Policy and
//!   human refusals are rig *refusals* ([`ToolExecutionError::refused`]); bad arguments are `invalid_args`,
//!   rate limits `rate_limited` (retryable), and tool failures `other` with the tool's message.
//!
//! Every call also publishes a [`GuardReport`] (tool call id, stripped ghost arguments, refusal) as host-only
//! result metadata on rig's [`ToolContext`], which hooks read with `ToolContext::result::<GuardReport>()`.
//!
//! Denied tools are not offered, so rig never dispatches them: a model that names one anyway makes an
//! *invalid* tool call in rig. [`GuardedRigTools::refusal_for_unoffered`] gives the dispatcher's refusal
//! for it, for a rig-agent `on_invalid_tool_call` hook to answer with (`InvalidToolCallAction::Skip`).
//!
//! rig 0.44 does not tell a tool the model's tool call id, so each call gets a fresh random one
//! (`rig-<uuid>`). The thread id is the [`CallContext`]'s, unless the run's rig `ToolContext` carries a
//! [`RigThreadId`].

use std::sync::Arc;

use rig_core::message::ToolName;
use rig_core::tool::{ContextValue, DynamicTool, ToolContext, ToolExecutionError, ToolOutput};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use rig_core;

use crate::context::CallContext;
use crate::dispatch::Dispatcher;
use crate::message::{Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};

/// A [`Dispatcher`]'s tools as rig tools, each call guarded.
#[derive(Clone)]
pub struct GuardedRigTools {
    dispatcher: Arc<Dispatcher>,
    context: CallContext,
}

/// The thread a rig run's tool calls belong to, for hosts that run many conversations through one set of
/// tools: insert it into the run's rig [`ToolContext`] and it replaces the [`CallContext`]'s thread id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RigThreadId(pub String);

impl ContextValue for RigThreadId {
    const KEY: &'static str = "agent_airlock.thread_id";
}

/// What the guard did with one call, published as host-only result metadata on rig's [`ToolContext`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardReport {
    /// The id the call ran under.
    pub tool_call_id: String,
    /// Argument keys the tool does not declare, removed before the call, named for display as a refusal names
    /// them: by path (`address.zipcode`, `items[2].note`), control, invisible and bidirectional characters
    /// escaped (`\t`, `\u{202e}`), at most 64 characters (a longer key keeps its ends around `…`). Two keys can
    /// be named alike (a tab and a written `\t`); the names are for people and logs, not to look keys up by.
    pub stripped_arguments: Vec<String>,
    /// Why the call was refused, if it was.
    pub refusal: Option<Refusal>,
}

impl ContextValue for GuardReport {
    const KEY: &'static str = "agent_airlock.guard";
}

impl GuardedRigTools {
    /// Guards calls to `dispatcher`'s tools, running each with `context` (its injected values and thread).
    pub fn new(dispatcher: Arc<Dispatcher>, context: CallContext) -> Self {
        GuardedRigTools { dispatcher, context }
    }

    /// One rig tool per tool the dispatcher offers (denied tools left out), in registration order, each
    /// with the tool's canonical input schema.
    pub fn tools(&self) -> Vec<DynamicTool> {
        self.dispatcher
            .offered_tools()
            .into_iter()
            .filter_map(|definition| {
                let name = match ToolName::new(definition.name.clone()) {
                    Ok(name) => name,
                    // Registered names are never empty (the macro checks them); a hand-written tool with an
                    // empty name cannot be offered to rig.
                    Err(_) => return None,
                };
                let guard = self.clone();
                let tool_name = definition.name;
                Some(DynamicTool::new_with_context(
                    name,
                    definition.description,
                    definition.input_schema,
                    move |rig_context: &mut ToolContext, arguments: Value| {
                        let guard = guard.clone();
                        let tool_name = tool_name.clone();
                        let thread = rig_context.get::<RigThreadId>().ok().flatten();
                        Box::pin(async move {
                            let (outcome, report) = guard.dispatch(&tool_name, arguments, thread).await;
                            if let Err(error) = rig_context.insert_result(report) {
                                tracing::warn!(target: "agent_airlock", %error, "guard report not published");
                            }
                            outcome
                        })
                    },
                ))
            })
            .collect()
    }

    /// The text to answer a model's call to a tool rig does not offer: the dispatcher's refusal for a
    /// denied or unknown tool. `None` if the dispatcher offers `name` (then the call should have reached the
    /// tool; nothing is run here).
    pub async fn refusal_for_unoffered(&self, tool_call_id: &str, name: &str, arguments: Value) -> Option<String> {
        if self.dispatcher.offered_tools().iter().any(|definition| definition.name == name) {
            return None;
        }
        // Not offered means not registered, or denied: the dispatcher refuses before anything runs.
        let call = ToolCall::new(tool_call_id, name, arguments);
        match self.dispatcher.dispatch(call, &self.context).await {
            Outcome::Message(message) if message.is_refusal() => Some(super::model_text(&message)),
            _ => None,
        }
    }

    async fn dispatch(
        &self,
        name: &str,
        arguments: Value,
        thread: Option<RigThreadId>,
    ) -> (Result<ToolOutput, ToolExecutionError>, GuardReport) {
        let tool_call_id = format!("rig-{}", uuid::Uuid::new_v4().simple());
        let call = ToolCall::new(tool_call_id, name, arguments);
        let outcome = match thread {
            Some(RigThreadId(thread)) => {
                let context = self.context.clone().with_thread(thread);
                self.dispatcher.dispatch(call, &context).await
            }
            None => self.dispatcher.dispatch(call, &self.context).await,
        };
        rig_result(outcome)
    }
}

impl std::fmt::Debug for GuardedRigTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedRigTools").field("context", &self.context).finish_non_exhaustive()
    }
}

/// A dispatch outcome as a rig tool result, with the guard's report.
fn rig_result(outcome: Outcome) -> (Result<ToolOutput, ToolExecutionError>, GuardReport) {
    match outcome {
        Outcome::Message(message) => {
            let report = GuardReport {
                tool_call_id: message.tool_call_id.clone(),
                stripped_arguments: message.stripped_arguments.clone(),
                refusal: message.refusal.clone(),
            };
            let result = match message.status {
                Status::Success => Ok(ToolOutput::text(message.content)),
                Status::Error => Err(execution_error(&message)),
            };
            (result, report)
        }
        // rig has no graph to apply a host command to: the model gets it as the tool's JSON result.
        Outcome::Command { command, tool_call_id, stripped_arguments } => {
            let report = GuardReport { tool_call_id, stripped_arguments, refusal: None };
            let result = serde_json::to_value(&command)
                .map(ToolOutput::json)
                .map_err(|error| ToolExecutionError::other(format!("the host command could not be encoded: {error}")));
            (result, report)
        }
        // rig cannot pause a turn: an interrupt (interrupt approvals on this dispatcher) is a refusal that
        // says the approval is pending; the operator approves out of band.
        Outcome::Interrupt { tool_call_id, request } => {
            let report = GuardReport { tool_call_id, stripped_arguments: Vec::new(), refusal: None };
            (Err(ToolExecutionError::refused(super::pending_approval_text(&request))), report)
        }
    }
}

fn execution_error(message: &ToolMessage) -> ToolExecutionError {
    let text = super::model_text(message);
    let Some(refusal) = &message.refusal else {
        // The tool ran and failed: its own message is what the model should read.
        return ToolExecutionError::other(text.clone()).with_model_feedback(text);
    };
    match refusal.kind {
        RefusalKind::UnknownTool => ToolExecutionError::not_found(text),
        RefusalKind::Denied
        | RefusalKind::ApprovalUnavailable
        | RefusalKind::HumanDenied
        | RefusalKind::ApprovalInvalid
        | RefusalKind::Duplicate
        | RefusalKind::EffectUnresolved => ToolExecutionError::refused(text),
        RefusalKind::MalformedArguments | RefusalKind::InvalidArguments => ToolExecutionError::invalid_args(text),
        RefusalKind::RateLimited | RefusalKind::EffectInFlight => ToolExecutionError::rate_limited(text),
        _ => ToolExecutionError::other(text),
    }
}
