//! The pre-screens against the scans they shorten: leaving a group out where a screen says it cannot match
//! finds exactly what the scan with every group finds.

use proptest::prelude::*;

use super::*;
use crate::mask::detect::{self, Finding};
use crate::mask::providers;
use crate::mask::tests::glued;

/// Whether `text` holds one of [`SECRET_NAME_WORDS`], any ASCII case, read the slow way.
fn names_a_secret(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    SECRET_NAME_WORDS.iter().any(|word| lower.contains(std::str::from_utf8(word).unwrap()))
}

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

fn scan(text: &str, set: MaskSet, only: MaskSet) -> (Vec<Finding>, bool) {
    let (scanner, _) = detect::scanner(set).unwrap();
    let mut found = Vec::new();
    let settled = scanner.scan(text, only, |finding| found.push(finding));
    (found, settled)
}

proptest! {
    #[test]
    fn leaving_out_what_cannot_match_finds_the_same(text in glued(PIECES, 3, "[ -~]{0,6}", 10)) {
        for set in [MaskSet::SECRETS | MaskSet::PII, MaskSet::ALL, MaskSet::SECRETS] {
            let full = scan(&text, set, set);
            let narrowed = detect::narrow(set, &text);
            prop_assert_eq!(&scan(&text, set, narrowed), &full, "{:?} narrowed", text);
            let first = first_scan(narrowed, names_a_secret(&text));
            prop_assert_eq!(&scan(&text, set, first), &full, "{:?} first scan", text);
        }
    }

    #[test]
    fn the_byte_loops_find_what_a_searcher_finds(text in glued(PIECES, 3, "[ -~]{0,6}", 10)) {
        prop_assert_eq!(holds_a_begin_line(&text), text.contains("-----BEGIN"));
        prop_assert_eq!(holds_a_scheme_separator(&text), text.contains("://"));
        // The provider rules' keyword pass says it as the slow reading does.
        prop_assert_eq!(providers::providers().unwrap().keyword_pass(&text).names_a_secret, names_a_secret(&text));
    }
}

#[test]
fn tags_name_secrets_and_the_first_scan_alone_leaves_them_out() {
    let set = MaskSet::SECRETS | MaskSet::PII;
    let pass = |text: &str| providers::providers().unwrap().keyword_pass(text).names_a_secret;
    assert!(pass("[GITHUB_TOKEN:3f2a9c1b]") && pass("db_PassWord") && pass("AIRLOCK_DB=x"));
    assert!(!pass("user0@example.com") && !pass("10.0.1.2") && !pass("airlock"));
    assert!(!first_scan(set, false).contains_kind(MaskKind::SecretValue));
    assert_eq!(first_scan(set, true), set);
    let no_email = without(set, MaskKind::Email);
    assert!(!no_email.contains_kind(MaskKind::Email) && no_email | MaskSet::of(MaskKind::Email) == set);
}

/// Pieces quiet texts and the texts just past them are glued from: status words, numbers short and long, the
/// bytes a number or a token is made of, and one of each kind of loud byte.
const QUIET_PIECES: &[&str] = &[
    "ticket",
    "filed",
    "files deleted in",
    "ms",
    "bearer ",
    "Bearer ",
    "phone ",
    "tel ",
    "ssn ",
    "social security ",
    "authorization ",
    "basic ",
    "2",
    "187",
    "13",
    "415 555 2671",
    "(415) 555 2671",
    "+1 415 555 2671",
    "+33 1 42 68 53 00",
    "0171 234 5678",
    "123 45 6789",
    "4111 1111 1111 1111",
    "4111111111111111",
    "1.2.3.4",
    "10.0.0.1",
    "abcdefgh12345678",
    "q8vn2kp4rt6wy1xb",
    "bearer q8vn2kp4rt6wy1xb",
    "x9/y8.z7~w6+v5",
    "/",
    " ",
    "(",
    ")",
    ".",
    "+",
    "~",
    ",",
    "é",
    "A",
    "AKIAIOSFODNN7QK4RW2Z",
    "123-45-6789",
    "authorization: basic azp6azp6",
    "authorization=basic azp6azp6",
    "jane@example.com",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "user_id 42 updated",
    "-",
    "_",
    ":",
    "=",
    "@",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_scan_of_a_quiet_text_finds_nothing(text in glued(QUIET_PIECES, 4, "[a-z0-9 ().+/~]{0,8}", 12)) {
        if is_quiet(&text) && !names_a_secret(&text) {
            for set in [MaskSet::ALL, MaskSet::SECRETS | MaskSet::PII] {
                prop_assert_eq!(scan(&text, set, set), (Vec::new(), true), "{:?}", text);
            }
        }
    }
}

#[test]
fn status_lines_are_quiet_and_numbers_tokens_and_loud_bytes_are_not() {
    for quiet in [
        "ticket 2/false/187/13",
        "3 files deleted in 12 ms",
        "user_id 42 updated",
        "ok",
        "",
        "done in 42 s, 2 of 3 left",
        "é 12345",
    ] {
        assert!(is_quiet(quiet), "{quiet:?}");
    }
    for loud in [
        "call 415 555 2671",
        "at 1.2.3.4",
        "bearer abcdefgh12345678",
        "Ticket 2",
        "a-b",
        "a:b",
        "a=b",
        "a@b",
        "1234567",
        "0123456789abcdef",
    ] {
        assert!(!is_quiet(loud), "{loud:?}");
    }
}
