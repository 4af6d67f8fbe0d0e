//! Every compile-time diagnostic of `#[airlock_tool]`. (The shapes that must keep compiling and running,
//! `tests/ui/pass/`, are test targets of their own in this crate's `Cargo.toml`: programs built by the
//! workspace's test build and run by `cargo test`.) The expected `.stderr` files are recorded with the
//! toolchain the workspace declares as its `rust-version`, the one CI builds with, and kept in two places by
//! who writes the text:
//!
//! - `fail/`: the macro's own diagnostics (`compile_error!` with the macro's wording, at the span it
//!   chose). Their text is this crate's contract and is checked on every toolchain.
//! - `rustc/`: diagnostics rustc writes about the expansion (an unsatisfied trait bound, a future that is not
//!   `Send`, a syntax error in the body, an unresolved `crate = ...` path). Their wording changes between
//!   compiler releases, so they are checked only on the recorded toolchain, and skipped with a notice on
//!   any other.
//!
//! Regenerate the expected output after a deliberate change with `TRYBUILD=overwrite`, then read the diff.
//! On a new toolchain: raise `rust-version` in the workspace `Cargo.toml`, re-record with
//! `TRYBUILD=overwrite`, and review the `rustc/` diff.

use std::process::Command;

/// The toolchain the `.stderr` files were recorded with: the workspace's declared `rust-version`.
const RECORDED_WITH: &str = env!("CARGO_PKG_RUST_VERSION");

/// The compile-fail cases of both folders in one `TestCases`: trybuild checks them all in one
/// `cargo check --keep-going` (in parallel, no code generated) when every case of a run must fail; a `pass` case
/// among them would make it build the cases one `cargo` invocation after another.
#[test]
fn the_macros_own_diagnostics_and_rustcs_on_the_recorded_toolchain() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    let running = rustc_version();
    if is_recorded_toolchain(&running) {
        cases.compile_fail("tests/ui/rustc/*.rs");
    } else {
        eprintln!(
            "skipped tests/ui/rustc/: recorded with rustc {RECORDED_WITH}, this is `{running}`; rustc's wording \
             differs between releases (re-record with TRYBUILD=overwrite after raising `rust-version`)"
        );
    }
}

/// `rustc 1.95.0 (59807616e 2026-04-14)` is release `1.95` (any patch release of it).
fn is_recorded_toolchain(version: &str) -> bool {
    let number = version.split_whitespace().nth(1).unwrap_or_default();
    number == RECORDED_WITH || number.strip_prefix(RECORDED_WITH).is_some_and(|rest| rest.starts_with('.'))
}

fn rustc_version() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output =
        Command::new(&rustc).arg("--version").output().unwrap_or_else(|err| panic!("`{rustc} --version`: {err}"));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn the_recorded_toolchain_is_told_apart_from_others() {
    assert!(is_recorded_toolchain(&format!("rustc {RECORDED_WITH}.0 (59807616e 2026-04-14)")));
    assert!(is_recorded_toolchain(&format!("rustc {RECORDED_WITH}.2")));
    assert!(!is_recorded_toolchain(&format!("rustc {RECORDED_WITH}0.0")));
    assert!(!is_recorded_toolchain("rustc 1.89.0"));
    assert!(!is_recorded_toolchain(""));
}
