//! Rate buckets shared by several dispatchers: one bucket for a rule however many hosts enforce it.
//!
//! A policy rule marked shared ([`PolicyBuilder::shared_rate_limit`](crate::PolicyBuilder::shared_rate_limit),
//! `rate_shared = true` in a policy file) keeps its bucket in a [`SharedRateBuckets`] instead of the
//! dispatcher's memory. The arithmetic is the local limiter's ([`gcra`](super::gcra)): a bucket is the
//! moment it is full again, `count` calls pass at once, then one per `period / count`; a call takes one
//! token from every bucket that applies or none; a call refused by a later gate gets its tokens back.
//!
//! **Where.** In PostgreSQL (feature `postgres`), a row per bucket in `airlock_rate_buckets`, taken in one
//! `INSERT … ON CONFLICT … DO UPDATE … WHERE … RETURNING` statement (several buckets: those statements in
//! one transaction, rolled back if one refuses, so a refused call takes nothing). In memory, a map shared by
//! the dispatchers of one process that hold clones of one value (tests, and hosts on redb, whose database
//! belongs to one process).
//!
//! **Whose clock.** In PostgreSQL the buckets run on the database's clock (`clock_timestamp()`), not the
//! dispatcher's [`Clock`](crate::Clock): hosts' clocks differ, and a bucket whose "full again" moment is
//! written by one host and read by another, with its own clock a second off, would admit a burst too many
//! or refuse one too early; the database's clock is one clock for every host. In memory, one process, the
//! dispatcher's clock is used, so tests with a [`ManualClock`](crate::ManualClock) stay deterministic.
//!
//! **Faults.** A store that cannot answer refuses the call (fail closed): a shared limit that cannot be
//! checked is never skipped.

use std::collections::HashMap;
#[cfg(feature = "postgres")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::duration_nanos;
use crate::rate::{Rate, RateScope, emission_interval_nanos, gcra};
use crate::store::StoreError;
#[cfg(feature = "postgres")]
use crate::store::{Reply, StoreHandle, postgres::Shared};

/// Where rate buckets shared by several dispatchers live: PostgreSQL for several hosts, or memory for the
/// dispatchers of one process. Clones share the buckets.
///
/// Give it to [`DispatcherBuilder::shared_rates`](crate::DispatcherBuilder::shared_rates). A dispatcher whose
/// approval ledger, effect records or audit log are in PostgreSQL uses that database without it; one on
/// redb or in memory needs it to build with a shared rule (a redb file belongs to one process, so its
/// buckets could only be in memory: say so with [`in_memory`](Self::in_memory)).
#[derive(Clone)]
pub struct SharedRateBuckets(Backend);

#[derive(Clone)]
enum Backend {
    Memory(Arc<Mutex<MemoryBuckets>>),
    /// The pool, and how many takes went through this value (every `pg::SWEEP_EVERY`th sweeps).
    #[cfg(feature = "postgres")]
    Postgres(Arc<Shared>, Arc<AtomicU64>),
}

impl std::fmt::Debug for SharedRateBuckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = match &self.0 {
            Backend::Memory(_) => "memory",
            #[cfg(feature = "postgres")]
            Backend::Postgres(..) => "postgres",
        };
        f.debug_tuple("SharedRateBuckets").field(&backend).finish()
    }
}

/// Full buckets are dropped when the map reaches this size, so memory follows active threads.
const MIN_SWEEP: usize = 1_024;

#[derive(Debug)]
struct MemoryBuckets {
    full_at: HashMap<String, u64>,
    sweep_at: usize,
}

/// One shared bucket of a tool: the rule it enforces, its rate and whom it counts.
#[derive(Debug, Clone)]
pub(crate) struct SharedBucket {
    /// The registered tool name.
    pub(crate) tool: String,
    /// The policy glob.
    pub(crate) rule: String,
    pub(crate) rate: Rate,
    pub(crate) scope: RateScope,
}

impl SharedBucket {
    /// The bucket's key in the store: tool, rule, rate and (per thread) the thread, as a JSON array, so no
    /// two buckets share a key whatever their names hold. Calls without a thread id share one bucket, as
    /// in the local limiter.
    pub(crate) fn key(&self, thread: Option<&str>) -> String {
        let thread = match self.scope {
            RateScope::PerTool => None,
            RateScope::PerThread => Some(thread.unwrap_or("")),
        };
        // Strings and an optional string: serialization cannot fail.
        serde_json::to_string(&(&self.tool, &self.rule, self.rate.to_string(), thread)).unwrap_or_default()
    }
}

