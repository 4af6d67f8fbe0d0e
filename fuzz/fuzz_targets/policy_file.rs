//! A policy file from untrusted text (`Policy::from_toml`), with optional JSON arguments after a NUL byte: a
//! policy or an error at a line and column, never a panic; a built policy answers every tool name and
//! argument set, and its conditions fail closed on a missing or mistyped argument.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    agent_airlock_fuzz::checks::check_policy_file(data);
});
