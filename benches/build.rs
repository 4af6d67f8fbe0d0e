//! With the feature `callgrind` (what `scripts/instruction_budget.py` builds), compiles callgrind's client
//! request to start instrumenting from valgrind's own header (`csrc/callgrind.c`) and sets `airlock_callgrind`.
//! Without the feature, or without the header, nothing: the README's test command, the criterion benchmarks and
//! an `--all-features` build need no valgrind (the budget's script refuses counts made without the request).

fn main() {
    println!("cargo::rerun-if-changed=csrc/callgrind.c");
    println!("cargo::rustc-check-cfg=cfg(airlock_callgrind)");
    #[cfg(feature = "callgrind")]
    match cc::Build::new().file("csrc/callgrind.c").try_compile("airlock_callgrind") {
        Ok(()) => println!("cargo::rustc-cfg=airlock_callgrind"),
        Err(error) => println!(
            "cargo::warning=built without callgrind's client request: valgrind's C header <valgrind/callgrind.h> \
             did not compile (Debian and Ubuntu ship it in the package `valgrind`, Fedora in `valgrind-devel`): {}",
            error.to_string().replace('\n', " ")
        ),
    }
}
