//! Resume values and interrupt requests read back from a checkpoint (untrusted): a genuine request and its
//! approval, mutated at random paths, or any JSON, never admit a call without the genuine token, and never
//! panic.
#![no_main]

use agent_airlock_fuzz::checks::{ApprovalFixture, check_resume};
use agent_airlock_fuzz::generate;
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fixture = ApprovalFixture::new();
    let mut u = Unstructured::new(data);
    let Ok(start) = u.int_in_range(0..=2u8) else { return };
    let mut untrusted = match start {
        0 => fixture.resume.clone(),
        1 => fixture.request.as_value().clone(),
        _ => match generate::value(&mut u, 0) {
            Ok(value) => value,
            Err(_) => return,
        },
    };
    let mutations = u.int_in_range(0..=3u8).unwrap_or(0);
    for _ in 0..mutations {
        if generate::mutate(&mut u, &mut untrusted).is_err() {
            break;
        }
    }
    check_resume(&fixture, &untrusted);
});
