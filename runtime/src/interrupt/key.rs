//! Approval keys and the key ring: which secret MACs new approvals, and which old ones are still honoured.

use std::fmt;
use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::mac::{BINDING_DOMAIN, SEAL_DOMAIN, TOKEN_DOMAIN};

pub(crate) type HmacSha256 = Hmac<Sha256>;

const MIN_SECRET_LEN: usize = ApprovalKey::MIN_SECRET_LEN;
const RECOMMENDED_SECRET_LEN: usize = ApprovalKey::RECOMMENDED_SECRET_LEN;
const MAX_KEY_ID_LEN: usize = ApprovalKey::MAX_ID_LEN;

/// A secret that MACs approvals, with an id so keys can rotate.
///
/// The secret itself is not kept: only the HMAC states keyed with it, one per purpose with the purpose's
/// domain already absorbed, so each MAC costs one clone of a pre-keyed state. `Debug` shows the id alone.
#[derive(Clone)]
pub struct ApprovalKey {
    id: String,
    binding: HmacSha256,
    seal: HmacSha256,
    token: HmacSha256,
}

impl fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalKey").field("id", &self.id).field("secret", &"<redacted>").finish()
    }
}

/// Why a key could not be made or loaded. Never contains secret material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The secret is shorter than [`ApprovalKey::MIN_SECRET_LEN`].
    #[error(
        "approval key `{id}` is {len} bytes long: at least {MIN_SECRET_LEN} bytes are needed, {RECOMMENDED_SECRET_LEN} recommended"
    )]
    TooShort {
        /// The key id.
        id: String,
        /// The secret's length in bytes.
        len: usize,
    },
    /// The key id is empty, too long, or has characters outside `[A-Za-z0-9._-]`.
    #[error("invalid approval key id `{id}`: expected 1 to {MAX_KEY_ID_LEN} characters from `A-Z a-z 0-9 . _ -`")]
    InvalidId {
        /// The id as given.
        id: String,
    },
    /// The key file could not be read.
    #[error("approval key `{id}`: cannot read key file `{path}`: {source}")]
    File {
        /// The key id.
        id: String,
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The environment variable is unset or not unicode.
    #[error("approval key `{id}`: environment variable `{var}` is not set (or not unicode)")]
    MissingEnv {
        /// The key id.
        id: String,
        /// The variable's name.
        var: String,
    },
    /// The encoded secret is not hex.
    #[error("approval key `{id}` from {origin}: expected the secret as hex, found {problem}")]
    NotHex {
        /// The key id.
        id: String,
        /// `file `…`` or `environment variable `…``.
        origin: String,
        /// What is wrong, without the secret's characters.
        problem: String,
    },
    /// The operating system's random source failed.
    #[error("approval key `{id}`: the system random source failed: {detail}")]
    Randomness {
        /// The key id.
        id: String,
        /// The error.
        detail: String,
    },
    /// Two keys in one ring share an id.
    #[error("approval key id `{id}` is used twice in one key ring")]
    DuplicateId {
        /// The id.
        id: String,
    },
}

impl ApprovalKey {
    /// Shortest secret accepted, in bytes.
    pub const MIN_SECRET_LEN: usize = 16;

    /// Secret length recommended (and produced by [`ApprovalKey::generate`]), in bytes.
    pub const RECOMMENDED_SECRET_LEN: usize = 32;

    /// Longest key id accepted, in bytes.
    pub const MAX_ID_LEN: usize = 64;

