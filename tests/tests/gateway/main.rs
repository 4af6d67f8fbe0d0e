//! The `airlock mcp` gateway in front of a Python MCP server (the official SDK, provisioned in a venv under the
//! target dir): stdio and HTTP, its boundary, an operator, the OpenTelemetry export, passthrough, the
//! tool-poisoning scan, a LangGraph client, the sandbox.
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

#[allow(dead_code)]
#[path = "../support/gateway.rs"]
mod gateway;

pub mod mcp_gateway;
pub mod mcp_gateway_boundary;
pub mod mcp_gateway_http;
pub mod mcp_gateway_langgraph;
pub mod mcp_gateway_oauth;
pub mod mcp_gateway_operator;
pub mod mcp_gateway_otel;
pub mod mcp_gateway_passthrough;
#[cfg(target_os = "linux")]
pub mod mcp_gateway_sandbox;
pub mod mcp_gateway_scan;
pub mod mcp_gateway_surfaces;
