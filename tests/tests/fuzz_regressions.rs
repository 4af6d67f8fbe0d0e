//! What the fuzz targets in `fuzz/` found, replayed on the stable toolchain by `cargo test`: the same checks
//! (`fuzz/src/checks.rs`, included here) run over the committed seed corpora of the raw-byte targets and
//! over every input that once failed, each kept as a case below with what it broke.

#[path = "../../fuzz/src/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("the seed corpus {} is readable: {err}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.into_iter().map(|path| (path.clone(), std::fs::read(&path).expect("a seed file is readable"))).collect()
}

#[test]
fn argument_seeds_pass_the_argument_checks() {
    for (path, bytes) in seeds("arguments_bytes") {
        eprintln!("{}", path.display());
        checks::check_argument_bytes(&bytes);
    }
}

#[test]
fn canonical_seeds_pass_the_canonical_checks() {
    for (path, bytes) in seeds("canonical") {
        eprintln!("{}", path.display());
        checks::check_canonical(&bytes);
    }
}

#[test]
fn the_genuine_resume_value_admits_once_and_forgeries_never() {
    let fixture = checks::ApprovalFixture::new();
    let mut forged = fixture.resume.clone();
    let token = forged["airlock_grant"]["token"].as_str().expect("a token").to_owned();
    let (first, rest) = token.split_at(1);
    let flipped = format!("{}{rest}", if first == "0" { "1" } else { "0" });
    forged["airlock_grant"]["token"] = Value::String(flipped);
    checks::check_resume(&fixture, &forged);
    checks::check_resume(&fixture, &json!({"airlock_grant": "x"}));
    checks::check_resume(&fixture, &fixture.request.as_value().clone());
    checks::check_resume(&fixture, &fixture.resume.clone());
    // Spent: the same value again is refused (the check accepts only `AlreadySpent` for it).
    checks::check_resume(&fixture, &fixture.resume.clone());
}

#[test]
fn masking_seeded_secrets_is_idempotent_and_complete() {
    for index in 0..checks::SEEDED_SECRETS.len() {
        checks::check_mask_text("mail jane@example.com, build 1.2.3.4", Some(index));
        checks::check_mask_value(&json!({"env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}), Some(index));
    }
}

#[test]
fn policy_inputs_never_panic() {
    checks::check_policy("payments_*", "*", "refund*", "10/minute", "secrets,pii", "refund");
    checks::check_policy("", "", "", "", "", "");
    checks::check_policy("refund", "[", "{a,b", "0/day", "bogus", "refund");
}

// ---- found by `arguments_structured` (crash-acc5b38f…): a refusal echoed a long string in full ----------
// A 40,000-character string in an integer field came back inside "`a`: invalid type: string \"…\"", so the
// refusal grew with the input. Echoed fragments (field paths, serde's messages, ghost keys) are now cut to
// a bounded length with an ellipsis.

#[test]
fn a_long_string_in_an_integer_field_gives_a_bounded_refusal() {
    let long = "airlock_approval".repeat(2_500);
    checks::check_arguments(1, json!({"a": long}));
}

#[test]
fn a_long_map_key_in_a_nested_path_gives_a_bounded_refusal() {
    let key = "k".repeat(50_000);
    checks::check_arguments(3, json!({"labels": {key: "not a number"}, "unique": [], "matrix": []}));
}

#[test]
fn a_long_ghost_key_under_ghost_block_gives_a_bounded_refusal() {
    let ghost = "g".repeat(50_000);
    checks::check_arguments(6, json!({"count": 1, ghost: true}));
}

// ---- found by `resume_values` (crash-55f61af5…): a check too strict, not a bug ---------------------------
// A genuine request with `"amount": 500` respelled `500.0` still verifies: the seal covers the canonical form,
// in which both are `500`. The check now compares arguments by canonical form; this case keeps it so.

#[test]
fn a_genuine_request_with_a_respelled_number_still_verifies_as_the_same_request() {
    let fixture = checks::ApprovalFixture::new();
    let mut respelled = fixture.request.as_value().clone();
    respelled["airlock_approval"]["arguments"]["amount"] = serde_json::from_str("500.0").expect("a number");
    assert!(fixture.approvals.verify_request(&respelled).is_ok());
    checks::check_resume(&fixture, &respelled);
}

// ---- found by `masking` (crash-03a7a78d…): a check too strict, not a bug ---------------------------------
// The payload held the AWS example key eighteen times glued together (`AKIA…EXAMPLEAKIA…EXAMPLE…`): one
// token of 360 characters, which is not an access key, and the masker rightly left it. The check looked for
// the secret anywhere in the output; it now looks only where the secret was planted.

#[test]
fn a_secret_glued_to_copies_of_itself_is_not_that_secret_but_the_planted_copy_is_masked() {
    let glued = "AKIAIOSFODNN7EXAMPLE".repeat(18);
    checks::check_mask_value(&json!({"payload": [glued.clone(), {"name": []}]}), Some(0));
    checks::check_mask_text(&glued, Some(0));
    let masked = agent_airlock::mask::Masker::default()
        .mask_text("key AKIAIOSFODNN7EXAMPLE here", agent_airlock::mask::MaskSet::ALL);
    assert!(!masked.contains("AKIAIOSFODNN7EXAMPLE"), "{masked}");
}

// ---- found by `masking` (crash-36ab8b8e…): OPEN, not fixed -----------------------------------------------
// Masking is not idempotent for a long run of dotted quads glued together (`…v1.2.3…1.2.3.41.2.3.41.2.3.4`,
// an object key in the fuzzer's value): each call masks a few more `[IP_ADDRESS]` at the end of the run,
// because masking one changes its neighbour's context and the masker stops after a fixed number of passes
// (`MAX_PASSES` in `runtime/src/mask/mod.rs`). The file holds the text after one masking, as the fuzzer
// printed it. Left for the masking owner, to fix at the cause (context rules that do not depend on whether a
// neighbour was masked, or passes until a fixed point with a linear bound).

#[test]
#[ignore = "open: masking is not idempotent for glued dotted quads (FUZZING.md, Found)"]
fn masking_glued_dotted_quads_is_idempotent() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/masking_glued_dotted_quads.txt");
    let text = std::fs::read_to_string(path).expect("the regression input is readable");
    let masker = agent_airlock::mask::Masker::default();
    let once = masker.mask_text(&text, agent_airlock::mask::MaskSet::ALL).into_owned();
    let twice = masker.mask_text(&once, agent_airlock::mask::MaskSet::ALL);
    assert_eq!(twice, once);
}
