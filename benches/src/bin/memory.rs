//! Memory held by the rate limiter for many distinct threads, and by the approval ledger for many
//! requests and grants (heap for `MemoryLedger`, file size for `RedbLedger`), counted by a global allocator.
//!
//! `cargo run --release -p agent-airlock-benches --bin memory [-- --keys 100000]`
#![allow(unsafe_code)] // a counting global allocator needs `unsafe impl GlobalAlloc`; it only forwards to `System`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use std::sync::Arc;

use agent_airlock::ledger::{ApprovalLedger, MemoryLedger, RedbLedger};
use agent_airlock::{CallContext, Dispatcher, ManualClock, Policy, Status, ToolCall, airlock_tool, tool};
use agent_airlock_benches::{BenchCall, approvals, approve_calls, block_on, request_all, run_ready};
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

fn per_key(bytes: isize, keys: usize) -> String {
    format!("{bytes} bytes ({:.0} B/key)", bytes as f64 / keys as f64)
}

fn rate_limiter(threads: usize) {
    let dispatcher = Dispatcher::builder()
        .tool(tool!(ping))
        .policy(Policy::builder().rate_limit_per_thread("ping", "10/minute").build().expect("valid"))
        .clock(ManualClock::new(Duration::from_secs(1_700_000_000)))
        .build()
        .expect("one tool");
    let contexts: Vec<CallContext> =
        (0..threads).map(|i| CallContext::new().with_thread(format!("thread-{i:06}"))).collect();
    let before = live();
    for context in &contexts {
        let message = run_ready(dispatcher.dispatch(ToolCall::new("c", "ping", json!({})), context)).expect_message();
        assert_eq!(message.status, Status::Success);
    }
    println!("rate limiter, per-thread buckets, {threads} threads: {}", per_key(live() - before, threads));
}

/// Heap held by a `MemoryLedger` for `keys` pending requests, then for `keys` granted ones, then spent.
fn memory_ledger(keys: usize) {
    const CHUNK: usize = 1_000;
    // Pending: only the ledger's copy is alive after each chunk (the returned interrupt values are dropped).
    let pending_bytes = {
        let before = live();
        let ledger = Arc::new(MemoryLedger::new());
        let approvals = approvals(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>);
        for chunk in 0..keys.div_ceil(CHUNK) {
            let calls: Vec<BenchCall> =
                (chunk * CHUNK..((chunk + 1) * CHUNK).min(keys)).map(|n| BenchCall::refund(n as u64)).collect();
            drop(request_all(&approvals, &calls));
        }
        drop(approvals);
        let bytes = live() - before;
        assert_eq!(ledger.list_requests().expect("listed").len(), keys);
        bytes
    };
    println!("MemoryLedger, {keys} pending requests: {}", per_key(pending_bytes, keys));

    let before = live();
    let ledger = Arc::new(MemoryLedger::new());
    let approvals = approvals(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>);
    let mut resumes = Vec::with_capacity(keys);
    for chunk in 0..keys.div_ceil(CHUNK) {
        let calls: Vec<BenchCall> =
            (chunk * CHUNK..((chunk + 1) * CHUNK).min(keys)).map(|n| BenchCall::refund(n as u64)).collect();
        resumes.push(approve_calls(&approvals, calls));
    }
    let granted_with_caller = live() - before;
    for (call, resume) in resumes.iter().flatten() {
        approvals.admit(&call.input(), resume).wait().expect("admitted");
    }
    let spent_with_caller = live() - before;
    drop(resumes);
    let spent = live() - before;
    // What the caller held (calls and resume values) is what dropping them freed; the ledger holds the rest.
    let granted = granted_with_caller - (spent_with_caller - spent);
    drop(approvals);
    assert_eq!(ledger.list_requests().expect("listed").len(), keys);
    println!(
        "MemoryLedger, {keys} granted requests (request + grant): {} (the grant alone ≈ {:.0} B/key)",
        per_key(granted, keys),
        (granted - pending_bytes) as f64 / keys as f64
    );
    println!("MemoryLedger, {keys} spent grants: {}", per_key(spent, keys));
}

/// The redb file for `keys` requests, each approved (and then spent).
fn redb_ledger(keys: usize) {
    const CHUNK: usize = 1_000;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("ledger.redb");
    let ledger = Arc::new(RedbLedger::open(&path).expect("the ledger opens"));
    let approvals = approvals(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>);
    let before = live();
    let started = std::time::Instant::now();
    let mut approved = Vec::with_capacity(keys);
    for chunk in 0..keys.div_ceil(CHUNK) {
        let calls: Vec<BenchCall> =
            (chunk * CHUNK..((chunk + 1) * CHUNK).min(keys)).map(|n| BenchCall::refund(n as u64)).collect();
        approved.extend(approve_calls(&approvals, calls));
    }
    let elapsed = started.elapsed();
    let size = std::fs::metadata(&path).expect("the file exists").len();
    let stats = ledger.writer_stats();
    println!(
        "RedbLedger, {keys} granted requests: file {} ({:.0} B/key); {} writes in {} commits, {:.1} s",
        size,
        size as f64 / keys as f64,
        stats.writes,
        stats.commits,
        elapsed.as_secs_f64()
    );
    for batch in approved.chunks(CHUNK) {
        let inputs: Vec<_> = batch.iter().map(|(call, _)| call.input()).collect();
        let admits = inputs.iter().zip(batch).map(|(input, (_, resume))| approvals.admit(input, resume));
        for admitted in block_on(futures_util::future::join_all(admits)) {
            admitted.expect("admitted");
        }
    }
    drop(approved);
    let size = std::fs::metadata(&path).expect("the file exists").len();
    println!("RedbLedger, {keys} spent grants: file {size} ({:.0} B/key)", size as f64 / keys as f64);
    // redb keeps a page cache in memory; this is what the ledger (writer thread, cache) holds on the heap.
    println!("RedbLedger, heap held after {keys} spent grants: {}", per_key(live() - before, keys));
}

fn main() {
    let mut keys = 100_000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--keys", Some(n)) => keys = n,
            _ => {
                eprintln!("usage: memory [--keys 100000]");
                std::process::exit(2);
            }
        }
    }
    rate_limiter(keys);
    memory_ledger(keys);
    redb_ledger(keys);
}
