//! Masking arbitrary text and JSON: idempotent, never panics, never leaves a seeded secret intact.
#![no_main]

use agent_airlock_fuzz::{checks, generate};
use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use std::sync::OnceLock;

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

/// With `AIRLOCK_FUZZ_PRINT` set, each input is printed to stderr as the case `tests/tests/dispatch/fuzz_regressions.rs`
/// replays (`{"text": …, "secret": …}` or `{"value": …, "secret": …}`), so that a failing input found here
/// becomes a regression test on stable: `AIRLOCK_FUZZ_PRINT=1 fuzz/target/…/masking <file>`.
fn print_cases() -> bool {
    static PRINT: OnceLock<bool> = OnceLock::new();
    *PRINT.get_or_init(|| std::env::var_os("AIRLOCK_FUZZ_PRINT").is_some())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(secret) = <Option<u8>>::arbitrary(&mut u) else { return };
    let secret = secret.map(usize::from);
    if u.arbitrary::<bool>().unwrap_or(false) {
        if let Ok(value) = generate::value(&mut u, 0) {
            if print_cases() {
                eprintln!("{}", json!({"value": value, "secret": secret}));
            }
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
    if print_cases() {
        eprintln!("{}", json!({"text": text, "secret": secret}));
    }
    checks::check_mask_text(&text, secret);
});
