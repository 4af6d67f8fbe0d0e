//! Masking arbitrary text and JSON: idempotent, never panics, never leaves a seeded secret intact.
#![no_main]

use agent_airlock_fuzz::{checks, generate};
use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Pieces secrets and personal data are made of, so the fuzzer builds near-misses cheaply.
const FRAGMENTS: &[&str] = &[
    "AKIA",
    "sk-",
    "sk-proj-",
    "ghp_",
    "xoxb-",
    "eyJ",
    ".",
    "@",
    "example.com",
    "password=",
    "passwd: ",
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "postgres://",
    "user:pass@",
    "host/db",
    "4111",
    "1111",
    " ",
    "-",
    "+1 ",
    "(555) ",
    "555-0100",
    "GB82",
    "WEST",
    "1234",
    "5698765432",
    "078-05-1120",
    "SSN ",
    "v1.2.3.4",
    "192.168.0.1",
    "order #",
    "\n",
    "\"",
    "=",
    ":",
    "Bearer ",
    "token=",
    "0123456789abcdef",
];

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(secret) = <Option<u8>>::arbitrary(&mut u) else { return };
    let secret = secret.map(usize::from);
    if u.arbitrary::<bool>().unwrap_or(false) {
        if let Ok(value) = generate::value(&mut u, 0) {
            checks::check_mask_value(&value, secret);
        }
        return;
    }
    let mut text = String::new();
    let _ = u.arbitrary_loop(Some(0), Some(64), |u| {
        if u.arbitrary::<bool>()? {
            text.push_str(u.choose(FRAGMENTS)?);
        } else {
            text.push_str(&String::arbitrary(u)?);
        }
        Ok(std::ops::ControlFlow::Continue(()))
    });
    checks::check_mask_text(&text, secret);
});
