//! Masks one text or the budget's 2 KB result under callgrind, to see where masking's instructions go
//! (BENCHMARKS.md §2, "The fixed cost of masking a short text"). Only `measured` is counted:
//!
//! ```sh
//! cargo build --profile budget -p agent-airlock-benches --no-default-features --bin mask_profile
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*measured*' \
//!     target/budget/mask_profile leaf 'user0@example.com' 100      # one string, 100 times
//! #   … mask_profile file PATH 1      a file's text, once
//! #   … mask_profile value 20         `hot_path::result_2k()` masked leaf by leaf, 20 times
//! ```
//!
//! Each measured call follows one warm call (lazily compiled patterns, the lazy DFAs' caches), with the default
//! masker and `secrets,pii`. Divide callgrind's total by the runs (and by the text's bytes for a file).

use std::hint::black_box;

use agent_airlock::mask::{MaskSet, Masker};
use agent_airlock_benches::hot_path::result_2k;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: mask_profile value RUNS | mask_profile leaf TEXT RUNS | mask_profile file PATH RUNS");
        std::process::exit(2)
    };
    let masker = Masker::default();
    let set = MaskSet::SECRETS | MaskSet::PII;
    match args.iter().skip(1).map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["value", runs] => {
            let Ok(runs) = runs.parse::<usize>() else { usage() };
            warm_value(&masker, set);
            for _ in 0..runs {
                let mut value = result_2k();
                measured_value(&masker, set, &mut value);
                black_box(value);
            }
        }
        [mode @ ("leaf" | "file"), source, runs] => {
            let Ok(runs) = runs.parse::<usize>() else { usage() };
            let text = if *mode == "file" {
                std::fs::read_to_string(source).unwrap_or_else(|err| panic!("{source}: {err}"))
            } else {
                (*source).to_owned()
            };
            warm(&masker, set, &text);
            for _ in 0..runs {
                measured(&masker, set, &text);
            }
        }
        _ => usage(),
    }
}

/// Warm and measured calls have different bodies (the warm one prints the sizes, and a short masked text itself),
/// so the linker never merges them.
#[inline(never)]
fn warm(masker: &Masker, set: MaskSet, text: &str) {
    let masked = masker.mask_text(black_box(text), set);
    eprintln!("{} bytes, {} masked", text.len(), masked.len());
    if masked.len() <= 200 {
        eprintln!("{masked}");
    }
}

#[inline(never)]
fn measured(masker: &Masker, set: MaskSet, text: &str) {
    black_box(masker.mask_text(black_box(text), set));
}

#[inline(never)]
fn warm_value(masker: &Masker, set: MaskSet) {
    let mut value = result_2k();
    let report = masker.mask_value(&mut value, set);
    eprintln!("{} masked: {value}", report.total());
}

#[inline(never)]
fn measured_value(masker: &Masker, set: MaskSet, value: &mut serde_json::Value) {
    black_box(masker.mask_value(value, set));
}
