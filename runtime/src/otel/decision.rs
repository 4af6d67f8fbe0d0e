//! What the export keeps of one tool call (or one resource read or prompt get of the MCP gateway): a fixed
//! list of fields, read by name from the dispatcher's `tool_call` span (the gateway's `surface_call` span) and
//! the events inside it. A field not on the list is never read, so an argument value, a
//! result, a refusal's text or an approver's name cannot reach an exporter: there is no place to put it.

use std::fmt;
use std::time::SystemTime;

use opentelemetry::{KeyValue, StringValue, Value};
use tracing::field::{Field, Visit};

/// The longest tool name or call id exported, in bytes: both come from the model, and a model can send
/// anything (a registered tool's name is at most 64 bytes).
const MAX_NAME_BYTES: usize = 128;

/// The decision about one tool call, built while its span is open and exported when it closes.
#[derive(Debug)]
pub(super) struct CallDecision {
    pub(super) start: SystemTime,
    /// The tool's name; for a read or get, the prompt's name or the resource URI's scheme.
    pub(super) tool: String,
    /// The tool call's id; for a read or get, the JSON-RPC request's id.
    pub(super) call_id: String,
    /// `resources/read` or `prompts/get` for a read or get of the MCP gateway; `None` for a tool call.
    pub(super) surface: Option<&'static str>,
    pub(super) outcome: Option<CallOutcome>,
    /// The refusal's kind (`snake_case`, as in [`RefusalKind`](crate::RefusalKind)'s serde names).
    pub(super) refusal_kind: Option<&'static str>,
    /// The policy rule (or rules, comma-separated) that refused or escalated the call.
    pub(super) rule: Option<String>,
    /// A human approved the call (an approver callback, or a grant spent on resume).
    pub(super) approved: bool,
    /// The call has an effect key: set by the event that reports how the tool ran.
    pub(super) has_effect: bool,
    /// The tool's error said it did not execute (a failed effect may be retried).
    pub(super) not_executed: bool,
    /// Observe mode: the kinds of refusal the policy would have made, not enforced.
    pub(super) would_refuse: Vec<&'static str>,
}

/// How a call ended, as `airlock.outcome` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallOutcome {
    /// The tool ran and returned a result (or a host command).
    Executed,
    /// The tool ran and returned an error.
    Failed,
    /// The tool panicked.
    Panicked,
    /// A gate refused the call; the tool did not run.
    Refused,
    /// The call waits for a human's approval (an interrupt was returned); the tool did not run.
    Escalated,
    /// The dispatch was dropped before it decided (the host cancelled the call).
    Cancelled,
}

impl CallOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Failed => "failed",
            Self::Panicked => "panicked",
            Self::Refused => "refused",
            Self::Escalated => "escalated",
            Self::Cancelled => "cancelled",
        }
    }
}

/// What happened to a call's effect (`airlock.effect`), for calls whose tool declares one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EffectOutcome {
    /// The effect ran and was committed.
    Executed,
    /// The same effect had already run: the call was refused as a duplicate.
    Replayed,
    /// The tool said it did not execute: the key is free to retry.
    Failed,
    /// It may or may not have taken effect: an operator must resolve it.
    Ambiguous,
}

impl EffectOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::Failed => "failed",
            Self::Ambiguous => "ambiguous",
        }
    }
}

impl CallDecision {
    /// Reads the `tool_call` span's two fields, `tool` and `tool_call_id`.
    pub(super) fn opened(attributes: &tracing::span::Attributes<'_>) -> Self {
        let mut decision = Self {
            start: SystemTime::now(),
            tool: String::new(),
            call_id: String::new(),
            surface: None,
            outcome: None,
            refusal_kind: None,
            rule: None,
            approved: false,
            has_effect: false,
            not_executed: false,
            would_refuse: Vec::new(),
        };
        attributes.record(&mut SpanFields(&mut decision));
        decision
    }

    /// Reads what an event inside the call's span says about the decision, by field name. An event that says
    /// nothing about it (no known `outcome`) changes nothing.
    pub(super) fn record(&mut self, event: &tracing::Event<'_>) {
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let Some(outcome) = fields.outcome else { return };
        match outcome {
            "executed" | "command" => self.outcome = Some(CallOutcome::Executed),
            "failed" => {
                self.outcome = Some(CallOutcome::Failed);
                self.not_executed = fields.not_executed;
            }
            "panicked" => self.outcome = Some(CallOutcome::Panicked),
            "interrupted" => self.outcome = Some(CallOutcome::Escalated),
            "approved" => self.approved = true,
            "refused" => {
                self.outcome = Some(CallOutcome::Refused);
                self.refusal_kind = fields.kind;
                self.rule = fields.rule.filter(|rule| !rule.is_empty());
            }
            "would_refuse" => {
                if let Some(kind) = fields.kind
                    && !self.would_refuse.contains(&kind)
                {
                    self.would_refuse.push(kind);
                }
            }
            _ => return,
        }
        if fields.effect {
            self.has_effect = true;
        }
        if self.rule.is_none()
            && let Some(rules) = fields.rules.filter(|rules| !rules.is_empty())
        {
            self.rule = Some(rules);
        }
    }

