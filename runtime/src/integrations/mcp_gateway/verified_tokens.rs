//! The OAuth resource server's cache of verified tokens: a token whose signature and claims were checked is
//! admitted again without checking its signature (an RSA or ECDSA verification costs hundreds of
//! microseconds; a SHA-256 of the token and a map lookup cost a few).
//!
//! - **Keyed by a digest.** An entry is found by the SHA-256 of the whole token (header, claims and signature),
//!   so only the very token that was verified hits it; the token itself is not kept.
//! - **Never longer than the token.** An entry is used until the earlier of the token's `exp` (plus the
//!   leeway the verification allowed) and a short time to live after it was verified, so a cached token is
//!   refused once it expires, and one whose key the issuer withdrew stops being admitted soon.
//! - **Bounded.** At most `capacity` entries; the oldest is evicted first.
//! - **Refusals are never cached**, and the cache is emptied whenever the issuer's keys are replaced; an
//!   entry verified with keys that were replaced while it was being verified is not stored.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::identity::Caller;

/// The SHA-256 of a token.
pub(super) type TokenDigest = [u8; 32];

/// The digest a token is cached under.
pub(super) fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

struct Verified {
    caller: Caller,
    /// Admitted again while the clock (time since the Unix epoch) is before this.
    until: Duration,
}

/// Verified tokens, the oldest evicted first.
pub(super) struct VerifiedTokens {
    capacity: usize,
    entries: HashMap<TokenDigest, Verified>,
    /// The digests in `entries`, oldest first (each exactly once).
    order: VecDeque<TokenDigest>,
    /// Bumped each time the keys are replaced; an entry is stored only under the generation it was verified in.
    generation: u64,
}

impl VerifiedTokens {
    /// An empty cache of at most `capacity` tokens (none for 0).
    pub(super) fn new(capacity: usize) -> Self {
        VerifiedTokens {
            capacity,
            entries: HashMap::with_capacity(capacity.min(1024)),
            order: VecDeque::with_capacity(capacity.min(1024)),
            generation: 0,
        }
    }

    /// The caller `digest` proved, if it was verified and is still admitted at `now`.
    pub(super) fn get(&self, digest: &TokenDigest, now: Duration) -> Option<Caller> {
        self.entries.get(digest).filter(|verified| now < verified.until).map(|verified| verified.caller.clone())
    }

    /// The generation of the keys now in use: a verification started under it may be stored.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Remembers a verified token until `until`, if the keys it was verified with (`generation`) are still
    /// those in use.
    pub(super) fn insert(&mut self, digest: TokenDigest, caller: Caller, until: Duration, generation: u64) {
        if self.capacity == 0 || generation != self.generation {
            return;
        }
        if let Some(verified) = self.entries.get_mut(&digest) {
            *verified = Verified { caller, until };
            return;
        }
        while self.entries.len() >= self.capacity {
            let Some(oldest) = self.order.pop_front() else { break };
            self.entries.remove(&oldest);
        }
        self.entries.insert(digest, Verified { caller, until });
        self.order.push_back(digest);
    }

    /// Forgets every token: the keys they were verified with were replaced.
    pub(super) fn keys_replaced(&mut self) {
        self.entries.clear();
        self.order.clear();
        self.generation = self.generation.wrapping_add(1);
    }

    /// How many tokens are remembered.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str) -> Caller {
        Caller::new(name)
    }

    #[test]
    fn an_entry_is_admitted_until_its_deadline_and_the_oldest_is_evicted_first() {
        let mut cache = VerifiedTokens::new(2);
        let at = Duration::from_secs;
        cache.insert(digest("a"), caller("a"), at(100), 0);
        assert_eq!(cache.get(&digest("a"), at(99)).map(|c| c.name().to_owned()).as_deref(), Some("a"));
        assert!(cache.get(&digest("a"), at(100)).is_none(), "admitted at its deadline");
        assert!(cache.get(&digest("b"), at(1)).is_none());
        cache.insert(digest("b"), caller("b"), at(100), 0);
        // Verified again: updated in place, still the oldest.
        cache.insert(digest("a"), caller("a"), at(200), 0);
        cache.insert(digest("c"), caller("c"), at(100), 0);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&digest("a"), at(1)).is_none(), "the oldest was not evicted");
        assert!(cache.get(&digest("b"), at(1)).is_some() && cache.get(&digest("c"), at(1)).is_some());
    }

    #[test]
    fn replaced_keys_empty_the_cache_and_a_verification_under_the_old_keys_is_not_stored() {
        let mut cache = VerifiedTokens::new(8);
        let started = cache.generation();
        cache.insert(digest("a"), caller("a"), Duration::MAX, started);
        cache.keys_replaced();
        assert_eq!(cache.len(), 0);
        cache.insert(digest("b"), caller("b"), Duration::MAX, started);
        assert_eq!(cache.len(), 0, "stored under keys that were replaced");
        let mut off = VerifiedTokens::new(0);
        off.insert(digest("a"), caller("a"), Duration::MAX, off.generation());
        assert_eq!(off.len(), 0);
    }
}
