//! Shared fixtures for the integration tests in `tests/tests/`. The binaries in `src/bin/` are driven by
//! those tests as separate OS processes (races, crashes).

/// Runs a future to completion on a fresh current-thread runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime starts").block_on(future)
}

/// Polls `ready` until it holds, for at most `within`: for a write another thread or process lands.
pub fn eventually(within: std::time::Duration, mut ready: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        if ready() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    ready()
}

/// Opens `path` (created if missing) and holds an exclusive lock on it until the file is dropped: one
/// provisioner (a venv, an npm install, a browser install) at a time across processes.
pub fn exclusive_lock(path: &std::path::Path) -> Result<std::fs::File, String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open the lock file `{}`: {e}", path.display()))?;
    file.lock().map_err(|e| format!("cannot lock `{}`: {e}", path.display()))?;
    Ok(file)
}

/// How many cases a property test runs: `default` (what the suite and CI run), or `PROPTEST_CASES` when it is
/// set to a number, for a deeper hunt on demand (`PROPTEST_CASES=5000 cargo test -p agent-airlock-tests --test
/// schema`). `ProptestConfig::with_cases` alone would ignore the variable.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.trim().parse().ok()).unwrap_or(default)
}

/// Writes one line to standard output and flushes it at once: how the worker binaries (`dispatch_worker`,
/// `ledger_worker`, `pg_dispatch_worker`, `pg_rate_worker`) answer the test that started them, line by line.
/// A closed pipe is ignored (the test may have stopped reading).
pub fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub mod checks_script;
pub mod chromium;
pub mod gateway_bench;
pub mod ledger_fixtures;
pub mod loopback_http;
pub mod mcp_stdio;
pub mod node_env;
pub mod otlp_receiver;
pub mod payments;
pub mod pg_proxy;
pub mod pg_server;
pub mod python_env;
pub mod tracing_capture;
/// The audit key the audit tests and helper binaries share.
pub fn audit_test_key() -> agent_airlock::keys::AuditKey {
    agent_airlock::keys::AuditKey::new("test-key-1", b"0123456789abcdef0123456789abcdef").expect("a valid key")
}

/// Opens the effect store at `path`, retrying while another process has the file open (redb allows one
/// process at a time) until `deadline`.
pub fn open_effects_with_retry(
    path: &std::path::Path,
    deadline: std::time::Instant,
) -> agent_airlock::effect::RedbEffectStore {
    loop {
        match agent_airlock::effect::RedbEffectStore::open(path) {
            Ok(store) => return store,
            Err(agent_airlock::effect::EffectError::AlreadyOpen) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(err) => panic!("the effect store does not open: {err}"),
        }
    }
}
