//! Secret keys: one type for every purpose, with one id rule, one set of loaders and one error.
//!
//! A [`Key`] is an id and a secret of at least [`Key::MIN_SECRET_LEN`] bytes
//! ([`Key::RECOMMENDED_SECRET_LEN`] recommended). Its purpose is part of its type, so a key made for the audit
//! log cannot be handed to the approval protocol by mistake:
//!
//! | alias | purpose | used by |
//! |---|---|---|
//! | [`ApprovalKey`] | [`purpose::Approval`] | [`KeyRing`](crate::approval::KeyRing): bindings, seals and tokens of approvals |
//! | [`AuditKey`] | [`purpose::Audit`] | [`AuditConfig`](crate::audit::AuditConfig): commitments and record MACs |
//! | [`HashKey`] | [`purpose::MaskHash`] | [`MaskStrategy::KeyedHash`](crate::mask::MaskStrategy::KeyedHash) |
//! | [`WebhookKey`] | [`purpose::Webhook`] | signatures of webhook notifications ([`WebhookKey::webhook_signature`]) |
//!
//! ```
//! use agent_airlock::{keys::ApprovalKey, approval::KeyRing};
//!
//! let ring = KeyRing::new(ApprovalKey::new("k1", &[7u8; 32]).unwrap());
//! assert_eq!(ring.current().id(), "k1");
//! ```
//!
//! ```compile_fail
//! use agent_airlock::{keys::AuditKey, approval::KeyRing};
//!
//! // An audit key is not an approval key, even with the same secret.
//! let ring = KeyRing::new(AuditKey::new("k1", &[7u8; 32]).unwrap());
//! ```
//!
//! Every key loads the same way: from bytes ([`Key::new`]), hex text ([`Key::from_hex`]), a file of hex
//! ([`Key::from_file`], e.g. made by `openssl rand -hex 32 > key`, trailing newline and all) or an
//! environment variable holding hex ([`Key::from_env`]); [`Key::generate`] makes a fresh one. A key id is 1
//! to [`Key::MAX_ID_LEN`] characters from `A-Z a-z 0-9 . _ -`.
//!
//! The secret is not kept: only the HMAC-SHA256 state keyed with it, which is wiped on drop, as is every
//! buffer a loader decodes the secret into. `Debug` shows the id alone, and no error repeats the secret.
//! Every MAC is computed under a domain tag of its own (see `keys/mac.rs`).

mod mac;

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use zeroize::Zeroizing;

pub(crate) use self::mac::{Domain, MAC_LEN, Mac, MacKey, decode_lower_hex};
use self::purpose::Purpose;

/// A secret that MACs approvals, with an id so keys can rotate. See [`Key`] for loading one.
pub type ApprovalKey = Key<purpose::Approval>;

/// A secret for the audit log, with an id recorded next to what it signs. See [`Key`] for loading one.
pub type AuditKey = Key<purpose::Audit>;

/// A secret for [`MaskStrategy::KeyedHash`](crate::mask::MaskStrategy::KeyedHash). See [`Key`] for loading one.
pub type HashKey = Key<purpose::MaskHash>;

/// A secret that signs webhook notifications (the operator console's announcements of new requests), so
/// the receiver can tell them from forgeries. See [`Key`] for loading one.
pub type WebhookKey = Key<purpose::Webhook>;

/// What a key is for, as a type parameter of [`Key`]. Sealed: the crate's purposes are the only ones.
pub mod purpose {
    use super::KeyPurpose;

    mod sealed {
        pub trait Sealed {}
    }

