//! The effect state machine, run against the memory, redb and PostgreSQL stores alike.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use agent_airlock::effect::{
    AmbiguityCause, EffectError, EffectFilter, EffectState, EffectStatus, EffectStore, MemoryEffectStore,
    RedbEffectStore, Resolution,
};
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger};
use agent_airlock::{Clock, ManualClock};

const LEASE: Duration = Duration::from_secs(30);
const T0: Duration = Duration::from_secs(1_700_000_000);

/// Each store under test, with the temp dir that must outlive it.
fn stores() -> Vec<(&'static str, Arc<dyn EffectStore>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let redb = RedbEffectStore::open(dir.path().join("effects.redb")).expect("opens");
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let postgres = PostgresLedger::connect(&url).expect("connects").effects();
    vec![
        ("memory", Arc::new(MemoryEffectStore::new()), None),
        ("redb", Arc::new(redb), Some(dir)),
        ("postgres", postgres, None),
    ]
}

#[test]
fn reserve_commit_then_duplicate() {
    for (name, store, _dir) in stores() {
        let reservation = store.reserve("refund:pi_1", LEASE, T0).expect("a fresh key reserves");
        assert_eq!(reservation.key(), "refund:pi_1");
        assert_eq!(reservation.attempt(), 1);
        assert_eq!(reservation.lease_until(), T0 + LEASE);
        let committed = store.commit(&reservation, T0 + Duration::from_secs(1)).expect("commits");
        assert_eq!(committed.state, EffectState::Committed { at: T0 + Duration::from_secs(1) });
        match store.reserve("refund:pi_1", LEASE, T0 + Duration::from_secs(2)) {
            Err(EffectError::Duplicate { key, committed_at }) => {
                assert_eq!(key, "refund:pi_1");
                assert_eq!(committed_at, T0 + Duration::from_secs(1));
            }
            other => panic!("{name}: expected a duplicate, got {other:?}"),
        }
        // Committing again with the same reservation is a no-op, not an error.
        store.commit(&reservation, T0 + Duration::from_secs(3)).expect("idempotent");
        // Another key is independent.
        store.reserve("refund:pi_2", LEASE, T0).expect("another key reserves");
    }
}

#[test]
fn a_not_executed_failure_allows_a_retry() {
    for (name, store, _dir) in stores() {
        let first = store.reserve("k", LEASE, T0).expect("reserved");
        let failed = store.fail(&first, T0).expect("failed");
        assert_eq!(failed.state, EffectState::Failed { at: T0 });
        let second = store.reserve("k", LEASE, T0 + Duration::from_secs(1)).expect("a failed key reserves again");
        assert_eq!(second.attempt(), 2, "{name}");
        store.commit(&second, T0 + Duration::from_secs(2)).expect("commits");
        assert!(matches!(store.reserve("k", LEASE, T0 + Duration::from_secs(3)), Err(EffectError::Duplicate { .. })));
    }
}

#[test]
fn an_ambiguous_effect_blocks_until_an_operator_resolves_it() {
    for (name, store, _dir) in stores() {
        let reservation = store.reserve("k", LEASE, T0).expect("reserved");
        let record = store.mark_ambiguous(&reservation, T0 + Duration::from_secs(1)).expect("marked");
        assert_eq!(
            record.state,
            EffectState::Ambiguous { since: T0 + Duration::from_secs(1), cause: AmbiguityCause::OutcomeUnknown }
        );
        for later in [1, 100, 100_000] {
            match store.reserve("k", LEASE, T0 + Duration::from_secs(later)) {
                Err(EffectError::Ambiguous { since, .. }) => assert_eq!(since, T0 + Duration::from_secs(1)),
                other => panic!("{name}: expected ambiguous, got {other:?}"),
            }
        }
        // The holder cannot turn it back into a retryable failure; the operator decides.
        assert!(matches!(store.fail(&reservation, T0), Err(EffectError::Stale { .. })), "{name}");
        let listed = store.list(&EffectFilter::ambiguous(), T0).expect("listed");
        assert_eq!(listed.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["k"]);

        let resolved = store.resolve("k", Resolution::Failed, "alice", T0 + Duration::from_secs(5)).expect("resolved");
        assert_eq!(resolved.resolution, Some(Resolution::Failed));
        assert_eq!(resolved.resolved_by.as_deref(), Some("alice"), "{name}: who resolved it is kept");
        assert_eq!(store.get("k").expect("read").expect("kept").resolved_by.as_deref(), Some("alice"));
        let retry = store.reserve("k", LEASE, T0 + Duration::from_secs(6)).expect("runnable after resolution");
        assert_eq!(retry.attempt(), 2);
        assert!(store.list(&EffectFilter::ambiguous(), T0 + Duration::from_secs(6)).expect("listed").is_empty());

        // Resolved as committed: later calls are duplicates.
        let other = store.reserve("j", LEASE, T0).expect("reserved");
        store.mark_ambiguous(&other, T0).expect("marked");
        store.resolve("j", Resolution::Committed, "alice", T0 + Duration::from_secs(1)).expect("resolved");
        assert!(matches!(store.reserve("j", LEASE, T0 + Duration::from_secs(2)), Err(EffectError::Duplicate { .. })));
    }
}

