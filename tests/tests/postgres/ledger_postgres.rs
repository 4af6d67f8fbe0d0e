//! What only the PostgreSQL ledger has: several hosts (pools, processes) on one database, schema
//! migrations and their refusal of a newer schema. The ledger rules themselves run on PostgreSQL in
//! `ledger_protocol`, `effects_states`, `approval_survives_refusal` and `ledger_prune`.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::effect::{EffectError, EffectStatus, EffectStore};
use agent_airlock::ledger::{
    ApprovalLedger, EffectClaim, GrantRecord, GrantState, LedgerError, PostgresLedger, RequestRecord, SpendAttempt,
};
use agent_airlock::store::{POSTGRES_SCHEMA_VERSION, PostgresOpenError};
use agent_airlock_tests::pg_server;

pub(crate) const NOW: Duration = Duration::from_secs(1_700_000_000);

fn database_of(url: &str) -> &str {
    url.rsplit("dbname=").next().expect("a dbname")
}

/// A pending request `id`, bound to `b-<id>` (also the TLS tests' fixture).
pub(crate) fn request(id: &str) -> RequestRecord {
    RequestRecord { requested_at: NOW, ..agent_airlock_tests::ledger_fixtures::request_record(id) }
}

/// An unsigned grant `id` of `request_id`, live for a minute after [`NOW`].
pub(crate) fn grant(id: &str, request_id: &str) -> GrantRecord {
    GrantRecord {
        grant_id: id.into(),
        request_id: request_id.into(),
        key_id: "k1".into(),
        binding: format!("b-{request_id}"),
        approver: "alice".into(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at: NOW,
        expires_at: NOW + Duration::from_secs(60),
    }
}

/// A granted request `r` with grant `g`.
fn granted(ledger: &PostgresLedger, r: &str, g: &str) {
    ledger.record_request(request(r), None).wait().unwrap();
    ledger.grant(grant(g, r), NOW).wait().unwrap();
}

fn attempt(g: &str, r: &str) -> SpendAttempt {
    SpendAttempt { grant_id: g.into(), binding: format!("b-{r}"), now: NOW + Duration::from_secs(1) }
}

#[test]
fn a_database_from_a_newer_version_is_refused() {
    let server = pg_server::shared();
    let url = server.fresh_database();
    drop(PostgresLedger::connect(&url).unwrap());
    let newer = POSTGRES_SCHEMA_VERSION + 1;
    server.psql(database_of(&url), &format!("INSERT INTO airlock_schema_version (version) VALUES ({newer})"));
    match PostgresLedger::connect(&url) {
        Err(err @ PostgresOpenError::SchemaTooNew { found }) => {
            assert_eq!(found, newer);
            assert!(err.to_string().contains("upgrade agent-airlock"), "{err}");
        }
        other => panic!("a newer schema must be refused, got {other:?}"),
    }
}

#[test]
fn migrations_run_once_under_concurrent_opens_and_records_survive_reopening() {
    let server = pg_server::shared();
    let url = server.fresh_database();
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PostgresLedger::connect(&url).map(drop))
        })
        .collect();
    for open in opens {
        open.join().unwrap().expect("every concurrent open succeeds");
    }
    let versions = server
        .psql(database_of(&url), "SELECT string_agg(version::text, ',' ORDER BY version) FROM airlock_schema_version");
    let every: Vec<String> = (1..=POSTGRES_SCHEMA_VERSION).map(|v| v.to_string()).collect();
    assert_eq!(versions.trim(), every.join(","), "each migration applied once");

    {
        let ledger = PostgresLedger::connect(&url).unwrap();
        granted(&ledger, "r1", "g1");
        ledger.spend(attempt("g1", "r1")).wait().unwrap();
    }
    let ledger = PostgresLedger::connect(&url).unwrap();
    assert!(matches!(ledger.find_grant("g1").unwrap().unwrap().state, GrantState::Spent { .. }));
    assert!(matches!(ledger.spend(attempt("g1", "r1")).wait(), Err(LedgerError::AlreadySpent { .. })));
}

#[test]
fn the_effect_store_is_the_ledgers_storage() {
    let url = pg_server::shared().fresh_database();
    let ledger = PostgresLedger::connect(&url).unwrap();
    let other = PostgresLedger::connect(&url).unwrap();
    assert!(ledger.effects().storage_id().is_some());
    assert_eq!(ledger.effects().storage_id(), ledger.effect_store().storage_id());
    assert_ne!(ledger.effects().storage_id(), other.effects().storage_id());
}

/// Eight hosts (each its own pool and runtime, connections already open), their spends awaited by tasks
/// on one current-thread runtime: exactly one spends, the others hear that it was spent. Several rounds,
/// so that the spends overlap.
#[test]
fn eight_hosts_race_one_grant_and_exactly_one_spends() {
    let url = pg_server::shared().fresh_database();
    let hosts: Vec<PostgresLedger> = (0..8).map(|_| PostgresLedger::connect(&url).unwrap()).collect();
    for host in &hosts {
        host.find_grant("warm-up").unwrap();
    }
    for round in 0..6 {
        let (r, g) = (format!("r{round}"), format!("g{round}"));
        granted(&hosts[0], &r, &g);
        let results = agent_airlock_tests::block_on(async {
            let replies: Vec<_> = hosts.iter().map(|host| host.spend(attempt(&g, &r))).collect();
            let mut results = Vec::new();
            for reply in replies {
                results.push(reply.await);
            }
            results
        });
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "round {round}: {results:?}");
        assert!(
            results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, LedgerError::AlreadySpent { .. })),
            "round {round}: {results:?}"
        );
    }
}

