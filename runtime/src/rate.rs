//! Rate limits: the `N/unit` value and a limiter that takes one token from every applicable bucket or none.
//!
//! Buckets live in the dispatcher's memory by default ([`RateLimiter`]), one per host. A rule marked
//! shared keeps its bucket in a store every host reaches instead
//! ([`SharedRateBuckets`](crate::store::SharedRateBuckets)), with the same arithmetic ([`gcra`]). A host
//! that builds its dispatcher again (a gateway whose upstream listed new tools) hands each one the same
//! [`LocalRateBuckets`], so the new dispatcher goes on from the old one's buckets instead of full ones.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use agent_airlock_grammar::{Rate, RateParseError};

use crate::clock::duration_nanos;

/// Time between tokens of `rate`.
pub(crate) fn emission_interval_nanos(rate: &Rate) -> u64 {
    duration_nanos(rate.period()) / u64::from(rate.count())
}

/// One GCRA step: a bucket full again at `full_at` (nanoseconds, 0: full), asked for one token at `now`.
/// `Ok` holds when it is full again after the token is taken; `Err` the wait (nanoseconds, at least 1)
/// until it could admit. A bucket admits while it holds no more than one period's worth of debt after the
/// call: `count` calls at once, then one per `period / count`.
pub(crate) fn gcra(full_at: u64, now: u64, rate: &Rate) -> Result<u64, u64> {
    let period = duration_nanos(rate.period());
    let next = full_at.max(now).saturating_add(emission_interval_nanos(rate));
    match next.saturating_sub(now).checked_sub(period) {
        Some(debt) if debt > 0 => Err(debt),
        _ => Ok(next),
    }
}

/// Identifies one bucket inside a [`RateLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BucketId(usize);

/// Whom a bucket counts: every call, or each thread's calls apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateScope {
    /// One bucket for all calls of the tool.
    PerTool,
    /// One bucket per thread (conversation) id; calls without a thread id share one.
    PerThread,
}

/// Token buckets kept as GCRA "theoretical arrival times": one `u64` per bucket (per thread for
/// [`RateScope::PerThread`]).
#[derive(Debug, Default)]
pub(crate) struct RateLimiter {
    buckets: Vec<Arc<Bucket>>,
    /// Where buckets are taken from and left for the next dispatcher, if the host keeps them.
    kept: Option<LocalRateBuckets>,
}

/// The buckets of a dispatcher's rate limits in memory, kept for the next dispatcher built with a clone of
/// this value ([`DispatcherBuilder::local_rates`](crate::DispatcherBuilder::local_rates)): a limit that
/// dispatcher enforces for the same tool, under the same rule, rate and scope, goes on from the bucket as
/// the last one left it. Without it every dispatcher starts with full buckets, so a host that rebuilds its
/// dispatcher (a gateway re-listing its upstream's tools, which the upstream can ask for at will) would
/// give every rate-limited tool a fresh budget each time.
///
/// A bucket full again that no dispatcher holds is dropped at the next build (a full bucket and a new one
/// are the same), so memory follows the limits in use, not every tool ever listed.
#[derive(Clone, Default)]
pub struct LocalRateBuckets(Arc<Mutex<HashMap<BucketKey, Arc<Bucket>>>>);

impl std::fmt::Debug for LocalRateBuckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("LocalRateBuckets").field("kept", &kept).finish()
    }
}

/// Which limit of which tool a bucket enforces: its tool, whether the rule is only observed, its position
/// among the tool's limits (two limits alike are two buckets, as in one dispatcher), the rule, its rate and
/// scope. Two dispatchers built with one policy give a limit the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct BucketKey {
    pub(crate) tool: String,
    pub(crate) observed: bool,
    pub(crate) position: usize,
    pub(crate) rule: String,
    pub(crate) rate: Rate,
    pub(crate) scope: RateScope,
}

impl LocalRateBuckets {
    /// No buckets yet: the first dispatcher built with it starts full.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops the buckets no dispatcher holds that are full again at `now` (nanoseconds).
    fn sweep(&self, now: u64) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|_, bucket| Arc::strong_count(bucket) > 1 || !bucket.is_full(now));
    }

    /// The bucket kept for `key`, or a new one kept from now on.
    fn bucket(&self, key: BucketKey) -> Arc<Bucket> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (rate, scope) = (key.rate, key.scope);
        Arc::clone(kept.entry(key).or_insert_with(|| Arc::new(Bucket::new(rate, scope))))
    }

    /// How many buckets are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[derive(Debug)]