/// Why shared buckets did not admit a call.
#[derive(Debug)]
pub(crate) enum SharedRefusal {
    /// A bucket is empty: the wait until every bucket could admit, and the position of the bucket that needs
    /// the longest.
    Empty(Duration, usize),
    /// The store could not answer.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Fault(StoreError),
}

impl SharedRateBuckets {
    /// Buckets in this process's memory, shared by every dispatcher given a clone of this value, on the
    /// dispatcher's clock.
    pub fn in_memory() -> Self {
        SharedRateBuckets(Backend::Memory(Arc::new(Mutex::new(MemoryBuckets {
            full_at: HashMap::new(),
            sweep_at: MIN_SWEEP,
        }))))
    }

    /// Buckets in a PostgreSQL database (table `airlock_rate_buckets`), shared by every host that connects to
    /// it, on the database's clock; [`PostgresLedger::shared_rate_buckets`](crate::ledger::PostgresLedger::shared_rate_buckets)
    /// gives its database's.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(shared: &Arc<Shared>) -> Self {
        SharedRateBuckets(Backend::Postgres(Arc::clone(shared), Arc::default()))
    }

    /// The buckets of a store, if it can hold them (PostgreSQL).
    #[cfg(feature = "postgres")]
    pub(crate) fn of_store(handle: &StoreHandle) -> Option<Self> {
        handle.postgres_shared().map(Self::postgres)
    }

    /// Takes one token from every bucket of `buckets` for a call on `thread`, or none. `now` is the
    /// dispatcher's clock, used by buckets in memory only.
    pub(crate) async fn acquire(
        &self,
        buckets: &[SharedBucket],
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), SharedRefusal> {
        if buckets.is_empty() {
            return Ok(());
        }
        match &self.0 {
            Backend::Memory(memory) => memory_take(memory, buckets, thread, now, true),
            #[cfg(feature = "postgres")]
            Backend::Postgres(shared, takes) => {
                let asks = pg::asks(buckets, thread);
                let sweep = takes.fetch_add(1, Ordering::Relaxed) % pg::SWEEP_EVERY == pg::SWEEP_EVERY - 1;
                run(shared, pg::acquire(shared.pool.clone(), asks, sweep)).await.map_err(SharedRefusal::Fault)?
            }
        }
    }

    /// Whether [`acquire`](Self::acquire) would admit now, taking nothing.
    pub(crate) async fn check(
        &self,
        buckets: &[SharedBucket],
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), SharedRefusal> {
        if buckets.is_empty() {
            return Ok(());
        }
        match &self.0 {
            Backend::Memory(memory) => memory_take(memory, buckets, thread, now, false),
            #[cfg(feature = "postgres")]
            Backend::Postgres(shared, _) => {
                let asks = pg::asks(buckets, thread);
                run(shared, pg::check(shared.pool.clone(), asks)).await.map_err(SharedRefusal::Fault)?
            }
        }
    }

    /// Gives back the token [`acquire`](Self::acquire) took from every bucket of `buckets`, for a call a
    /// later gate refused. On a fault the tokens stay spent (the limit errs on the strict side).
    pub(crate) async fn refund(
        &self,
        buckets: &[SharedBucket],
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), StoreError> {
        if buckets.is_empty() {
            return Ok(());
        }
        match &self.0 {
            Backend::Memory(memory) => {
                let mut state = memory.lock().unwrap_or_else(PoisonError::into_inner);
                let now = duration_nanos(now);
                for bucket in buckets {
                    let key = bucket.key(thread);
                    let full_at = state.full_at.get(&key).copied().unwrap_or(0);
                    state.set(key, full_at.saturating_sub(emission_interval_nanos(&bucket.rate)), now);
                }
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(shared, _) => {
                let asks = pg::asks(buckets, thread);
                run(shared, pg::refund(shared.pool.clone(), asks)).await
            }
        }
    }
}

