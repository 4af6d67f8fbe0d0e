//! What keeps the console's sign-in from being guessed at or used to exhaust the host.
//!
//! - [`Throttle`]: failed sign-ins are counted per account (the name typed, known or not, so throttling
//!   reveals nothing about which names exist) and per client address. After [`FREE_FAILURES`] failures
//!   in a row, each further attempt under that account or from that address must wait: 1 s, then 2 s,
//!   4 s, … up to [`MAX_BACKOFF`]. Every attempt is counted when it starts, so a burst of parallel
//!   attempts is throttled too; a successful sign-in clears both counts. Time comes from an injected
//!   [`Clock`], so the tests never sleep.
//! - [`CheckSlots`]: at most a fixed number of password checks (argon2, about 19 MiB of memory each) run
//!   at once; an attempt beyond that is refused at once (503), never queued.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_airlock::Clock;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Failures in a row that cost nothing.
pub(super) const FREE_FAILURES: u32 = 3;
/// The first wait.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// How many accounts and addresses are remembered at most; the oldest is forgotten first.
const MAX_TRACKED: usize = 10_000;

/// Whom a count belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Subject {
    /// The operator name typed (empty for the one-time token).
    Account(String),
    /// Where the attempt came from.
    Client(IpAddr),
}

impl Subject {
    /// The account a typed name counts against: its first [`ACCOUNT_CHARS`] characters (no operator name
    /// is longer), so a long name costs no more memory than a short one.
    fn account(name: &str) -> Subject {
        Subject::Account(name.chars().take(ACCOUNT_CHARS).collect())
    }
}

/// The longest operator name.
const ACCOUNT_CHARS: usize = 64;

/// The failures of one subject.
#[derive(Debug, Clone, Copy)]
struct Failures {
    /// In a row, since the last success.
    count: u32,
    /// No attempt before this.
    blocked_until: Duration,
    /// The latest attempt.
    last: Duration,
}

/// Failed sign-ins per account and per client, with exponential back-off.
pub(super) struct Throttle {
    clock: Arc<dyn Clock>,
    failures: Mutex<HashMap<Subject, Failures>>,
}

/// An attempt refused by the throttle: how long until the next one may be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TooSoon {
    pub(super) retry_after: Duration,
}

impl Throttle {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Throttle {
        Throttle { clock, failures: Mutex::new(HashMap::new()) }
    }

    /// Starts an attempt for `account` from `client`: refused while either must wait, otherwise counted
    /// as a failure until [`succeeded`](Self::succeeded) says otherwise.
    pub(super) fn attempt(&self, account: &str, client: IpAddr) -> Result<(), TooSoon> {
        let now = self.clock.now();
        let subjects = [Subject::account(account), Subject::Client(client)];
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let wait = subjects
            .iter()
            .filter_map(|subject| failures.get(subject))
            .map(|f| f.blocked_until.saturating_sub(now))
            .max()
            .unwrap_or_default();
        if !wait.is_zero() {
            return Err(TooSoon { retry_after: wait });
        }
        if failures.len() + subjects.len() > MAX_TRACKED {
            forget_settled(&mut failures, now);
        }
        for subject in subjects {
            let entry = failures.entry(subject).or_insert(Failures { count: 0, blocked_until: now, last: now });
            entry.count = entry.count.saturating_add(1);
            entry.last = now;
            entry.blocked_until = now.saturating_add(backoff(entry.count));
        }
        Ok(())
    }

    /// The attempt proved who signed in: both counts start again.
    pub(super) fn succeeded(&self, account: &str, client: IpAddr) {
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        failures.remove(&Subject::account(account));
        failures.remove(&Subject::Client(client));
    }
}

/// The wait after the `count`-th failure in a row.
fn backoff(count: u32) -> Duration {
    match count.checked_sub(FREE_FAILURES) {
        None => Duration::ZERO,
        Some(doublings) => {
            let factor = 1u32.checked_shl(doublings.min(31)).unwrap_or(u32::MAX);
            FIRST_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
        }
    }
}

/// Room for new subjects: forgets those whose wait ended longer than the longest wait ago, then, if the
/// map is still full, the ones seen longest ago.
fn forget_settled(failures: &mut HashMap<Subject, Failures>, now: Duration) {
    failures.retain(|_, f| now < f.blocked_until.saturating_add(MAX_BACKOFF));
    while failures.len() + 2 > MAX_TRACKED {
        let Some(oldest) = failures.iter().min_by_key(|(_, f)| f.last).map(|(s, _)| s.clone()) else { break };
        failures.remove(&oldest);
    }
}

/// A bounded number of concurrent password checks.
pub(super) struct CheckSlots {
    slots: Arc<Semaphore>,
}

/// The right to run one password check, given back when dropped.
pub(super) struct CheckSlot {
    _permit: OwnedSemaphorePermit,
}

impl CheckSlots {
    /// At most `slots` checks at once (at least one).
    pub(super) fn new(slots: usize) -> CheckSlots {
        CheckSlots { slots: Arc::new(Semaphore::new(slots.max(1))) }
    }

