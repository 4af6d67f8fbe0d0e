//! Exact pre-screens: byte loops that say a group of patterns cannot match a text at all, so the scan leaves
//! that group out (the scan a scanner without it makes, which finds the same). Each names the literal every
//! match of its patterns holds; a property test (`mask::screen::tests`) holds that leaving the group out never
//! changes what is found. They save a regex search's fixed cost on the short leaves of a JSON result.

use agent_airlock_grammar::{MaskKind, MaskSet};

/// Whether `text` holds `-----BEGIN`, the start of every private-key block: looked for from each `-`, where a
/// substring searcher built per call costs more than most JSON leaves (this runs on every text masked).
pub(crate) fn holds_a_begin_line(text: &str) -> bool {
    holds(text.as_bytes(), b"-----BEGIN")
}

/// Whether `text` holds `://`, which every connection password's URL holds (`scheme://user:password@host`).
pub(crate) fn holds_a_scheme_separator(text: &str) -> bool {
    holds(text.as_bytes(), b"://")
}

/// The words, any ASCII case, of which every labelled secret's name holds one: the names the pattern ends a key
/// with are `password`, `passwd`, `passphrase` (`pass`), `secret`, `token`, `api[_-]?key`, `access[_-]?key`,
/// `private[_-]?key` (`key`), `credential(s)` and agent-airlock's own `airlock_…` names (`detect::PATTERNS`).
const SECRET_NAME_WORDS: [&[u8]; 6] = [b"pass", b"secret", b"token", b"key", b"credential", b"airlock_"];

/// Whether `text` may hold a labelled secret (`password = …`): `false` when it holds none of
/// [`SECRET_NAME_WORDS`], in any ASCII case. Each byte picks the one word it can start.
pub(crate) fn may_name_a_secret(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().any(|(at, &b)| {
        let word: &[u8] = match b | 0x20 {
            b'p' => SECRET_NAME_WORDS[0],
            b's' => SECRET_NAME_WORDS[1],
            b't' => SECRET_NAME_WORDS[2],
            b'k' => SECRET_NAME_WORDS[3],
            b'c' => SECRET_NAME_WORDS[4],
            b'a' => SECRET_NAME_WORDS[5],
            _ => return false,
        };
        bytes.get(at + 1..at + word.len()).is_some_and(|rest| rest.eq_ignore_ascii_case(&word[1..]))
    })
}

/// `only` without the labelled secrets when `text` names none ([`may_name_a_secret`]). For the first scan of a
/// text only: the scans of a text with its findings replaced by tags must keep them, since a tag may name one
/// (`[GITHUB_TOKEN:3f2a9c1b]` reads as `TOKEN:3f2a9c1b`, which the pattern matches and its verifier refuses).
pub(crate) fn first_scan(only: MaskSet, text: &str) -> MaskSet {
    if only.contains_kind(MaskKind::SecretValue) && !may_name_a_secret(text) {
        without(only, MaskKind::SecretValue)
    } else {
        only
    }
}

/// `set` without `kind`.
pub(crate) fn without(set: MaskSet, kind: MaskKind) -> MaskSet {
    set.kinds().filter(|&k| k != kind).fold(MaskSet::NONE, |set, k| set | MaskSet::of(k))
}

/// Whether `bytes` hold `needle` (not empty), looked for from each occurrence of its first byte.
fn holds(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(at, &b)| b == needle[0] && bytes[at..].starts_with(needle))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests;
