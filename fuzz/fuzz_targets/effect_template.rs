//! The `effect = "…"` template renderer on an untrusted template, with optional JSON arguments after a NUL
//! byte: an error or a key, never a panic; key order and number spelling never change the key.
//! The body is `agent_airlock_fuzz::targets::effect_template` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::effect_template(data));