impl MemoryBuckets {
    fn set(&mut self, key: String, full_at: u64, now: u64) {
        if !self.full_at.contains_key(&key) && self.full_at.len() >= self.sweep_at {
            self.full_at.retain(|_, t| *t > now);
            self.sweep_at = (self.full_at.len() * 2).max(MIN_SWEEP);
        }
        self.full_at.insert(key, full_at);
    }
}

fn memory_take(
    memory: &Mutex<MemoryBuckets>,
    buckets: &[SharedBucket],
    thread: Option<&str>,
    now: Duration,
    commit: bool,
) -> Result<(), SharedRefusal> {
    let now = duration_nanos(now);
    let mut state = memory.lock().unwrap_or_else(PoisonError::into_inner);
    let keys: Vec<String> = buckets.iter().map(|bucket| bucket.key(thread)).collect();
    let full: Vec<u64> = keys.iter().map(|key| state.full_at.get(key).copied().unwrap_or(0)).collect();
    let rates: Vec<Rate> = buckets.iter().map(|bucket| bucket.rate).collect();
    let (next, wait) = step_all(&rates, &full, now);
    if let Some((wait, position)) = wait {
        return Err(SharedRefusal::Empty(Duration::from_nanos(wait), position));
    }
    if commit {
        for (key, full_at) in keys.into_iter().zip(next) {
            state.set(key, full_at, now);
        }
    }
    Ok(())
}

/// The GCRA step of every bucket at `now` (their rates and "full again" moments at the same positions): the new moments, and
/// the longest wait with its position if any bucket refuses.
fn step_all(rates: &[Rate], full: &[u64], now: u64) -> (Vec<u64>, Option<(u64, usize)>) {
    let mut next = Vec::with_capacity(rates.len());
    let mut wait: Option<(u64, usize)> = None;
    for (position, (rate, full_at)) in rates.iter().zip(full).enumerate() {
        match gcra(*full_at, now, rate) {
            Ok(full_at) => next.push(full_at),
            Err(debt) if wait.is_none_or(|(longest, _)| debt > longest) => wait = Some((debt, position)),
            Err(_) => {}
        }
    }
    (next, wait)
}

/// Runs `future` on the store's runtime and awaits its answer without blocking the caller's executor.
#[cfg(feature = "postgres")]
async fn run<T: Send + 'static>(
    shared: &Shared,
    future: impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let (sender, reply) = Reply::<T, StoreError>::fault_channel();
    drop(shared.handle.spawn(async move { sender.send(future.await) }));
    reply.await
}

/// The statements: one per bucket, on the database's clock.
#[cfg(feature = "postgres")]
mod pg {
    use std::time::Duration;

    use deadpool_postgres::Pool;

    use super::{SharedBucket, SharedRefusal, step_all};
    use crate::clock::duration_nanos;
    use crate::rate::{Rate, emission_interval_nanos};
    use crate::store::StoreError;
    use crate::store::postgres::client;

    /// One bucket as the statements take it.
    pub(super) struct Ask {
        key: String,
        rate: Rate,
        /// Nanoseconds between tokens.
        step: i64,
        /// Nanoseconds of one period: the most debt a bucket may hold.
        period: i64,
        /// Position in the caller's buckets.
        position: usize,
    }

    /// The buckets in key order (so concurrent transactions lock their rows in one order and cannot
    /// deadlock), each with its position.
    pub(super) fn asks(buckets: &[SharedBucket], thread: Option<&str>) -> Vec<Ask> {
        let nanos = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let mut asks: Vec<Ask> = buckets
            .iter()
            .enumerate()
            .map(|(position, bucket)| Ask {
                key: bucket.key(thread),
                rate: bucket.rate,
                step: nanos(emission_interval_nanos(&bucket.rate)),
                period: nanos(duration_nanos(bucket.rate.period())),
                position,
            })
            .collect();
        asks.sort_by(|a, b| a.key.cmp(&b.key));
        asks
    }

    /// The database's clock in nanoseconds since the Unix epoch (microsecond precision).
    macro_rules! db_now {
        () => {
            "((extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000)"
        };
    }

