//! `airlock mcp` passes resources and prompts through: the official Python SDK as the client
//! (`tests/mcp/passthrough_client.py`), the Python SDK server of `tests/mcp/upstream_server.py` upstream.
//! Lists and reads come back as the upstream gave them, and what the policy denies (`deny_resources`,
//! `deny_prompts`) is neither listed nor forwarded: the upstream's own log shows what reached it.

use serde_json::json;

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{AIRLOCK, run_client, venv};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/passthrough_client.py");

const POLICY: &str = r#"version = 1
default = "allow"
deny = ["delete_everything"]
deny_resources = ["config://secrets"]
deny_prompts = ["admin_*"]
"#;

#[test]
fn resources_and_prompts_pass_through_except_what_the_policy_denies() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| scratch.path().join(name);
    std::fs::write(path("airlock.toml"), POLICY).expect("the policy is written");
    std::fs::create_dir_all(path("notes")).expect("the notes directory");
    std::fs::write(path("notes").join("hello.txt"), "hello from the notes").expect("a note");
    let upstream = [
        venv.python().display().to_string(),
        UPSTREAM.to_owned(),
        path("calls.log").display().to_string(),
        path("notes").display().to_string(),
    ];
    let config = json!({
        "airlock": AIRLOCK,
        "policy": path("airlock.toml"),
        "db": path("airlock.redb"),
        "upstream": upstream,
        "log": path("calls.log"),
    });
    run_client(&venv, CLIENT, &config, scratch.path(), 7);
}
