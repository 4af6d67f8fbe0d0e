//! Capturing the `tracing` events of one test while other tests of the binary run beside it.
//!
//! `tracing::subscriber::with_default` alone misses events now and then: a callsite first reached on another
//! thread while no subscriber exists caches its interest as "never", and if that registration races the
//! test's subscriber being created, the cache is never rebuilt for it (a test then saw no event at all).
//! [`with_default`] first installs, once per process, a global subscriber that is interested in every
//! callsite and records nothing, so no callsite can ever be cached as "never"; the test's own subscriber,
//! scoped to its thread, then receives every event made there.

use std::sync::Once;

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// Interested in everything, records nothing: the process-wide default behind every scoped capture.
struct Interested;

impl Subscriber for Interested {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Runs `f` with `subscriber` as this thread's default, after making sure no callsite of the process is
/// cached as uninteresting (see the module's documentation).
pub fn with_default<S: Subscriber + Send + Sync + 'static, T>(subscriber: S, f: impl FnOnce() -> T) -> T {
    static GLOBAL: Once = Once::new();
    GLOBAL.call_once(|| {
        // Another global subscriber already set (by a test's own choice) also counts: then it decides.
        let _ = tracing::subscriber::set_global_default(Interested);
        tracing::callsite::rebuild_interest_cache();
    });
    tracing::subscriber::with_default(subscriber, f)
}