    /// A key's purpose. Implemented by the marker types of this module only.
    pub trait Purpose: sealed::Sealed + 'static {
        /// The purpose as a value, for messages.
        const KIND: KeyPurpose;
    }

    /// Approvals: bindings, seals and tokens.
    #[derive(Debug)]
    pub enum Approval {}

    /// The audit log: keyed commitments, record and head MACs.
    #[derive(Debug)]
    pub enum Audit {}

    /// Keyed hashes of masked values.
    #[derive(Debug)]
    pub enum MaskHash {}

    /// Webhook notifications' signatures.
    #[derive(Debug)]
    pub enum Webhook {}

    impl sealed::Sealed for Approval {}
    impl sealed::Sealed for Audit {}
    impl sealed::Sealed for MaskHash {}
    impl sealed::Sealed for Webhook {}

    impl Purpose for Approval {
        const KIND: KeyPurpose = KeyPurpose::Approval;
    }

    impl Purpose for Audit {
        const KIND: KeyPurpose = KeyPurpose::Audit;
    }

    impl Purpose for MaskHash {
        const KIND: KeyPurpose = KeyPurpose::MaskHash;
    }

    impl Purpose for Webhook {
        const KIND: KeyPurpose = KeyPurpose::Webhook;
    }
}

/// What a key is for, named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyPurpose {
    /// [`ApprovalKey`].
    Approval,
    /// [`AuditKey`].
    Audit,
    /// [`HashKey`].
    MaskHash,
    /// [`WebhookKey`].
    Webhook,
}

impl KeyPurpose {
    fn type_name(self) -> &'static str {
        match self {
            KeyPurpose::Approval => "ApprovalKey",
            KeyPurpose::Audit => "AuditKey",
            KeyPurpose::MaskHash => "HashKey",
            KeyPurpose::Webhook => "WebhookKey",
        }
    }
}

impl fmt::Display for KeyPurpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyPurpose::Approval => "approval",
            KeyPurpose::Audit => "audit",
            KeyPurpose::MaskHash => "mask hash",
            KeyPurpose::Webhook => "webhook",
        })
    }
}

/// A secret key for one purpose, with an id. Cloning is cheap (the keyed state is shared).
///
/// ```
/// use agent_airlock::keys::ApprovalKey;
///
/// let key = ApprovalKey::from_hex("k1", "00112233445566778899AABBCCDDEEFF").unwrap();
/// assert_eq!(key.id(), "k1");
/// assert_eq!(format!("{key:?}"), r#"ApprovalKey { id: "k1", secret: "<redacted>" }"#);
/// ```
pub struct Key<P: Purpose> {
    inner: Arc<KeyInner>,
    purpose: PhantomData<fn() -> P>,
}

struct KeyInner {
    id: String,
    mac: MacKey,
}

impl<P: Purpose> Clone for Key<P> {
    fn clone(&self) -> Self {
        Key { inner: Arc::clone(&self.inner), purpose: PhantomData }
    }
}

impl<P: Purpose> fmt::Debug for Key<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(P::KIND.type_name()).field("id", &self.inner.id).field("secret", &"<redacted>").finish()
    }
}

/// Why a key could not be made or loaded. Never contains secret material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The secret is shorter than [`Key::MIN_SECRET_LEN`].
    #[error(
        "{purpose} key `{id}` is {len} bytes long: at least {min} bytes are needed, {recommended} recommended",
        min = MIN_SECRET_LEN,
        recommended = RECOMMENDED_SECRET_LEN
    )]
    TooShort {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The key id.
        id: String,
        /// The secret's length in bytes.
        len: usize,
    },
    /// The key id is empty, too long, or has characters outside `[A-Za-z0-9._-]`.
    #[error(
        "invalid {purpose} key id `{id}`: expected 1 to {max} characters from `A-Z a-z 0-9 . _ -`",
        max = MAX_ID_LEN
    )]
    InvalidId {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The id as given.
        id: String,
    },
    /// The key file could not be read.
    #[error("{purpose} key `{id}`: cannot read key file `{path}`: {source}")]
    File {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The key id.
        id: String,
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The environment variable is not set.
    #[error("{purpose} key `{id}`: environment variable `{var}` is not set")]
    MissingEnv {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The key id.
        id: String,
        /// The variable's name.
        var: String,
    },
    /// The encoded secret is not hex.
    #[error("{purpose} key `{id}` from {origin}: expected the secret as hex, found {problem}")]
    NotHex {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The key id.
        id: String,
        /// `a hex string`, ``file `…` `` or ``environment variable `…` ``.
        origin: String,
        /// What is wrong, without the secret's characters.
        problem: String,
    },
    /// The operating system's random source failed.
    #[error("{purpose} key `{id}`: the system random source failed: {detail}")]
    Randomness {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The key id.
        id: String,
        /// The error.
        detail: String,
    },
    /// Two keys in one ring share an id.
    #[error("{purpose} key id `{id}` is used twice in one key ring")]
    DuplicateId {
        /// What the key is for.
        purpose: KeyPurpose,
        /// The id.
        id: String,
    },
}

