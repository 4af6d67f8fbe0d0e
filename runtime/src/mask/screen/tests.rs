//! The pre-screens against the scans they shorten: leaving a group out where a screen says it cannot match
//! finds exactly what the scan with every group finds.

use proptest::prelude::*;

use super::*;
use crate::mask::detect::{self, Finding};

/// Pieces texts are glued from: the screens' words in several cases and cut short, the detectors' triggers and
/// findings, tags a masker writes (which name secrets), separators.
const PIECES: &[&str] = &[
    "password",
    "PASSWD",
    "Passphrase",
    "pas",
    "secret",
    "SECRET",
    "secre",
    "token",
    "Token",
    "toke",
    "api_key",
    "API-KEY",
    "apikey",
    "access_key",
    "private-key",
    "key",
    "ke",
    "credentials",
    "Credential",
    "airlock_db",
    "AIRLOCK_AUDIT_KEY",
    "airlock",
    "=",
    ":",
    " = ",
    ": ",
    "\"",
    "'",
    ",",
    "://",
    ":/",
    "@",
    "-----BEGIN",
    "-----BEGI",
    "postgres://app:s3cr3t-Pa55@db.internal",
    "https://shop.example.com/x",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "AKIAIOSFODNN7QK4RW2Z",
    "[GITHUB_TOKEN:3f2a9c1b]",
    "[SECRET_VALUE]",
    "[API_TOKEN]",
    "jane@example.com",
    "4111 1111 1111 1111",
    "+1 415 555 2671",
    "123-45-6789",
    "10.0.0.1",
    "Bearer abcDEF1234567890ghij",
    "hunter2",
    "\"Zq8vN2kP4rT6wY1xB3mC\"",
    "…",
    "sk-proj-abcdefghij0123456789ABCDEFGHIJ",
    " ",
    "\n",
    "_",
    ".",
];

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![3 => proptest::sample::select(PIECES).prop_map(str::to_owned), 1 => "[ -~]{0,6}"],
        0..10,
    )
    .prop_map(|pieces| pieces.concat())
}

fn scan(text: &str, set: MaskSet, only: MaskSet) -> (Vec<Finding>, bool) {
    let (scanner, _) = detect::scanner(set).unwrap();
    let mut found = Vec::new();
    let settled = scanner.scan(text, only, |finding| found.push(finding));
    (found, settled)
}

proptest! {
    #[test]
    fn leaving_out_what_cannot_match_finds_the_same(text in text()) {
        for set in [MaskSet::SECRETS | MaskSet::PII, MaskSet::ALL, MaskSet::SECRETS] {
            let full = scan(&text, set, set);
            let narrowed = detect::narrow(set, &text);
            prop_assert_eq!(&scan(&text, set, narrowed), &full, "{:?} narrowed", text);
            prop_assert_eq!(&scan(&text, set, first_scan(narrowed, &text)), &full, "{:?} first scan", text);
        }
    }

    #[test]
    fn the_byte_loops_find_what_a_searcher_finds(text in text()) {
        prop_assert_eq!(holds_a_begin_line(&text), text.contains("-----BEGIN"));
        prop_assert_eq!(holds_a_scheme_separator(&text), text.contains("://"));
        let lower = text.to_ascii_lowercase();
        let named = ["pass", "secret", "token", "key", "credential", "airlock_"].iter().any(|word| lower.contains(word));
        prop_assert_eq!(may_name_a_secret(&text), named);
    }
}

#[test]
fn tags_name_secrets_and_the_first_scan_alone_leaves_them_out() {
    let set = MaskSet::SECRETS | MaskSet::PII;
    assert!(may_name_a_secret("[GITHUB_TOKEN:3f2a9c1b]") && may_name_a_secret("db_PassWord"));
    assert!(!may_name_a_secret("user0@example.com") && !may_name_a_secret("10.0.1.2"));
    assert!(!first_scan(set, "10.0.1.2").contains_kind(MaskKind::SecretValue));
    assert_eq!(first_scan(set, "token: x"), set);
    let no_email = without(set, MaskKind::Email);
    assert!(!no_email.contains_kind(MaskKind::Email) && no_email | MaskSet::of(MaskKind::Email) == set);
}
