//! Python: the venv provisioning itself, the official MCP SDK's client against our server, and `airlock_rs` in
//! LangGraph graphs (a wheel built with maturin).
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod mcp_python_client;
pub mod python_env;
pub mod python_langgraph;
