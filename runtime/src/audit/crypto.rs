//! Digests, MACs and the canonical JSON the commitments are computed over. Every input is prefixed with a
//! domain tag ending in NUL, so a digest of one kind can never be passed off as a digest of another. The
//! MAC tags (and the commitment tags, shared by the unkeyed digests) are [`Domain`]s of [`crate::keys`].

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{AuditKey, CommittedPart, Digest};
use crate::keys::{Domain, Mac, MacKey};

/// The tag of the (unkeyed) chain hash.
const RECORD_HASH_TAG: &[u8] = b"agent-airlock/audit/v1/record\0";

/// The `prev` of the first record.
pub(super) const GENESIS: Digest = Digest([0; 32]);

/// `SHA-256(tag ‖ prev ‖ body)`: the hash that chains record `body` to its predecessor.
pub(super) fn record_hash(prev: &Digest, body: &[u8]) -> Digest {
    let mut hasher = Sha256::new();
    hasher.update(RECORD_HASH_TAG);
    hasher.update(prev.0);
    hasher.update(body);
    Digest(hasher.finalize().into())
}

fn part_domain(part: CommittedPart) -> Domain {
    match part {
        CommittedPart::Arguments => Domain::AuditArguments,
        CommittedPart::Result => Domain::AuditResult,
    }
}

/// `SHA-256(tag ‖ canonical)`: the unkeyed commitment to an argument object or a result.
pub(super) fn plain_commitment(part: CommittedPart, canonical: &[u8]) -> Digest {
    let mut hasher = Sha256::new();
    hasher.update(part_domain(part).tag());
    hasher.update(canonical);
    Digest(hasher.finalize().into())
}

/// The three keys derived from one [`AuditKey`], each keyed once so every use only clones the state.
#[derive(Clone)]
pub(super) struct DerivedKeys {
    pub(super) id: String,
    commitment: MacKey,
    record: MacKey,
    head: MacKey,
}

impl DerivedKeys {
    pub(super) fn derive(key: &AuditKey) -> DerivedKeys {
        DerivedKeys {
            id: key.id().to_owned(),
            commitment: key.subkey(b"commitment"),
            record: key.subkey(b"record"),
            head: key.subkey(b"head"),
        }
    }

    /// `HMAC(commitment key, tag ‖ canonical)`: a commitment nobody without the key can test guesses against.
    pub(super) fn commitment(&self, part: CommittedPart, canonical: &[u8]) -> Digest {
        Digest(self.commitment_mac(part, canonical).finish())
    }

    pub(super) fn record_mac(&self, seq: u64, hash: &Digest) -> Digest {
        Digest(position_mac(&self.record, Domain::AuditRecord, seq, hash).finish())
    }

    pub(super) fn head_mac(&self, seq: u64, hash: &Digest) -> Digest {
        Digest(position_mac(&self.head, Domain::AuditHead, seq, hash).finish())
    }

    /// Constant-time check of a record MAC.
    pub(super) fn verify_record_mac(&self, seq: u64, hash: &Digest, mac: &Digest) -> bool {
        position_mac(&self.record, Domain::AuditRecord, seq, hash).verify(&mac.0)
    }

    /// Constant-time check of a head (or anchor) MAC.
    pub(super) fn verify_head_mac(&self, seq: u64, hash: &Digest, mac: &Digest) -> bool {
        position_mac(&self.head, Domain::AuditHead, seq, hash).verify(&mac.0)
    }

    /// Constant-time check of a keyed commitment.
    pub(super) fn verify_commitment(&self, part: CommittedPart, canonical: &[u8], digest: &Digest) -> bool {
        self.commitment_mac(part, canonical).verify(&digest.0)
    }

    fn commitment_mac(&self, part: CommittedPart, canonical: &[u8]) -> Mac {
        let mut mac = self.commitment.start(part_domain(part));
        mac.update(canonical);
        mac
    }
}

/// `HMAC(subkey, tag ‖ seq ‖ hash)`: a record's or the head's place in the chain.
fn position_mac(key: &MacKey, domain: Domain, seq: u64, hash: &Digest) -> Mac {
    let mut mac = key.start(domain);
    mac.update(&seq.to_be_bytes());
    mac.update(&hash.0);
    mac
}

