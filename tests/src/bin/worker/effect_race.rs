//! One contender in a race of OS processes for one effect key.
//!
//! Usage: `effect_race <db-path> <key> <go-file>`. Waits until `<go-file>` exists, opens the database
//! (retrying while another process has it open, for at most 60 s), tries to reserve `<key>` with a long
//! lease, prints the outcome (`reserved`, `in_flight`, `duplicate`, `ambiguous`) and closes the database.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_airlock::effect::{EffectError, EffectStore};
use agent_airlock::{Clock, SystemClock};

pub fn main() {
    let mut args = std::env::args().skip(2);
    let (Some(path), Some(key), Some(go)) = (args.next(), args.next(), args.next()) else {
        panic!("usage: worker effect_race <db-path> <key> <go-file>");
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Path::new(&go).exists() {
        assert!(Instant::now() < deadline, "the go file never appeared");
        std::thread::sleep(Duration::from_millis(1));
    }
    let store = agent_airlock_tests::open_effects_with_retry(Path::new(&path), deadline);
    let outcome = match store.reserve(&key, Duration::from_secs(3600), SystemClock.now()) {
        Ok(_) => "reserved",
        Err(EffectError::InFlight { .. }) => "in_flight",
        Err(EffectError::Duplicate { .. }) => "duplicate",
        Err(EffectError::Ambiguous { .. }) => "ambiguous",
        Err(other) => panic!("unexpected answer: {other}"),
    };
    drop(store);
    println!("{outcome}");
}
