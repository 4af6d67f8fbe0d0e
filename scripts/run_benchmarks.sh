#!/usr/bin/env bash
# Runs every benchmark of BENCHMARKS.md in one session, in the order the document reports them, and keeps
# the raw output in one folder (default: $CARGO_TARGET_DIR/bench-results/<date>, or target/...). Takes ~20 minutes on 2 cores.
#
#   scripts/run_benchmarks.sh [OUT_DIR]
#
# The Python peer runs if /tmp/pyairlock holds agent-airlock 0.10.26 (see scripts/python_peer.py);
# otherwise it is skipped and said so.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${CARGO_TARGET_DIR:-target}/bench-results/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
criterion_args=(--warm-up-time 1 --measurement-time 3)

{
    echo "date: $(date -Is)"
    echo "nproc: $(nproc)"
    grep -m1 'model name' /proc/cpuinfo || true
    uname -srm
    rustc --version
    df -h . | tail -1
    uptime
} | tee "$out/machine.txt"

cargo build --release -p agent-airlock-benches --benches --bins
cargo bench -p agent-airlock-benches --bench dispatch -- "${criterion_args[@]}" 2>&1 | tee "$out/dispatch.txt"
if [ -x /tmp/pyairlock/bin/python ]; then
    /tmp/pyairlock/bin/python scripts/python_peer.py --json "$out/python_peer.json" 2>&1 | tee "$out/python_peer.txt"
else
    echo "python peer skipped: /tmp/pyairlock is missing" | tee "$out/python_peer.txt"
fi
cargo bench -p agent-airlock-benches --bench masking -- "${criterion_args[@]}" 2>&1 | tee "$out/masking.txt"
cargo bench -p agent-airlock-benches --bench ledger -- "${criterion_args[@]}" 2>&1 | tee "$out/ledger.txt"
cargo run --release -q -p agent-airlock-benches --bin ledger_throughput -- --spends 1024 --rounds 5 2>&1 \
    | tee "$out/ledger_throughput.txt"
cargo bench -p agent-airlock-benches --bench durable -- "${criterion_args[@]}" 2>&1 | tee "$out/durable.txt"
cargo bench -p agent-airlock-tests --bench storage -- "${criterion_args[@]}" 2>&1 | tee "$out/storage.txt"
# A throwaway PostgreSQL server from the installed binaries (initdb, pg_ctl; Debian: apt install postgresql).
cargo bench -p agent-airlock-benches --bench postgres -- "${criterion_args[@]}" 2>&1 | tee "$out/postgres.txt"
cargo run --release -q -p agent-airlock-benches --bin memory -- --keys 100000 2>&1 | tee "$out/memory.txt"
python3 scripts/compile_time.py --tools 100 --runs 5 2>&1 | tee "$out/compile_time.txt"
# The medians and p10–p90 BENCHMARKS.md reports (criterion itself prints the mean).
python3 scripts/criterion_table.py "${CARGO_TARGET_DIR:-target}/criterion" | tee "$out/criterion_medians.md"
uptime | tee -a "$out/machine.txt"
