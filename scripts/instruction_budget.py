#!/usr/bin/env python3
"""The hot path's instruction budget: counts the instructions one call of each case costs, under callgrind,
and fails when a case has grown more than 10 % over the budget committed in benches/instruction_budget.toml.

Instruction counts do not depend on the machine's load, so this is a deterministic check, not a timed test.
Each case runs RUNS times in `hot_path_counts` (benches/src/bin), and callgrind counts only inside its
`one_call` (`--toggle-collect`), so setup and the heap's housekeeping between calls are not counted.

    scripts/instruction_budget.py            # check (what .ci/run does)
    scripts/instruction_budget.py --update   # write the measured counts as the new budget; say why in the commit

It then checks that the guard's cost grows linearly with what a model or an upstream controls: each shape of
`benches/src/scaling.rs` (many ghosts, long strings, wide and deep results to mask, ...) is counted at a size n
and at 4 n (`scaling_counts`), and the check fails when 4 n costs more than the bound it prints (6x: linear work
is at most 4x, a quadratic walk 16x). No budget file: the ratio is the machine's own.

Needs valgrind (Debian/Ubuntu: `apt install valgrind`).
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = ROOT / "benches" / "instruction_budget.toml"
# The floors: serde's own cost of parsing the arguments into the typed struct, from a value and from JSON text.
# Each case is read against the floor of its input (the `_text` cases take the arguments as text); reported,
# never held to a budget.
FLOORS = ("direct_parse", "direct_parse_text")
RUNS = 200
# Cases that cost millions of instructions a call are counted over fewer calls (they are not bimodal).
RUNS_OF = {"mask_begin_lines": 5, "ghosts_many": 5}
TOLERANCE = 0.10


# The workspace's `budget` profile: release with one codegen unit. With the default 16, which functions share a
# unit (and so may be inlined into each other) moves with the crate's module layout: moving code between files
# shifted cases that run none of it by 1-4 % (mask_2k, when args/nested.rs was split). One unit makes a count
# depend on the code, not on how it is filed.
PROFILE = "budget"


def build() -> Path:
    subprocess.run(
        # Without the benches' `stores` feature: only what the hot path needs is built (benches/Cargo.toml), the
        # JSON Schema tools for the scaling check's `json_*` shapes, and callgrind's client request that starts
        # the instrumentation after each binary's setup (`--instr-atstart=no` below).
        [
            "cargo", "build", "--profile", PROFILE, "--quiet", "-p", "agent-airlock-benches", "--no-default-features",
            "--features", "json-tool,callgrind", "--bin", "hot_path_counts", "--bin", "scaling_counts",
        ],
        cwd=ROOT,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / PROFILE / "hot_path_counts"


# The heap steps between two modes from one process to the next (~1.7 k instructions per call on the hot path):
# in the high one glibc's `malloc_consolidate` runs during the counted calls, in the low one it does not. A
# count's mode is read from its own profile: consolidation above this many instructions per call is the high one.
HIGH_MODE = 500


class Count:
    """One process's count of a case, per call, and the allocator mode it ran in."""

    def __init__(self, per_call: int, consolidate: int):
        self.per_call = per_call
        self.mode = "high" if consolidate >= HIGH_MODE else "low"