/// Appends the canonical JSON of `value` to `out`: RFC 8785 (JCS), from [`crate::canonical`], the same
/// encoding approvals bind. A value JCS cannot encode exactly (an integer beyond ±(2^53−1), nesting deeper
/// than its limit) is committed to as `noncanonical:` followed by `serde_json`'s compact text: exact and
/// deterministic for the value recorded, and never confused with a canonical encoding.
pub(super) fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    let start = out.len();
    if crate::canonical::write_canonical(value, out).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"noncanonical:");
        // Writing into a `Vec` cannot fail, and a `Value` always serializes.
        let _ = serde_json::to_writer(&mut *out, value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn canonical(value: &Value) -> String {
        let mut out = Vec::new();
        canonical_json(value, &mut out);
        String::from_utf8(out).expect("canonical JSON is UTF-8")
    }

    #[test]
    fn members_are_sorted_and_whitespace_dropped() {
        let value = json!({"b": [1, true, null], "a": {"z": "x", "y": 1.5}, "\u{e9}": 0});
        assert_eq!(canonical(&value), r#"{"a":{"y":1.5,"z":"x"},"b":[1,true,null],"é":0}"#);
    }

    #[test]
    fn keys_sort_by_utf16_code_units_as_jcs_does() {
        // U+1F600 sorts after U+FF61 by code point, but before it by UTF-16 code unit (0xD83D < 0xFF61).
        let value = json!({"\u{ff61}": 2, "\u{1f600}": 1});
        assert_eq!(canonical(&value), "{\"\u{1f600}\":1,\"\u{ff61}\":2}");
    }

    #[test]
    fn strings_are_escaped_as_jcs_does() {
        let value = json!("a\"b\\c\n\u{1}\u{7f}/");
        assert_eq!(canonical(&value), "\"a\\\"b\\\\c\\n\\u0001\u{7f}/\"");
        let parsed: Value = serde_json::from_str(&canonical(&value)).expect("canonical JSON parses");
        assert_eq!(parsed, value);
    }

    #[test]
    fn true_and_one_commit_differently() {
        let one = canonical(&json!({"x": 1}));
        let yes = canonical(&json!({"x": true}));
        assert_ne!(
            plain_commitment(CommittedPart::Arguments, one.as_bytes()),
            plain_commitment(CommittedPart::Arguments, yes.as_bytes())
        );
    }

    #[test]
    fn arguments_and_results_are_domain_separated() {
        let bytes = b"{}";
        assert_ne!(plain_commitment(CommittedPart::Arguments, bytes), plain_commitment(CommittedPart::Result, bytes));
        let key = AuditKey::new("k1", &[7u8; 32]).expect("a valid key");
        let keys = DerivedKeys::derive(&key);
        assert_ne!(keys.commitment(CommittedPart::Arguments, bytes), keys.commitment(CommittedPart::Result, bytes));
        assert_ne!(keys.record_mac(1, &GENESIS), keys.head_mac(1, &GENESIS));
    }

    #[test]
    fn keyed_commitment_depends_on_the_key() {
        let a = DerivedKeys::derive(&AuditKey::new("k", &[1u8; 16]).expect("a valid key"));
        let b = DerivedKeys::derive(&AuditKey::new("k", &[2u8; 16]).expect("a valid key"));
        let digest = a.commitment(CommittedPart::Arguments, b"{}");
        assert!(a.verify_commitment(CommittedPart::Arguments, b"{}", &digest));
        assert!(!b.verify_commitment(CommittedPart::Arguments, b"{}", &digest));
        assert_ne!(digest, plain_commitment(CommittedPart::Arguments, b"{}"));
    }

    #[test]
    fn values_jcs_cannot_encode_are_committed_exactly_in_their_own_domain() {
        let big = canonical(&json!({"id": 9_007_199_254_740_993_u64}));
        assert_eq!(big, r#"noncanonical:{"id":9007199254740993}"#);
        assert_ne!(big, canonical(&json!({"id": 9_007_199_254_740_992_u64})));
    }
}