    /// Takes a token if the bucket has one, in one statement: `GREATEST(full_at, now) + step` is the
    /// bucket's new "full again" moment, written only if it is at most one period ahead of now. No row
    /// returned: refused, nothing written. A missing row is a full bucket.
    const TAKE: &str = concat!(
        "WITH clock AS (SELECT ",
        db_now!(),
        " AS now)
INSERT INTO airlock_rate_buckets AS b (bucket_key, full_at)
SELECT $1, clock.now + $2 FROM clock
ON CONFLICT (bucket_key) DO UPDATE
SET full_at = GREATEST(b.full_at + $2, excluded.full_at)
WHERE GREATEST(b.full_at + $2, excluded.full_at) <= excluded.full_at - $2 + $3
RETURNING full_at"
    );

    /// The buckets' "full again" moments and the database's now, for a wait or a check.
    const READ: &str = concat!(
        "SELECT ",
        db_now!(),
        ", coalesce(array_agg(bucket_key), '{}'), coalesce(array_agg(full_at), '{}')
FROM airlock_rate_buckets WHERE bucket_key = ANY($1)"
    );

    /// Drops the rows of full buckets (a missing row is a full bucket, so nothing changes for any caller):
    /// a row whose moment has passed is deleted only if no concurrent take moved it on first, since the
    /// row is locked and the condition checked again.
    const SWEEP: &str = concat!("DELETE FROM airlock_rate_buckets WHERE full_at < ", db_now!());

    /// Every this many takes through one [`SharedRateBuckets`](super::SharedRateBuckets), the full buckets'
    /// rows are swept, so the table follows the active buckets (one per thread, for a per-thread rule)
    /// rather than every thread ever seen.
    pub(super) const SWEEP_EVERY: u64 = 1_024;

    const REFUND: &str = "UPDATE airlock_rate_buckets AS b SET full_at = b.full_at - r.step
FROM unnest($1::text[], $2::bigint[]) AS r(bucket_key, step) WHERE b.bucket_key = r.bucket_key";

    /// Takes a token from every bucket or none; then, if `sweep`, drops the rows of full buckets.
    pub(super) async fn acquire(
        pool: Pool,
        asks: Vec<Ask>,
        sweep: bool,
    ) -> Result<Result<(), SharedRefusal>, StoreError> {
        let mut conn = client(&pool).await?;
        let take = conn.prepare_cached(TAKE).await.map_err(StoreError::storage)?;
        let taken = if let [ask] = asks.as_slice() {
            conn.query_opt(&take, &[&ask.key, &ask.step, &ask.period]).await.map_err(StoreError::storage)?.is_some()
        } else {
            let txn = conn.transaction().await.map_err(StoreError::storage)?;
            let mut all = true;
            for ask in &asks {
                let row =
                    txn.query_opt(&take, &[&ask.key, &ask.step, &ask.period]).await.map_err(StoreError::storage)?;
                if row.is_none() {
                    all = false;
                    break;
                }
            }
            if all {
                txn.commit().await.map_err(StoreError::storage)?;
            } else {
                txn.rollback().await.map_err(StoreError::storage)?;
            }
            all
        };
        if taken {
            if sweep {
                // The call is admitted whatever the sweep does; a failed sweep is retried next time.
                if let Err(err) = conn.execute(SWEEP, &[]).await {
                    tracing::warn!(target: "agent_airlock", error = %err, "full shared rate buckets not swept");
                }
            }
            return Ok(Ok(()));
        }
        // Refused: how long until every bucket could admit, from what they hold now.
        Ok(Err(match waits(&conn, &asks).await? {
            Err(refusal) => refusal,
            // Refilled since the refusal: retry at once.
            Ok(()) => SharedRefusal::Empty(Duration::from_millis(1), asks[0].position),
        }))
    }

    pub(super) async fn check(pool: Pool, asks: Vec<Ask>) -> Result<Result<(), SharedRefusal>, StoreError> {
        let conn = client(&pool).await?;
        waits(&conn, &asks).await
    }

    pub(super) async fn refund(pool: Pool, asks: Vec<Ask>) -> Result<(), StoreError> {
        let conn = client(&pool).await?;
        let keys: Vec<&str> = asks.iter().map(|ask| ask.key.as_str()).collect();
        let steps: Vec<i64> = asks.iter().map(|ask| ask.step).collect();
        conn.execute(REFUND, &[&keys, &steps]).await.map_err(StoreError::storage)?;
        Ok(())
    }

