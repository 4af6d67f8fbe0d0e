//! Every compile-time diagnostic of `#[airlock_tool]` (one `fail/` case each, its `.stderr` pinned to this
//! machine's stable toolchain) and the shapes that must keep compiling and running (`pass/`).
//!
//! Regenerate the expected output after a deliberate change with `TRYBUILD=overwrite`, then read the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
