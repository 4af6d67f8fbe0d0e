//! The `effect = "…"` template renderer on an untrusted template, with optional JSON arguments after a NUL
//! byte: an error or a key, never a panic; key order and number spelling never change the key.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    agent_airlock_fuzz::checks::check_effect_template(data);
});
