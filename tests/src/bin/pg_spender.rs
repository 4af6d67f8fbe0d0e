//! One host racing to spend a grant in a PostgreSQL ledger: `pg_spender URL GRANT_ID BINDING NOW_MS GO_FILE`.
//! Connects (its own pool), waits until `GO_FILE` exists, spends once, and prints `spent` or the refusal.

use std::time::Duration;

use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, SpendAttempt};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, grant_id, binding, now_ms, go] = args.as_slice() else {
        eprintln!("usage: pg_spender URL GRANT_ID BINDING NOW_MS GO_FILE");
        std::process::exit(2);
    };
    let now = Duration::from_millis(now_ms.parse().expect("NOW_MS is a number"));
    let ledger = PostgresLedger::connect(url).expect("connects");
    // Warm the pool so the race is between spends, not between connects.
    ledger.find_grant(grant_id).expect("reads");
    while !std::path::Path::new(go).exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let attempt = SpendAttempt { grant_id: grant_id.clone(), binding: binding.clone(), now };
    match ledger.spend(attempt).wait() {
        Ok(_) => println!("spent"),
        Err(err) => println!("refused: {err}"),
    }
}