#[test]
fn a_running_reservation_renews_its_lease_until_it_is_settled_or_lapses() {
    for (name, store, _dir) in stores() {
        let reservation = store.reserve("k", LEASE, T0).expect("reserved");
        let renewed = store.renew(&reservation, LEASE, T0 + Duration::from_secs(20)).expect("renewed");
        assert_eq!(renewed.lease_until(), T0 + Duration::from_secs(50), "{name}");
        assert_eq!((renewed.attempt(), renewed.reserved_at()), (reservation.attempt(), reservation.reserved_at()));
        // Past the first lease, the call still holds the key: neither resolvable nor reservable.
        let later = T0 + Duration::from_secs(40);
        let record = store.get("k").expect("read").expect("kept");
        assert_eq!(record.status_at(later), EffectStatus::Reserved, "{name}");
        assert!(matches!(store.reserve("k", LEASE, later), Err(EffectError::InFlight { .. })), "{name}");
        assert!(
            matches!(store.resolve("k", Resolution::Failed, "alice", later), Err(EffectError::StillRunning { .. })),
            "{name}"
        );
        // The reservation handed out first still settles it (the fence is the attempt, not the lease).
        store.commit(&reservation, later).expect("committed");
        assert!(matches!(store.renew(&renewed, LEASE, later), Err(EffectError::Stale { .. })), "{name}");
        // A lapsed lease is not renewed.
        let other = store.reserve("j", LEASE, T0).expect("reserved");
        assert!(matches!(store.renew(&other, LEASE, T0 + LEASE), Err(EffectError::Stale { .. })), "{name}");
    }
}

#[test]
fn only_ambiguous_effects_can_be_resolved() {
    for (name, store, _dir) in stores() {
        assert!(
            matches!(store.resolve("nope", Resolution::Failed, "alice", T0), Err(EffectError::NotFound { .. })),
            "{name}"
        );
        let reservation = store.reserve("k", LEASE, T0).expect("reserved");
        match store.resolve("k", Resolution::Failed, "alice", T0 + Duration::from_secs(1)) {
            Err(EffectError::StillRunning { lease_until, .. }) => assert_eq!(lease_until, reservation.lease_until()),
            other => panic!("{name}: a running reservation is not the operator's to resolve, got {other:?}"),
        }
        assert!(
            matches!(store.resolve("k", Resolution::Failed, " ", T0 + LEASE), Err(EffectError::NoOperator)),
            "{name}: a resolution names its operator"
        );
        store.commit(&reservation, T0).expect("committed");
        match store.resolve("k", Resolution::Failed, "alice", T0) {
            Err(err @ EffectError::NotAmbiguous { status: EffectStatus::Committed, .. }) => {
                assert_eq!(
                    err.to_string(),
                    "effect `k` is committed, not ambiguous: only an ambiguous effect can be resolved"
                );
            }
            other => panic!("{name}: a committed effect cannot be resolved, got {other:?}"),
        }
    }
}

#[test]
fn a_lapsed_lease_makes_the_effect_ambiguous() {
    for (name, store, _dir) in stores() {
        let clock = ManualClock::new(T0);
        let holder = store.reserve("refund:pi_9", LEASE, clock.now()).expect("reserved");
        clock.advance(Duration::from_secs(10));
        match store.reserve("refund:pi_9", LEASE, clock.now()) {
            Err(EffectError::InFlight { lease_until, .. }) => assert_eq!(lease_until, T0 + LEASE),
            other => panic!("{name}: expected in flight, got {other:?}"),
        }
        // Listed as ambiguous as soon as the lease lapses, before anyone tries again.
        clock.set(T0 + LEASE);
        let listed = store.list(&EffectFilter::ambiguous(), clock.now()).expect("listed");
        assert_eq!(listed.len(), 1, "{name}");
        assert!(matches!(listed[0].state, EffectState::Reserved { .. }));

        clock.advance(Duration::from_secs(1));
        match store.reserve("refund:pi_9", LEASE, clock.now()) {
            Err(EffectError::Ambiguous { since, .. }) => assert_eq!(since, T0 + LEASE),
            other => panic!("{name}: expected ambiguous, got {other:?}"),
        }
        let record = store.get("refund:pi_9").expect("readable").expect("present");
        assert_eq!(record.state, EffectState::Ambiguous { since: T0 + LEASE, cause: AmbiguityCause::LeaseLapsed });
        // The late holder cannot make it retryable, nor mark it twice...
        assert!(matches!(store.fail(&holder, clock.now()), Err(EffectError::Stale { .. })), "{name}");
        store.mark_ambiguous(&holder, clock.now()).expect("already ambiguous: a no-op");
        // ...but its word that the effect happened is taken: that only blocks more.
        let committed = store.commit(&holder, clock.now()).expect("a late success is recorded");
        assert!(matches!(committed.state, EffectState::Committed { .. }));
        assert!(matches!(store.reserve("refund:pi_9", LEASE, clock.now()), Err(EffectError::Duplicate { .. })));
    }
}