struct Bucket {
    rate: Rate,
    state: Mutex<BucketState>,
}

/// When a bucket is full again, in nanoseconds since the epoch (0: full).
#[derive(Debug)]
enum BucketState {
    PerTool(u64),
    PerThread {
        full_at: HashMap<Box<str>, u64>,
        /// Full buckets are dropped when the map reaches this size, so memory follows active threads.
        sweep_at: usize,
    },
}

const MIN_SWEEP: usize = 1_024;

impl Bucket {
    fn new(rate: Rate, scope: RateScope) -> Bucket {
        let state = match scope {
            RateScope::PerTool => BucketState::PerTool(0),
            RateScope::PerThread => BucketState::PerThread { full_at: HashMap::new(), sweep_at: MIN_SWEEP },
        };
        Bucket { rate, state: Mutex::new(state) }
    }

    /// Whether every call it counts could take its whole burst at `now` (nanoseconds).
    fn is_full(&self, now: u64) -> bool {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            BucketState::PerTool(full_at) => *full_at <= now,
            BucketState::PerThread { full_at, .. } => full_at.values().all(|t| *t <= now),
        }
    }
}

impl BucketState {
    fn get(&self, thread: &str) -> u64 {
        match self {
            BucketState::PerTool(full_at) => *full_at,
            BucketState::PerThread { full_at, .. } => full_at.get(thread).copied().unwrap_or(0),
        }
    }

    fn set(&mut self, thread: &str, value: u64, now: u64) {
        match self {
            BucketState::PerTool(full_at) => *full_at = value,
            BucketState::PerThread { full_at, sweep_at } => match full_at.get_mut(thread) {
                Some(slot) => *slot = value,
                None => {
                    if full_at.len() >= *sweep_at {
                        full_at.retain(|_, t| *t > now);
                        *sweep_at = (full_at.len() * 2).max(MIN_SWEEP);
                    }
                    full_at.insert(thread.into(), value);
                }
            },
        }
    }
}

impl RateLimiter {
    /// A limiter whose buckets are taken from `kept` (those full again at `now` and held by no dispatcher
    /// dropped first) and left there for the next one.
    pub(crate) fn keeping(kept: LocalRateBuckets, now: Duration) -> RateLimiter {
        kept.sweep(duration_nanos(now));
        RateLimiter { buckets: Vec::new(), kept: Some(kept) }
    }

    /// A bucket for the limit `key` names, kept or new. Two dispatchers holding one kept bucket lock it in
    /// the same order among the tool's buckets (its position is in its key), so they cannot deadlock.
    pub(crate) fn add_bucket(&mut self, key: BucketKey) -> BucketId {
        let bucket = match &self.kept {
            Some(kept) => kept.bucket(key),
            None => Arc::new(Bucket::new(key.rate, key.scope)),
        };
        self.buckets.push(bucket);
        BucketId(self.buckets.len() - 1)
    }

    /// Takes one token from every bucket in `ids` (ascending, distinct), or none: `Err` holds the wait
    /// until all could admit and the position in `ids` of the bucket that needs the longest wait.
    #[inline]
    pub(crate) fn acquire(
        &self,
        ids: &[BucketId],
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), (Duration, usize)> {
        // A tool without rate rules (the usual case) answers here, without a call.
        if ids.is_empty() {
            return Ok(());
        }
        self.take(ids, thread, now, true)
    }

    /// Whether [`acquire`](Self::acquire) would succeed now, taking nothing: for refusing a call before
    /// a human is asked about it.
    pub(crate) fn check(&self, ids: &[BucketId], thread: Option<&str>, now: Duration) -> Result<(), (Duration, usize)> {
        self.take(ids, thread, now, false)
    }

    /// Gives back the token [`acquire`](Self::acquire) took from every bucket in `ids`, for a call that a
    /// later gate refused: refused calls spend nothing.
    pub(crate) fn refund(&self, ids: &[BucketId], thread: Option<&str>, now: Duration) {
        let now = duration_nanos(now);
        let thread = thread.unwrap_or("");
        for id in ids {
            let bucket = &self.buckets[id.0];
            let mut state = bucket.state.lock().unwrap_or_else(PoisonError::into_inner);
            let full_at = state.get(thread).saturating_sub(emission_interval_nanos(&bucket.rate));
            state.set(thread, full_at, now);
        }
    }