const MIN_SECRET_LEN: usize = 16;
const RECOMMENDED_SECRET_LEN: usize = 32;
const MAX_ID_LEN: usize = 64;

impl<P: Purpose> Key<P> {
    /// Shortest secret accepted, in bytes.
    pub const MIN_SECRET_LEN: usize = MIN_SECRET_LEN;

    /// Secret length recommended (and made by [`Key::generate`]), in bytes.
    pub const RECOMMENDED_SECRET_LEN: usize = RECOMMENDED_SECRET_LEN;

    /// Longest key id accepted, in bytes.
    pub const MAX_ID_LEN: usize = MAX_ID_LEN;

    /// A key from raw secret bytes. Refuses a secret shorter than [`Key::MIN_SECRET_LEN`] bytes and an id
    /// outside the id rule.
    pub fn new(id: impl Into<String>, secret: &[u8]) -> Result<Self, KeyError> {
        let id = id.into();
        check_id::<P>(&id)?;
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::TooShort { purpose: P::KIND, id, len: secret.len() });
        }
        let mac = MacKey::new(secret);
        Ok(Key { inner: Arc::new(KeyInner { id, mac }), purpose: PhantomData })
    }

    /// A key from a secret written as hex (upper or lower case; surrounding whitespace ignored).
    pub fn from_hex(id: impl Into<String>, hex: &str) -> Result<Self, KeyError> {
        let id = id.into();
        let secret = decode_secret::<P>(&id, || "a hex string".to_owned(), hex)?;
        Self::new(id, secret.as_slice())
    }

    /// A key whose secret is the hex text in `path`, e.g. made by `openssl rand -hex 32 > key` (a trailing
    /// newline is fine).
    pub fn from_file(id: impl Into<String>, path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let id = id.into();
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map(Zeroizing::new).map_err(|source| KeyError::File {
            purpose: P::KIND,
            id: id.clone(),
            path: path.display().to_string(),
            source,
        })?;
        let secret = decode_secret::<P>(&id, || format!("file `{}`", path.display()), &text)?;
        Self::new(id, secret.as_slice())
    }

    /// A key whose secret is the hex text in the environment variable `var`.
    pub fn from_env(id: impl Into<String>, var: &str) -> Result<Self, KeyError> {
        let id = id.into();
        let origin = || format!("environment variable `{var}`");
        let text = match std::env::var(var) {
            Ok(text) => Zeroizing::new(text),
            Err(std::env::VarError::NotPresent) => {
                return Err(KeyError::MissingEnv { purpose: P::KIND, id, var: var.to_owned() });
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                let problem = "text that is not unicode".to_owned();
                return Err(KeyError::NotHex { purpose: P::KIND, id, origin: origin(), problem });
            }
        };
        let secret = decode_secret::<P>(&id, origin, &text)?;
        Self::new(id, secret.as_slice())
    }

    /// A fresh random key of [`Key::RECOMMENDED_SECRET_LEN`] bytes, and its secret as lowercase hex so it can
    /// be stored (in a file or a secret manager) and loaded again with [`Key::from_hex`] or
    /// [`Key::from_file`].
    pub fn generate(id: impl Into<String>) -> Result<(Self, String), KeyError> {
        let id = id.into();
        let mut secret = Zeroizing::new([0u8; RECOMMENDED_SECRET_LEN]);
        getrandom::fill(secret.as_mut_slice()).map_err(|err| KeyError::Randomness {
            purpose: P::KIND,
            id: id.clone(),
            detail: err.to_string(),
        })?;
        let key = Self::new(id, secret.as_slice())?;
        Ok((key, hex::encode(secret.as_slice())))
    }

    /// The key id, recorded next to what the key MACs so keys can rotate.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// What the key is for.
    pub fn purpose(&self) -> KeyPurpose {
        P::KIND
    }

    fn start(&self, domain: Domain) -> Mac {
        self.inner.mac.start(domain)
    }
}

