//! The audit log: concurrent writers, a crash mid-append, tampering, tracing records, PostgreSQL.
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod audit_concurrency;
pub mod audit_crash;
pub mod audit_tamper;
pub mod audit_tracing;