    fn take(
        &self,
        ids: &[BucketId],
        thread: Option<&str>,
        now: Duration,
        commit: bool,
    ) -> Result<(), (Duration, usize)> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = duration_nanos(now);
        let thread = thread.unwrap_or("");
        // Locks are taken in id order, so concurrent callers cannot deadlock.
        let mut guards = Vec::with_capacity(ids.len());
        for id in ids {
            let bucket = &self.buckets[id.0];
            guards.push((bucket.rate, bucket.state.lock().unwrap_or_else(PoisonError::into_inner)));
        }
        let mut wait = (0u64, 0usize);
        let mut next = Vec::with_capacity(guards.len());
        for (position, (rate, state)) in guards.iter().enumerate() {
            match gcra(state.get(thread), now, rate) {
                Ok(full_at) => next.push(full_at),
                Err(debt) if debt > wait.0 => wait = (debt, position),
                Err(_) => {}
            }
        }
        if wait.0 > 0 {
            return Err((Duration::from_nanos(wait.0), wait.1));
        }
        if commit {
            for ((_, state), full_at) in guards.iter_mut().zip(next) {
                state.set(thread, full_at, now);
            }
        }
        Ok(())
    }

    /// Threads with a partly spent bucket, summed over buckets.
    #[cfg(test)]
    fn tracked_threads(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| match &*b.state.lock().unwrap_or_else(PoisonError::into_inner) {
                BucketState::PerTool(_) => 0,
                BucketState::PerThread { full_at, .. } => full_at.len(),
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU32, NonZeroU64};

    use super::*;

    fn rate(count: u32, period_secs: u64) -> Rate {
        Rate::new(NonZeroU32::new(count).unwrap(), NonZeroU64::new(period_secs).unwrap())
    }

    /// The key of `tool`'s limit at `position`, under the rule `*`.
    fn key(tool: &str, position: usize, rate: Rate, scope: RateScope) -> BucketKey {
        BucketKey { tool: tool.to_owned(), observed: false, position, rule: "*".to_owned(), rate, scope }
    }

    impl RateLimiter {
        /// A bucket for a limit of its own.
        fn add(&mut self, rate: Rate, scope: RateScope) -> BucketId {
            let position = self.buckets.len();
            self.add_bucket(key("t", position, rate, scope))
        }
    }

    #[test]
    fn per_thread_buckets_are_apart_and_full_ones_are_swept() {
        let mut limiter = RateLimiter::default();
        let shared = limiter.add(rate(1_000_000, 60), RateScope::PerTool);
        let each = limiter.add(rate(1, 60), RateScope::PerThread);
        let t0 = Duration::from_secs(1_000);
        limiter.acquire(&[shared, each], Some("a"), t0).unwrap();
        limiter.acquire(&[shared, each], Some("b"), t0).unwrap();
        assert_eq!(limiter.acquire(&[shared, each], Some("a"), t0).unwrap_err().1, 1);
        for i in 0..5_000 {
            limiter.acquire(&[each], Some(&format!("t{i}")), t0).unwrap();
        }
        assert_eq!(limiter.tracked_threads(), 5_002);
        // A minute later every old bucket is full again: the amortised sweep (when the map doubles) drops
        // them all, so only the 4,000 threads active since are tracked.
        let later = t0 + Duration::from_secs(61);
        for i in 0..4_000 {
            limiter.acquire(&[each], Some(&format!("new{i}")), later).unwrap();
        }
        assert_eq!(limiter.tracked_threads(), 4_000);
    }

    #[test]
    fn bursts_then_refills_one_token_per_interval() {
        let mut limiter = RateLimiter::default();
        let id = limiter.add(rate(3, 60), RateScope::PerTool);
        let t0 = Duration::from_secs(1_000);
        for _ in 0..3 {
            limiter.acquire(&[id], None, t0).unwrap();
        }
        let (wait, position) = limiter.acquire(&[id], None, t0).unwrap_err();
        assert_eq!((wait, position), (Duration::from_secs(20), 0));
        assert!(limiter.acquire(&[id], None, t0 + Duration::from_secs(19)).is_err());
        limiter.acquire(&[id], None, t0 + Duration::from_secs(20)).unwrap();
    }

    #[test]
    fn check_takes_nothing_and_refund_gives_the_token_back() {
        let mut limiter = RateLimiter::default();
        let bucket = limiter.add(rate(2, 60), RateScope::PerTool);
        let now = Duration::from_secs(1_000);
        for _ in 0..5 {
            assert!(limiter.check(&[bucket], None, now).is_ok());
        }
        assert!(limiter.acquire(&[bucket], None, now).is_ok());
        assert!(limiter.acquire(&[bucket], None, now).is_ok());
        assert!(limiter.check(&[bucket], None, now).is_err());
        assert!(limiter.acquire(&[bucket], None, now).is_err());
        limiter.refund(&[bucket], None, now);
        assert!(limiter.check(&[bucket], None, now).is_ok());
        assert!(limiter.acquire(&[bucket], None, now).is_ok());
        assert!(limiter.acquire(&[bucket], None, now).is_err());
    }

    #[test]
    fn all_buckets_or_none() {
        let mut limiter = RateLimiter::default();
        let roomy = limiter.add(rate(100, 60), RateScope::PerTool);
        let tight = limiter.add(rate(1, 60), RateScope::PerTool);
        let t0 = Duration::from_secs(1_000);
        limiter.acquire(&[roomy, tight], None, t0).unwrap();
        for _ in 0..10 {
            assert_eq!(limiter.acquire(&[roomy, tight], None, t0).unwrap_err().1, 1);
        }
        // The refused calls took nothing from the roomy bucket: 99 remain.
        for _ in 0..99 {
            limiter.acquire(&[roomy], None, t0).unwrap();
        }
        assert!(limiter.acquire(&[roomy], None, t0).is_err());
    }

    #[test]
    fn a_dispatcher_built_again_goes_on_from_the_kept_buckets() {
        let kept = LocalRateBuckets::new();
        let t0 = Duration::from_secs(1_000);
        let tight = rate(1, 3_600);
        let mut first = RateLimiter::keeping(kept.clone(), t0);
        let tool = first.add_bucket(key("write_note", 0, tight, RateScope::PerTool));
        let each = first.add_bucket(key("write_note", 1, tight, RateScope::PerThread));
        first.acquire(&[tool], None, t0).unwrap();
        first.acquire(&[each], Some("a"), t0).unwrap();
        drop(first);

        // Built again (the same limits, and one more tool): the spent buckets stay spent.
        let mut second = RateLimiter::keeping(kept.clone(), t0);
        let tool = second.add_bucket(key("write_note", 0, tight, RateScope::PerTool));
        let each = second.add_bucket(key("write_note", 1, tight, RateScope::PerThread));
        let other = second.add_bucket(key("read_note", 0, tight, RateScope::PerTool));
        assert!(second.acquire(&[tool], None, t0).is_err());
        assert!(second.acquire(&[each], Some("a"), t0).is_err());
        second.acquire(&[each], Some("b"), t0).unwrap();
        second.acquire(&[other], None, t0).unwrap();
        // Another rate or rule is another limit: a bucket of its own.
        let looser = second.add_bucket(key("write_note", 0, rate(2, 3_600), RateScope::PerTool));
        second.acquire(&[looser], None, t0).unwrap();
        assert_eq!(kept.len(), 4);
        drop(second);

        // An hour on every bucket is full again and none is held: dropped at the next build.
        let later = t0 + Duration::from_secs(3_600);
        let mut third = RateLimiter::keeping(kept.clone(), later);
        assert_eq!(kept.len(), 0);
        let tool = third.add_bucket(key("write_note", 0, tight, RateScope::PerTool));
        third.acquire(&[tool], None, later).unwrap();
    }

    #[test]
    fn a_bucket_a_live_dispatcher_holds_is_not_dropped() {
        let kept = LocalRateBuckets::new();
        let t0 = Duration::from_secs(1_000);
        let mut old = RateLimiter::keeping(kept.clone(), t0);
        let bucket = old.add_bucket(key("write_note", 0, rate(1, 60), RateScope::PerTool));
        // Full, but the old dispatcher is still serving a call: a new build must not start another bucket.
        let mut new = RateLimiter::keeping(kept.clone(), t0 + Duration::from_secs(120));
        let shared = new.add_bucket(key("write_note", 0, rate(1, 60), RateScope::PerTool));
        old.acquire(&[bucket], None, t0 + Duration::from_secs(120)).unwrap();
        assert!(new.acquire(&[shared], None, t0 + Duration::from_secs(120)).is_err());
    }
}