impl Key<purpose::Approval> {
    /// A binding MAC, its domain absorbed.
    pub(crate) fn binding_mac(&self) -> Mac {
        self.start(Domain::ApprovalBinding)
    }

    /// A seal MAC, its domain absorbed.
    pub(crate) fn seal_mac(&self) -> Mac {
        self.start(Domain::ApprovalSeal)
    }

    /// A token MAC, its domain absorbed.
    pub(crate) fn token_mac(&self) -> Mac {
        self.start(Domain::ApprovalToken)
    }

    /// A checkpoint commitment's MAC, its domain absorbed.
    pub(crate) fn checkpoint_mac(&self) -> Mac {
        self.start(Domain::CheckpointCommitment)
    }

    /// The key that encrypts the exact arguments of requests made under this key:
    /// `HMAC(key, arguments-key tag)`. Derived, never stored; it rotates with the approval key, and a
    /// MAC under this key's other domains never equals it.
    pub(crate) fn arguments_cipher_key(&self) -> Zeroizing<[u8; MAC_LEN]> {
        Zeroizing::new(self.start(Domain::ApprovalArgumentsKey).finish())
    }
}

impl Key<purpose::Audit> {
    /// The subkey `HMAC(key, subkey tag ‖ label)` for one use inside the audit log.
    pub(crate) fn subkey(&self, label: &[u8]) -> MacKey {
        self.inner.mac.derive(Domain::AuditSubkey, label)
    }
}

impl Key<purpose::MaskHash> {
    /// A masked value's MAC, its domain absorbed.
    pub(crate) fn hash_mac(&self) -> Mac {
        self.start(Domain::MaskHash)
    }
}

impl Key<purpose::Webhook> {
    /// The signature of a webhook notification sent at `timestamp` (seconds since the Unix epoch) with
    /// `body`: `HMAC-SHA256(secret, "agent-airlock/webhook/v1\0" ‖ timestamp in decimal ‖ "." ‖ body)`, as
    /// lowercase hex. The timestamp is signed so a receiver can refuse an old notification replayed.
    ///
    /// ```
    /// use agent_airlock::keys::WebhookKey;
    ///
    /// let key = WebhookKey::from_hex("hook-1", &"ab".repeat(32)).unwrap();
    /// let signature = key.webhook_signature(1_700_000_000, br#"{"event":"approval.pending"}"#);
    /// assert_eq!(signature.len(), 64);
    /// assert_ne!(signature, key.webhook_signature(1_700_000_001, br#"{"event":"approval.pending"}"#));
    /// ```
    pub fn webhook_signature(&self, timestamp: u64, body: &[u8]) -> String {
        let mut mac = self.start(Domain::Webhook);
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        hex::encode(mac.finish())
    }
}

/// The key id rule: 1 to [`MAX_ID_LEN`] characters from `A-Z a-z 0-9 . _ -`.
fn check_id<P: Purpose>(id: &str) -> Result<(), KeyError> {
    let valid = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid { Ok(()) } else { Err(KeyError::InvalidId { purpose: P::KIND, id: id.to_owned() }) }
}

