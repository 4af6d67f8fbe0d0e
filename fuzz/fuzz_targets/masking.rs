//! Masking arbitrary text and JSON: idempotent, never panics, never leaves a seeded secret intact.
//! The body is `agent_airlock_fuzz::targets::masking` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::masking(data));