    /// What the local limiter's arithmetic says of the buckets as they are now.
    async fn waits(conn: &tokio_postgres::Client, asks: &[Ask]) -> Result<Result<(), SharedRefusal>, StoreError> {
        let keys: Vec<&str> = asks.iter().map(|ask| ask.key.as_str()).collect();
        let row = conn.query_one(READ, &[&keys]).await.map_err(StoreError::storage)?;
        let now: i64 = row.get(0);
        let found: Vec<String> = row.get(1);
        let full_ats: Vec<i64> = row.get(2);
        let unsigned = |value: i64| u64::try_from(value).unwrap_or(0);
        let full: Vec<u64> = asks
            .iter()
            .map(|ask| found.iter().position(|key| *key == ask.key).map_or(0, |at| unsigned(full_ats[at])))
            .collect();
        let rates: Vec<Rate> = asks.iter().map(|ask| ask.rate).collect();
        Ok(match step_all(&rates, &full, unsigned(now)).1 {
            Some((wait, sorted)) => Err(SharedRefusal::Empty(Duration::from_nanos(wait), asks[sorted].position)),
            None => Ok(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU32, NonZeroU64};

    use super::*;

    fn bucket(rule: &str, count: u32, scope: RateScope) -> SharedBucket {
        SharedBucket {
            tool: "pay".into(),
            rule: rule.into(),
            rate: Rate::new(NonZeroU32::new(count).unwrap(), NonZeroU64::new(60).unwrap()),
            scope,
        }
    }

    #[test]
    fn keys_tell_tools_rules_rates_and_threads_apart() {
        let tool = bucket("pay*", 3, RateScope::PerTool);
        let thread = bucket("pay*", 3, RateScope::PerThread);
        assert_eq!(tool.key(Some("a")), tool.key(Some("b")));
        assert_ne!(thread.key(Some("a")), thread.key(Some("b")));
        assert_eq!(thread.key(None), thread.key(Some("")));
        assert_ne!(tool.key(None), bucket("pay*", 4, RateScope::PerTool).key(None));
        assert_ne!(tool.key(None), bucket("pa*", 3, RateScope::PerTool).key(None));
        // A name holding the separator cannot pose as another bucket.
        let odd = SharedBucket { tool: "pay\",\"x".into(), ..bucket("y", 3, RateScope::PerTool) };
        assert_ne!(
            odd.key(None),
            SharedBucket { tool: "pay".into(), ..bucket("x\",\"y", 3, RateScope::PerTool) }.key(None)
        );
    }

    #[test]
    fn memory_buckets_are_all_or_none_and_refunds_give_tokens_back() {
        let buckets = SharedRateBuckets::in_memory();
        let roomy = bucket("roomy", 100, RateScope::PerTool);
        let tight = bucket("tight", 1, RateScope::PerThread);
        let both = [roomy.clone(), tight.clone()];
        let now = Duration::from_secs(1_000);
        now_or_never(buckets.acquire(&both, Some("t"), now)).unwrap();
        for _ in 0..5 {
            match now_or_never(buckets.acquire(&both, Some("t"), now)) {
                Err(SharedRefusal::Empty(wait, 1)) => assert_eq!(wait, Duration::from_secs(60)),
                other => panic!("refused by the tight bucket, got {other:?}"),
            }
        }
        // Another thread has its own tight bucket; the roomy one lost only the two admitted calls' tokens.
        now_or_never(buckets.acquire(&both, Some("u"), now)).unwrap();
        for _ in 0..98 {
            now_or_never(buckets.acquire(std::slice::from_ref(&roomy), None, now)).unwrap();
        }
        assert!(now_or_never(buckets.check(std::slice::from_ref(&roomy), None, now)).is_err());
        now_or_never(buckets.refund(std::slice::from_ref(&roomy), None, now)).unwrap();
        now_or_never(buckets.check(std::slice::from_ref(&roomy), None, now)).unwrap();
        now_or_never(buckets.acquire(std::slice::from_ref(&roomy), None, now)).unwrap();
        assert!(now_or_never(buckets.acquire(std::slice::from_ref(&roomy), None, now)).is_err());
    }

    /// These futures never wait (the memory backend answers at once).
    fn now_or_never<T>(future: impl std::future::Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(value) => value,
            std::task::Poll::Pending => panic!("a memory bucket waited"),
        }
    }
}
