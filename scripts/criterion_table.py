#!/usr/bin/env python3
"""Median and spread of criterion's samples, as BENCHMARKS.md reports them.

criterion prints the mean (a slope over its linear sampling) with a confidence interval; BENCHMARKS.md
reports the median of the per-iteration time of the samples and their 10th–90th percentiles, read from
`<target>/criterion/<group>/<bench>/new/sample.json` after a `cargo bench` run.

Usage: python3 scripts/criterion_table.py [CRITERION_DIR] [--filter SUBSTRING]
(CRITERION_DIR defaults to $CARGO_TARGET_DIR/criterion, or target/criterion.)
"""
import argparse
import json
import os
import statistics


def fmt(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e5:
        return f"{ns / 1e3:.0f} µs"
    if ns >= 1e4:
        return f"{ns / 1e3:.1f} µs"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def main() -> None:
    default = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=default)
    parser.add_argument("--filter", default="")
    args = parser.parse_args()
    rows = []
    for dirpath, _, files in os.walk(args.root):
        if not dirpath.endswith(os.sep + "new") or "sample.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            name = json.load(f)["full_id"]
        if args.filter not in name:
            continue
        with open(os.path.join(dirpath, "sample.json")) as f:
            sample = json.load(f)
        per_iter = sorted(t / i for i, t in zip(sample["iters"], sample["times"]))
        n = len(per_iter)
        pick = lambda q: per_iter[min(n - 1, round(q * (n - 1)))]
        rows.append((name, statistics.median(per_iter), pick(0.1), pick(0.9), n))
    print("| bench | median | p10–p90 | samples |")
    print("|---|---|---|---|")
    for name, median, p10, p90, n in sorted(rows):
        print(f"| {name} | {fmt(median)} | {fmt(p10)}–{fmt(p90)} | {n} |")


if __name__ == "__main__":
    main()
