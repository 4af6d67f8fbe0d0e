//! A guarded payments host shared by the dispatcher-level approval tests and the `dispatch_worker`
//! process: escalated tools whose executions are appended to a file, so runs are counted across
//! processes and crashes.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::ledger::ApprovalLedger;
use agent_airlock::{
    CallContext, Dispatcher, ManualClock, Policy, State, ToolCall, ToolError, airlock_tool,
    approval::InterruptApprovals, tool,
};
use serde_json::{Value, json};

use crate::ledger_fixtures::{GRANT_TTL, key_ring};

/// Where executions are recorded, and whether a tool hangs after recording (to be killed mid-run).
pub struct ExecutionLog {
    /// The file; one line per execution.
    pub path: PathBuf,
    /// Hang forever after writing the line.
    pub hang_after_start: bool,
}

impl ExecutionLog {
    /// Appends `line` (synced), then hangs if asked to.
    pub fn record(&self, line: &str) -> Result<(), ToolError> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| ToolError::not_executed(e.to_string()))?;
        // One write per line: concurrent runs append whole lines.
        file.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| ToolError::new(e.to_string()))?;
        if self.hang_after_start {
            loop {
                std::thread::sleep(Duration::from_secs(3_600));
            }
        }
        Ok(())
    }

    /// The executions recorded so far.
    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

/// Refund a payment to the customer's card.
#[airlock_tool(escalate = "moves money", rate = "100/minute")]
pub fn refund(
    /// The payment to refund.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
    #[inject] log: State<ExecutionLog>,
) -> Result<String, ToolError> {
    log.record(&format!("refund {payment_id} {amount} pid={}", std::process::id()))?;
    Ok(format!("refunded {amount} on {payment_id}"))
}

/// Cancel a subscription.
#[airlock_tool(escalate = "ends a subscription")]
pub fn cancel_subscription(
    /// The payment to refund.
    payment_id: String,
    /// Amount in cents.
    amount: u64,
    #[inject] log: State<ExecutionLog>,
) -> Result<String, ToolError> {
    log.record(&format!("cancel {payment_id} {amount}"))?;
    Ok("cancelled".to_owned())
}

/// Pay an invoice, approved by a human, once per invoice.
#[airlock_tool(escalate = "moves money", effect = "pay:{invoice}")]
pub fn pay_invoice(
    /// The invoice to pay.
    invoice: String,
    #[inject] log: State<ExecutionLog>,
) -> Result<String, ToolError> {
    log.record(&format!("pay {invoice} pid={}", std::process::id()))?;
    Ok(format!("paid {invoice}"))
}

/// A dispatcher for `pay_invoice` with interrupt approvals over `ledger` (the effect records are the
/// ledger's).
pub fn invoice_dispatcher(ledger: Arc<dyn ApprovalLedger>, clock: Arc<ManualClock>) -> Dispatcher {
    let approvals = InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(Arc::clone(&clock));
    Dispatcher::builder()
        .tool(tool!(pay_invoice))
        .interrupt_approvals(approvals)
        .clock(clock)
        .build()
        .expect("one tool")
}

/// The call `call_id` paying `invoice`.
pub fn pay_call(call_id: &str, invoice: &str) -> ToolCall {
    ToolCall::new(call_id, "pay_invoice", json!({ "invoice": invoice }))
}

/// A dispatcher for the payments tools with interrupt approvals over `ledger`.
pub fn dispatcher(ledger: Arc<dyn ApprovalLedger>, clock: Arc<ManualClock>, policy: Policy) -> Dispatcher {
    let approvals = InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(Arc::clone(&clock));
    dispatcher_with(approvals, clock, policy)
}

/// A dispatcher for the payments tools with the given interrupt approvals (e.g. in operator mode).
pub fn dispatcher_with(approvals: InterruptApprovals, clock: Arc<ManualClock>, policy: Policy) -> Dispatcher {
    builder_with(approvals, clock, policy).build().expect("distinct tool names")
}

/// [`dispatcher_with`], every outcome audited in `log`.
pub fn dispatcher_audited(
    approvals: InterruptApprovals,
    clock: Arc<ManualClock>,
    policy: Policy,
    log: Arc<agent_airlock::audit::AuditLog>,
) -> Dispatcher {
    builder_with(approvals, clock, policy).audit(log).build().expect("distinct tool names")
}

fn builder_with(
    approvals: InterruptApprovals,
    clock: Arc<ManualClock>,
    policy: Policy,
) -> agent_airlock::DispatcherBuilder {
    Dispatcher::builder()
        .tool(tool!(refund))
        .tool(tool!(cancel_subscription))
        .policy(policy)
        .interrupt_approvals(approvals)
        .clock(clock)
}

/// The call the tests interrupt and resume.
pub fn refund_call(amount: u64) -> ToolCall {
    ToolCall::new("call_1", "refund", json!({"payment_id": "pi_1", "amount": amount}))
}

/// The host's context at checkpoint `checkpoint` of thread `t1`, with the execution log.
pub fn context(log: ExecutionLog, checkpoint: &str, resume: Option<Value>) -> CallContext {
    let context = CallContext::new()
        .with_thread("t1")
        .with_checkpoint("", [(String::new(), checkpoint.to_owned())].into())
        .with_state(log);
    match resume {
        Some(value) => context.with_resume(value),
        None => context,
    }
}