    /// A slot, or `None` at once when every slot is taken.
    pub(super) fn try_take(&self) -> Option<CheckSlot> {
        Arc::clone(&self.slots).try_acquire_owned().ok().map(|permit| CheckSlot { _permit: permit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_airlock::ManualClock;

    const T0: Duration = Duration::from_secs(1_796_153_379);

    fn throttle() -> (Arc<ManualClock>, Throttle) {
        let clock = Arc::new(ManualClock::new(T0));
        (Arc::clone(&clock), Throttle::new(clock))
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn failures_per_account_back_off_exponentially() {
        let (clock, throttle) = throttle();
        // Three failures in a row are free; the third starts the first wait.
        for n in 1..=3u8 {
            assert_eq!(throttle.attempt("alice", ip(n)), Ok(()), "attempt {n}");
        }
        // From another address, the account still waits.
        assert_eq!(throttle.attempt("alice", ip(9)), Err(TooSoon { retry_after: Duration::from_secs(1) }));
        clock.advance(Duration::from_secs(1));
        assert_eq!(throttle.attempt("alice", ip(9)), Ok(()));
        // Each failure doubles the wait: 2 s, then 4 s.
        clock.advance(Duration::from_secs(1));
        assert_eq!(throttle.attempt("alice", ip(10)), Err(TooSoon { retry_after: Duration::from_secs(1) }));
        clock.advance(Duration::from_secs(1));
        assert_eq!(throttle.attempt("alice", ip(10)), Ok(()));
        clock.advance(Duration::from_secs(3));
        assert_eq!(throttle.attempt("alice", ip(11)), Err(TooSoon { retry_after: Duration::from_secs(1) }));
        clock.advance(Duration::from_secs(1));
        assert_eq!(throttle.attempt("alice", ip(11)), Ok(()));
        // Another account is not held up by alice's failures.
        assert_eq!(throttle.attempt("bob", ip(12)), Ok(()));
    }

    #[test]
    fn failures_per_client_back_off_whatever_the_account() {
        let (clock, throttle) = throttle();
        for name in ["a", "b", "c"] {
            assert_eq!(throttle.attempt(name, ip(1)), Ok(()));
        }
        assert_eq!(throttle.attempt("d", ip(1)), Err(TooSoon { retry_after: Duration::from_secs(1) }));
        assert_eq!(throttle.attempt("d", ip(2)), Ok(()), "another client is not held up");
        clock.advance(Duration::from_secs(1));
        assert_eq!(throttle.attempt("e", ip(1)), Ok(()));
        assert!(throttle.attempt("f", ip(1)).is_err());
    }

    #[test]
    fn a_success_clears_the_counts_and_the_wait_is_capped() {
        let (clock, throttle) = throttle();
        for _ in 0..3 {
            throttle.attempt("alice", ip(1)).unwrap();
        }
        throttle.succeeded("alice", ip(1));
        for _ in 0..3 {
            assert_eq!(throttle.attempt("alice", ip(1)), Ok(()));
        }
        // Forty failures later the wait is still at most the cap.
        for _ in 0..40 {
            clock.advance(MAX_BACKOFF);
            throttle.attempt("alice", ip(1)).unwrap();
        }
        assert_eq!(throttle.attempt("alice", ip(1)), Err(TooSoon { retry_after: MAX_BACKOFF }));
        assert_eq!(backoff(FREE_FAILURES + 40), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn many_names_do_not_grow_the_memory_without_bound() {
        let (clock, throttle) = throttle();
        for n in 0..(MAX_TRACKED + 50) {
            clock.advance(Duration::from_millis(1));
            // Each from its own address, as a botnet would.
            let client = IpAddr::from(u32::try_from(n).unwrap().to_be_bytes());
            let _ = throttle.attempt(&format!("name{n}"), client);
        }
        assert!(throttle.failures.lock().unwrap().len() <= MAX_TRACKED);
    }

    #[test]
    fn a_long_name_is_remembered_by_its_first_characters() {
        let (_, throttle) = throttle();
        let long = "x".repeat(100_000);
        for n in 1..=3 {
            throttle.attempt(&long, ip(n)).unwrap();
        }
        assert!(throttle.attempt(&"x".repeat(64), ip(4)).is_err(), "the same account");
        let remembered = throttle.failures.lock().unwrap();
        assert!(remembered.keys().all(|s| !matches!(s, Subject::Account(name) if name.len() > ACCOUNT_CHARS)));
    }

    #[test]
    fn password_checks_beyond_the_bound_are_refused_at_once() {
        let slots = CheckSlots::new(2);
        let first = slots.try_take().expect("a first slot");
        let second = slots.try_take().expect("a second slot");
        assert!(slots.try_take().is_none(), "a third check does not run, and does not wait");
        drop(first);
        let third = slots.try_take().expect("a slot given back is taken again");
        drop((second, third));
        assert!(CheckSlots::new(0).try_take().is_some(), "at least one slot");
    }
}
