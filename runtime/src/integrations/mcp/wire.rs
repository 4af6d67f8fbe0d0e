//! The mapping between the dispatcher's values and MCP's wire types: tool definitions, call results and
//! their `_meta` report, request ids.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, RequestId};
use serde::Serialize;
use serde_json::{Map, Value};

pub(super) use rmcp;

use crate::message::{Outcome, Refusal, Status};
use crate::schema::ToolDefinition;

use super::CALL_META_KEY;

/// The MCP `inputSchema` of a tool: its canonical schema, which already is one closed JSON object.
// The single place to swap in the MCP dialect transform of the canonical schema.
pub fn mcp_input_schema(definition: &ToolDefinition) -> JsonObject {
    match &definition.input_schema {
        Value::Object(schema) => schema.clone(),
        // The canonical schema is always an object; should that change, offer a tool that takes nothing
        // rather than a schema MCP clients reject.
        _ => {
            let mut schema = Map::new();
            schema.insert("type".into(), "object".into());
            schema.insert("properties".into(), Value::Object(Map::new()));
            schema.insert("additionalProperties".into(), Value::Bool(false));
            schema
        }
    }
}

/// A tool definition as MCP lists it.
pub fn mcp_tool(definition: &ToolDefinition) -> rmcp::model::Tool {
    rmcp::model::Tool::new(
        definition.name.clone(),
        definition.description.clone(),
        Arc::new(mcp_input_schema(definition)),
    )
}

/// What the guard did with a call, as reported under [`CALL_META_KEY`].
#[derive(Serialize)]
pub(super) struct CallReport<'a> {
    tool_call_id: &'a str,
    status: Status,
    stripped_arguments: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a Refusal>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    hints: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    host_command: bool,
}

impl CallReport<'_> {
    pub(super) fn into_meta(self) -> Option<MetaObject> {
        let report = serde_json::to_value(&self).ok()?;
        let mut meta = MetaObject::new();
        meta.insert(CALL_META_KEY.to_owned(), report);
        Some(meta)
    }
}

/// A dispatch outcome as an MCP tool result: refusals and failures with `isError: true` and the text the
/// model reads (refusal, then hints), and the guard's report in `_meta`.
pub fn tool_result(outcome: Outcome) -> CallToolResult {
    match outcome {
        Outcome::Message(message) => {
            let text = crate::integrations::model_text(&message);
            let mut result = match message.status {
                Status::Success => CallToolResult::success(vec![ContentBlock::text(text)]),
                Status::Error => CallToolResult::error(vec![ContentBlock::text(text)]),
            };
            result.structured_content = message.structured_content.clone();
            let meta = CallReport {
                tool_call_id: &message.tool_call_id,
                status: message.status,
                stripped_arguments: &message.stripped_arguments,
                refusal: message.refusal.as_ref(),
                hints: &message.hints,
                host_command: false,
            }
            .into_meta();
            result.with_meta(meta)
        }
        // MCP has no graph to apply a host command to: the client gets the command as the tool's JSON
        // result, flagged in `_meta`.
        // MCP cannot resume a call with a value: an interrupt (interrupt approvals on this dispatcher) is an
        // error result saying the approval is pending; an operator approves out of band.
        Outcome::Interrupt { tool_call_id, request } => {
            let meta = CallReport {
                tool_call_id: &tool_call_id,
                status: Status::Error,
                stripped_arguments: &[],
                refusal: None,
                hints: &[],
                host_command: false,
            }
            .into_meta();
            CallToolResult::error(vec![ContentBlock::text(crate::integrations::pending_approval_text(&request))])
                .with_meta(meta)
        }
        Outcome::Command { command, tool_call_id, stripped_arguments } => {
            let text = serde_json::to_string(&command).unwrap_or_default();
            let meta = CallReport {
                tool_call_id: &tool_call_id,
                status: Status::Success,
                stripped_arguments: &stripped_arguments,
                refusal: None,
                hints: &[],
                host_command: true,
            }
            .into_meta();
            CallToolResult::success(vec![ContentBlock::text(text)]).with_meta(meta)
        }
    }
}

/// A JSON-RPC request id as the call's tool call id: its JSON text, so `7` and `"7"` stay distinct.
pub(crate) fn request_id_text(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_else(|_| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_of_both_kinds_stay_distinct() {
        assert_eq!(request_id_text(&RequestId::Number(7)), "7");
        assert_eq!(request_id_text(&RequestId::String("7".into())), "\"7\"");
    }
}
