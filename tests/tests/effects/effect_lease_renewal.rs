//! A call that runs longer than its effect lease keeps the lease while it runs: no operator can mark it
//! "did not happen" meanwhile, and no second call with the same effect key runs. Real time, a real long
//! call, a short lease configured for the test, through the real dispatcher on a redb file.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_airlock::effect::{EffectError, EffectStatus, EffectStore, RedbEffectStore, Resolution};
use agent_airlock::{
    CallContext, Clock as _, Dispatcher, RefusalKind, State, Status, SystemClock, ToolCall, ToolError, airlock_tool,
    tool,
};
use agent_airlock_tests::block_on;
use serde_json::json;

/// The lease the test configures: the call below runs for four of them. Renewal comes every third of it,
/// each a durable redb write: at 300 ms a loaded 2-core machine starved the renewal past the lease (seen
/// once in a full suite run), so the lease is long enough that only a stall of over a second fails it.
const LEASE: Duration = Duration::from_secs(2);

/// How often the provider was charged.
#[derive(Default)]
struct Provider {
    charges: AtomicUsize,
}

/// Charge a card, slowly.
#[airlock_tool(effect = "charge:{order_id}")]
async fn charge(
    /// The order.
    order_id: String,
    #[inject] provider: State<Provider>,
) -> Result<String, ToolError> {
    provider.charges.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(LEASE * 4).await;
    Ok(format!("charged {order_id}"))
}

#[test]
fn a_call_longer_than_its_lease_keeps_it_so_it_can_be_neither_resolved_nor_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let effects = Arc::new(RedbEffectStore::open(dir.path().join("airlock.redb")).unwrap());
    let dispatcher =
        Dispatcher::builder().tool(tool!(charge)).effects(Arc::clone(&effects)).effect_lease(LEASE).build().unwrap();
    let provider = Arc::new(Provider::default());
    let context = CallContext::new().with_thread("t1").with_state_arc(Arc::clone(&provider));
    let call = || ToolCall::new("c1", "charge", json!({"order_id": "o-1"}));

    let started = Instant::now();
    std::thread::scope(|scope| {
        let first = scope.spawn(|| block_on(dispatcher.dispatch(call(), &context)).expect_message());
        // Well past the lease the call was admitted with, while the call still runs.
        std::thread::sleep(LEASE * 5 / 2);
        assert!(!first.is_finished(), "the call runs for four leases");
        let now = SystemClock.now();
        let record = effects.get("charge:o-1").unwrap().expect("reserved");
        assert_eq!(record.status_at(now), EffectStatus::Reserved, "the running call's lease was renewed: {record:?}");
        match effects.resolve("charge:o-1", Resolution::Failed, "mallory", now) {
            Err(EffectError::StillRunning { lease_until, .. }) => assert!(lease_until > now),
            other => panic!("a running call is not the operator's to resolve, got {other:?}"),
        }
        let second = block_on(dispatcher.dispatch(call(), &context)).expect_message();
        assert_eq!(second.refusal.as_ref().map(|r| r.kind), Some(RefusalKind::EffectInFlight), "{}", second.content);

        let first = first.join().unwrap();
        assert_eq!(first.status, Status::Success, "{}", first.content);
    });
    assert!(started.elapsed() >= LEASE * 4);
    assert_eq!(provider.charges.load(Ordering::SeqCst), 1, "the effect ran once");
    let record = effects.get("charge:o-1").unwrap().unwrap();
    assert_eq!(record.status_at(SystemClock.now()), EffectStatus::Committed);
    assert_eq!(record.resolution, None);
}

#[test]
fn a_settled_call_stops_renewing_so_a_lapsed_lease_stays_lapsed() {
    let dir = tempfile::tempdir().unwrap();
    let effects = RedbEffectStore::open(dir.path().join("airlock.redb")).unwrap();
    let now = SystemClock.now();
    let reservation = effects.reserve("charge:o-2", LEASE, now).unwrap();
    // Renewed while live: the lease moves on, and is never shortened.
    let renewed = effects.renew(&reservation, LEASE * 2, now + LEASE / 2).unwrap();
    assert_eq!(renewed.lease_until(), now + LEASE / 2 + LEASE * 2);
    let kept = effects.renew(&renewed, Duration::ZERO, now + LEASE).unwrap();
    assert_eq!(kept.lease_until(), renewed.lease_until());
    // Once lapsed, a renewal is too late: whoever saw the key ambiguous may be deciding it.
    let lapsed = renewed.lease_until() + Duration::from_millis(1);
    assert!(matches!(effects.renew(&renewed, LEASE, lapsed), Err(EffectError::Stale { .. })));
    assert_eq!(effects.get("charge:o-2").unwrap().unwrap().status_at(lapsed), EffectStatus::Ambiguous);
    // A settled reservation is not renewed either.
    let again = effects.reserve("charge:o-3", LEASE, now).unwrap();
    effects.commit(&again, now).unwrap();
    assert!(matches!(effects.renew(&again, LEASE, now), Err(EffectError::Stale { .. })));
}
