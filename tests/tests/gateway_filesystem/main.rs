//! The gateway in front of `@modelcontextprotocol/server-filesystem` (Node.js, npm packages from a pinned lock
//! file).
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

#[allow(dead_code)]
#[path = "../support/gateway.rs"]
mod gateway;

pub mod mcp_gateway_filesystem;
