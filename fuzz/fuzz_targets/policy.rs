//! The policy builder's untrusted inputs (globs, rate strings, mask set names): an error or a policy,
//! never a panic, and a literal deny glob denies its tool.
//! The body is `agent_airlock_fuzz::targets::policy` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::policy(data));
