//! The policy builder's untrusted inputs (globs, rate strings, mask set names): an error or a policy,
//! never a panic, and a literal deny glob denies its tool.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, String, String, String, String, String)| {
    let (deny, allow, escalate, rate, masks, tool) = input;
    agent_airlock_fuzz::checks::check_policy(&deny, &allow, &escalate, &rate, &masks, &tool);
});
