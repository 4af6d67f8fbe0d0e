//! A tool schema as an upstream MCP server declares it, made into a tool, offered in every dialect and called.
//! The body is `agent_airlock_fuzz::targets::tool_schema` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::tool_schema(data));
