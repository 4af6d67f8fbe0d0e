//! HMAC-SHA256 under a domain tag: the one place the crate keys, runs and checks a MAC.
//!
//! Every MAC starts with its [`Domain`]'s tag, a fixed string ending in NUL, so a MAC made for one use
//! (an approval's seal, say) is never valid for another (a token) under the same key. The tags are part of
//! what is stored (requests, grants, audit records, masked text): they never change, and a test pins each
//! one's output for a fixed key. Checking a MAC goes through `Mac::verify_slice`, which compares in
//! constant time and refuses an expected value of any other length.

use hmac::{Hmac, KeyInit, Mac as _};
use sha2::Sha256;
use zeroize::Zeroizing;

type HmacSha256 = Hmac<Sha256>;

/// Length of an HMAC-SHA256 output, in bytes.
pub(crate) const MAC_LEN: usize = 32;

/// What a MAC is for. Each use has its own tag, absorbed before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Domain {
    /// An approval's binding: which call, where, with which arguments.
    ApprovalBinding,
    /// The derivation of the key that encrypts a request's exact arguments at rest.
    ApprovalArgumentsKey,
    /// An approval request's seal: the request as issued.
    ApprovalSeal,
    /// A grant's token: one grant for one binding.
    ApprovalToken,
    /// The derivation of an audit subkey from the audit key.
    AuditSubkey,
    /// A keyed commitment to a call's arguments (also the tag of the unkeyed one).
    AuditArguments,
    /// A keyed commitment to a tool's result (also the tag of the unkeyed one).
    AuditResult,
    /// An audit record's MAC over its position and hash.
    AuditRecord,
    /// The audit head's (or an anchor's) MAC over its position and hash.
    AuditHead,
    /// A masked value's keyed hash.
    MaskHash,
    /// A webhook notification's signature over its timestamp and body.
    Webhook,
    /// A commitment to a host's checkpoint (`checkpoint::CheckpointCommitments`).
    CheckpointCommitment,
}

impl Domain {
    /// The tag absorbed first. Never change one: stored MACs are checked against it.
    pub(crate) const fn tag(self) -> &'static [u8] {
        match self {
            Domain::ApprovalBinding => b"agent-airlock/approval/binding/v1\0",
            Domain::ApprovalArgumentsKey => b"agent-airlock/approval/arguments-key/v1\0",
            Domain::ApprovalSeal => b"agent-airlock/approval/seal/v1\0",
            Domain::ApprovalToken => b"agent-airlock/approval/token/v1\0",
            Domain::AuditSubkey => b"agent-airlock/audit/v1/subkey\0",
            Domain::AuditArguments => b"agent-airlock/audit/v1/arguments\0",
            Domain::AuditResult => b"agent-airlock/audit/v1/result\0",
            Domain::AuditRecord => b"agent-airlock/audit/v1/record-mac\0",
            Domain::AuditHead => b"agent-airlock/audit/v1/head-mac\0",
            Domain::MaskHash => b"agent-airlock/mask/v1\0",
            Domain::Webhook => b"agent-airlock/webhook/v1\0",
            Domain::CheckpointCommitment => b"agent-airlock/checkpoint/v1\0",
        }
    }
}

/// A secret absorbed into HMAC-SHA256 once. Every MAC clones this state, so keying (two compression
/// calls) is paid once per key, not once per MAC. The state is wiped when dropped.
#[derive(Clone)]
pub(crate) struct MacKey(HmacSha256);

impl MacKey {
    /// Keys HMAC-SHA256 with `secret`. Length rules are the caller's: HMAC itself takes any length.
    pub(crate) fn new(secret: &[u8]) -> MacKey {
        match HmacSha256::new_from_slice(secret) {
            Ok(keyed) => MacKey(keyed),
            // `Hmac` implements the fallible `KeyInit` trait, but accepts a key of any length.
            Err(_) => unreachable!("HMAC-SHA256 accepts keys of any length"),
        }
    }

    /// A MAC in `domain`, its tag already absorbed.
    pub(crate) fn start(&self, domain: Domain) -> Mac {
        let mut state = self.0.clone();
        state.update(domain.tag());
        Mac(state)
    }

    /// The key `HMAC(self, domain tag ‖ label)`, a subkey for one purpose.
    pub(crate) fn derive(&self, domain: Domain, label: &[u8]) -> MacKey {
        let mut mac = self.start(domain);
        mac.update(label);
        let derived = Zeroizing::new(mac.finish());
        MacKey::new(derived.as_slice())
    }
}

/// A MAC being computed: feed it, then finish it or check it against a MAC received.
pub(crate) struct Mac(HmacSha256);

impl Mac {
    /// Absorbs `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The MAC.
    pub(crate) fn finish(self) -> [u8; MAC_LEN] {
        self.0.finalize().into_bytes().into()
    }

    /// Whether `expected` is this MAC, compared in constant time. A truncated or extended `expected` is
    /// refused.
    pub(crate) fn verify(self, expected: &[u8]) -> bool {
        self.0.verify_slice(expected).is_ok()
    }
}