#[test]
fn a_stale_reservation_cannot_overwrite_a_newer_one() {
    for (name, store, _dir) in stores() {
        let first = store.reserve("k", LEASE, T0).expect("reserved");
        store.fail(&first, T0).expect("failed");
        let second = store.reserve("k", LEASE, T0).expect("reserved again at the same instant");
        assert_ne!(first, second);
        assert!(matches!(store.commit(&first, T0), Err(EffectError::Stale { .. })), "{name}");
        assert!(matches!(store.mark_ambiguous(&first, T0), Err(EffectError::Stale { .. })), "{name}");
        assert!(matches!(store.fail(&first, T0), Err(EffectError::Stale { .. })), "{name}");
        let record = store.get("k").expect("readable").expect("present");
        assert!(matches!(record.state, EffectState::Reserved { .. }), "{name}: untouched by the stale holder");
        store.commit(&second, T0).expect("the current holder commits");
        // After commit, the current holder cannot fail or blur it either.
        assert!(matches!(store.fail(&second, T0), Err(EffectError::Stale { .. })), "{name}");
        assert!(matches!(store.mark_ambiguous(&second, T0), Err(EffectError::Stale { .. })), "{name}");
    }
}

#[test]
fn listing_filters_by_status_prefix_and_limit() {
    for (name, store, _dir) in stores() {
        for id in 0..5 {
            let r = store.reserve(&format!("refund:pi_{id}"), LEASE, T0).expect("reserved");
            if id % 2 == 0 {
                store.commit(&r, T0).expect("committed");
            }
        }
        store.reserve("email:u_1", LEASE, T0).expect("reserved");
        let all = store.list(&EffectFilter::all(), T0).expect("listed");
        assert_eq!(all.len(), 6, "{name}");
        assert_eq!(all[0].key, "email:u_1", "{name}: key order");
        let refunds = EffectFilter { key_prefix: Some("refund:".into()), ..EffectFilter::default() };
        assert_eq!(store.list(&refunds, T0).expect("listed").len(), 5, "{name}");
        let committed = EffectFilter { status: Some(EffectStatus::Committed), ..refunds.clone() };
        let keys: Vec<_> = store.list(&committed, T0).expect("listed").into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["refund:pi_0", "refund:pi_2", "refund:pi_4"], "{name}");
        let limited = EffectFilter { limit: Some(2), ..committed };
        assert_eq!(store.list(&limited, T0).expect("listed").len(), 2, "{name}");
        let reserved = EffectFilter { status: Some(EffectStatus::Reserved), ..EffectFilter::default() };
        assert_eq!(store.list(&reserved, T0).expect("listed").len(), 3, "{name}");
        assert_eq!(store.list(&reserved, T0 + LEASE).expect("listed").len(), 0, "{name}: lapsed leases");
    }
}

#[test]
fn an_empty_key_is_refused() {
    for (_, store, _dir) in stores() {
        assert!(matches!(store.reserve("", LEASE, T0), Err(EffectError::EmptyKey)));
    }
}

#[test]
fn sixteen_threads_one_key_exactly_one_reservation() {
    for (name, store, _dir) in stores() {
        let barrier = Arc::new(Barrier::new(16));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let store = Arc::clone(&store);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    store.reserve("refund:pi_race", LEASE, T0)
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().expect("ran")).collect();
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "{name}: {results:?}");
        assert!(
            results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, EffectError::InFlight { .. })),
            "{name}: {results:?}"
        );
    }
}

#[test]
fn redb_records_survive_reopening() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("effects.redb");
    {
        let store = RedbEffectStore::open(&path).expect("opens");
        let r = store.reserve("a", LEASE, T0).expect("reserved");
        store.commit(&r, T0).expect("committed");
        store.reserve("b", LEASE, T0).expect("reserved");
    }
    let store = RedbEffectStore::open(&path).expect("reopens");
    assert!(matches!(store.reserve("a", LEASE, T0), Err(EffectError::Duplicate { .. })));
    assert!(matches!(store.reserve("b", LEASE, T0), Err(EffectError::InFlight { .. })));
    assert!(matches!(store.reserve("b", LEASE, T0 + LEASE), Err(EffectError::Ambiguous { .. })));
}
