//! `airlock mcp` guards everything the upstream serves, not only tool calls: the official Python SDK as the
//! client (`tests/mcp/surfaces_client.py`), the Python SDK server of `tests/mcp/upstream_server.py`
//! upstream (with `SURFACES=1`, passed by `--env`). Under `default = "deny"` a resource or prompt no
//! `allow_*` glob matches is refused and never forwarded; a `[resources.…]` rate limit refuses the read past
//! it; secrets in a resource's text, a prompt's messages and a tool's structured content are masked; the
//! tool's output schema and structured content reach the client; a resource or prompt whose listing poisons
//! is not listed unless the policy accepts its findings; and every read and get, allowed or refused, has its
//! audit record in the gateway's log.

use agent_airlock::integrations::mcp_gateway::{PROMPT_GET, RESOURCE_READ};

// Each gateway test uses part of the shared helpers.
use crate::gateway;
use gateway::{Scratch, run_client, venv};

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/surfaces_client.py");

const POLICY: &str = r#"version = 1
default = "deny"
allow = ["read_note", "forecast"]
allow_resources = ["config://app", "config://leaky", "config://poisoned", "note://**"]
allow_prompts = ["summarise", "leaky", "poisoned", "vetted"]

[prompts.vetted]
allow_findings = ["instruction_tag"]

[resources."note://**"]
rate = "2/minute"
"#;

#[test]
fn resources_prompts_and_structured_results_go_through_the_guard() {
    let venv = venv();
    let scratch = Scratch::with_policy(POLICY);
    scratch.notes(&[("a.txt", "note a.txt"), ("b.txt", "note b.txt"), ("c.txt", "note c.txt")]);
    run_client(&venv, CLIENT, &scratch.stdio_client_config(&venv), scratch.dir(), 9);

    // The gateway has exited with its client: its audit log holds a record for every read and get.
    let records = scratch.audit_records();
    let of = |method: &str| -> Vec<(String, Option<String>)> {
        records
            .iter()
            .filter(|record| record.tool == method)
            .map(|record| (record.outcome.to_string(), record.rule.clone()))
            .collect()
    };
    let refused = |rule: &str| ("refused (denied)".to_owned(), Some(rule.to_owned()));
    let executed = || ("executed".to_owned(), None);
    assert_eq!(
        of(RESOURCE_READ),
        vec![
            refused("not in allow list"),
            refused("not in allow list"),
            executed(),
            executed(),
            ("refused (rate_limited)".to_owned(), Some("note://**".to_owned())),
            executed(),
        ],
        "{records:#?}"
    );
    assert_eq!(of(PROMPT_GET), vec![refused("not in allow list"), executed(), executed()], "{records:#?}");
    // The long URI's record commits to it, and the stored text of every record holds no secret.
    for record in &records {
        for raw in [&record.raw_arguments, &record.raw_result].into_iter().flatten() {
            assert!(!raw.contains("AKIAIOSFODNN7QK4RW2Z"), "{raw}");
        }
    }
    assert!(records.iter().filter(|r| r.tool == RESOURCE_READ).all(|r| r.arguments.is_some()));
}

const OBSERVE_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/surfaces_observe_client.py");

/// What the policy alone would refuse, observed: a deny glob, `default = "deny"` and a rate limit.
const OBSERVED: &str = r#"version = 1
default = "deny"
mode = "observe"
allow = ["read_note"]
deny_resources = ["config://leaky"]
allow_resources = ["config://leaky", "note://**"]
allow_prompts = ["summarise"]

[resources."note://**"]
rate = "2/minute"
"#;

/// In observe mode a read or get the policy would refuse is served, still masked, and its audit trail says
/// what would have been refused: a `refused` record with the rule ("not enforced"), then `executed`.
#[test]
fn observe_mode_serves_masks_and_records_what_the_policy_would_refuse() {
    let venv = venv();
    let scratch = Scratch::with_policy(OBSERVED);
    scratch.notes(&[("a.txt", "note a.txt"), ("b.txt", "note b.txt"), ("c.txt", "note c.txt")]);
    run_client(&venv, OBSERVE_CLIENT, &scratch.stdio_client_config(&venv), scratch.dir(), 4);

    let records = scratch.audit_records();
    let trail: Vec<(String, Option<String>, bool)> = records
        .iter()
        .filter(|record| record.tool == RESOURCE_READ || record.tool == PROMPT_GET)
        .map(|record| {
            let observed = record
                .detail
                .as_deref()
                .is_some_and(|detail| detail.starts_with("observe mode: would refuse, not enforced: "));
            (record.outcome.to_string(), record.rule.clone(), observed)
        })
        .collect();
    let would = |kind: &str, rule: &str| (format!("refused ({kind})"), Some(rule.to_owned()), true);
    let executed = || ("executed".to_owned(), None, false);
    assert_eq!(
        trail,
        vec![
            would("denied", "config://leaky"),
            executed(),
            would("denied", "not in allow list"),
            executed(),
            executed(),
            executed(),
            would("rate_limited", "note://**"),
            executed(),
        ],
        "{records:#?}"
    );
    for record in &records {
        for raw in [&record.raw_arguments, &record.raw_result].into_iter().flatten() {
            assert!(!raw.contains("AKIAIOSFODNN7QK4RW2Z"), "{raw}");
        }
    }
}
