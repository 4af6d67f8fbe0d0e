//! The key ring: which approval key MACs new approvals, and which old ones are still honoured. The keys
//! themselves, their loaders and their MACs live in [`crate::keys`].

use crate::keys::{ApprovalKey, KeyError, KeyPurpose};

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
        if self.contains(key.id()) {
            return Err(KeyError::DuplicateId { purpose: KeyPurpose::Approval, id: key.id().to_owned() });
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
        if self.contains(next.id()) {
            return Err(KeyError::DuplicateId { purpose: KeyPurpose::Approval, id: next.id().to_owned() });
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

    fn contains(&self, key_id: &str) -> bool {
        self.current.id() == key_id || self.retired.iter().any(|k| k.id() == key_id)
    }

    /// The key a request or resume value names, if the ring accepts it.
    pub fn find(&self, key_id: &str) -> Result<&ApprovalKey, KeyLookupError> {
        if self.current.id() == key_id {
            return Ok(&self.current);
        }
        match self.retired.iter().find(|k| k.id() == key_id) {
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
    fn rotation_and_retired_policy() {
        let ring = KeyRing::new(ApprovalKey::new("k1", &[1; 32]).unwrap())
            .rotate(ApprovalKey::new("k2", &[2; 32]).unwrap())
            .unwrap();
        assert_eq!(ring.current().id(), "k2");
        assert_eq!(ring.find("k1").unwrap().id(), "k1");
        let refusing = ring.clone().retired_keys(RetiredKeys::Refuse);
        assert_eq!(refusing.find("k1").unwrap_err(), KeyLookupError::Retired { key_id: "k1".into() });
        assert_eq!(refusing.find("k9").unwrap_err(), KeyLookupError::Unknown { key_id: "k9".into() });
        let err = ring.clone().with_retired(ApprovalKey::new("k2", &[3; 32]).unwrap()).unwrap_err();
        assert_eq!(err.to_string(), "approval key id `k2` is used twice in one key ring");
        assert!(matches!(ring.rotate(ApprovalKey::new("k1", &[3; 32]).unwrap()), Err(KeyError::DuplicateId { .. })));
    }
}