/// Eight hosts record requests of one tool and thread at once, under a limit of two pending: two are
/// recorded, six refused, in every round (rows not inserted yet cannot be locked; the scope's advisory
/// lock makes the count and the insert one step).
#[test]
fn eight_hosts_racing_requests_never_overshoot_the_pending_limit() {
    let url = pg_server::shared().fresh_database();
    let hosts: Vec<PostgresLedger> = (0..8).map(|_| PostgresLedger::connect(&url).unwrap()).collect();
    for host in &hosts {
        host.find_grant("warm-up").unwrap();
    }
    for round in 0..6 {
        let results = agent_airlock_tests::block_on(async {
            let replies: Vec<_> = hosts
                .iter()
                .enumerate()
                .map(|(n, host)| {
                    let record = RequestRecord { tool: format!("tool{round}"), ..request(&format!("q{round}-{n}")) };
                    host.record_request(record, Some(2))
                })
                .collect();
            let mut results = Vec::new();
            for reply in replies {
                results.push(reply.await);
            }
            results
        });
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2, "round {round}: {results:?}");
        assert!(
            results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, LedgerError::TooManyPending { .. })),
            "round {round}: {results:?}"
        );
    }
}

/// Eight grants race for one effect key through `spend_and_reserve` on eight hosts: one reservation,
/// one spend; the seven others keep their grants live.
#[test]
fn eight_spend_and_reserves_race_one_effect_key() {
    let url = pg_server::shared().fresh_database();
    let hosts: Vec<Arc<PostgresLedger>> = (0..8).map(|_| Arc::new(PostgresLedger::connect(&url).unwrap())).collect();
    for host in &hosts {
        host.find_grant("warm-up").unwrap();
    }
    for n in 0..8 {
        granted(&hosts[0], &format!("r{n}"), &format!("g{n}"));
    }
    let claim = EffectClaim { key: "refund:pi_1".into(), lease: Duration::from_secs(30) };
    let replies: Vec<_> = hosts
        .iter()
        .enumerate()
        .map(|(n, host)| host.spend_and_reserve(attempt(&format!("g{n}"), &format!("r{n}")), claim.clone()))
        .collect();
    let results: Vec<_> = replies.into_iter().map(|reply| reply.wait().expect("no ledger fault")).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(
        results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, EffectError::InFlight { .. })),
        "{results:?}"
    );
    let spent = (0..8)
        .filter(|n| matches!(hosts[0].find_grant(&format!("g{n}")).unwrap().unwrap().state, GrantState::Spent { .. }))
        .count();
    assert_eq!(spent, 1);
    let record = hosts[3].effects().get("refund:pi_1").unwrap().unwrap();
    assert_eq!(record.status_at(NOW + Duration::from_secs(1)), EffectStatus::Reserved);
}

/// Eight OS processes, each with its own pool, race for each of several grants at the same instant: each
/// grant is spent by exactly one of them.
#[test]
fn eight_processes_race_one_grant_and_exactly_one_spends() {
    const ROUNDS: usize = 16;
    let url = pg_server::shared().fresh_database();
    let ledger = PostgresLedger::connect(&url).unwrap();
    for round in 0..ROUNDS {
        granted(&ledger, &format!("r{round}"), &format!("g{round}"));
    }
    let now = (NOW + Duration::from_secs(1)).as_millis().to_string();
    // Every process spends round N's grant at the same wall-clock instant, once all have connected.
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let start = (wall + Duration::from_secs(2)).as_millis().to_string();
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_worker"))
                .arg("pg_spender")
                .args([url.as_str(), &ROUNDS.to_string(), now.as_str(), start.as_str()])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let lines: Vec<String> = children
        .into_iter()
        .flat_map(|child| {
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success());
            String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(lines.len(), 8 * ROUNDS, "{lines:?}");
    for round in 0..ROUNDS {
        let grant = format!("g{round} ");
        let mine: Vec<&String> = lines.iter().filter(|line| line.starts_with(&grant)).collect();
        assert_eq!(mine.iter().filter(|line| line.ends_with(" spent")).count(), 1, "{mine:?}");
        assert!(
            mine.iter().filter(|line| !line.ends_with(" spent")).all(|line| line.contains("already spent")),
            "{mine:?}"
        );
        assert!(matches!(ledger.find_grant(&format!("g{round}")).unwrap().unwrap().state, GrantState::Spent { .. }));
    }
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("host={} port=5432 user=postgres dbname=none connect_timeout=2", dir.path().display());
    let err = PostgresLedger::connect(&url).expect_err("nothing listens there");
    assert!(matches!(err, PostgresOpenError::Connect(_)), "{err:?}");
    assert!(err.to_string().starts_with("cannot connect to PostgreSQL"), "{err}");
}
