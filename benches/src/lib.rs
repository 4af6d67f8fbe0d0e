//! Shared pieces of the benchmarks.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use agent_airlock::ledger::ApprovalLedger;
use agent_airlock::{
    CallContext, Clock, ManualClock, ToolCall,
    approval::{BindingInput, InterruptApprovals, KeyRing},
    keys::ApprovalKey,
};
use futures_util::future::join_all;
use serde_json::{Map, Value, json};

/// Polls a future that completes without waiting (every sync tool's dispatch does) on a no-op waker, so the
/// benchmark measures the dispatcher and not an executor. Falls back to spinning for futures that yield.
pub fn run_ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::hint::spin_loop();
    }
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future that waits for another thread (a ledger's writer, a disk commit) on the current thread,
/// parking between polls, so a waiting benchmark does not burn the CPU the writer needs.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// A fixed start time for the manual clocks, so runs are reproducible.
pub const START: Duration = Duration::from_secs(1_767_225_600);

/// How long grants stay valid in the benchmarks: longer than any run.
pub const GRANT_TTL: Duration = Duration::from_secs(86_400);

/// The benchmarks' approval key ring (one 32-byte key, id `bench`).
pub fn key_ring() -> KeyRing {
    KeyRing::new(ApprovalKey::new("bench", &[0x5a; 32]).expect("a 32-byte key is valid"))
}

/// Interrupt approvals over `ledger`, on a manual clock fixed at [`START`].
pub fn approvals(ledger: Arc<dyn ApprovalLedger>) -> InterruptApprovals {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(START));
    // The benches leave thousands of requests pending in one thread: no pending limit.
    InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(clock).with_max_pending(None)
}

/// An escalated call as a host makes it, owned, so many can be prepared before a measurement.
#[derive(Debug, Clone)]
pub struct BenchCall {
    /// The graph thread.
    pub thread_id: String,
    /// The checkpoint map.
    pub checkpoint: BTreeMap<String, String>,
    /// The model's tool call id.
    pub tool_call_id: String,
    /// The registered tool.
    pub tool: String,
    /// The admitted arguments.
    pub arguments: Map<String, Value>,
}

impl BenchCall {
    /// The `n`-th refund call: its own tool call id and payment, so each needs its own approval.
    pub fn refund(n: u64) -> Self {
        Self::to_tool("refund", n)
    }

    /// The `n`-th call to `tool`, with a refund's arguments (`payment_id`, `amount`).
    pub fn to_tool(tool: &str, n: u64) -> Self {
        let mut arguments = Map::new();
        arguments.insert("payment_id".to_owned(), Value::String(format!("pi_3MtwBwLkdIwHu7ix{n:010}")));
        arguments.insert("amount".to_owned(), json!(2500));
        BenchCall {
            thread_id: "thread-bench".to_owned(),
            checkpoint: BTreeMap::from([(String::new(), "1f0a2b3c-checkpoint".to_owned())]),
            tool_call_id: format!("call_{n:012}"),
            tool: tool.to_owned(),
            arguments,
        }
    }

    /// The model's tool call, as the dispatcher receives it.
    pub fn tool_call(&self) -> ToolCall {
        ToolCall::new(self.tool_call_id.clone(), self.tool.clone(), Value::Object(self.arguments.clone()))
    }

    /// The host's context for this call: its thread and checkpoint, and the resume value if resumed.
    pub fn context(&self, resume: Option<Value>) -> CallContext {
        let context =
            CallContext::new().with_thread(self.thread_id.clone()).with_checkpoint("", self.checkpoint.clone());
        match resume {
            Some(resume) => context.with_resume(resume),
            None => context,
        }
    }

    /// What the binding covers.
    pub fn input(&self) -> BindingInput<'_> {
        BindingInput {
            thread_id: &self.thread_id,
            checkpoint_ns: "",
            checkpoint: &self.checkpoint,
            tool_call_id: &self.tool_call_id,
            tool: &self.tool,
            arguments: &self.arguments,
        }
    }
}

