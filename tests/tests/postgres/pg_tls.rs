//! The PostgreSQL ledger over TLS, against a real server started with `ssl=on` and a certificate made
//! here (a CA of the test's own signs the server's certificate for `localhost` and `127.0.0.1`): the right
//! CA connects and the ledger and its effect records work over TLS; another CA, another host name
//! (under `verify-full`) and a server without TLS are refused with a clear reason that holds no secret.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use agent_airlock::effect::{EffectStatus, EffectStore};
use agent_airlock::ledger::{ApprovalLedger, EffectClaim, PostgresLedger, SpendAttempt};
use agent_airlock::store::{PostgresOpenError, PostgresOptions};
use agent_airlock_tests::pg_server::PgServer;

use crate::ledger_postgres::{NOW, grant, request};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A password in the connection strings: it must never show in an error.
const SECRET: &str = "hunter2-not-for-logs";

struct Fixture {
    server: PgServer,
    /// The CA that signed the server's certificate, as a PEM file.
    ca_file: PathBuf,
    /// Another CA, that signed nothing the server presents.
    other_ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

fn ca(name: &str) -> (CertificateParams, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (params, KeyPair::generate().expect("a CA key"))
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (ca_params, ca_key) = ca("airlock test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().expect("the server's key");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("server params");
        server_params.distinguished_name.push(DnType::CommonName, "localhost");
        let server_cert = server_params.signed_by(&server_key, &issuer).expect("the server's certificate");
        let (other_params, other_key) = ca("another CA");
        let other_cert = other_params.self_signed(&other_key).expect("another CA certificate");

        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        let other_ca_file = dir.path().join("other-ca.pem");
        std::fs::write(&other_ca_file, other_cert.pem()).unwrap();
        let server = PgServer::start_tls(&server_cert.pem(), &server_key.serialize_pem());
        Fixture { server, ca_file, other_ca_file, _dir: dir }
    })
}

fn quick() -> PostgresOptions {
    PostgresOptions { connect_timeout: Duration::from_secs(5), ..PostgresOptions::default() }
}

/// A new database on the TLS server, and its name.
fn fresh(server: &PgServer) -> String {
    let url = server.fresh_database();
    url.rsplit("dbname=").next().expect("a dbname").to_owned()
}

fn refusal(result: Result<PostgresLedger, PostgresOpenError>) -> String {
    match result {
        Ok(_) => panic!("the connection must be refused"),
        Err(err) => {
            let message = err.to_string();
            assert!(!message.contains(SECRET), "the error shows the password: {message}");
            message
        }
    }
}

/// Grants, spends and reserves an effect through `ledger`, and reads the effect back.
fn exercise(ledger: &PostgresLedger) {
    ledger.record_request(request("r1"), None).wait().unwrap();
    ledger.grant(grant("g1", "r1"), NOW).wait().unwrap();
    let attempt = SpendAttempt { grant_id: "g1".into(), binding: "b-r1".into(), now: NOW + Duration::from_secs(1) };
    let claim = EffectClaim { key: "refund:pi_1".into(), lease: Duration::from_secs(30) };
    ledger.spend_and_reserve(attempt, claim).wait().expect("no ledger fault").expect("spent and reserved");
    let record = ledger.effects().get("refund:pi_1").unwrap().expect("the effect record");
    assert_eq!(record.status_at(NOW + Duration::from_secs(1)), EffectStatus::Reserved);
}

/// How many of `database`'s open connections use TLS, and how many do not.
fn tls_connections(server: &PgServer, database: &str) -> (u32, u32) {
    let count = |ssl: bool| {
        server
            .psql(
                "postgres",
                &format!(
                    "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE datname = '{database}' AND ssl = {ssl}"
                ),
            )
            .trim()
            .parse::<u32>()
            .expect("a count")
    };
    (count(true), count(false))
}

#[test]
fn with_the_right_ca_the_ledger_and_its_effects_work_over_tls() {
    let fixture = fixture();
    let database = fresh(&fixture.server);
    let url = format!(
        "{} password={SECRET} sslmode=verify-full sslrootcert='{}'",
        fixture.server.tcp_url(&database, "localhost"),
        fixture.ca_file.display()
    );
    let ledger = PostgresLedger::connect_with(&url, &quick()).expect("the ledger opens over TLS");
    exercise(&ledger);
    let (tls, plain) = tls_connections(&fixture.server, &database);
    assert!(tls >= 1 && plain == 0, "{tls} TLS and {plain} plain connections");
}

#[test]
fn a_url_with_sslmode_require_and_the_ca_as_an_option_verifies_and_works() {
    let fixture = fixture();
    let database = fresh(&fixture.server);
    let port = fixture.server.tcp_url(&database, "localhost");
    let port = port.split("port=").nth(1).and_then(|rest| rest.split(' ').next()).expect("a port");
    let url = format!("postgresql://postgres@127.0.0.1:{port}/{database}?sslmode=require");
    let options = PostgresOptions { tls_root_cert: Some(fixture.ca_file.clone()), ..quick() };
    let ledger = PostgresLedger::connect_with(&url, &options).expect("the ledger opens over TLS");
    exercise(&ledger);
    assert_eq!(tls_connections(&fixture.server, &database).1, 0);
    // Without the CA, the system's roots do not trust the test's CA.
    let message = refusal(PostgresLedger::connect_with(&url, &quick()));
    assert!(message.contains("the server's certificate is not trusted"), "{message}");
}

#[test]
fn another_ca_is_refused() {
    let fixture = fixture();
    let database = fresh(&fixture.server);
    for mode in ["require", "verify-ca", "verify-full"] {
        let url = format!(
            "{} password={SECRET} sslmode={mode} sslrootcert={}",
            fixture.server.tcp_url(&database, "localhost"),
            fixture.other_ca_file.display()
        );
        let message = refusal(PostgresLedger::connect_with(&url, &quick()));
        assert!(message.contains("the server's certificate is not trusted"), "{mode}: {message}");
    }
}

#[test]
fn another_host_name_is_refused_under_verify_full_and_accepted_under_verify_ca() {
    let fixture = fixture();
    let database = fresh(&fixture.server);
    let base = fixture.server.tcp_url(&database, "db.example");
    let ca = fixture.ca_file.display();
    for mode in ["verify-full", "require"] {
        let url = format!("{base} password={SECRET} sslmode={mode} sslrootcert={ca}");
        let message = refusal(PostgresLedger::connect_with(&url, &quick()));
        assert!(message.contains("not valid for the host name `db.example`"), "{mode}: {message}");
    }
    let ledger = PostgresLedger::connect_with(&format!("{base} sslmode=verify-ca sslrootcert={ca}"), &quick())
        .expect("verify-ca checks the chain only");
    exercise(&ledger);
}

#[test]
fn sslmode_require_against_a_server_without_tls_is_refused() {
    let server = PgServer::start_tcp();
    let database = fresh(&server);
    let base = server.tcp_url(&database, "localhost");
    let ca = fixture().ca_file.display();
    let message = refusal(PostgresLedger::connect_with(
        &format!("{base} password={SECRET} sslmode=require sslrootcert={ca}"),
        &quick(),
    ));
    assert!(message.contains("server does not support TLS"), "{message}");
    // Without sslmode the same server is reached over plain TCP, as before.
    let ledger = PostgresLedger::connect_with(&base, &quick()).expect("plain TCP");
    exercise(&ledger);
    assert_eq!(tls_connections(&server, &database).0, 0);
}
