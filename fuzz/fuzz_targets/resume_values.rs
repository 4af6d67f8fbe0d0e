//! Resume values and interrupt requests read back from a checkpoint (untrusted): a genuine request and its
//! approval, mutated at random paths, or any JSON, never admit a call without the genuine token, and never
//! panic.
//! The body is `agent_airlock_fuzz::targets::resume_values` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::resume_values(data));
