//! `Dispatcher::dispatch_with_approver`, the seam the MCP server uses to ask the human behind the request
//! being served: the per-call approver replaces the dispatcher's own, and `None` refuses escalated calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_airlock::{
    CallContext, Dispatcher, RefusalKind, Status, ToolCall, airlock_tool,
    approval::{ApprovalRequest, Approver, Decision},
    tool,
};
use agent_airlock_tests::block_on;
use serde_json::json;

/// Wipes a disk.
#[airlock_tool(escalate = "destroys data")]
fn wipe(
    /// The disk.
    disk: String,
) -> String {
    format!("wiped {disk}")
}

fn counting(answer: Decision, asked: Arc<AtomicUsize>) -> impl Approver {
    move |_request: ApprovalRequest| {
        asked.fetch_add(1, Ordering::SeqCst);
        let answer = answer.clone();
        async move { answer }
    }
}

#[test]
fn the_per_call_approver_replaces_the_dispatchers_own() {
    let own = Arc::new(AtomicUsize::new(0));
    let per_call = Arc::new(AtomicUsize::new(0));
    let dispatcher = Dispatcher::builder()
        .tool(tool!(wipe))
        .approver(counting(Decision::Approve, Arc::clone(&own)))
        .build()
        .unwrap();
    let context = CallContext::new();
    let call = || ToolCall::new("1", "wipe", json!({"disk": "sda"}));

    let refuser = counting(Decision::Deny { reason: None }, Arc::clone(&per_call));
    let message = block_on(dispatcher.dispatch_with_approver(call(), &context, Some(&refuser))).expect_message();
    assert_eq!(message.status, Status::Error);
    assert_eq!(message.refusal.unwrap().kind, RefusalKind::HumanDenied);
    assert_eq!((own.load(Ordering::SeqCst), per_call.load(Ordering::SeqCst)), (0, 1));

    // No approver for this call: refused, even though the dispatcher has one that would say yes.
    let message = block_on(dispatcher.dispatch_with_approver(call(), &context, None)).expect_message();
    assert_eq!(message.refusal.unwrap().kind, RefusalKind::ApprovalUnavailable);
    assert!(message.content.contains("needs a human's approval and none can be asked here"), "{}", message.content);
    assert_eq!(own.load(Ordering::SeqCst), 0);

    // `dispatch` still uses the dispatcher's own.
    let message = block_on(dispatcher.dispatch(call(), &context)).expect_message();
    assert_eq!(message.content, "wiped sda");
    assert_eq!(own.load(Ordering::SeqCst), 1);
}

#[test]
fn the_dispatch_future_can_move_between_threads() {
    fn assert_send<T: Send>(value: T) -> T {
        value
    }
    let dispatcher = Dispatcher::builder().tool(tool!(wipe)).build().unwrap();
    let context = CallContext::new();
    let future = assert_send(dispatcher.dispatch_with_approver(
        ToolCall::new("1", "wipe", json!({"disk": "sda"})),
        &context,
        None,
    ));
    assert_eq!(block_on(future).expect_message().refusal.unwrap().kind, RefusalKind::ApprovalUnavailable);
}

#[test]
fn an_approval_that_could_not_be_obtained_is_not_a_humans_no() {
    let asked = Arc::new(AtomicUsize::new(0));
    let dispatcher = Dispatcher::builder()
        .tool(tool!(wipe))
        .approver(counting(Decision::Unavailable { reason: "the approval request timed out".into() }, asked))
        .build()
        .unwrap();
    let message =
        block_on(dispatcher.dispatch(ToolCall::new("1", "wipe", json!({"disk": "sda"})), &CallContext::new()))
            .expect_message();
    assert_eq!(message.refusal.unwrap().kind, RefusalKind::ApprovalUnavailable);
    assert_eq!(
        message.content,
        "tool `wipe` needs a human's approval and it could not be obtained: the approval request timed out"
    );
}

#[test]
fn an_approver_renders_the_call_in_full_and_escaped() {
    let request = ApprovalRequest {
        tool: "wipe".into(),
        tool_call_id: "1".into(),
        thread_id: None,
        reasons: vec![agent_airlock::approval::EscalationReason {
            rule: "attribute".into(),
            reason: "destroys data".into(),
        }],
        arguments: json!({"disk": "sda\u{202E}bds", "note": "x".repeat(5000)}),
    };
    let text = request.render().unwrap();
    assert!(text.contains("\"disk\": \"sda\\u{202E}bds\""), "{text}");
    assert!(text.contains(&"x".repeat(5000)));
    assert!(text.find("\"disk\"").unwrap() < text.find("\"note\"").unwrap());
    let too_long = ApprovalRequest { arguments: json!({"note": "x".repeat(70_000)}), ..request };
    assert!(too_long.render().is_err());
}
