//! Effect records across real OS processes: a race for one key, and a holder killed mid-reservation.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_airlock::effect::{AmbiguityCause, EffectError, EffectState, EffectStore, RedbEffectStore, Resolution};
use agent_airlock_tests::open_effects_with_retry;

const CONTENDERS: usize = 10;

#[test]
fn processes_racing_for_one_key_reserve_it_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("effects.redb");
    let go = dir.path().join("go");
    drop(RedbEffectStore::open(&db).expect("the file is created up front"));
    let children: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_worker"))
                .arg("effect_race")
                .args([db.as_os_str(), "refund:pi_race".as_ref(), go.as_os_str()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("a contender starts")
        })
        .collect();
    std::fs::write(&go, b"go").expect("the start signal");
    let outcomes: Vec<String> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("a contender finishes");
            assert!(output.status.success(), "a contender failed: {output:?}");
            String::from_utf8(output.stdout).expect("text").trim().to_owned()
        })
        .collect();
    assert_eq!(outcomes.iter().filter(|o| *o == "reserved").count(), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| *o == "in_flight").count(), CONTENDERS - 1, "{outcomes:?}");
    let store = RedbEffectStore::open(&db).expect("opens");
    let record = store.get("refund:pi_race").expect("readable").expect("present");
    assert_eq!(record.attempt, 1);
    assert!(matches!(record.state, EffectState::Reserved { .. }));
}

#[test]
fn a_holder_killed_while_reserved_leaves_the_key_ambiguous_once_the_lease_lapses() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("effects.redb");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_worker"))
        .arg("effect_hold")
        .args([db.as_os_str(), "refund:pi_kill".as_ref(), "60000".as_ref()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the holder starts");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("piped")).read_line(&mut line).expect("the holder reports");
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("reserved"), "{line:?}");
    let _reserved_at: u64 = words.next().and_then(|w| w.parse().ok()).expect("reserved_at");
    let lease_until = Duration::from_nanos(words.next().and_then(|w| w.parse().ok()).expect("lease_until"));

    // While the holder lives, the file is its own: a second opener gets a clear error.
    assert!(matches!(RedbEffectStore::open(&db), Err(EffectError::AlreadyOpen)));

    holder.kill().expect("SIGKILL");
    holder.wait().expect("reaped");

    let store = open_effects_with_retry(Path::new(&db), Instant::now() + Duration::from_secs(30));
    let key = "refund:pi_kill";
    // The lease still runs: the key is in flight, not free.
    match store.reserve(key, Duration::from_secs(60), lease_until - Duration::from_millis(1)) {
        Err(EffectError::InFlight { lease_until: until, .. }) => assert_eq!(until, lease_until),
        other => panic!("expected in flight, got {other:?}"),
    }
    // Once it lapses: ambiguous, and it stays so however late the retry.
    for late in [Duration::ZERO, Duration::from_secs(3600), Duration::from_secs(86_400 * 365)] {
        match store.reserve(key, Duration::from_secs(60), lease_until + late) {
            Err(EffectError::Ambiguous { since, .. }) => assert_eq!(since, lease_until),
            other => panic!("expected ambiguous, got {other:?}"),
        }
    }
    drop(store);
    // Also after another restart.
    let store = RedbEffectStore::open(&db).expect("reopens");
    let record = store.get(key).expect("readable").expect("present");
    assert_eq!(record.state, EffectState::Ambiguous { since: lease_until, cause: AmbiguityCause::LeaseLapsed });
    // Only an operator makes it runnable again.
    store.resolve(key, Resolution::Failed, "ops", lease_until + Duration::from_secs(10)).expect("resolved");
    let retry = store.reserve(key, Duration::from_secs(60), lease_until + Duration::from_secs(11)).expect("runnable");
    assert_eq!(retry.attempt(), 2);
}
