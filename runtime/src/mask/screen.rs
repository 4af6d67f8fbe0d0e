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
/// `private[_-]?key` (`key`), `credential(s)` and agent-airlock's own `airlock_…` names (`detect::PATTERNS`); a
/// `Cookie` header's cookies follow `cookie`, a `.netrc` entry's password `password`, a command's one-letter password
/// flag its name (`mysql`, `mariadb`, `sshpass`, `redis-cli`, `mongo…`, `ldap…`, a registry client's `login`:
/// `docker`, `podman`, `nerdctl`, `buildah`, `skopeo`, `helm`; OpenSSL's `pass:`).
/// The provider rules' keyword pass looks for them too, so knowing costs no extra pass over the text.
pub(crate) const SECRET_NAME_WORDS: [&[u8]; 18] = [
    b"pass",
    b"secret",
    b"token",
    b"key",
    b"credential",
    b"airlock_",
    b"cookie",
    b"mysql",
    b"mariadb",
    b"redis-cli",
    b"mongo",
    b"ldap",
    b"docker",
    b"podman",
    b"nerdctl",
    b"buildah",
    b"skopeo",
    b"helm",
];

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

/// Whether no pattern of the scanner can match `text`, which names no secret (none of [`SECRET_NAME_WORDS`]): a
/// short status line (`ticket 2 filed`, `3 files deleted in 12 ms`, `user_id 42 updated`) costs a byte loop
/// instead of a search. Every pattern needs (`detect::PATTERNS`) a capital (`-----BEGIN`, `eyJ`, `AKIA`, `AIza`, an
/// IBAN's country, Slack's `/T`), a `-` (`sk-`, `xoxb-`, an SSN), a `:` or `=` (a URL's `://`, `authorization: basic
/// azp6azp6`), an `@` (an e-mail), a secret's name (a labelled value), seven bytes or more in a row of digits,
/// blanks, `(`, `)`, `.`, `+` (a phone, a card, an SSN after its label, an IPv4 address: `1.2.3.4`), or sixteen in a
/// row of a token's letters, digits, `.`, `/`, `~`, `+`, `_` (the token after `bearer`, and `ghp_…`, `sk_live_…`,
/// `github_pat_…`, whose bodies are that long). A property test (`screen::tests`) holds that the scan of a text
/// this says `true` of finds nothing, and fails with any one of those needs left out.
pub(crate) fn is_quiet(text: &str) -> bool {
    const LOUD: u8 = 1;
    const NUMBER: u8 = 2;
    const TOKEN: u8 = 4;
    const CLASSES: [u8; 256] = {
        let mut classes = [0u8; 256];
        let mut byte = 0;
        while byte < 256 {
            let b = byte as u8;
            classes[byte] = if b.is_ascii_uppercase() || matches!(b, b'-' | b':' | b'=' | b'@') {
                LOUD
            } else {
                let number =
                    if b.is_ascii_digit() || matches!(b, b' ' | b'(' | b')' | b'.' | b'+') { NUMBER } else { 0 };
                let token =
                    if b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'/' | b'~' | b'+' | b'_') {
                        TOKEN
                    } else {
                        0
                    };
                number | token
            };
            byte += 1;
        }
        classes
    };
    let (mut number, mut token) = (0usize, 0usize);
    for &b in text.as_bytes() {
        let class = CLASSES[usize::from(b)];
        if class & LOUD != 0 {
            return false;
        }
        number = if class & NUMBER != 0 { number + 1 } else { 0 };
        token = if class & TOKEN != 0 { token + 1 } else { 0 };
        if number >= 7 || token >= 16 {
            return false;
        }
    }
    true
}

/// `set` without `kind`.
pub(crate) fn without(set: MaskSet, kind: MaskKind) -> MaskSet {
    set.difference(MaskSet::of(kind))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests;