/// Decodes hex text (either case, surrounding whitespace ignored) into a buffer wiped on drop. Errors name
/// the position of a bad character, never the character.
fn decode_secret<P: Purpose>(
    id: &str,
    origin: impl FnOnce() -> String,
    text: &str,
) -> Result<Zeroizing<Vec<u8>>, KeyError> {
    let text = text.trim();
    let not_hex = |problem: String| KeyError::NotHex { purpose: P::KIND, id: id.to_owned(), origin: origin(), problem };
    if text.is_empty() {
        return Err(not_hex("an empty value".to_owned()));
    }
    let mut secret = Zeroizing::new(vec![0u8; text.len() / 2]);
    match hex::decode_to_slice(text, secret.as_mut_slice()) {
        Ok(()) => Ok(secret),
        Err(hex::FromHexError::InvalidHexCharacter { index, .. }) => {
            Err(not_hex(format!("a non-hex character at position {index}")))
        }
        Err(hex::FromHexError::OddLength | hex::FromHexError::InvalidStringLength) => {
            Err(not_hex(format!("an odd number of hex digits ({})", text.len())))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const SECRET_HEX: &str = "00112233445566778899aabbccddeeff";

    /// The key's MAC of a fixed message, to tell whether two keys hold the same secret.
    fn fingerprint(key: &ApprovalKey) -> [u8; MAC_LEN] {
        let mut mac = key.token_mac();
        mac.update(b"x");
        mac.finish()
    }

    #[test]
    fn hex_loads_in_either_case_and_ignores_surrounding_whitespace() {
        let lower = ApprovalKey::from_hex("k1", SECRET_HEX).unwrap();
        let upper = ApprovalKey::from_hex("k1", &SECRET_HEX.to_uppercase()).unwrap();
        let padded = ApprovalKey::from_hex("k1", &format!("  {SECRET_HEX}\n")).unwrap();
        let raw = ApprovalKey::new("k1", &hex::decode(SECRET_HEX).unwrap()).unwrap();
        assert_eq!(fingerprint(&lower), fingerprint(&raw));
        assert_eq!(fingerprint(&upper), fingerprint(&raw));
        assert_eq!(fingerprint(&padded), fingerprint(&raw));
    }

    #[test]
    fn bad_hex_is_refused_without_echoing_the_secret() {
        let err = ApprovalKey::from_hex("k1", "0011223344556677889sSECRETbbccddeeff").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("non-hex character at position 19"), "{text}");
        assert!(!text.contains("SECRET"), "{text}");
        let odd = ApprovalKey::from_hex("k1", "00112233445566778899aabbccddeef").unwrap_err();
        assert!(odd.to_string().contains("an odd number of hex digits (31)"), "{odd}");
        assert!(matches!(ApprovalKey::from_hex("k1", "  "), Err(KeyError::NotHex { .. })));
    }

    #[test]
    fn short_secrets_are_refused_for_every_purpose() {
        let err = ApprovalKey::new("k1", &[7u8; 15]).unwrap_err();
        assert_eq!(err.to_string(), "approval key `k1` is 15 bytes long: at least 16 bytes are needed, 32 recommended");
        let err = AuditKey::from_hex("a1", "0011").unwrap_err();
        assert_eq!(err.to_string(), "audit key `a1` is 2 bytes long: at least 16 bytes are needed, 32 recommended");
        let err = HashKey::new("m1", &[7u8; 8]).unwrap_err();
        assert!(matches!(err, KeyError::TooShort { purpose: KeyPurpose::MaskHash, len: 8, .. }), "{err}");
        assert!(ApprovalKey::new("k1", &[7u8; 16]).is_ok());
    }

    #[test]
    fn key_ids_follow_one_rule() {
        assert!(matches!(ApprovalKey::new("", &[1; 32]), Err(KeyError::InvalidId { .. })));
        assert!(matches!(AuditKey::new("a b", &[1; 32]), Err(KeyError::InvalidId { .. })));
        assert!(matches!(HashKey::new("x".repeat(65), &[1; 32]), Err(KeyError::InvalidId { .. })));
        assert!(HashKey::new("x".repeat(64), &[1; 32]).is_ok());
        assert!(ApprovalKey::new("prod-2026.01_a", &[1; 32]).is_ok());
        let err = AuditKey::new("a/b", &[1; 32]).unwrap_err();
        assert_eq!(err.to_string(), "invalid audit key id `a/b`: expected 1 to 64 characters from `A-Z a-z 0-9 . _ -`");
    }

    #[test]
    fn a_key_file_may_end_with_a_newline() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "{SECRET_HEX}").unwrap();
        let key = ApprovalKey::from_file("k1", file.path()).unwrap();
        assert_eq!(fingerprint(&key), fingerprint(&ApprovalKey::from_hex("k1", SECRET_HEX).unwrap()));
    }

    #[test]
    fn a_missing_or_bad_key_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.key");
        let err = AuditKey::from_file("a1", &missing).unwrap_err();
        assert!(matches!(err, KeyError::File { .. }));
        assert!(err.to_string().contains("absent.key"), "{err}");
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "not hex at all\n").unwrap();
        let err = AuditKey::from_file("a1", &bad).unwrap_err();
        assert!(err.to_string().starts_with("audit key `a1` from file `"), "{err}");
        assert!(err.to_string().ends_with("expected the secret as hex, found a non-hex character at position 0"));
    }

    #[test]
    fn environment_variables_that_are_missing_or_not_hex_are_named() {
        // Setting a variable needs `unsafe` in edition 2024 (and this crate forbids it), so the good path is
        // tested through child processes (`cli/tests`, `tests/src/bin`); here, one variable nobody sets and
        // one every process has.
        let missing = "AGENT_AIRLOCK_KEYS_TEST_NEVER_SET";
        let err = HashKey::from_env("m1", missing).unwrap_err();
        assert!(matches!(err, KeyError::MissingEnv { purpose: KeyPurpose::MaskHash, .. }));
        assert_eq!(err.to_string(), format!("mask hash key `m1`: environment variable `{missing}` is not set"));
        assert!(std::env::var_os("PATH").is_some(), "tests run with a `PATH`");
        let err = ApprovalKey::from_env("k1", "PATH").unwrap_err();
        assert!(matches!(err, KeyError::NotHex { .. }), "{err}");
        assert!(err.to_string().starts_with("approval key `k1` from environment variable `PATH`: expected"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let secret = [0xabu8; 32];
        let approval = ApprovalKey::new("k1", &secret).unwrap();
        let audit = AuditKey::new("a1", &secret).unwrap();
        let hash = HashKey::new("m1", &secret).unwrap();
        for shown in [format!("{approval:?}"), format!("{audit:?}"), format!("{hash:?}"), format!("{hash:#?}")] {
            assert!(shown.contains("<redacted>"), "{shown}");
            assert!(!shown.to_lowercase().contains("abab"), "{shown}");
            assert!(!shown.contains("171"), "{shown}");
        }
        assert_eq!(format!("{audit:?}"), r#"AuditKey { id: "a1", secret: "<redacted>" }"#);
    }

    #[test]
    fn generated_keys_round_trip_through_hex() {
        let (key, hex) = ApprovalKey::generate("k1").unwrap();
        assert_eq!(hex.len(), 2 * RECOMMENDED_SECRET_LEN);
        assert_eq!(fingerprint(&key), fingerprint(&ApprovalKey::from_hex("k1", &hex).unwrap()));
        let (other, _) = ApprovalKey::generate("k1").unwrap();
        assert_ne!(fingerprint(&key), fingerprint(&other));
    }

    #[test]
    fn purposes_with_the_same_secret_mac_differently() {
        let secret = [5u8; 32];
        let approval = ApprovalKey::new("k", &secret).unwrap();
        let hash = HashKey::new("k", &secret).unwrap();
        let mut a = approval.token_mac();
        a.update(b"x");
        let mut b = hash.hash_mac();
        b.update(b"x");
        assert_ne!(a.finish(), b.finish());
        assert_eq!(hash.purpose(), KeyPurpose::MaskHash);
    }
}
