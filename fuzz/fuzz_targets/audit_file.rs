//! An append-only audit file from untrusted bytes, or a genuine one edited: opening it to read or to write never
//! panics; to write, it is refused as damaged and left as it was, or keeps the genuine records of the whole
//! batches before the first changed byte and takes an append.
//! The body is `agent_airlock_fuzz::targets::audit_file` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::audit_file(data));
