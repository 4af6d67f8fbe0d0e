//! Runs one hot-path case a given number of times, for an instruction count under callgrind:
//! `hot_path_counts CASE RUNS PREPARED`. It prepares `PREPARED` inputs and runs the first `RUNS` of them,
//! each in `one_call`, the only function callgrind is told to count (`scripts/instruction_budget.py`).
//! `hot_path_counts --cases` lists the cases, one a line: the script counts each.

use std::hint::black_box;

use agent_airlock_benches::hot_path::{CASES, Input, Workload};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--cases") {
        CASES.iter().for_each(|case| println!("{case}"));
        return;
    }
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
    // Callgrind instruments from here on (run with `--instr-atstart=no`): the setup above ran ~4x faster.
    agent_airlock_benches::start_callgrind_instrumentation();
    for input in inputs.iter_mut().take(runs) {
        let input = input.take().expect("each input is used once");
        one_call(&workload, case, input);
    }
    // The inputs left unused are leaked rather than freed: only calls are counted.
    std::mem::forget(inputs);
}

/// One call, its result freed: what the budget counts (callgrind collects only inside this function,
/// `--toggle-collect=*one_call*`, so setup, the first call and the heap's own housekeeping outside it
/// are not counted).
#[inline(never)]
fn one_call(workload: &Workload, case: &str, input: Input) {
    drop(black_box(workload.run(case, input)));
}
