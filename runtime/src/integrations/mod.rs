//! Hosts for guarded tools, each behind its own cargo feature: an MCP server (`mcp`, feature `mcp`), a
//! gateway in front of an MCP server nobody here wrote (`mcp_gateway`, feature `mcp-gateway`) and rig agent
//! tools (`rig`, feature `rig`). All run every call through [`Dispatcher`](crate::Dispatcher) and show the
//! model the same text for a refusal.

#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "mcp-gateway")]
pub mod mcp_gateway;
#[cfg(feature = "rig")]
pub mod rig;

use crate::message::ToolMessage;

/// What the model reads for a tool message: the content, then each hint on a line of its own.
pub(crate) fn model_text(message: &ToolMessage) -> String {
    if message.hints.is_empty() {
        return message.content.clone();
    }
    let mut text = message.content.clone();
    for hint in &message.hints {
        text.push_str("\nhint: ");
        text.push_str(hint);
    }
    text
}

/// What the model reads when a call paused for an approval that this host cannot resume in-band.
pub(crate) fn pending_approval_text(request: &crate::approval::InterruptRequest) -> String {
    format!(
        "tool `{}` needs a human's approval ({}); the request `{}` is waiting for an operator. Do not retry now; \
         tell the user the action awaits approval.",
        request.tool(),
        request.reason(),
        request.request_id(),
    )
}
