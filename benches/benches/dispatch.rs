//! Guard overhead: a small tool called directly vs through the dispatcher, per gate outcome.
//!
//! `cargo bench -p agent-airlock-benches --bench dispatch`

use std::hint::black_box;
use std::time::Duration;

use agent_airlock::{
    CallContext, Dispatcher, ManualClock, Policy, Status, ToolCall, airlock_tool,
    approval::{ApprovalRequest, Decision},
    tool,
};
use agent_airlock_benches::run_ready;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

/// Look up an order.
#[airlock_tool]
fn lookup_order(
    /// Order id.
    order_id: String,
    /// Include the line items.
    with_items: Option<bool>,
    /// Max rows.
    limit: u32,
) -> String {
    if with_items.unwrap_or(false) { format!("{order_id}:{limit}:items") } else { format!("{order_id}:{limit}") }
}

/// Same tool, escalated.
#[airlock_tool(name = "lookup_escalated", escalate = "benchmark")]
fn lookup_escalated(
    /// Order id.
    order_id: String,
    /// Include the line items.
    with_items: Option<bool>,
    /// Max rows.
    limit: u32,
) -> String {
    lookup_order(order_id, with_items, limit)
}

/// Same tool, rate limited to nearly nothing.
#[airlock_tool(name = "lookup_limited", rate = "1/day")]
fn lookup_limited(
    /// Order id.
    order_id: String,
    /// Include the line items.
    with_items: Option<bool>,
    /// Max rows.
    limit: u32,
) -> String {
    lookup_order(order_id, with_items, limit)
}

/// Denied by policy.
#[airlock_tool(name = "admin_lookup")]
fn admin_lookup(
    /// Order id.
    order_id: String,
) -> String {
    order_id
}

fn args() -> Value {
    json!({"order_id": "ord_1234567890", "with_items": true, "limit": 25})
}

fn bench(c: &mut Criterion) {
    let dispatcher = Dispatcher::builder()
        .tool(tool!(lookup_order))
        .tool(tool!(lookup_escalated))
        .tool(tool!(lookup_limited))
        .tool(tool!(admin_lookup))
        .policy(Policy::builder().deny("admin_*").build().expect("valid policy"))
        .approver(|_: ApprovalRequest| async { Decision::Approve })
        .clock(ManualClock::new(Duration::from_secs(1_700_000_000)))
        .build()
        .expect("distinct names");
    let context = CallContext::new().with_thread("bench");
    // Spend the limited tool's only token so every measured call is refused.
    run_ready(dispatcher.dispatch(ToolCall::new("c", "lookup_limited", args()), &context));

    let mut group = c.benchmark_group("dispatch");
    let arguments = args();
    group.bench_function("direct_call", |b| {
        b.iter(|| {
            // What a host does without a guard: parse the arguments it was given and call the function.
            let a = black_box(&arguments);
            let order_id: String = serde_json::from_value(a["order_id"].clone()).expect("string");
            let with_items: Option<bool> = serde_json::from_value(a["with_items"].clone()).expect("bool");
            let limit: u32 = serde_json::from_value(a["limit"].clone()).expect("u32");
            black_box(lookup_order(order_id, with_items, limit))
        })
    });
    let cases: [(&str, &str, Value, Status); 6] = [
        ("allowed", "lookup_order", args(), Status::Success),
        (
            "allowed_ghosts_stripped",
            "lookup_order",
            json!({"order_id": "ord_1234567890", "with_items": true, "limit": 25, "admin": true, "debug": 1}),
            Status::Success,
        ),
        ("refused_validation", "lookup_order", json!({"order_id": 5, "limit": "25"}), Status::Error),
        ("denied_by_policy", "admin_lookup", json!({"order_id": "x"}), Status::Error),
        ("rate_limited", "lookup_limited", args(), Status::Error),
        ("approver_yes", "lookup_escalated", args(), Status::Success),
    ];
    for (label, name, arguments, expected) in cases {
        let call = ToolCall::new("call_abc123", name, arguments);
        let status = run_ready(dispatcher.dispatch(call.clone(), &context)).expect_message().status;
        assert_eq!(status, expected, "{label}");
        group.bench_function(label, |b| {
            b.iter_batched(
                || call.clone(),
                |call| black_box(run_ready(dispatcher.dispatch(call, &context))),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
