//! Idempotent effects: their states on every store, spellings of one key, OS processes racing, the audit trail, and
//! PostgreSQL's faults.
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod effect_lease_renewal;
pub mod effects_audit_dispatch;
pub mod effects_processes;
pub mod effects_spelling;
pub mod effects_states;
