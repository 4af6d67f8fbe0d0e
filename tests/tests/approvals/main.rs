//! Approvals: the interrupt/resume protocol, the ledger on redb, PostgreSQL and in memory, pruning, decisions
//! recorded by a store, OS processes sharing one ledger.
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod approval_survives_refusal;
pub mod approvals_dispatch;
pub mod checkpoint_commitments;
pub mod ledger_processes;
pub mod ledger_protocol;
pub mod ledger_prune;
pub mod ledger_redb;
pub mod operator_signatures;
pub mod revocation_log;
pub mod store_decisions;
