//! One host racing others to spend grants in a PostgreSQL ledger: `pg_spender URL ROUNDS NOW_MS START_MS`.
//! Connects (its own pool), then tries to spend grant `gN` (of request `rN`, bound to `b-rN`) at
//! `START_MS + N × 50` ms since the Unix epoch (wall clock, the same instant for every racer), printing
//! `gN spent` or `gN refused: …`. `NOW_MS` is the ledger's "now" for the expiry check.

use std::time::Duration;

use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, SpendAttempt};

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [_, url, rounds, now_ms, start_ms] = args.as_slice() else {
        eprintln!("usage: worker pg_spender URL ROUNDS NOW_MS START_MS");
        std::process::exit(2);
    };
    let rounds: usize = rounds.parse().expect("ROUNDS is a number");
    let now = Duration::from_millis(now_ms.parse().expect("NOW_MS is a number"));
    let ledger = PostgresLedger::connect(url).expect("connects");
    // Open the pool's connection first, so the race is between spends, not between connects.
    ledger.find_grant("warm-up").expect("reads");
    let start = Duration::from_millis(start_ms.parse().expect("START_MS is a number"));
    for round in 0..rounds {
        let at = start + Duration::from_millis(50) * u32::try_from(round).unwrap_or(u32::MAX);
        let wall = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        if let Some(wait) = at.checked_sub(wall()) {
            std::thread::sleep(wait);
        }
        let attempt = SpendAttempt { grant_id: format!("g{round}"), binding: format!("b-r{round}"), now };
        match ledger.spend(attempt).wait() {
            Ok(_) => println!("g{round} spent"),
            Err(err) => println!("g{round} refused: {err}"),
        }
    }
}
