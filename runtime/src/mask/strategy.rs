//! How a finding is written back: fixed text, a recognisable part, a type tag, or a keyed hash.

use std::fmt::Write as _;

use super::{MaskKind, MaskSet};
use crate::keys::HashKey;

/// What replaces a masked value.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum MaskStrategy {
    /// Fixed text, [`FULL_MASK`], whatever the kind.
    Full,
    /// Keep a recognisable part that reveals nothing useful: a key's provider prefix and last four
    /// characters (`sk-proj-...wxyz`), a card's, phone's, SSN's or IBAN's last four digits with the layout
    /// kept (`**** **** **** 1111`), an e-mail's first letter and domain (`j***@example.com`), an IP's first
    /// two octets (`192.168.*.*`), a PEM block's BEGIN and END lines. Passwords and labelled secrets have no
    /// safe part and become `****`.
    Partial,
    /// The kind's tag, e.g. `[EMAIL]` ([`MaskKind::tag`]).
    #[default]
    TypeTag,
    /// The kind and a truncated HMAC-SHA256 of the value under a key, e.g. `[EMAIL:3f2a9c1b]`: equal values
    /// map to equal text, so a model can still tell that two results name the same customer, without the
    /// value being recoverable. Values are normalised first (e-mails lower-cased; separators dropped from
    /// cards, phones, SSNs and IBANs).
    KeyedHash(HashKey),
}

/// The text of [`MaskStrategy::Full`].
pub const FULL_MASK: &str = "[REDACTED]";

/// Hex digits of the HMAC kept by [`MaskStrategy::KeyedHash`] (32 bits: enough to tell values apart within a
/// conversation, far too few to be a lookup key).
pub const HASH_HEX_LEN: usize = 8;

/// The first [`HASH_HEX_LEN`] hex digits of HMAC-SHA256 under `key` over a domain-separated encoding of the
/// kind and the value.
fn digest_hex(key: &HashKey, kind: MaskKind, value: &[u8], out: &mut String) {
    let mut mac = key.hash_mac();
    mac.update(kind.name().as_bytes());
    mac.update(b"\0");
    mac.update(value);
    out.push_str(&hex::encode(&mac.finish()[..HASH_HEX_LEN / 2]));
}

/// The strategy for each kind: one default, with overrides per kind or family.
///
/// ```
/// use agent_airlock::{mask::{MaskConfig, MaskKind, MaskSet, MaskStrategy}};
///
/// let config = MaskConfig::new(MaskStrategy::TypeTag)
///     .with(MaskSet::of(MaskKind::PaymentCard), MaskStrategy::Partial);
/// assert!(matches!(config.strategy(MaskKind::PaymentCard), MaskStrategy::Partial));
/// assert!(matches!(config.strategy(MaskKind::Email), MaskStrategy::TypeTag));
/// ```
#[derive(Clone, Debug)]
pub struct MaskConfig {
    strategies: [MaskStrategy; MaskKind::COUNT],
    max_text_bytes: usize,
}

/// The default [`MaskConfig::max_text_bytes`]: 64 MiB, about a second of masking on the slowest text measured.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 64 << 20;

impl MaskConfig {
    /// Every kind masked with `strategy`.
    pub fn new(strategy: MaskStrategy) -> MaskConfig {
        MaskConfig { strategies: std::array::from_fn(|_| strategy.clone()), max_text_bytes: DEFAULT_MAX_TEXT_BYTES }
    }

    /// The budget for one result, in bytes: a text, or a JSON value's strings and keys together. A longer one
    /// is not masked but replaced whole by a message saying so ([`too_large`]), never passed on unmasked (a JSON
    /// value becomes that one string). Masking reads each byte a bounded number of times, so this bounds its
    /// time too.
    #[must_use]
    pub fn with_max_text_bytes(mut self, max: usize) -> MaskConfig {
        self.max_text_bytes = max;
        self
    }

    /// The budget for one result ([`MaskConfig::with_max_text_bytes`]).
    pub fn max_text_bytes(&self) -> usize {
        self.max_text_bytes
    }

    /// The kinds in `kinds` masked with `strategy` instead.
    #[must_use]
    pub fn with(mut self, kinds: MaskSet, strategy: MaskStrategy) -> MaskConfig {
        for kind in kinds.kinds() {
            self.strategies[kind.index()] = strategy.clone();
        }
        self
    }

    /// The strategy for `kind`.
    pub fn strategy(&self, kind: MaskKind) -> &MaskStrategy {
        &self.strategies[kind.index()]
    }
}

impl Default for MaskConfig {
    /// [`MaskStrategy::TypeTag`] for every kind.
    fn default() -> MaskConfig {
        MaskConfig::new(MaskStrategy::TypeTag)
    }
}

