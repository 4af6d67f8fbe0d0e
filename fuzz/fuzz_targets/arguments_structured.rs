//! Structure-aware arguments: objects of known parameter names, variant names, boundary numbers, long
//! strings and deep nesting, sent to every tool.
#![no_main]

use agent_airlock_fuzz::{checks, generate};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(tool) = u.arbitrary::<u8>() else { return };
    let arguments = match u.ratio(7u8, 8u8) {
        Ok(true) => generate::object(&mut u, 0).map(Value::Object),
        _ => generate::value(&mut u, 0),
    };
    if let Ok(arguments) = arguments {
        checks::check_arguments(usize::from(tool), arguments);
    }
});
