//! Fuzz targets for agent-airlock: the checks every target runs ([`checks`], shared with the stable
//! regression tests) and a structure-aware JSON generator ([`generate`]).
#![forbid(unsafe_code)]

pub mod checks;
pub mod generate;
