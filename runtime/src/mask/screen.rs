//! Exact pre-screens: cheap checks that say a group of patterns cannot match a text at all, so the scan leaves
//! that group out (the scan a scanner without it makes, which finds the same). Each names the literal every
//! match of its patterns holds; a property test (`mask::screen::tests`) holds that leaving the groups out never
//! changes what is found. They save a regex search's fixed cost on the short leaves of a JSON result, and must
//! cost less than that search: a loop with a closure per byte does not (BENCHMARKS.md §2).

use agent_airlock_grammar::{MaskKind, MaskSet};

/// Whether `text` holds `-----BEGIN`, the start of every private-key block. The substring searcher is built only
/// for a text holding a `-` (one `memchr`): most JSON leaves hold none, and building it costs more than they do.
pub(crate) fn holds_a_begin_line(text: &str) -> bool {
    text.as_bytes().contains(&b'-') && text.contains("-----BEGIN")
}

/// Whether `text` holds `://`, which every connection password's URL holds (`scheme://user:password@host`).
pub(crate) fn holds_a_scheme_separator(text: &str) -> bool {
    text.as_bytes().contains(&b':') && text.contains("://")
}

/// The words, any ASCII case, of which every labelled secret's name holds one: the names the pattern ends a key
/// with are `password`, `passwd`, `passphrase` (`pass`), `secret`, `token`, `api[_-]?key`, `access[_-]?key`,
/// `private[_-]?key` (`key`), `credential(s)` and agent-airlock's own `airlock_…` names (`detect::PATTERNS`).
/// The provider rules' keyword pass looks for them too, so knowing costs no extra pass over the text.
pub(crate) const SECRET_NAME_WORDS: [&[u8]; 6] = [b"pass", b"secret", b"token", b"key", b"credential", b"airlock_"];

/// `only` without the labelled secrets when the text names none (it holds none of [`SECRET_NAME_WORDS`]). For
/// the first scan of a text only: the scans of a text with its findings replaced by tags must keep them, since a
/// tag may name one (`[GITHUB_TOKEN:3f2a9c1b]` reads as `TOKEN:3f2a9c1b`, which the pattern matches and its
/// verifier refuses).
pub(crate) fn first_scan(only: MaskSet, names_a_secret: bool) -> MaskSet {
    if only.contains_kind(MaskKind::SecretValue) && !names_a_secret {
        without(only, MaskKind::SecretValue)
    } else {
        only
    }
}

/// `set` without `kind`.
pub(crate) fn without(set: MaskSet, kind: MaskKind) -> MaskSet {
    set.kinds().filter(|&k| k != kind).fold(MaskSet::NONE, |set, k| set | MaskSet::of(k))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests;