    /// A key from raw secret bytes. Refuses a secret shorter than [`ApprovalKey::MIN_SECRET_LEN`] bytes.
    pub fn new(id: impl Into<String>, secret: &[u8]) -> Result<Self, KeyError> {
        let id = id.into();
        validate_id(&id)?;
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::TooShort { id, len: secret.len() });
        }
        let keyed = match HmacSha256::new_from_slice(secret) {
            Ok(keyed) => keyed,
            // HMAC accepts keys of any length; this arm exists only because the API is fallible.
            Err(_) => {
                return Err(KeyError::TooShort { id, len: secret.len() });
            }
        };
        let prekeyed = |domain: &[u8]| {
            let mut state = keyed.clone();
            state.update(domain);
            state
        };
        Ok(ApprovalKey {
            binding: prekeyed(BINDING_DOMAIN),
            seal: prekeyed(SEAL_DOMAIN),
            token: prekeyed(TOKEN_DOMAIN),
            id,
        })
    }

    /// A key from a secret written as hex (upper or lower case; surrounding whitespace ignored).
    pub fn from_hex(id: impl Into<String>, hex: &str) -> Result<Self, KeyError> {
        let id = id.into();
        let secret = decode_secret_hex(&id, "a hex string", hex)?;
        Self::new(id, &secret)
    }

    /// A key whose secret is the hex text in `path`, e.g. made by `openssl rand -hex 32 > key`.
    pub fn from_file(id: impl Into<String>, path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let id = id.into();
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::File {
            id: id.clone(),
            path: path.display().to_string(),
            source,
        })?;
        let secret = decode_secret_hex(&id, &format!("file `{}`", path.display()), &text)?;
        Self::new(id, &secret)
    }

    /// A key whose secret is the hex text in the environment variable `var`.
    pub fn from_env(id: impl Into<String>, var: &str) -> Result<Self, KeyError> {
        let id = id.into();
        let Ok(text) = std::env::var(var) else {
            return Err(KeyError::MissingEnv { id, var: var.to_owned() });
        };
        let secret = decode_secret_hex(&id, &format!("environment variable `{var}`"), &text)?;
        Self::new(id, &secret)
    }

    /// A fresh random key of [`ApprovalKey::RECOMMENDED_SECRET_LEN`] bytes, and its secret as hex so it can be stored
    /// (in a file or a secret manager) and loaded again with [`ApprovalKey::from_hex`].
    pub fn generate(id: impl Into<String>) -> Result<(Self, String), KeyError> {
        let id = id.into();
        let mut secret = [0u8; RECOMMENDED_SECRET_LEN];
        getrandom::fill(&mut secret).map_err(|err| KeyError::Randomness { id: id.clone(), detail: err.to_string() })?;
        let key = Self::new(id, &secret)?;
        let hex = super::mac::hex_encode(&secret);
        secret.fill(0);
        Ok((key, hex))
    }

    /// The key id, carried in requests and resume values.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn binding_mac(&self) -> HmacSha256 {
        self.binding.clone()
    }

    pub(crate) fn seal_mac(&self) -> HmacSha256 {
        self.seal.clone()
    }

    pub(crate) fn token_mac(&self) -> HmacSha256 {
        self.token.clone()
    }
}

fn validate_id(id: &str) -> Result<(), KeyError> {
    let valid = !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid { Ok(()) } else { Err(KeyError::InvalidId { id: id.to_owned() }) }
}

fn decode_secret_hex(id: &str, origin: &str, text: &str) -> Result<Vec<u8>, KeyError> {
    let text = text.trim();
    let not_hex = |problem: String| KeyError::NotHex { id: id.to_owned(), origin: origin.to_owned(), problem };
    if text.is_empty() {
        return Err(not_hex("an empty value".to_owned()));
    }
    if let Some(position) = text.bytes().position(|b| !b.is_ascii_hexdigit()) {
        return Err(not_hex(format!("a non-hex character at position {position}")));
    }
    if !text.len().is_multiple_of(2) {
        return Err(not_hex(format!("an odd number of hex digits ({})", text.len())));
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    };
    Ok(text.as_bytes().chunks_exact(2).map(|pair| digit(pair[0]) << 4 | digit(pair[1])).collect())
}

/// What happens to requests and grants made under a retired key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetiredKeys {
    /// Approve requests and admit grants made under a retired key (new ones always use the current key).
    /// Rotation without losing what is in flight.
    #[default]
    Honour,
    /// Refuse them: the rotation revokes everything made under the old key.
    Refuse,
}

/// The current key, which MACs every new request, and retired keys still recognised by id.
#[derive(Debug, Clone)]
pub struct KeyRing {
    current: ApprovalKey,
    retired: Vec<ApprovalKey>,
    retired_policy: RetiredKeys,
}

/// Why a key id named in a request or resume value was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyLookupError {
    /// No key in the ring has this id.
    #[error("unknown approval key `{key_id}`: it is neither the current key nor a retired one")]
    Unknown {
        /// The id named.
        key_id: String,
    },
    /// The key is retired and the ring refuses retired keys.
    #[error("approval key `{key_id}` is retired and this key ring refuses what was made under retired keys")]
    Retired {
        /// The id named.
        key_id: String,
    },
}

impl KeyRing {
    /// A ring with only a current key. Retired keys are honoured unless told otherwise.
    pub fn new(current: ApprovalKey) -> Self {
        KeyRing { current, retired: Vec::new(), retired_policy: RetiredKeys::Honour }
    }

    /// Adds a retired key. Refuses an id already in the ring.
    pub fn with_retired(mut self, key: ApprovalKey) -> Result<Self, KeyError> {
        if key.id == self.current.id || self.retired.iter().any(|k| k.id == key.id) {
            return Err(KeyError::DuplicateId { id: key.id });
        }
        self.retired.push(key);
        Ok(self)
    }

