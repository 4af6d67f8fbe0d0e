//! Runs one scaling shape at one size, for an instruction count under callgrind:
//! `scaling_counts SHAPE N RUNS`. It prepares `RUNS` inputs of size `N` and runs each in `one_call`, the only
//! function callgrind is told to count (`scripts/instruction_budget.py` compares `4 N` with `N`).
//! `scaling_counts --list` prints the bound and each shape with its `N`, one per line.

use std::hint::black_box;

use agent_airlock_benches::hot_path::Workload;
use agent_airlock_benches::scaling;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--list") {
        println!("bound {}", scaling::LINEAR_BOUND);
        for (shape, n) in scaling::shapes() {
            println!("{shape} {n}");
        }
        return;
    }
    let shapes: Vec<&str> = scaling::shapes().map(|(shape, _)| shape).collect();
    let usage = || -> ! {
        eprintln!("usage: scaling_counts SHAPE N RUNS  (SHAPE one of {shapes:?})");
        std::process::exit(2)
    };
    let [_, shape, n, runs] = args.as_slice() else { usage() };
    let (Ok(n), Ok(runs)) = (n.parse::<usize>(), runs.parse::<usize>()) else { usage() };
    if !shapes.contains(&shape.as_str()) || n == 0 || runs == 0 {
        usage()
    }
    let workload = Workload::new();
    scaling::check(&workload);
    // A first call outside the counted ones: lazily compiled patterns and the like are setup.
    black_box(scaling::run(&workload, shape, scaling::input(shape, n)));
    let inputs: Vec<_> = (0..runs).map(|_| scaling::input(shape, n)).collect();
    // Callgrind instruments from here on (run with `--instr-atstart=no`): the setup above ran ~4x faster.
    agent_airlock_benches::start_callgrind_instrumentation();
    for input in inputs {
        one_call(&workload, shape, input);
    }
}

/// One call, its result freed: what is counted (`--toggle-collect=*one_call*`).
#[inline(never)]
fn one_call(workload: &Workload, shape: &str, input: agent_airlock_benches::hot_path::Input) {
    drop(black_box(scaling::run(workload, shape, input)));
}