/// What replaces a text longer than the budget: `[TOO_LARGE_TO_MASK: 70000000 bytes > 67108864]`.
pub fn too_large(len: usize, max: usize) -> String {
    format!("[TOO_LARGE_TO_MASK: {len} bytes > {max}]")
}

/// The text that replaces `value`, a finding of `kind` whose first `keep_prefix` bytes are a public,
/// recognisable prefix (a provider's key prefix), written to `out`.
pub(crate) fn render(strategy: &MaskStrategy, kind: MaskKind, value: &str, keep_prefix: usize, out: &mut String) {
    match strategy {
        MaskStrategy::Full => out.push_str(FULL_MASK),
        MaskStrategy::TypeTag => out.push_str(kind.tag()),
        MaskStrategy::Partial => partial(kind, value, keep_prefix, out),
        MaskStrategy::KeyedHash(key) => {
            let tag = kind.tag();
            out.push_str(&tag[..tag.len() - 1]);
            out.push(':');
            digest_hex(key, kind, &canonical(kind, value), out);
            out.push(']');
        }
    }
}

/// The form hashed, so that differently written equal values hash equally.
fn canonical(kind: MaskKind, value: &str) -> Vec<u8> {
    match kind {
        MaskKind::Email => value.to_ascii_lowercase().into_bytes(),
        MaskKind::PaymentCard | MaskKind::UsSsn => value.bytes().filter(u8::is_ascii_digit).collect(),
        MaskKind::Phone => value.bytes().filter(|b| b.is_ascii_digit() || *b == b'+').collect(),
        MaskKind::Iban => value.bytes().filter(u8::is_ascii_alphanumeric).map(|b| b.to_ascii_uppercase()).collect(),
        _ => value.as_bytes().to_vec(),
    }
}

fn partial(kind: MaskKind, value: &str, keep_prefix: usize, out: &mut String) {
    match kind {
        MaskKind::AnthropicKey
        | MaskKind::OpenAiKey
        | MaskKind::GoogleApiKey
        | MaskKind::GitHubToken
        | MaskKind::SlackToken
        | MaskKind::StripeKey
        | MaskKind::AwsAccessKey
        | MaskKind::Jwt
        | MaskKind::BearerToken => {
            let prefix = value.get(..keep_prefix).unwrap_or("");
            let rest = &value[prefix.len()..];
            out.push_str(prefix);
            out.push_str("...");
            // Show the last four only when at least twelve characters stay hidden.
            if rest.chars().count() >= 16 {
                let tail_start = rest.char_indices().rev().nth(3).map_or(0, |(i, _)| i);
                out.push_str(&rest[tail_start..]);
            }
        }
        MaskKind::PrivateKey => {
            // Keep the `-----BEGIN … PRIVATE KEY-----` and `-----END … -----` lines.
            let header_end = value.get(5..).and_then(|after| after.find("-----")).map(|i| i + 10);
            match header_end {
                Some(end) => {
                    out.push_str(&value[..end]);
                    out.push_str("****");
                    if let Some(footer) = value.rfind("-----END")
                        && footer >= end
                    {
                        out.push_str(&value[footer..]);
                    }
                }
                None => out.push_str("****"),
            }
        }
        MaskKind::Email => match value.split_once('@') {
            Some((local, domain)) => {
                out.extend(local.chars().next());
                out.push_str("***@");
                out.push_str(domain);
            }
            None => out.push_str("****"),
        },
        MaskKind::PaymentCard | MaskKind::Phone | MaskKind::UsSsn => {
            star_all_but_last_four(value, 0, |c| c.is_ascii_digit(), out);
        }
        MaskKind::Iban => star_all_but_last_four(value, 2, |c| c.is_ascii_alphanumeric(), out),
        MaskKind::IpAddress => {
            let mut octets = value.split('.');
            match (octets.next(), octets.next()) {
                (Some(first), Some(second)) => {
                    let _ = write!(out, "{first}.{second}.*.*");
                }
                _ => out.push_str("****"),
            }
        }
        MaskKind::ConnectionPassword | MaskKind::SecretValue => out.push_str("****"),
        // A kind added to the grammar before it has a partial form here is hidden whole.
        _ => out.push_str("****"),
    }
}