    /// Sets what happens to requests and grants made under retired keys.
    pub fn retired_keys(mut self, policy: RetiredKeys) -> Self {
        self.retired_policy = policy;
        self
    }

    /// Makes `next` the current key and retires the current one. Refuses an id already in the ring.
    pub fn rotate(mut self, next: ApprovalKey) -> Result<Self, KeyError> {
        if next.id == self.current.id || self.retired.iter().any(|k| k.id == next.id) {
            return Err(KeyError::DuplicateId { id: next.id });
        }
        let previous = std::mem::replace(&mut self.current, next);
        self.retired.push(previous);
        Ok(self)
    }

    /// The key that MACs new requests.
    pub fn current(&self) -> &ApprovalKey {
        &self.current
    }

    /// The retired keys, oldest first.
    pub fn retired(&self) -> &[ApprovalKey] {
        &self.retired
    }

    /// The policy for retired keys.
    pub fn retired_policy(&self) -> RetiredKeys {
        self.retired_policy
    }

    /// The key a request or resume value names, if the ring accepts it.
    pub fn find(&self, key_id: &str) -> Result<&ApprovalKey, KeyLookupError> {
        if self.current.id == key_id {
            return Ok(&self.current);
        }
        match self.retired.iter().find(|k| k.id == key_id) {
            Some(key) => match self.retired_policy {
                RetiredKeys::Honour => Ok(key),
                RetiredKeys::Refuse => Err(KeyLookupError::Retired { key_id: key_id.to_owned() }),
            },
            None => Err(KeyLookupError::Unknown { key_id: key_id.to_owned() }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn short_secrets_are_refused() {
        let err = ApprovalKey::new("k1", &[7u8; 15]).unwrap_err();
        assert_eq!(err.to_string(), "approval key `k1` is 15 bytes long: at least 16 bytes are needed, 32 recommended");
        assert!(ApprovalKey::new("k1", &[7u8; 16]).is_ok());
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let key = ApprovalKey::from_hex("k1", "00112233445566778899aabbccddeeff").unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains("k1"));
        assert!(!shown.contains("00112233"));
        assert!(!shown.contains("[0, 17"));
    }

    #[test]
    fn hex_errors_do_not_echo_the_secret() {
        let err = ApprovalKey::from_hex("k1", "0011223344556677889sSECRETbbccddeeff").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("non-hex character at position 19"), "{text}");
        assert!(!text.contains("SECRET"));
        assert!(matches!(ApprovalKey::from_hex("k1", "abc"), Err(KeyError::NotHex { .. })));
        assert!(matches!(ApprovalKey::from_hex("k1", "  "), Err(KeyError::NotHex { .. })));
    }

    #[test]
    fn key_ids_are_checked() {
        assert!(matches!(ApprovalKey::new("", &[1; 32]), Err(KeyError::InvalidId { .. })));
        assert!(matches!(ApprovalKey::new("a b", &[1; 32]), Err(KeyError::InvalidId { .. })));
        assert!(matches!(ApprovalKey::new("x".repeat(65), &[1; 32]), Err(KeyError::InvalidId { .. })));
        assert!(ApprovalKey::new("prod-2026.01_a", &[1; 32]).is_ok());
    }

    #[test]
    fn rotation_and_retired_policy() {
        let ring = KeyRing::new(ApprovalKey::new("k1", &[1; 32]).unwrap())
            .rotate(ApprovalKey::new("k2", &[2; 32]).unwrap())
            .unwrap();
        assert_eq!(ring.current().id(), "k2");
        assert_eq!(ring.find("k1").unwrap().id(), "k1");
        let refusing = ring.clone().retired_keys(RetiredKeys::Refuse);
        assert_eq!(refusing.find("k1").unwrap_err(), KeyLookupError::Retired { key_id: "k1".into() });
        assert_eq!(refusing.find("k9").unwrap_err(), KeyLookupError::Unknown { key_id: "k9".into() });
        assert!(matches!(
            ring.with_retired(ApprovalKey::new("k2", &[3; 32]).unwrap()),
            Err(KeyError::DuplicateId { .. })
        ));
    }

    #[test]
    fn generated_keys_round_trip_through_hex() {
        let (key, hex) = ApprovalKey::generate("k1").unwrap();
        assert_eq!(hex.len(), 64);
        let again = ApprovalKey::from_hex("k1", &hex).unwrap();
        let a = key.token_mac().chain_update(b"x").finalize().into_bytes();
        let b = again.token_mac().chain_update(b"x").finalize().into_bytes();
        assert_eq!(a, b);
    }
}