def instructions(binary: Path, case: str, runs: int, args: list[str] | None = None) -> Count:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                # Uninstrumented until the binary asks (`start_callgrind_instrumentation`, after its setup): each
                # process spent ~5 s of CPU under callgrind, nearly all in the setup (the masker's patterns
                # compiled, ~580 M instructions), and ~1.3 s uninstrumented. The counts are the same.
                "--instr-atstart=no",
                "--collect-atstart=no",
                "--toggle-collect=*one_call*",
                f"--callgrind-out-file={out}",
                str(binary),
                *(args if args is not None else [case, str(runs), str(runs)]),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        text = out.read_text()
        found = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.MULTILINE)
        if not found:
            sys.exit(f"error: no instruction total in callgrind's output for `{case}`")
        if int(found.group(1)) == 0:
            sys.exit(
                f"error: callgrind counted no instruction of `{case}`: {binary.name} was built without callgrind's"
                " client request, which starts its instrumentation (the benches' feature `callgrind` and valgrind's"
                " C header <valgrind/callgrind.h>: Debian and Ubuntu ship it in `valgrind`, Fedora in"
                " `valgrind-devel`; the build's warning says what failed)"
            )
        consolidate = 0
        if shutil.which("callgrind_annotate") is not None:
            annotated = subprocess.run(
                ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            line = re.search(r"^\s*([\d,]+) .*:malloc_consolidate ", annotated, re.MULTILINE)
            if line:
                consolidate = int(line.group(1).replace(",", ""))
    return Count(round(int(found.group(1)) / runs), round(consolidate / runs))


def per_call(binary: Path, rounds: int) -> dict[str, list[Count]]:
    """One call's instructions for every case, each counted in `rounds` processes: some cases are bimodal (a
    ~1.8 k-instruction step that comes and goes between processes, e.g. `denied` at 10.1 k or 12.0 k), so the
    check takes the lowest of its rounds and a new budget the highest of its own: a check passes in either
    mode, and a real growth of more than the tolerance over the high mode still fails.

    The processes run two at a time (a count does not depend on what runs beside it): each spends ~1.3 s of
    CPU under valgrind, nearly all of it in the setup before the counted calls (the masker's patterns compiled
    on the first call, uninstrumented), and CI waits for the budget at its end."""
    # The cases are the binary's own (`hot_path::CASES`), so the two lists cannot drift apart.
    cases = subprocess.run([str(binary), "--cases"], check=True, capture_output=True, text=True).stdout.split()
    jobs = [(case, round_) for case in cases for round_ in range(rounds)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda job: instructions(binary, job[0], RUNS_OF.get(job[0], RUNS)), jobs))
    counted: dict[str, list[Count]] = {case: [] for case in cases}
    for (case, _), count in zip(jobs, counts):
        counted[case].append(count)
    return counted


def versus_floor(counts: list[Count], floor: list[Count]) -> str:
    """The case against the floor like for like: the lowest count of each in the same allocator mode (the high
    one when both were seen in it), since a count in one mode over the floor in the other is off by ~20 %."""
    for mode in ("high", "low"):
        mine = [c.per_call for c in counts if c.mode == mode]
        theirs = [c.per_call for c in floor if c.mode == mode]
        if mine and theirs:
            return f"{min(mine) / min(theirs):>6.3f}x {mode}"
    return f"{'-':>7} {'':<4}"


def rewrite_budget(text: str, measured: dict[str, int]) -> str:
    """The budget file with each measured case's number replaced in place: its dated comments (why each budget
    moved) and its layout kept; a case not in it yet is added at the end of `[instructions]`."""
    lines = text.splitlines()
    section = None
    has_table = False
    seen = set()
    end_of_table = len(lines)
    for index, line in enumerate(lines):
        header = re.match(r"\s*\[([^\]]+)\]\s*$", line)
        if header:
            if section == "instructions":
                end_of_table = index
            section = header.group(1).strip()
            has_table |= section == "instructions"
            continue
        entry = re.match(r"(\s*)([A-Za-z0-9_]+)(\s*=\s*)[0-9_]+(.*)$", line)
        if section == "instructions" and entry and entry.group(2) in measured:
            case = entry.group(2)
            lines[index] = f"{entry.group(1)}{case}{entry.group(3)}{measured[case]}{entry.group(4)}"
            seen.add(case)
    if not has_table:
        lines += ["", "[instructions]"]
        end_of_table = len(lines)
    missing = [f"{case} = {count}" for case, count in measured.items() if case not in seen]
    while end_of_table > 0 and not lines[end_of_table - 1].strip():
        end_of_table -= 1
    lines[end_of_table:end_of_table] = missing
    return "\n".join(lines) + "\n"


