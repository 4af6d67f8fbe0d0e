//! Structure-aware arguments: objects of known parameter names, variant names, boundary numbers, long
//! strings and deep nesting, sent to every tool.
//! The body is `agent_airlock_fuzz::targets::arguments_structured` (fuzz/src/targets.rs), which the stable tests also run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_airlock_fuzz::targets::arguments_structured(data));
