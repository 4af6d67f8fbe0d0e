//! Rate limits: the `N/unit` value and a limiter that takes one token from every applicable bucket or none.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::duration_nanos;

/// `count` calls per `period`, with bursts up to `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u32,
    period_secs: u64,
}

impl Rate {
    /// `count` calls per `period_secs` seconds. Used by generated code, which checks both at compile time;
    /// a zero is raised to one so a `Rate` is always valid.
    pub const fn new_const(count: u32, period_secs: u64) -> Self {
        Rate { count: if count == 0 { 1 } else { count }, period_secs: if period_secs == 0 { 1 } else { period_secs } }
    }

    /// Calls allowed per period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_secs(self.period_secs)
    }

    /// Time between tokens.
    fn emission_interval_nanos(&self) -> u64 {
        duration_nanos(self.period()) / u64::from(self.count)
    }

    /// Whether `self` admits no more than `other` does over any window (the stricter of two).
    pub fn is_at_least_as_strict_as(&self, other: &Rate) -> bool {
        u128::from(self.count) * u128::from(other.period_secs) <= u128::from(other.count) * u128::from(self.period_secs)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period_secs {
            1 => "second",
            60 => "minute",
            3_600 => "hour",
            86_400 => "day",
            other => return write!(f, "{}/{other}s", self.count),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// A rate string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RateParseError(String);

impl FromStr for Rate {
    type Err = RateParseError;

    /// `"10/minute"`; units `second`, `minute`, `hour`, `day` (or `s`, `sec`, `m`, `min`, `h`, `d`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |m: String| RateParseError(m);
        let (count, unit) = text
            .split_once('/')
            .ok_or_else(|| err(format!("malformed rate `{text}`, expected `N/unit` such as `10/minute`")))?;
        let (count, unit) = (count.trim(), unit.trim());
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(format!("rate count `{count}` is not a whole number")));
        }
        let count: u32 = count.parse().map_err(|_| err(format!("rate count `{count}` is too large")))?;
        if count == 0 {
            return Err(err("rate count must be at least 1; to forbid a tool, deny it".to_owned()));
        }
        let period_secs = match unit {
            "second" | "sec" | "s" => 1,
            "minute" | "min" | "m" => 60,
            "hour" | "h" => 3_600,
            "day" | "d" => 86_400,
            other => {
                return Err(err(format!(
                    "unknown rate unit `{other}`, expected one of `second`, `minute`, `hour`, `day`"
                )));
            }
        };
        Ok(Rate { count, period_secs })
    }
}

/// Identifies one bucket inside a [`RateLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BucketId(usize);

/// Whom a bucket counts: every call, or each thread's calls apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    buckets: Vec<Bucket>,
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
    pub(crate) fn add_bucket(&mut self, rate: Rate, scope: RateScope) -> BucketId {
        let state = match scope {
            RateScope::PerTool => BucketState::PerTool(0),
            RateScope::PerThread => BucketState::PerThread { full_at: HashMap::new(), sweep_at: MIN_SWEEP },
        };
        self.buckets.push(Bucket { rate, state: Mutex::new(state) });
        BucketId(self.buckets.len() - 1)
    }

    /// Takes one token from every bucket in `ids` (ascending, distinct), or none: `Err` holds the wait
    /// until all could admit and the position in `ids` of the bucket that needs the longest wait.
    pub(crate) fn acquire(
        &self,
        ids: &[BucketId],
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), (Duration, usize)> {
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
            let mut state = bucket.state.lock().unwrap_or_else(|p| p.into_inner());
            let full_at = state.get(thread).saturating_sub(bucket.rate.emission_interval_nanos());
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
            guards.push((bucket.rate, bucket.state.lock().unwrap_or_else(|p| p.into_inner())));
        }
        let mut wait = (0u64, 0usize);
        for (position, (rate, state)) in guards.iter().enumerate() {
            let period = duration_nanos(rate.period());
            let next = state.get(thread).max(now).saturating_add(rate.emission_interval_nanos());
            // Admit while the bucket would hold no more than `period` worth of debt after this call.
            if next.saturating_sub(now) > period && next - now - period > wait.0 {
                wait = (next - now - period, position);
            }
        }
        if wait.0 > 0 {
            return Err((Duration::from_nanos(wait.0), wait.1));
        }
        if commit {
            for (rate, state) in &mut guards {
                let next = state.get(thread).max(now).saturating_add(rate.emission_interval_nanos());
                state.set(thread, next, now);
            }
        }
        Ok(())
    }

    /// Threads with a partly spent bucket, summed over buckets.
    #[cfg(test)]
    fn tracked_threads(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| match &*b.state.lock().unwrap_or_else(|p| p.into_inner()) {
                BucketState::PerTool(_) => 0,
                BucketState::PerThread { full_at, .. } => full_at.len(),
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_thread_buckets_are_apart_and_full_ones_are_swept() {
        let mut limiter = RateLimiter::default();
        let shared = limiter.add_bucket(Rate::new_const(1_000_000, 60), RateScope::PerTool);
        let each = limiter.add_bucket(Rate::new_const(1, 60), RateScope::PerThread);
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
    fn parses_and_displays() {
        assert_eq!("10/minute".parse::<Rate>().unwrap().to_string(), "10/minute");
        assert_eq!("1/s".parse::<Rate>().unwrap(), Rate::new_const(1, 1));
        for bad in ["ten/minute", "0/minute", "5/fortnight", "5/", "5", "99999999999/day"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn strictness_compares_rates_per_time() {
        let per_min = |n| Rate::new_const(n, 60);
        assert!(per_min(5).is_at_least_as_strict_as(&per_min(10)));
        assert!(!per_min(10).is_at_least_as_strict_as(&per_min(5)));
        assert!(Rate::new_const(1, 1).is_at_least_as_strict_as(&per_min(60)));
    }

    #[test]
    fn bursts_then_refills_one_token_per_interval() {
        let mut limiter = RateLimiter::default();
        let id = limiter.add_bucket(Rate::new_const(3, 60), RateScope::PerTool);
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
        let bucket = limiter.add_bucket(Rate::new_const(2, 60), RateScope::PerTool);
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
        let roomy = limiter.add_bucket(Rate::new_const(100, 60), RateScope::PerTool);
        let tight = limiter.add_bucket(Rate::new_const(1, 60), RateScope::PerTool);
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
}
