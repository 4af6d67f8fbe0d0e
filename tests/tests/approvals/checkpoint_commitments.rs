//! Checkpoint commitments (the runtime's `checkpoint` module) on every store they can be kept in: memory,
//! a redb file and a PostgreSQL database. The same sequence on each: what was committed verifies, an edit
//! does not, an unknown checkpoint is reported, an older checkpoint is not the head, each commitment is
//! chained after the one before it, and late writes leave the head alone. On PostgreSQL, a second
//! connection (another host) verifies what the first committed, and a commitment row rewritten with `psql`
//! without the key does not verify.

use std::sync::Arc;

use agent_airlock::checkpoint::{
    CheckpointCommitments, CommitmentStore, MemoryCommitments, PostgresCommitments, RedbCommitments, Verdict,
};
use agent_airlock::keys::ApprovalKey;
use agent_airlock::ledger::PostgresLedger;
use serde_json::{Value, json};

fn key() -> ApprovalKey {
    ApprovalKey::new("approval-1", &[7; 32]).expect("a key")
}

fn manifest(messages: &str) -> Value {
    json!({"checkpoint": {"id": "h1"}, "channel_values": {"messages": messages}, "pending_writes": []})
}

/// The sequence every store must pass: record, verify, chain, time travel, late writes.
fn record_verify_and_chain(store: impl CommitmentStore) {
    let c = CheckpointCommitments::new(key(), store);
    let scope = CheckpointCommitments::langgraph_scope("t1", "");
    let first = manifest("aa");
    assert_eq!(c.verify(&scope, "c1", &first).unwrap(), Verdict::Unrecorded);
    let one = c.record(&scope, "c1", &first, true).unwrap();
    assert_eq!(one.previous, None);
    assert_eq!(c.verify(&scope, "c1", &first).unwrap(), Verdict::Matches);
    assert_eq!(c.verify(&scope, "c1", &manifest("ab")).unwrap(), Verdict::Edited);
    assert_eq!(c.verify(&scope, "c9", &first).unwrap(), Verdict::Unknown);
    let second = manifest("ab");
    let two = c.record(&scope, "c2", &second, true).unwrap();
    assert_eq!(two.previous.as_deref(), Some(one.digest.as_str()), "chained after the head");
    assert_eq!(c.verify(&scope, "c1", &first).unwrap(), Verdict::NotHead { head: "c2".into() });
    assert_eq!(c.verify(&scope, "c2", &second).unwrap(), Verdict::Matches);
    let late = json!({"channel_values": {"messages": "aa"}, "pending_writes": [["task", "x", "00"]]});
    let three = c.record(&scope, "c1", &late, false).unwrap();
    assert_eq!(three.previous.as_deref(), Some(one.digest.as_str()), "chained after the checkpoint's own");
    assert_eq!(c.verify(&scope, "c1", &late).unwrap(), Verdict::NotHead { head: "c2".into() });
    assert_eq!(c.verify(&scope, "c1", &first).unwrap(), Verdict::Edited);
    assert_eq!(c.verify(&scope, "c2", &second).unwrap(), Verdict::Matches);
    // Another namespace of the same thread is another scope.
    let nested = CheckpointCommitments::langgraph_scope("t1", "inner");
    assert_eq!(c.verify(&nested, "c2", &second).unwrap(), Verdict::Unrecorded);
}

#[test]
fn commitments_in_memory_record_verify_and_chain() {
    record_verify_and_chain(MemoryCommitments::default());
}

#[test]
fn commitments_in_redb_record_verify_and_chain() {
    let dir = tempfile::tempdir().unwrap();
    let database = Arc::new(redb::Database::create(dir.path().join("airlock.redb")).unwrap());
    record_verify_and_chain(RedbCommitments::new(database));
}

#[test]
fn commitments_in_postgresql_record_verify_and_chain() {
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    let ledger = PostgresLedger::connect(&url).unwrap();
    record_verify_and_chain(PostgresCommitments::new(&ledger));
}

#[test]
fn commitments_in_postgresql_are_shared_by_hosts_and_a_row_rewritten_without_the_key_does_not_verify() {
    let server = agent_airlock_tests::pg_server::shared();
    let url = server.fresh_database();
    let database = url.rsplit("dbname=").next().expect("a dbname").to_owned();
    let scope = CheckpointCommitments::langgraph_scope("t2", "");
    let committed = manifest("aa");
    let edited = manifest("evil");
    {
        let pausing = PostgresLedger::connect(&url).unwrap();
        CheckpointCommitments::new(key(), PostgresCommitments::new(&pausing))
            .record(&scope, "c1", &committed, true)
            .unwrap();
    }
    let resuming = PostgresLedger::connect(&url).unwrap();
    let c = CheckpointCommitments::new(key(), PostgresCommitments::new(&resuming));
    assert_eq!(c.verify(&scope, "c1", &committed).unwrap(), Verdict::Matches, "another connection sees it");
    // Someone with the database but not the key commits to the edited state, as our code would without the
    // key: a commitment made with another key, written over ours row by row.
    let forger =
        CheckpointCommitments::new(ApprovalKey::new("approval-1", &[9; 32]).unwrap(), MemoryCommitments::default());
    let forged = forger.record(&scope, "c1", &edited, true).unwrap();
    let forged = serde_json::to_string(&forged).unwrap().replace('\'', "''");
    let rows = server.psql(
        &database,
        &format!("UPDATE airlock_checkpoint_commitments SET commitment = '{forged}' RETURNING commitment_key"),
    );
    assert!(rows.contains("langgraph:t2#c1") && rows.lines().any(|l| l.trim() == "langgraph:t2"), "{rows}");
    assert_eq!(c.verify(&scope, "c1", &edited).unwrap(), Verdict::Edited, "a forged row does not verify");
    assert_eq!(c.verify(&scope, "c1", &committed).unwrap(), Verdict::Edited, "nor does the original now");
}
