//! The hosts that run the dispatcher in process: the MCP server (rmcp's client, a real server process,
//! cancellation, a per-call approver), a rig agent, and the gateway's keyed audit log in front of the example
//! Rust server (no Python needed).
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod gateway_audit_key;
pub mod mcp_cancellation;
pub mod mcp_per_call_approver;
pub mod mcp_rmcp_client;
pub mod mcp_server_process;
pub mod rig_agent;
