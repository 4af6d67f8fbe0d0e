//! Shared fixtures for the integration tests in `tests/tests/`. The binaries in `src/bin/` are driven by
//! those tests as separate OS processes (races, crashes).

/// Runs a future to completion on a fresh current-thread runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime starts").block_on(future)
}

pub mod ledger_fixtures;
pub mod payments;