    /// How the call ended; a span that closes without an outcome was a dispatch dropped midway.
    pub(super) fn outcome(&self) -> CallOutcome {
        self.outcome.unwrap_or(CallOutcome::Cancelled)
    }

    /// What happened to the call's effect, if it has one (or was refused as its replay).
    pub(super) fn effect(&self) -> Option<EffectOutcome> {
        if self.refusal_kind == Some("duplicate") {
            return Some(EffectOutcome::Replayed);
        }
        if !self.has_effect {
            return None;
        }
        match self.outcome() {
            CallOutcome::Executed => Some(EffectOutcome::Executed),
            CallOutcome::Failed if self.not_executed => Some(EffectOutcome::Failed),
            CallOutcome::Failed | CallOutcome::Panicked => Some(EffectOutcome::Ambiguous),
            _ => None,
        }
    }

    /// The span's name: `execute_tool {tool}` (GenAI), or `{method} {target}` (MCP) for a read or get.
    pub(super) fn span_name(&self) -> String {
        match self.surface {
            None => format!("execute_tool {}", self.named_tool()),
            Some(method) => format!("{method} {}", self.tool),
        }
    }

    /// The attribute naming what was called, for the counters: the tool, or the MCP method.
    pub(super) fn subject(&self) -> KeyValue {
        match self.surface {
            None => KeyValue::new("gen_ai.tool.name", self.named_tool().to_owned()),
            Some(method) => KeyValue::new("mcp.method.name", method),
        }
    }

    /// The tool as the span's name and the counters' label name it: one of the dispatcher's tools, or
    /// [`UNKNOWN_TOOL`]. A name the model made up would be a series of its own (and enough of them would fold
    /// real tools' counts into the exporter's overflow series); the span's `gen_ai.tool.name` attribute keeps
    /// the name as called.
    fn named_tool(&self) -> &str {
        if self.refusal_kind == Some("unknown_tool") { UNKNOWN_TOOL } else { &self.tool }
    }

    /// The span's attributes: the GenAI semantic conventions' for a tool execution (the MCP ones for a read or
    /// get), then ours.
    pub(super) fn attributes(&self) -> Vec<KeyValue> {
        let outcome = self.outcome();
        let mut attributes = match self.surface {
            None => vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", self.tool.clone()),
                KeyValue::new("gen_ai.tool.call.id", self.call_id.clone()),
            ],
            Some(method) => vec![
                KeyValue::new("mcp.method.name", method),
                KeyValue::new("jsonrpc.request.id", self.call_id.clone()),
                if method == PROMPT_GET {
                    KeyValue::new("gen_ai.prompt.name", self.tool.clone())
                } else {
                    KeyValue::new("airlock.resource.scheme", self.tool.clone())
                },
            ],
        };
        attributes.push(KeyValue::new("airlock.outcome", outcome.as_str()));
        if let Some(kind) = self.refusal_kind {
            attributes.push(KeyValue::new("airlock.refusal.kind", kind));
        }
        if let Some(rule) = &self.rule {
            attributes.push(KeyValue::new("airlock.rule", rule.clone()));
        }
        if self.approved {
            attributes.push(KeyValue::new("airlock.approved", true));
        }
        if let Some(effect) = self.effect() {
            attributes.push(KeyValue::new("airlock.effect", effect.as_str()));
        }
        if !self.would_refuse.is_empty() {
            let kinds: Vec<StringValue> = self.would_refuse.iter().map(|kind| StringValue::from(*kind)).collect();
            attributes.push(KeyValue::new("airlock.would_refuse.kinds", Value::Array(kinds.into())));
        }
        match outcome {
            CallOutcome::Refused => {
                attributes.push(KeyValue::new("error.type", self.refusal_kind.unwrap_or("refused")));
            }
            CallOutcome::Failed => attributes.push(KeyValue::new("error.type", "tool_error")),
            CallOutcome::Panicked => attributes.push(KeyValue::new("error.type", "tool_panicked")),
            _ => {}
        }
        attributes
    }
}

/// The MCP methods a `surface_call` span names.
const RESOURCE_READ: &str = "resources/read";
const PROMPT_GET: &str = "prompts/get";

/// The `tool_call` span's fields, `tool` and `tool_call_id`, and the `surface_call` span's, `method`,
/// `subject` and `request_id`; nothing else.
struct SpanFields<'a>(&'a mut CallDecision);

