//! LangGraph as a client of `airlock mcp`: a tool-calling graph whose tools are the gateway's, loaded with
//! langchain-mcp-adapters (`tests/mcp/langgraph_client.py`), in front of the Python SDK server of
//! `tests/mcp/upstream_server.py`. The chat model is scripted, so no model is downloaded. An allowed call
//! goes through (its undeclared argument stripped); a call the policy denies is refused, and the upstream's
//! own log shows it never arrived.
//!
//! langchain-mcp-adapters needs the MCP Python SDK 1.x, so the client runs from the environment of
//! `tests/mcp/requirements-langgraph.txt`; the upstream runs from the SDK 2 environment of the other tests.

use std::path::Path;

use agent_airlock_tests::python_env::PythonEnv;
use serde_json::json;

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{AIRLOCK, UPSTREAM, run_client, venv};

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/langgraph_client.py");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/requirements-langgraph.txt");

const POLICY: &str = r#"version = 1
default = "allow"
deny = ["delete_everything"]

[[tools.write_note.when]]
if = 'name matches "*.key"'
deny = "never write key files"
"#;

#[test]
fn a_langgraph_agent_calls_through_the_gateway_and_a_denied_call_is_refused() {
    let upstream_venv = venv();
    let langgraph = PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(REQUIREMENTS))
        .unwrap_or_else(|why| panic!("LangGraph and langchain-mcp-adapters cannot be provisioned: {why}"));
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| scratch.path().join(name);
    std::fs::write(path("airlock.toml"), POLICY).expect("the policy is written");
    let config = json!({
        "airlock": AIRLOCK,
        "policy": path("airlock.toml"),
        "db": path("airlock.redb"),
        "upstream": [
            upstream_venv.python().display().to_string(),
            UPSTREAM,
            path("calls.log").display().to_string(),
            path("notes").display().to_string(),
        ],
        "log": path("calls.log"),
        "notes": path("notes"),
    });
    run_client(&langgraph, CLIENT, &config, scratch.path(), 6);
}
