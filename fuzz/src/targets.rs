//! The body of every fuzz target, one function per target taking libFuzzer's raw input: the targets in
//! `fuzz_targets/` call them, and `tests/tests/dispatch/fuzz_regressions.rs` (stable toolchain, every
//! `cargo test`) includes this file and calls them with the committed seeds, the inputs that once failed and
//! generated mutations of the seeds. Each function decodes the bytes exactly as its target always has (the
//! committed corpora keep their meaning) and panics when a property does not hold.
//!
//! Siblings are named by `super::`: here they are the fuzz crate's modules, in the stable test those of the
//! module that includes this file.

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Value, json};

use super::{checks, generate};

/// A target's body: it runs one raw input and panics when a property does not hold.
pub type Body = fn(&[u8]);

/// Every target by name (the file names in `fuzz_targets/` and the folders in `fuzz/seeds/`).
pub const TARGETS: &[(&str, Body)] = &[
    ("arguments_bytes", arguments_bytes),
    ("arguments_structured", arguments_structured),
    ("audit_file", audit_file),
    ("canonical", canonical),
    ("effect_template", effect_template),
    ("masking", masking),
    ("policy", policy),
    ("policy_file", policy_file),
    ("resume_values", resume_values),
    ("tool_schema", tool_schema),
];

/// Raw bytes: the first picks one of 7 tools, the rest is JSON text (or non-JSON text).
pub fn arguments_bytes(data: &[u8]) {
    checks::check_argument_bytes(data);
}

/// An append-only audit file: the first byte's low bit picks a genuine file edited as the rest says, or the
/// rest as the file's frames after its magic; its next bit, for an edited file, makes the edit after a writer
/// opened the genuine one (the writer's next append finds it).
pub fn audit_file(data: &[u8]) {
    match data.split_first() {
        Some((mode, rest)) => checks::check_audit_file(rest, mode & 1 == 1, mode & 3 == 3),
        None => checks::check_audit_file(&[], false, false),
    }
}

/// Structure-aware arguments: objects of known parameter names, variant names, boundary numbers, long
/// strings and deep nesting, sent to every tool.
pub fn arguments_structured(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(tool) = u.arbitrary::<u8>() else { return };
    let arguments = match u.ratio(7u8, 8u8) {
        Ok(true) => generate::object(&mut u, 0).map(Value::Object),
        _ => generate::value(&mut u, 0),
    };
    if let Ok(arguments) = arguments {
        checks::check_arguments(usize::from(tool), arguments);
    }
}

/// Raw bytes parsed as JSON and canonicalized.
pub fn canonical(data: &[u8]) {
    checks::check_canonical(data);
}

/// An `effect = "…"` template and, after the first NUL byte, JSON arguments.
pub fn effect_template(data: &[u8]) {
    checks::check_effect_template(data);
}

/// The policy builder's untrusted inputs (globs, rate strings, mask set names): an error or a policy, never a
/// panic, and a literal deny glob denies its tool. Six strings, decoded from the bytes as libFuzzer's
/// `fuzz_target!` decodes a typed input (too few bytes for the type's least size: nothing to run).
pub fn policy(data: &[u8]) {
    type Input = (String, String, String, String, String, String);
    if data.len() < <Input as Arbitrary>::size_hint(0).0 {
        return;
    }
    let Ok((deny, allow, escalate, rate, masks, tool)) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    checks::check_policy(&deny, &allow, &escalate, &rate, &masks, &tool);
}

/// A policy file (TOML) and, after the first NUL byte, JSON arguments.
pub fn policy_file(data: &[u8]) {
    checks::check_policy_file(data);
}

/// A genuine approval's resume value or sealed request, mutated at random paths, or any JSON.
pub fn resume_values(data: &[u8]) {
    // A fresh fixture per input: a genuine value sent unchanged spends its approval.
    let fixture = checks::ApprovalFixture::new();
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
    checks::check_resume(&fixture, &untrusted);
}

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
/// replays (`{"text": …, "secret": …}` or `{"value": …, "secret": …}`), so that a failing input found by the
/// fuzzer becomes a readable regression test: `AIRLOCK_FUZZ_PRINT=1 fuzz/target/…/masking <file>`.
fn print_cases() -> bool {
    static PRINT: OnceLock<bool> = OnceLock::new();
    *PRINT.get_or_init(|| std::env::var_os("AIRLOCK_FUZZ_PRINT").is_some())
}

/// Masking arbitrary text and JSON: idempotent, never panics, never leaves a seeded secret intact.
pub fn masking(data: &[u8]) {
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
}

/// A tool schema as an upstream MCP server declares it (`generate::schema`: properties of known names, `$defs`
/// referred to from anywhere, combinators, boundary numbers), then up to four argument objects sent to it.
pub fn tool_schema(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(schema) = generate::schema(&mut u) else { return };
    let mut calls = Vec::new();
    let _ = u.arbitrary_loop(Some(0), Some(4), |u| {
        calls.push(Value::Object(generate::object(u, 0)?));
        Ok(std::ops::ControlFlow::Continue(()))
    });
    checks::check_tool_schema(schema, &calls);
}