impl Visit for SpanFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "tool" | "subject" => self.0.tool = bounded(value),
            "tool_call_id" | "request_id" => self.0.call_id = bounded(value),
            "method" => self.0.surface = [RESOURCE_READ, PROMPT_GET].into_iter().find(|known| *known == value),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `tool = %name` arrives here, as a value whose `Debug` is its `Display`.
        if matches!(field.name(), "tool" | "tool_call_id" | "subject" | "request_id") {
            self.record_str(field, &format!("{value:?}"));
        }
    }
}

/// An event's fields about the decision; every other field is skipped without being formatted.
#[derive(Default)]
struct EventFields {
    outcome: Option<&'static str>,
    kind: Option<&'static str>,
    rule: Option<String>,
    rules: Option<String>,
    not_executed: bool,
    effect: bool,
}

/// The outcomes the dispatcher's events name (`outcome = "…"`); anything else is not read.
const OUTCOMES: &[&str] =
    &["executed", "command", "failed", "panicked", "interrupted", "approved", "refused", "would_refuse"];

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "outcome" => self.outcome = OUTCOMES.iter().copied().find(|known| *known == value),
            "rule" => self.rule = Some(bounded(value)),
            "rules" => self.rules = Some(bounded(value)),
            _ => {}
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        match field.name() {
            "not_executed" => self.not_executed = value,
            "effect" => self.effect = value,
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            // `kind = ?refused.kind`: the variant's name, e.g. `RateLimited`.
            "kind" => self.kind = refusal_kind(&format!("{value:?}")),
            "rules" => self.rules = Some(bounded(&format!("{value:?}"))),
            _ => {}
        }
    }
}

/// A [`RefusalKind`](crate::RefusalKind)'s serde name (`rate_limited`) from its variant's name
/// (`RateLimited`); `None` for anything that is not one of them.
pub(super) fn refusal_kind(variant: &str) -> Option<&'static str> {
    Some(match variant {
        "UnknownTool" => "unknown_tool",
        "Denied" => "denied",
        "MalformedArguments" => "malformed_arguments",
        "InvalidArguments" => "invalid_arguments",
        "HostMisconfigured" => "host_misconfigured",
        "ApprovalUnavailable" => "approval_unavailable",
        "HumanDenied" => "human_denied",
        "ApprovalInvalid" => "approval_invalid",
        "RateLimited" => "rate_limited",
        "Duplicate" => "duplicate",
        "EffectUnresolved" => "effect_unresolved",
        "EffectInFlight" => "effect_in_flight",
        "Unavailable" => "unavailable",
        _ => return None,
    })
}

/// `value`, cut at [`MAX_NAME_BYTES`] on a character boundary.
fn bounded(value: &str) -> String {
    if value.len() <= MAX_NAME_BYTES {
        return value.to_owned();
    }
    let mut end = MAX_NAME_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &value[..end])
}

/// The span name's and the counters' tool for a call to a tool the dispatcher does not have.
const UNKNOWN_TOOL: &str = "(unknown)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RefusalKind;

    #[test]
    fn every_refusal_kind_maps_from_its_variant_name_to_its_serde_name() {
        let kinds = [
            RefusalKind::UnknownTool,
            RefusalKind::Denied,
            RefusalKind::MalformedArguments,
            RefusalKind::InvalidArguments,
            RefusalKind::HostMisconfigured,
            RefusalKind::ApprovalUnavailable,
            RefusalKind::HumanDenied,
            RefusalKind::ApprovalInvalid,
            RefusalKind::RateLimited,
            RefusalKind::Duplicate,
            RefusalKind::EffectUnresolved,
            RefusalKind::EffectInFlight,
            RefusalKind::Unavailable,
        ];
        for kind in kinds {
            // Exhaustive: a new kind does not compile here until it is listed above and in `refusal_kind`.
            match kind {
                RefusalKind::UnknownTool
                | RefusalKind::Denied
                | RefusalKind::MalformedArguments
                | RefusalKind::InvalidArguments
                | RefusalKind::HostMisconfigured
                | RefusalKind::ApprovalUnavailable
                | RefusalKind::HumanDenied
                | RefusalKind::ApprovalInvalid
                | RefusalKind::RateLimited
                | RefusalKind::Duplicate
                | RefusalKind::EffectUnresolved
                | RefusalKind::EffectInFlight
                | RefusalKind::Unavailable => {}
            }
            let serde_name = serde_json::to_value(kind).unwrap();
            assert_eq!(refusal_kind(&format!("{kind:?}")), serde_name.as_str(), "{kind:?}");
        }
        assert_eq!(refusal_kind("rate_limited"), None);
        assert_eq!(refusal_kind("Denied; DROP TABLE"), None);
    }

    #[test]
    fn long_names_are_cut_on_a_character_boundary() {
        let long = "é".repeat(100);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_NAME_BYTES + '…'.len_utf8(), "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("echo"), "echo");
    }
}
