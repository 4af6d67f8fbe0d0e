//! Results are masked before the model sees them: the author's choice, plus what the policy adds.

use agent_airlock::{
    CallContext, Dispatcher, HostCommand, Outcome, Policy, Status, ToolCall, ToolError, ToolMessage, airlock_tool,
    mask::{MaskConfig, MaskStrategy, Masker},
    tool,
};
use agent_airlock_tests::block_on;
use serde_json::{Value, json};

const AWS_KEY: &str = "AKIAIOSFODNN7QK4RW2Z";
const EMAIL: &str = "jane.doe@example.com";

/// Read the deployment config (default masking: secrets).
#[airlock_tool]
fn read_config() -> Value {
    json!({"region": "eu-west-1", "aws_access_key_id": AWS_KEY, "owner": EMAIL, "replicas": 3})
}

/// Look up a customer (masks secrets and PII).
#[airlock_tool(mask = "secrets,pii")]
fn lookup_customer(
    /// Customer id.
    id: String,
) -> String {
    format!("customer {id}: {EMAIL}, card 4111 1111 1111 1111, version 1.2.3.4")
}

/// Echo a value back, unmasked by the author.
#[airlock_tool(mask = "none")]
fn echo(
    /// The text.
    text: String,
) -> String {
    text
}

/// Connect to the database.
#[airlock_tool]
fn connect() -> Result<String, ToolError> {
    Err(ToolError::new("could not connect to postgres://admin:hunter2secret@db.internal:5432/app"))
}

/// Hand the secret to the host's graph state.
#[airlock_tool]
fn stash() -> HostCommand {
    HostCommand { update: json!({"aws_key": AWS_KEY}), goto: Vec::new() }
}

/// List recent events (a result of many small leaves).
#[airlock_tool]
fn list_events() -> Value {
    let events: Vec<Value> =
        (0..50).map(|i| json!({"id": i, "note": format!("event {i} by {EMAIL}, key {AWS_KEY}")})).collect();
    json!({"events": events})
}

fn dispatcher(policy: Policy) -> Dispatcher {
    Dispatcher::builder()
        .tool(tool!(read_config))
        .tool(tool!(lookup_customer))
        .tool(tool!(echo))
        .tool(tool!(connect))
        .tool(tool!(stash))
        .policy(policy)
        .build()
        .unwrap()
}

fn call(dispatcher: &Dispatcher, name: &str, arguments: Value) -> Outcome {
    block_on(dispatcher.dispatch(ToolCall::new("c1", name, arguments), &CallContext::new()))
}

fn message(dispatcher: &Dispatcher, name: &str, arguments: Value) -> ToolMessage {
    call(dispatcher, name, arguments).expect_message()
}

#[test]
fn secrets_are_masked_by_default_leaf_by_leaf() {
    let message = message(&dispatcher(Policy::new()), "read_config", json!({}));
    let content: Value = serde_json::from_str(&message.content).unwrap();
    assert_eq!(content["aws_access_key_id"], "[AWS_ACCESS_KEY]");
    assert_eq!(content["owner"], EMAIL, "PII is not masked unless asked for");
    assert_eq!(content["replicas"], 3, "the JSON keeps its shape");
    assert_eq!(content["region"], "eu-west-1");
}

#[test]
fn the_authors_choice_masks_pii_without_false_positives() {
    let message = message(&dispatcher(Policy::new()), "lookup_customer", json!({"id": "c-9"}));
    assert_eq!(message.status, Status::Success);
    assert!(!message.content.contains(EMAIL) && !message.content.contains("4111 1111"), "{}", message.content);
    assert!(message.content.contains("[EMAIL]") && message.content.contains("[PAYMENT_CARD]"), "{}", message.content);
    assert!(message.content.contains("version 1.2.3.4"), "a version is not an IP: {}", message.content);
}

#[test]
fn a_policy_adds_masking_but_cannot_remove_it() {
    let unmasked = message(&dispatcher(Policy::new()), "echo", json!({"text": EMAIL}));
    assert_eq!(unmasked.content, EMAIL);
    let policy = Policy::builder().mask("echo", "pii").mask("read_config", "none").build().unwrap();
    let d = dispatcher(policy);
    assert_eq!(message(&d, "echo", json!({"text": EMAIL})).content, "[EMAIL]");
    let config: Value = serde_json::from_str(&message(&d, "read_config", json!({})).content).unwrap();
    assert_eq!(config["aws_access_key_id"], "[AWS_ACCESS_KEY]", "`none` in a policy removes nothing");
    assert!(Policy::builder().mask("*", "pii,passports").build().is_err());
}

#[test]
fn error_text_is_masked_too() {
    let message = message(&dispatcher(Policy::new()), "connect", json!({}));
    assert_eq!(message.status, Status::Error);
    assert!(!message.content.contains("hunter2secret"), "{}", message.content);
}

#[test]
fn host_commands_pass_through_unmasked() {
    match call(&dispatcher(Policy::new()), "stash", json!({})) {
        Outcome::Command { command, .. } => assert_eq!(command.update["aws_key"], AWS_KEY),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_deployment_chooses_the_strategy() {
    let masker = Masker::new(MaskConfig::new(MaskStrategy::Full));
    let d = Dispatcher::builder().tool(tool!(lookup_customer)).masker(masker).build().unwrap();
    let message = message(&d, "lookup_customer", json!({"id": "c-9"}));
    assert!(!message.content.contains("[EMAIL]") && !message.content.contains(EMAIL), "{}", message.content);
}

#[test]
fn a_result_over_the_masking_budget_is_refused_whole_never_passed_unmasked() {
    // Every leaf is far under the budget; the result's strings together are over it.
    let masker = Masker::new(MaskConfig::default().with_max_text_bytes(1024));
    let d = Dispatcher::builder().tool(tool!(list_events)).masker(masker).build().unwrap();
    let refused = message(&d, "list_events", json!({})).content;
    assert!(refused.contains("TOO_LARGE_TO_MASK"), "{refused}");
    assert!(!refused.contains(AWS_KEY) && !refused.contains(EMAIL), "{refused}");
    // Under the budget the same result is masked leaf by leaf.
    let d = Dispatcher::builder().tool(tool!(list_events)).build().unwrap();
    let masked = message(&d, "list_events", json!({})).content;
    assert!(masked.contains("[AWS_ACCESS_KEY]") && !masked.contains(AWS_KEY), "{masked}");
}
