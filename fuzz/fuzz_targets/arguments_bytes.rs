//! Raw bytes → JSON text → the dispatcher's admission, validation and refusal wording. The first byte picks
//! the tool; see `checks::check_arguments` for what is checked beyond "no panic".
//! The body is `agent_airlock_fuzz::targets::arguments_bytes` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::arguments_bytes(data));
