//! Schemas: canonical JSON, every dialect, JSON-schema tools, committed snapshots, and the schema-truth property
//! (what we publish is what we admit).
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

#[path = "../support/corpus.rs"]
mod corpus;
#[allow(dead_code)]
#[path = "../support/diff.rs"]
mod diff;
#[allow(dead_code)]
#[path = "../support/schema_node.rs"]
mod schema_node;
#[allow(dead_code)]
#[path = "../support/validators.rs"]
mod validators;

pub mod canonical_json;
pub mod dialects;
pub mod json_schema_tool;
pub mod schema_snapshots;
pub mod schema_truth;
