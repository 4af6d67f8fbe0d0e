//! Gate 9: what the tool returned, as the model sees it (masked) and as the audit log records it, and how
//! the call's effect settles from it.

use serde_json::Value;

use super::call::Call;
use super::dispatcher::{Dispatcher, Entry};
use super::effect_guard::EffectGuard;
use crate::audit::AuditOutcome;
use crate::effect::Settle;
use crate::mask::MaskSet;
use crate::message::{Outcome, Status};
use crate::tool::ToolOutput;

impl Dispatcher {
    /// Gate 9: the tool's output as a message (masked) or a host command (untouched), with how its
    /// effect settles and its audit facts noted (written after the gates, in one write).
    pub(super) fn settle(
        &self,
        call: &mut Call<'_>,
        output: ToolOutput,
        entry: &Entry,
        stripped: Vec<String>,
        effect: Option<&mut EffectGuard>,
    ) -> Outcome {
        let audited = self.audit.is_some();
        let trail = &mut call.trail;
        match output {
            ToolOutput::Content(mut value) => {
                tracing::info!(target: "agent_airlock", outcome = "executed", effect = effect.is_some(), "tool call executed");
                self.mask(&mut value, entry.mask);
                trail.settle = effect.and_then(|guard| guard.take(Settle::Commit));
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = Some(value.clone());
                }
                Outcome::Message(call.message(Status::Success, content_text(value), stripped))
            }
            ToolOutput::Structured { mut content, mut structured } => {
                tracing::info!(target: "agent_airlock", outcome = "executed", effect = effect.is_some(), "tool call executed");
                self.mask(&mut content, entry.mask);
                let was_object = structured.is_object();
                self.mask(&mut structured, entry.mask);
                // Too large to mask, the structured result became the notice saying so: a client checks
                // `structuredContent` against the tool's output schema, so the notice goes in the text instead.
                let structured = if was_object && !structured.is_object() {
                    content = structured;
                    None
                } else {
                    Some(structured)
                };
                trail.settle = effect.and_then(|guard| guard.take(Settle::Commit));
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = Some(serde_json::json!({"content": content, "structuredContent": structured}));
                }
                let mut message = call.message(Status::Success, content_text(content), stripped);
                message.structured_content = structured;
                Outcome::Message(message)
            }
            ToolOutput::Command(command) => {
                tracing::info!(target: "agent_airlock", outcome = "command", effect = effect.is_some(), "tool returned a host command");
                trail.settle = effect.and_then(|guard| guard.take(Settle::Commit));
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = serde_json::to_value(&command).ok();
                }
                Outcome::Command { command, tool_call_id: String::new(), stripped_arguments: stripped }
            }
            ToolOutput::Failed(error) => {
                let not_executed = error.is_not_executed();
                // Error text can carry secrets too (a connection string in a driver's message).
                let text = self.masker.mask_text(error.message(), entry.mask).into_owned();
                tracing::info!(
                    target: "agent_airlock",
                    outcome = "failed",
                    not_executed,
                    effect = effect.is_some(),
                    "tool returned an error"
                );
                let how = if not_executed { Settle::Fail } else { Settle::Ambiguous };
                trail.settle = effect.and_then(|guard| guard.take(how));
                trail.outcome = Some(AuditOutcome::Failed { not_executed });
                if audited {
                    trail.result = Some(Value::String(text.clone()));
                }
                Outcome::Message(call.message(Status::Error, text, stripped))
            }
        }
    }

    fn mask(&self, value: &mut Value, set: MaskSet) {
        if set.is_empty() {
            return;
        }
        let report = self.masker.mask_value(value, set);
        if !report.is_empty() {
            tracing::info!(target: "agent_airlock", masked = %report.total(), kinds = %report.kinds(), "result masked");
        }
    }
}

/// A string result is shown as is; anything else as JSON.
fn content_text(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}
