//! A policy file from untrusted text (`Policy::from_toml`), with optional JSON arguments after a NUL byte: a
//! policy or an error at a line and column, never a panic; a built policy answers every tool name and
//! argument set, and its conditions fail closed on a missing or mistyped argument.
//! The body is `agent_airlock_fuzz::targets::policy_file` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::policy_file(data));
