//! Runs one hot-path case a given number of times, for an instruction count under callgrind:
//! `hot_path_counts CASE RUNS PREPARED`. It always prepares `PREPARED` inputs and runs the first `RUNS`
//! of them, so a run with `RUNS = 0` does all the same setup: the difference between two counts divided
//! by `RUNS` is what one call costs (`scripts/instruction_budget.py` does that for every case).

use std::hint::black_box;

use agent_airlock_benches::hot_path::{CASES, Workload};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: hot_path_counts CASE RUNS PREPARED  (CASE one of {CASES:?}; RUNS <= PREPARED)");
        std::process::exit(2)
    };
    let [_, case, runs, prepared] = args.as_slice() else { usage() };
    let (Ok(runs), Ok(prepared)) = (runs.parse::<usize>(), prepared.parse::<usize>()) else { usage() };
    if !CASES.contains(&case.as_str()) || runs > prepared {
        usage()
    }
    let workload = Workload::new();
    workload.check();
    // A first call outside the counted ones: lazily compiled patterns and the like are setup.
    black_box(workload.run(case, workload.input(case)));
    let mut inputs: Vec<_> = (0..prepared).map(|_| Some(workload.input(case))).collect();
    let mut outputs = Vec::with_capacity(prepared);
    for input in inputs.iter_mut().take(runs) {
        let input = input.take().expect("each input is used once");
        outputs.push(workload.run(case, input));
    }
    black_box(&outputs);
    // Freeing a call's result is part of the call; freeing an input is too (a dispatch consumes its call),
    // so the inputs left unused are leaked rather than freed, or the run without calls would count them.
    drop(outputs);
    std::mem::forget(inputs);
}
