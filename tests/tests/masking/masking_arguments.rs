//! Secrets the model passes as *arguments* never reach storage in plaintext: the interrupt value the host
//! checkpoints and the ledger's records hold the exact arguments only encrypted (version 3), the binding
//! covers them, and whoever holds the key is shown them whole; the approved call resumes and runs with them
//! (and only with them). A tool's mask set governs what the model and the audit log see, not the approver.

use std::path::Path;
use std::sync::Arc;

use agent_airlock::ledger::{ApprovalLedger, RedbLedger};
use agent_airlock::{
    CallContext, Dispatcher, ManualClock, Outcome, Policy, RefusalKind, Status, ToolCall, airlock_tool,
    approval::InterruptApprovals, tool,
};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const PASSWORD: &str = "Tr0ub4dor&3-correct-horse";
const API_KEY: &str = "sk-proj-flzdE1F8ResqEDusTpkr0cStY4qWB8dWKnHfDNxS";
const EMAIL: &str = "jane.doe@example.com";
const SECRETS: [&str; 3] = [PASSWORD, API_KEY, EMAIL];

/// One environment variable, Kubernetes style.
#[derive(Deserialize, JsonSchema)]
pub struct EnvVar {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// Rotate a database user's credentials.
#[airlock_tool(escalate = "changes credentials", mask = "secrets,pii")]
fn rotate_credentials(
    /// The user's e-mail.
    user: String,
    /// The new password.
    password: String,
    /// The service's environment.
    env: Vec<EnvVar>,
) -> String {
    let exact = user == EMAIL && password == PASSWORD && env.first().is_some_and(|var| var.value == API_KEY);
    if exact { "rotated with the exact arguments".to_owned() } else { "rotated with altered arguments".to_owned() }
}

fn arguments() -> Value {
    json!({
        "user": EMAIL,
        "password": PASSWORD,
        "env": [{"name": "OPENAI_API_KEY", "value": API_KEY}, {"name": "LOG_LEVEL", "value": "debug"}],
    })
}

fn call(arguments: Value) -> ToolCall {
    ToolCall::new("call_1", "rotate_credentials", arguments)
}

fn context(resume: Option<Value>) -> CallContext {
    let context = CallContext::new().with_thread("t1").with_checkpoint("", [(String::new(), "c1".to_owned())].into());
    match resume {
        Some(resume) => context.with_resume(resume),
        None => context,
    }
}

fn assert_no_secret_in(bytes: &[u8], what: &str) {
    for secret in SECRETS {
        let found = bytes.windows(secret.len()).any(|window| window == secret.as_bytes());
        assert!(!found, "{what} holds `{secret}`");
    }
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn secret_arguments_are_encrypted_where_stored_and_the_call_runs_with_the_real_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let ledger = Arc::new(RedbLedger::open(&path).unwrap());
    let clock = Arc::new(ManualClock::new(START));
    let approvals = InterruptApprovals::new(key_ring(), Arc::clone(&ledger), GRANT_TTL).with_clock(Arc::clone(&clock));
    let dispatcher = Dispatcher::builder()
        .tool(tool!(rotate_credentials))
        .interrupt_approvals(approvals.clone())
        .clock(clock)
        .build()
        .unwrap();

    // First pass: the interrupt value the host checkpoints.
    let interrupt = match block_on(dispatcher.dispatch(call(arguments()), &context(None))) {
        Outcome::Interrupt { request, .. } => request.into_value(),
        other => panic!("expected an interrupt, got {other:?}"),
    };
    assert_no_secret_in(interrupt.to_string().as_bytes(), "the interrupt value");
    let request = &interrupt["airlock_approval"];
    assert!(request.get("arguments").is_none(), "no plaintext arguments: {request}");
    assert!(request["sealed_arguments"].is_string());
    // The digest of the exact arguments (RFC 8785), which the binding covers.
    let exact = serde_json_canonicalizer::to_vec(&arguments()).unwrap();
    let digest: String = Sha256::digest(&exact).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(request["arguments_sha256"], digest.as_str());
    assert_eq!(request["version"], 3);

    // The ledger's file (a real redb file) holds no secret either, and its record still verifies.
    assert_no_secret_in(&file_bytes(&path), "the ledger file");
    let recorded = ledger.list_requests().unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].request.interrupt, interrupt);
    // Whoever holds the key opens them: the approver is shown exactly what the grant covers.
    let verified = approvals.verify_request(&recorded[0].request.interrupt).unwrap();
    assert_eq!(Value::Object(verified.arguments().clone()), arguments());
    let shown = verified.render().unwrap();
    assert!(shown.contains(PASSWORD) && shown.contains(API_KEY) && shown.contains(EMAIL), "{shown}");

    let resume = approvals.approve(&interrupt, "alice").wait().unwrap().into_value();

    // A host that rebuilt the call with a masked copy of the arguments gets nothing: the binding covers
    // the exact ones. The grant stays usable.
    let masked = json!({"user": "[EMAIL]", "password": "[SECRET_VALUE]", "env": []});
    let rebuilt = block_on(dispatcher.dispatch(call(masked), &context(Some(resume.clone()))));
    let refusal = rebuilt.expect_message().refusal.expect("refused");
    assert_eq!(refusal.kind, RefusalKind::ApprovalInvalid);

    // The call as the model made it resumes and runs with the exact arguments.
    let message = block_on(dispatcher.dispatch(call(arguments()), &context(Some(resume)))).expect_message();
    assert_eq!(message.status, Status::Success, "{message:?}");
    assert_eq!(message.content, "rotated with the exact arguments");

    drop(dispatcher);
    drop(approvals);
    drop(ledger);
    assert_no_secret_in(&file_bytes(&path), "the ledger file after the spend");
}

/// Rotate a password, unmasked by the author.
#[airlock_tool(escalate = "changes credentials", mask = "none")]
fn rotate_unmasked(
    /// The new password.
    password: String,
    /// Who to tell.
    cc: String,
) -> String {
    format!("{} characters, told {cc}", password.len())
}

fn first_pass_arguments(policy: Policy, call: ToolCall) -> Value {
    let ledger = Arc::new(agent_airlock::ledger::MemoryLedger::new());
    let clock = Arc::new(ManualClock::new(START));
    let approvals = InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(Arc::clone(&clock));
    let dispatcher = Dispatcher::builder()
        .tool(tool!(rotate_credentials))
        .tool(tool!(rotate_unmasked))
        .policy(policy)
        .interrupt_approvals(approvals)
        .clock(clock)
        .build()
        .unwrap();
    match block_on(dispatcher.dispatch(call, &context(None))) {
        Outcome::Interrupt { request, .. } => serde_json::Value::Object(request.arguments().clone()),
        other => panic!("expected an interrupt, got {other:?}"),
    }
}

/// Whatever the tool's and the policy's mask sets, the request holds the exact arguments: masking is for
/// the model and the audit log, never for the approver.
#[test]
fn no_mask_set_changes_what_the_approver_is_shown() {
    let unmasked = || ToolCall::new("call_2", "rotate_unmasked", json!({"password": PASSWORD, "cc": EMAIL}));
    assert_eq!(first_pass_arguments(Policy::new(), unmasked()), json!({"password": PASSWORD, "cc": EMAIL}));
    let policy = Policy::builder().mask("rotate_unmasked", "secrets").build().unwrap();
    assert_eq!(first_pass_arguments(policy, unmasked()), json!({"password": PASSWORD, "cc": EMAIL}));
    let stored = first_pass_arguments(Policy::new(), call(arguments()));
    assert_eq!(stored, arguments(), "the tool's own `secrets,pii` hides nothing from the approver");
}