/// Replaces each character `counts` accepts with `*`, except the first `keep_first` and the last four of them;
/// other characters (separators) are kept, so the layout stays recognisable.
fn star_all_but_last_four(value: &str, keep_first: usize, counts: impl Fn(char) -> bool, out: &mut String) {
    let total = value.chars().filter(|&c| counts(c)).count();
    let mut seen = 0;
    for c in value.chars() {
        if counts(c) {
            seen += 1;
            if seen > keep_first && seen + 4 <= total {
                out.push('*');
                continue;
            }
        }
        out.push(c);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    fn rendered(strategy: &MaskStrategy, kind: MaskKind, value: &str, keep: usize) -> String {
        let mut out = String::new();
        render(strategy, kind, value, keep, &mut out);
        out
    }

    #[test]
    fn partial_keeps_a_recognisable_part() {
        let p = MaskStrategy::Partial;
        assert_eq!(rendered(&p, MaskKind::OpenAiKey, "sk-proj-abcdefghijklmnopqrstuvwxyz", 8), "sk-proj-...wxyz");
        assert_eq!(rendered(&p, MaskKind::AwsAccessKey, "AKIAIOSFODNN7QK4RW2Z", 4), "AKIA...RW2Z");
        assert_eq!(rendered(&p, MaskKind::BearerToken, "short-token-1234", 0), "...1234");
        assert_eq!(rendered(&p, MaskKind::BearerToken, "short-token", 0), "...");
        assert_eq!(rendered(&p, MaskKind::PaymentCard, "4111 1111 1111 1111", 0), "**** **** **** 1111");
        assert_eq!(rendered(&p, MaskKind::PaymentCard, "4111111111111111", 0), "************1111");
        assert_eq!(rendered(&p, MaskKind::UsSsn, "123-45-6789", 0), "***-**-6789");
        assert_eq!(rendered(&p, MaskKind::Phone, "+1 (415) 555-2671", 0), "+* (***) ***-2671");
        assert_eq!(rendered(&p, MaskKind::Iban, "DE89 3704 0044 0532 0130 00", 0), "DE** **** **** **** **30 00");
        assert_eq!(rendered(&p, MaskKind::Email, "jane.doe@example.com", 0), "j***@example.com");
        assert_eq!(rendered(&p, MaskKind::IpAddress, "203.0.113.7", 0), "203.0.*.*");
        assert_eq!(rendered(&p, MaskKind::SecretValue, "hunter2", 0), "****");
        assert_eq!(
            rendered(
                &p,
                MaskKind::PrivateKey,
                "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----",
                0
            ),
            "-----BEGIN EC PRIVATE KEY-----****-----END EC PRIVATE KEY-----"
        );
    }

    #[test]
    fn full_and_tag() {
        assert_eq!(rendered(&MaskStrategy::Full, MaskKind::Email, "a@b.co", 0), FULL_MASK);
        assert_eq!(rendered(&MaskStrategy::TypeTag, MaskKind::Email, "a@b.co", 0), "[EMAIL]");
    }

    #[test]
    fn keyed_hash_is_stable_normalised_and_keyed() {
        let key = HashKey::new("m1", &[7; 32]).unwrap();
        let other = HashKey::new("m1", &[8; 32]).unwrap();
        let h = MaskStrategy::KeyedHash(key);
        let a = rendered(&h, MaskKind::Email, "Jane@Example.com", 0);
        let b = rendered(&h, MaskKind::Email, "jane@example.com", 0);
        let c = rendered(&h, MaskKind::Email, "john@example.com", 0);
        let d = rendered(&MaskStrategy::KeyedHash(other), MaskKind::Email, "jane@example.com", 0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert!(a.starts_with("[EMAIL:") && a.ends_with(']') && a.len() == "[EMAIL:]".len() + HASH_HEX_LEN, "{a}");
        let card1 = rendered(&h, MaskKind::PaymentCard, "4111 1111 1111 1111", 0);
        let card2 = rendered(&h, MaskKind::PaymentCard, "4111-1111-1111-1111", 0);
        assert_eq!(card1, card2);
    }

    #[test]
    fn key_never_in_debug() {
        let key = HashKey::new("m1", b"super-secret-key-material-123456").unwrap();
        let shown = format!("{:?} {:?}", key, MaskStrategy::KeyedHash(key.clone()));
        assert!(!shown.contains("super-secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
        let config = MaskConfig::new(MaskStrategy::KeyedHash(key));
        assert!(!format!("{config:?}").contains("super"));
    }

    #[test]
    fn keyed_hash_output_is_unchanged() {
        // HMAC-SHA256(0x00..=0x1f, "agent-airlock/mask/v1\0" ‖ "email\0" ‖ "jane@example.com"), first 8 hex
        // digits, computed outside this crate.
        let secret: Vec<u8> = (0u8..32).collect();
        let h = MaskStrategy::KeyedHash(HashKey::new("m1", &secret).unwrap());
        assert_eq!(rendered(&h, MaskKind::Email, "Jane@Example.com", 0), "[EMAIL:668e671e]");
    }

    #[test]
    fn short_keys_are_refused() {
        assert_eq!(
            HashKey::new("m1", &[1; 15]).unwrap_err().to_string(),
            "mask hash key `m1` is 15 bytes long: at least 16 bytes are needed, 32 recommended"
        );
        assert!(HashKey::new("m1", &[1; 16]).is_ok());
    }
}