/// Records a pending request for each call, all at once (so a grouping ledger shares commits between
/// them), and returns the interrupt values in order.
pub fn request_all(approvals: &InterruptApprovals, calls: &[BenchCall]) -> Vec<Value> {
    let inputs: Vec<BindingInput<'_>> = calls.iter().map(BenchCall::input).collect();
    let requests = block_on(join_all(inputs.iter().map(|input| approvals.request(input, "attribute", "bench"))));
    requests.into_iter().map(|request| request.expect("the request is recorded").into_value()).collect()
}

/// Approves each interrupt value, all at once, and returns the resume values in order.
pub fn approve_all(approvals: &InterruptApprovals, interrupts: &[Value]) -> Vec<Value> {
    let resumes = block_on(join_all(interrupts.iter().map(|interrupt| approvals.approve(interrupt, "alice"))));
    resumes.into_iter().map(|resume| resume.expect("the request is approved").into_value()).collect()
}

/// `count` refund calls numbered from `first`, each requested and approved: what resumers spend.
pub fn approved_calls(approvals: &InterruptApprovals, first: u64, count: u64) -> Vec<(BenchCall, Value)> {
    approve_calls(approvals, (first..first + count).map(BenchCall::refund).collect())
}

/// Requests and approves each of `calls`, and pairs each with its resume value.
pub fn approve_calls(approvals: &InterruptApprovals, calls: Vec<BenchCall>) -> Vec<(BenchCall, Value)> {
    let interrupts = request_all(approvals, &calls);
    let resumes = approve_all(approvals, &interrupts);
    calls.into_iter().zip(resumes).collect()
}

/// The `quantiles` (each in 0..=1, nearest rank) of `samples`, which are sorted in place.
pub fn percentiles(samples: &mut [f64], quantiles: &[f64]) -> Vec<f64> {
    samples.sort_by(f64::total_cmp);
    quantiles
        .iter()
        .map(|q| {
            if samples.is_empty() {
                return f64::NAN;
            }
            let rank = (q * (samples.len() - 1) as f64).round() as usize;
            samples[rank.min(samples.len() - 1)]
        })
        .collect()
}

/// The size of one record in the storage floors, about a grant's.
pub const RECORD: usize = 300;

/// Two tables shaped like a spend's writes (a grant and its request's status), for the raw redb floor.
pub const SPEND_GRANTS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("bench_spend_grants");
/// See [`SPEND_GRANTS`].
pub const SPEND_STATUS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("bench_spend_status");

/// Fills both spend tables with `count` records under random-looking 32-hex ids (like grant and request ids)
/// in one commit, and returns the ids.
pub fn seed_spend_tables(db: &redb::Database, count: u64) -> Vec<String> {
    let value = [0x61u8; RECORD];
    let ids: Vec<String> =
        (0..count).map(|i| format!("{:032x}", u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) << 17)).collect();
    let txn = db.begin_write().expect("a transaction");
    {
        let mut grants = txn.open_table(SPEND_GRANTS).expect("the table");
        let mut status = txn.open_table(SPEND_STATUS).expect("the table");
        for id in &ids {
            grants.insert(id.as_str(), value.as_slice()).expect("inserted");
            status.insert(id.as_str(), value.as_slice()).expect("inserted");
        }
    }
    txn.commit().expect("committed");
    ids
}

pub mod hot_path;
pub mod scaling;

/// Starts callgrind's instrumentation, for the instruction budget's binaries run with `--instr-atstart=no`
/// (`scripts/instruction_budget.py`): their setup runs uninstrumented, ~4x faster under valgrind, and only
/// what follows this call can be counted. A no-op outside valgrind, and when built without the request (the
/// feature `callgrind` off, or valgrind's header missing: build.rs), where a run with `--instr-atstart=no`
/// counts nothing and the script says so.
pub fn start_callgrind_instrumentation() {
    #[cfg(airlock_callgrind)]
    {
        unsafe extern "C" {
            // csrc/callgrind.c: `CALLGRIND_START_INSTRUMENTATION` from valgrind's header.
            safe fn airlock_callgrind_start_instrumentation();
        }
        airlock_callgrind_start_instrumentation();
    }
}