# How many calls of each scaling shape and size are counted per process, and in how many processes (the lowest
# count is taken): glibc's `malloc_consolidate` runs during the counted calls in some processes and not in others,
# which moved one count by 13 % (`invalid_customers` at 4n: 1.44 M or 1.63 M).
SCALING_RUNS = 2
SCALING_ROUNDS = 2


def scaling(binary: Path) -> list[str]:
    """Counts each shape of `scaling_counts --list` at n and at 4 n (the lowest of its rounds); the failures (4 n
    over the bound times n)."""
    listed = subprocess.run([str(binary), "--list"], check=True, capture_output=True, text=True).stdout.split("\n")
    bound = float(listed[0].split()[1])
    shapes = [(line.split()[0], int(line.split()[1])) for line in listed[1:] if line.strip()]
    jobs = [(shape, size) for shape, n in shapes for size in (n, 4 * n) for _ in range(SCALING_ROUNDS)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(
            pool.map(
                lambda job: instructions(
                    binary, job[0], SCALING_RUNS, [job[0], str(job[1]), str(SCALING_RUNS)]
                ).per_call,
                jobs,
            )
        )
    counted: dict[tuple[str, int], int] = {}
    for job, count in zip(jobs, counts):
        counted[job] = min(count, counted.get(job, count))
    failed = []
    print(f"\n{'scaling shape':<20}{'n':>6}{'at n':>14}{'at 4n':>14}{'4n / n':>9}  (bound {bound:g}x)")
    for shape, n in shapes:
        small, large = counted[(shape, n)], counted[(shape, 4 * n)]
        ratio = large / max(small, 1)
        print(f"{shape:<20}{n:>6}{small:>14,}{large:>14,}{ratio:>8.2f}x")
        if ratio > bound:
            failed.append(f"`{shape}` costs {ratio:.2f}x at 4n what it costs at n ({small:,} -> {large:,}): not linear")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the measured counts as the budget")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("error: the instruction budget needs valgrind; install it with `apt install valgrind`")
    binary = build()
    rounds = 5 if args.update else 3
    counted = per_call(binary, rounds)
    pick = max if args.update else min
    measured = {case: pick(c.per_call for c in counts) for case, counts in counted.items()}
    if args.update:
        BUDGET.write_text(rewrite_budget(BUDGET.read_text(), measured))
        print(f"wrote {BUDGET.relative_to(ROOT)}: add a dated comment above [instructions] saying why")
    budget = tomllib.loads(BUDGET.read_text())["instructions"]
    failed = []
    print(f"{'case':<18}{'instructions':>14}{'budget':>10}{'vs budget':>11}{'vs floor':>13}  counts (mode)")
    for case, count in measured.items():
        allowed = budget.get(case)
        counts = ", ".join(f"{c.per_call:,} ({c.mode})" for c in counted[case])
        floor = counted["direct_parse_text" if case.endswith("_text") else "direct_parse"]
        if allowed is None:
            # Printed all the same, so that a new case's budget can be read off the run that asks for it.
            print(f"{case:<18}{count:>14,}{'-':>10}{'-':>11}{versus_floor(counted[case], floor):>13}  {counts}")
            failed.append(f"`{case}` has no budget in {BUDGET.name}")
            continue
        ratio = count / allowed
        print(f"{case:<18}{count:>14,}{allowed:>10,}{ratio:>10.2f}x{versus_floor(counted[case], floor):>13}  {counts}")
        if ratio > 1 + TOLERANCE and case not in FLOORS:
            failed.append(f"`{case}`: {count:,} instructions per call, {ratio - 1:.0%} over its budget of {allowed:,}")
    print(
        "vs floor: the case's lowest count over its floor's lowest (direct_parse_text for the _text cases, direct_parse\n"
        "for the others), both in the same allocator mode (high: glibc's\n"
        f"malloc_consolidate ran in the counted calls, {HIGH_MODE}+ instructions per call; low: it did not), the high\n"
        "mode when both were seen in it; '-' when they never were. 'instructions' is the lowest count (the\n"
        "highest with --update), whatever its mode."
    )
    failed += scaling(binary.with_name("scaling_counts"))
    for failure in failed:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