/// Decodes exactly `N` bytes of lowercase hex; anything else (upper case included) is `None`, so a MAC or
/// an id that travels as text has one spelling.
pub(crate) fn decode_lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Domain; 12] = [
        Domain::ApprovalBinding,
        Domain::ApprovalArgumentsKey,
        Domain::ApprovalSeal,
        Domain::ApprovalToken,
        Domain::AuditSubkey,
        Domain::AuditArguments,
        Domain::AuditResult,
        Domain::AuditRecord,
        Domain::AuditHead,
        Domain::MaskHash,
        Domain::Webhook,
        Domain::CheckpointCommitment,
    ];

    fn key() -> MacKey {
        let secret: Vec<u8> = (0u8..32).collect();
        MacKey::new(&secret)
    }

    fn mac(domain: Domain, message: &[u8]) -> [u8; MAC_LEN] {
        let mut mac = key().start(domain);
        mac.update(message);
        mac.finish()
    }

    /// `HMAC-SHA256(0x00..=0x1f, tag ‖ "message")` for each domain, computed outside this crate (Python's
    /// `hmac`): the tags, and so every MAC already stored, are unchanged.
    #[test]
    fn every_domain_keeps_its_tag() {
        let expected = [
            (Domain::ApprovalBinding, "09271dd14263f5aa4dcab796809dee17d28beeec60d365060175e9eaa36dd42d"),
            (Domain::ApprovalArgumentsKey, "1bdff0c78e4376cf2d2aab0171f0ea89213c6f2bf467c7b08490d65804eff731"),
            (Domain::ApprovalSeal, "25ba417366f6b8eb55fa9f0dd59c86722f9afba7d61bb1cd4a7f70e3306492fe"),
            (Domain::ApprovalToken, "8f01262237608dc75050983dad1e5d7886d7fbdbb7559a32f67f060c8f1a37e2"),
            (Domain::AuditSubkey, "7d593325a01eae67768fc12de4892909fd65fe69024e3ae9771ab54f8b07bc8d"),
            (Domain::AuditArguments, "3e17596327e345622a9553f24edb92717b6dbb3b8c3d4b2c536c6fbf496c01ec"),
            (Domain::AuditResult, "c5dc0c90732d84a7435fa63e850d50fa3ff77e9fc534d7495ebbd048c755d4b7"),
            (Domain::AuditRecord, "616b701fa6af5c7473f09bb20b9f38afc8b9e6acd73942004d550ae13b51386a"),
            (Domain::AuditHead, "59229c3c6773199681054ab207b0eed0e55be2edb3c3017ec9e94611b2e3f4ff"),
            (Domain::MaskHash, "b3ad28d290a2c31c05325af116ba8a268dac64bd8144ec0ebb725a61445340a7"),
            (Domain::Webhook, "f276287ec10e9dd74a81046c851694bcb7535e440b901a1304a2f3faba60f306"),
            (Domain::CheckpointCommitment, "be69deac9974a8d6760063340d38e1ad9cd63a47ffef641a96f81dad2b46a263"),
        ];
        assert_eq!(expected.len(), ALL.len());
        for (domain, hex) in expected {
            assert_eq!(hex::encode(mac(domain, b"message")), hex, "{domain:?}");
        }
    }

    #[test]
    fn derived_keys_match_the_audit_log_format() {
        // HMAC(HMAC(key, subkey tag ‖ "record"), record tag ‖ "message"), computed outside this crate.
        let mut mac = key().derive(Domain::AuditSubkey, b"record").start(Domain::AuditRecord);
        mac.update(b"message");
        assert_eq!(hex::encode(mac.finish()), "f5c91f61f42c7f7263c78cb53aa5f81f503f5b6fdac5989696d7cbd2c11e16b8");
    }

    #[test]
    fn the_same_key_and_message_differ_in_every_domain() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(mac(*a, b"same"), mac(*b, b"same"), "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn verification_refuses_wrong_and_truncated_macs() {
        let good = mac(Domain::ApprovalToken, b"grant");
        let check = |expected: &[u8]| {
            let mut mac = key().start(Domain::ApprovalToken);
            mac.update(b"grant");
            mac.verify(expected)
        };
        assert!(check(&good));
        let mut flipped = good;
        flipped[31] ^= 1;
        assert!(!check(&flipped));
        assert!(!check(&good[..31]));
        assert!(!check(&good[..16]));
        assert!(!check(&[]));
        let mut extended = good.to_vec();
        extended.push(0);
        assert!(!check(&extended));
        // The same MAC from another domain is not valid here.
        assert!(!check(&mac(Domain::ApprovalSeal, b"grant")));
    }

    #[test]
    fn keyed_states_are_wiped_on_drop() {
        // A compile-time check: fails to build without the `zeroize` feature of `sha2`. The key material of
        // an HMAC state is the two SHA-256 cores it holds (inner and outer pad absorbed), of this type.
        fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>() {}
        wiped_on_drop::<<Sha256 as hmac::EagerHash>::Core>();
    }

    #[test]
    fn lowercase_hex_is_strict() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex::encode(bytes), "0001abff");
        assert_eq!(decode_lower_hex::<4>("0001abff"), Some(bytes));
        assert_eq!(decode_lower_hex::<4>("0001ABFF"), None);
        assert_eq!(decode_lower_hex::<4>("0001abf"), None);
        assert_eq!(decode_lower_hex::<4>("0001abfg"), None);
        assert_eq!(decode_lower_hex::<4>("0001abff00"), None);
    }
}
