//! The audit log in PostgreSQL (`AuditLog::with_postgres`): one chain shared by every host of a
//! deployment, its head advanced in the transaction that appends the records, verified like any other.
//! The dispatcher's use of it (records in the admission's and the settlement's transactions) runs in
//! `store_decisions` and `pg_faults`.

use std::sync::Arc;

use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome, VerifyError, verify};
use agent_airlock::ledger::PostgresLedger;
use agent_airlock_tests::pg_server;

fn config() -> AuditConfig {
    AuditConfig { key: Some(agent_airlock_tests::audit_test_key()), ..AuditConfig::default() }
}

fn database_of(url: &str) -> &str {
    url.rsplit("dbname=").next().expect("a dbname")
}

/// Eight hosts, each its own pool, append to one chain at once: every record lands once, in one unbroken
/// chain, and a host that connects later verifies it and appends after it.
#[test]
fn eight_hosts_append_to_one_chain_and_it_verifies() {
    const EACH: u64 = 25;
    let url = pg_server::shared().fresh_database();
    let hosts: Vec<Arc<AuditLog>> = (0..8)
        .map(|_| {
            let ledger = PostgresLedger::connect(&url).expect("connects");
            Arc::new(AuditLog::with_postgres(&ledger, config()))
        })
        .collect();
    let appenders: Vec<_> = hosts
        .iter()
        .enumerate()
        .map(|(host, log)| {
            let log = Arc::clone(log);
            std::thread::spawn(move || {
                (0..EACH)
                    .map(|n| {
                        let call_id = format!("h{host}-{n}");
                        log.append(AuditEvent::new("refund", &call_id, AuditOutcome::Executed)).expect("appended").seq
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = appenders.into_iter().flat_map(|appender| appender.join().expect("appended")).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=8 * EACH).collect::<Vec<_>>(), "each record has its own place, none skipped");

    let later = AuditLog::with_postgres(&PostgresLedger::connect(&url).expect("connects"), config());
    let report = verify(&later, None).expect("the chain verifies");
    assert_eq!((report.records, report.signed_records, report.head_signed), (8 * EACH, 8 * EACH, true));
    let next = later.append(AuditEvent::new("refund", "late", AuditOutcome::Interrupted)).expect("appended");
    assert_eq!(next.seq, 8 * EACH + 1);
    assert_eq!(verify(&hosts[0], None).expect("the chain verifies").head.seq, 8 * EACH + 1);
}

/// A record rewritten in the database, or the head moved back, is found by the verifier.
#[test]
fn a_record_altered_in_the_database_fails_verification() {
    let server = pg_server::shared();
    let url = server.fresh_database();
    let log = AuditLog::with_postgres(&PostgresLedger::connect(&url).expect("connects"), config());
    for n in 0..3 {
        log.append(AuditEvent::new("refund", &format!("c{n}"), AuditOutcome::Executed)).expect("appended");
    }
    verify(&log, None).expect("the untouched chain verifies");

    server.psql(
        database_of(&url),
        // One bit of record #2 flipped.
        "UPDATE airlock_audit_records SET record = set_byte(record, length(record) / 2, get_byte(record, length(record) / 2) # 1) WHERE seq = 2",
    );
    assert!(matches!(verify(&log, None), Err(VerifyError::Tampered(_))), "{:?}", verify(&log, None));

    let url = server.fresh_database();
    let log = AuditLog::with_postgres(&PostgresLedger::connect(&url).expect("connects"), config());
    for n in 0..3 {
        log.append(AuditEvent::new("refund", &format!("c{n}"), AuditOutcome::Executed)).expect("appended");
    }
    // The last record removed: the head no longer matches the records.
    server.psql(database_of(&url), "DELETE FROM airlock_audit_records WHERE seq = 3");
    assert!(verify(&log, None).is_err(), "a truncated chain is refused");
}
