//! Fuzz targets for agent-airlock: each target's body ([`targets`]), the checks they run ([`checks`]) and a
//! structure-aware JSON generator ([`generate`]), all three shared with the stable tests
//! (`tests/tests/dispatch/fuzz_regressions.rs`).
#![forbid(unsafe_code)]

pub mod checks;
pub mod generate;
pub mod targets;
