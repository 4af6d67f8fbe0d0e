//! Canonical JSON (RFC 8785): fixed point, same data, order and number spelling never change the bytes or
//! the digest, and agreement with `serde_json_canonicalizer`.
//! The body is `agent_airlock_fuzz::targets::canonical` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::canonical(data));
