//! The hot path in time: the cases of `agent_airlock_benches::hot_path` (an 8-field, ~300-byte argument
//! object) side by side with the floor, parsing the same arguments into the typed struct. The same cases
//! are counted in instructions by `scripts/instruction_budget.py` (deterministic, checked in CI).
//!
//! `cargo bench -p agent-airlock-benches --bench hot_path`

use std::hint::black_box;
use std::time::Duration;

use agent_airlock_benches::hot_path::{CASES, Workload};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let workload = Workload::new();
    workload.check();
    let mut group = c.benchmark_group("hot_path");
    for case in CASES {
        group.bench_function(case, |b| {
            b.iter_batched(|| workload.input(case), |input| black_box(workload.run(case, input)), BatchSize::SmallInput)
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
