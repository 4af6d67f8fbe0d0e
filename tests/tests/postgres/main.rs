//! PostgreSQL against a real server (a throwaway one from the installed binaries, `tests/src/pg_server.rs`): the
//! ledger's and the audit log's PostgreSQL stores, and the store's faults (a restarted or killed server, a
//! connection cut during `COMMIT`, statement timeouts, racing OS processes), each fault on its own server; TLS
//! (`ssl=on`, certificates made by the test).
//!
//! One test binary per subsystem (CONTRIBUTING.md); the slow ones, like this, stay apart from the core.

pub mod audit_postgres;
pub mod ledger_postgres;
pub mod pg_faults;
pub mod pg_tls;
