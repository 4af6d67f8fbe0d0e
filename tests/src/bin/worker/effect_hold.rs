//! Reserves an effect key and then hangs, holding the database, until killed.
//!
//! Usage: `effect_hold <db-path> <key> <lease-ms>`. Prints `reserved <reserved_at_ns> <lease_until_ns>`
//! once the reservation is durable.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_airlock::effect::EffectStore;
use agent_airlock::{Clock, SystemClock};

pub fn main() {
    let mut args = std::env::args().skip(2);
    let (Some(path), Some(key), Some(lease)) = (args.next(), args.next(), args.next()) else {
        panic!("usage: worker effect_hold <db-path> <key> <lease-ms>");
    };
    let lease = Duration::from_millis(lease.parse().expect("a lease in milliseconds"));
    let store =
        agent_airlock_tests::open_effects_with_retry(Path::new(&path), Instant::now() + Duration::from_secs(60));
    let reservation = store.reserve(&key, lease, SystemClock.now()).expect("the key is free");
    let mut out = std::io::stdout().lock();
    writeln!(out, "reserved {} {}", reservation.reserved_at().as_nanos(), reservation.lease_until().as_nanos())
        .expect("stdout is open");
    out.flush().expect("stdout is open");
    drop(out);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
