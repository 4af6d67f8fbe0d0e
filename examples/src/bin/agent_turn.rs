//! A scripted agent turn through the airlock: the schemas offered to the model, then one tool call per
//! gate: allowed, ghost arguments stripped, a validation refusal, a denied tool, a human's yes and no,
//! and a rate-limited call.
//!
//! Run: `cargo run -p agent-airlock-examples --bin agent_turn`

use std::collections::BTreeMap;
use std::sync::Mutex;

use agent_airlock::{
    CallContext, Dispatcher, Outcome, Policy, State, ToolCall, ToolError, airlock_tool,
    approval::{ApprovalRequest, Decision},
    tool,
};
use serde_json::json;

/// The files of a toy workspace.
#[derive(Default)]
struct Workspace {
    files: Mutex<BTreeMap<String, String>>,
}

/// Read a file in the workspace.
#[airlock_tool(rate = "3/minute")]
fn read_file(
    /// Path relative to the workspace root.
    path: String,
    #[inject] ws: State<Workspace>,
) -> Result<String, ToolError> {
    let files = ws.files.lock().map_err(|_| ToolError::new("workspace unavailable"))?;
    files.get(&path).cloned().ok_or_else(|| ToolError::not_executed(format!("no file `{path}`")))
}

/// Delete a file in the workspace.
#[airlock_tool(escalate = "deletes a file", rate = "10/minute")]
async fn delete_file(
    /// Path relative to the workspace root.
    path: String,
    #[inject] ws: State<Workspace>,
) -> Result<String, ToolError> {
    let mut files = ws.files.lock().map_err(|_| ToolError::new("workspace unavailable"))?;
    match files.remove(&path) {
        Some(_) => Ok(format!("deleted {path}")),
        None => Err(ToolError::not_executed(format!("no file `{path}`"))),
    }
}

/// Move money between two accounts.
#[airlock_tool]
fn transfer(
    /// Amount in cents.
    amount: u64,
    /// Destination account id.
    to: String,
) -> String {
    format!("sent {amount} cents to {to}")
}

/// Run a shell command on the host.
#[airlock_tool(name = "admin_shell")]
fn shell(
    /// The command line.
    command: String,
) -> String {
    format!("would run {command}")
}

fn show(outcome: &Outcome) {
    match outcome {
        Outcome::Message(m) => {
            println!("   status:  {:?}", m.status);
            println!("   content: {}", m.content.replace('\n', "\n            "));
            if let Some(refusal) = &m.refusal {
                println!("   refusal: {:?} (rule: {})", refusal.kind, refusal.rule.as_deref().unwrap_or("-"));
            }
            for hint in &m.hints {
                println!("   hint:    {hint}");
            }
            if !m.stripped_arguments.is_empty() {
                println!("   stripped ghost arguments: {:?}", m.stripped_arguments);
            }
        }
        other => println!("   {other:?}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let policy = Policy::builder().deny("admin_*").build().expect("the policy is valid");
    // A human at a console would decide; this script approves deleting notes and refuses the rest.
    let approver = |request: ApprovalRequest| async move {
        println!("   human asked: {} {} ({})", request.tool, request.arguments, request.reasons[0].reason);
        if request.arguments["path"] == "notes.txt" {
            Decision::Approve
        } else {
            Decision::Deny { reason: Some("keep the report".into()) }
        }
    };
    let dispatcher = Dispatcher::builder()
        .tool(tool!(read_file))
        .tool(tool!(delete_file))
        .tool(tool!(transfer))
        .tool(tool!(shell))
        .policy(policy)
        .approver(approver)
        .build()
        .expect("tool names are distinct");

    let workspace = Workspace::default();
    {
        let mut files = workspace.files.lock().expect("not poisoned");
        files.insert("notes.txt".into(), "buy milk".into());
        files.insert("report.md".into(), "# Q3".into());
    }
    let context = CallContext::new().with_thread("demo-thread").with_state(workspace);

    println!("Tools offered to the model (admin_* is denied, so not offered):");
    for definition in dispatcher.offered_tools() {
        println!("  {} — {}\n    {}", definition.name, definition.description, definition.input_schema);
    }

    let script = [
        ("an allowed call", ToolCall::new("c1", "read_file", json!({"path": "notes.txt"}))),
        ("ghost arguments stripped", ToolCall::new("c2", "read_file", json!({"path": "report.md", "as_root": true}))),
        ("a validation refusal", ToolCall::new("c3", "transfer", json!({"amount": "500", "too": "acct-9"}))),
        ("a denied tool", ToolCall::new("c4", "admin_shell", json!({"command": "rm -rf /"}))),
        ("an escalated call the human approves", ToolCall::new("c5", "delete_file", json!({"path": "notes.txt"}))),
        ("an escalated call the human refuses", ToolCall::new("c6", "delete_file", json!({"path": "report.md"}))),
        ("within the rate limit (3/minute)", ToolCall::new("c7", "read_file", json!({"path": "report.md"}))),
        ("over the rate limit", ToolCall::new("c8", "read_file", json!({"path": "report.md"}))),
    ];
    for (step, call) in script {
        println!("\n── {step}");
        println!("   model calls {}({})", call.name, call.arguments);
        let outcome = dispatcher.dispatch(call, &context).await;
        show(&outcome);
    }
}
