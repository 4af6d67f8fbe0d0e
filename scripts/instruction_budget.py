#!/usr/bin/env python3
"""The hot path's instruction budget: counts the instructions one call of each case costs, under callgrind,
and fails when a case has grown more than 10 % over the budget committed in benches/instruction_budget.toml.

Instruction counts do not depend on the machine's load, so this is a deterministic check, not a timed test.
Each case is counted twice by `hot_path_counts` (benches/src/bin): with no call and with RUNS calls, the same
setup in both; the difference divided by RUNS is one call.

    scripts/instruction_budget.py            # check (what .ci/run does)
    scripts/instruction_budget.py --update   # write the measured counts as the new budget; say why in the commit

Needs valgrind (Debian/Ubuntu: `apt install valgrind`).
"""

import argparse
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
CASES = ["direct_parse", "allowed", "ghosts_stripped", "invalid", "denied", "mask_2k"]
RUNS = 200
TOLERANCE = 0.10


def build() -> Path:
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "agent-airlock-benches", "--bin", "hot_path_counts"],
        cwd=ROOT,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "hot_path_counts"


def instructions(binary: Path, case: str, runs: int) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary), case, str(runs), str(RUNS)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        text = out.read_text()
    found = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.MULTILINE)
    if not found:
        sys.exit(f"error: no instruction total in callgrind's output for `{case}`")
    return int(found.group(1))


def per_call(binary: Path, case: str) -> int:
    return round((instructions(binary, case, RUNS) - instructions(binary, case, 0)) / RUNS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the measured counts as the budget")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("error: the instruction budget needs valgrind; install it with `apt install valgrind`")
    binary = build()
    measured = {case: per_call(binary, case) for case in CASES}
    if args.update:
        lines = [
            "# Instructions per call of each hot-path case (scripts/instruction_budget.py), on x86_64, release.",
            "# CI fails when a case grows more than 10 % over its budget. Raise a budget only on purpose, and",
            "# say in the commit what the extra instructions buy.",
            "",
            "[instructions]",
        ]
        lines += [f"{case} = {count}" for case, count in measured.items()]
        BUDGET.write_text("\n".join(lines) + "\n")
        print(f"wrote {BUDGET.relative_to(ROOT)}")
    budget = tomllib.loads(BUDGET.read_text())["instructions"]
    floor = measured["direct_parse"]
    failed = []
    print(f"{'case':<18}{'instructions':>14}{'budget':>10}{'vs budget':>11}{'vs floor':>10}")
    for case, count in measured.items():
        allowed = budget.get(case)
        if allowed is None:
            failed.append(f"`{case}` has no budget in {BUDGET.name}")
            continue
        ratio = count / allowed
        print(f"{case:<18}{count:>14,}{allowed:>10,}{ratio:>10.2f}x{count / floor:>9.2f}x")
        if ratio > 1 + TOLERANCE:
            failed.append(f"`{case}`: {count:,} instructions per call, {ratio - 1:.0%} over its budget of {allowed:,}")
    for failure in failed:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
