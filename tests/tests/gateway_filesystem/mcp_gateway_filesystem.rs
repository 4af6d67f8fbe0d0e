//! `airlock mcp` in front of a server nobody here wrote, from npm: `@modelcontextprotocol/server-filesystem`,
//! at the version pinned by `tests/npm/package-lock.json` and installed by the test itself (`npm ci` under
//! the cargo target directory). The client is the official Python MCP SDK, launching the gateway from
//! another folder as a desktop client does. Each claim is shown on the files the server would have touched.
//!
//! The policy is `airlock mcp scan`'s starter with four tools allowed and pinned, writes under `.ssh`
//! denied by an argument condition, and edits escalated to the client's human.

use std::path::Path;

use agent_airlock::Policy;
use agent_airlock_tests::node_env::{NodePackages, node};
use serde_json::json;

use crate::gateway;
use gateway::{AIRLOCK, run_client, scan, venv};

const PACKAGES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/npm");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/filesystem_client.py");
const SERVER: &str = "@modelcontextprotocol/server-filesystem";

/// Keeps `[tools.NAME]` tables (with their pins) for the allowed tools only, and adds rules to two of them.
fn operator_policy(starter: &str) -> String {
    let allowed = ["read_text_file", "write_file", "list_directory", "edit_file"];
    let mut policy = String::from("version = 1\ndefault = \"deny\"\n");
    policy.push_str(&format!("allow = {allowed:?}\n"));
    let pinned = Policy::from_toml(starter).unwrap_or_else(|e| panic!("the starter policy parses: {e}\n{starter}"));
    assert!(pinned.pins().len() >= 10, "every tool of the server is pinned: {:?}", pinned.pins());
    for tool in allowed {
        let pin = pinned.pin(tool).unwrap_or_else(|| panic!("`{tool}` is pinned"));
        policy.push_str(&format!("\n[tools.{tool}]\npin = \"{pin}\"\n"));
        if tool == "edit_file" {
            policy.push_str("escalate = \"changes a file\"\n");
        }
    }
    policy
        .push_str("\n[[tools.write_file.when]]\nif = 'path matches \"**/.ssh/**\"'\ndeny = \"never write ssh keys\"\n");
    policy
}

#[test]
fn the_gateway_guards_the_npm_filesystem_server() {
    let node = node().unwrap_or_else(|why| panic!("{why}"));
    let install = NodePackages::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(Path::new(PACKAGES))
        .unwrap_or_else(|why| panic!("`{SERVER}` cannot be installed: {why}"));
    let entry = install.package_file(SERVER, "dist/index.js");
    assert!(entry.is_file(), "`{}` is installed", entry.display());
    let venv = venv();

    let scratch = tempfile::tempdir().expect("a temporary directory");
    let root = scratch.path().join("root");
    std::fs::create_dir_all(root.join(".ssh")).expect("the served folder is made");
    // The server resolves symlinks; name the folder as it will.
    let root = root.canonicalize().expect("the served folder exists");
    let upstream = vec![node.to_owned(), entry.display().to_string(), root.display().to_string()];

    let policy = operator_policy(&scan(&upstream));
    Policy::from_toml(&policy).unwrap_or_else(|e| panic!("the operator's policy parses: {e}\n{policy}"));
    let policy_path = scratch.path().join("airlock.toml");
    std::fs::write(&policy_path, policy).expect("the policy is written");

    let config = json!({
        "airlock": AIRLOCK,
        "policy": policy_path,
        "db": scratch.path().join("airlock.redb"),
        "upstream": upstream,
        "root": root,
    });
    run_client(&venv, CLIENT, &config, scratch.path(), 6);
}
