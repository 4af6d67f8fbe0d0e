//! Memory held by the rate limiter for many distinct threads, counted by a global allocator.
//!
//! `cargo run --release -p agent-airlock-benches --bin memory`
#![allow(unsafe_code)] // a counting global allocator needs `unsafe impl GlobalAlloc`; it only forwards to `System`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use agent_airlock::{CallContext, Dispatcher, ManualClock, Policy, Status, ToolCall, airlock_tool, tool};
use agent_airlock_benches::run_ready;
use serde_json::json;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the caller's layout; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Ping.
#[airlock_tool]
fn ping() -> &'static str {
    "pong"
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn main() {
    const THREADS: usize = 100_000;
    let dispatcher = Dispatcher::builder()
        .tool(tool!(ping))
        .policy(Policy::builder().rate_limit_per_thread("ping", "10/minute").build().expect("valid"))
        .clock(ManualClock::new(Duration::from_secs(1_700_000_000)))
        .build()
        .expect("one tool");
    let contexts: Vec<CallContext> =
        (0..THREADS).map(|i| CallContext::new().with_thread(format!("thread-{i:06}"))).collect();
    let before = live();
    for context in &contexts {
        let message = run_ready(dispatcher.dispatch(ToolCall::new("c", "ping", json!({})), context)).expect_message();
        assert_eq!(message.status, Status::Success);
    }
    let after = live();
    let per_thread = (after - before) as f64 / THREADS as f64;
    println!(
        "rate limiter, per-thread buckets: {THREADS} threads → {} bytes ({per_thread:.0} B/thread)",
        after - before
    );
}
