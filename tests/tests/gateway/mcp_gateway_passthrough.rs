//! `airlock mcp` passes resources and prompts through: the official Python SDK as the client
//! (`tests/mcp/passthrough_client.py`), the Python SDK server of `tests/mcp/upstream_server.py` upstream.
//! Lists and reads come back as the upstream gave them, and what the policy denies (`deny_resources`,
//! `deny_prompts`) is neither listed nor forwarded: the upstream's own log shows what reached it.

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{Scratch, run_client, venv};

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
    let scratch = Scratch::with_policy(POLICY);
    scratch.notes(&[("hello.txt", "hello from the notes")]);
    run_client(&venv, CLIENT, &scratch.stdio_client_config(&venv), scratch.dir(), 7);
}
