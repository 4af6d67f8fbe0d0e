#!/usr/bin/env python3
"""The Python peer on the gitleaks corpus, per provider family, beside ours (issue 28).

Reads the corpus the Rust test `masking_gitleaks` reads (`tests/masking/gitleaks/*.tsv`) and masks every sample
with agent-airlock 0.10.26's `sanitize_output(text, mask_pii=False, mask_secrets=True)`, scoring it exactly as
the Rust test scores `Masker::default()` with `secrets`: a true positive is masked when its secret no longer
occurs in the output, a false positive is changed when the output differs from the input. With `--ours FILE`
(the Rust test's output, whose first lines are its per-family table) it prints one Markdown table of both.

Setup (not needed by CI; the venv lives outside the repository), as for `scripts/python_peer.py`:

    python3 -m venv /tmp/pyairlock && /tmp/pyairlock/bin/pip install agent-airlock==0.10.26
    cargo test -p agent-airlock-tests --test masking masking_gitleaks -- --nocapture > /tmp/ours.txt
    /tmp/pyairlock/bin/python scripts/python_peer_gitleaks.py --ours /tmp/ours.txt
"""
import argparse
import logging
import os
import sys
from collections import defaultdict

logging.disable(logging.CRITICAL)

try:
    import agent_airlock
    from agent_airlock.sanitizer import sanitize_output
except ImportError as err:  # pragma: no cover - setup error
    sys.exit(f"agent-airlock is not importable ({err}); see the setup lines at the top of this file")

CORPUS = os.path.join(os.path.dirname(__file__), "..", "tests", "masking", "gitleaks")


def unescape(text: str) -> str:
    """The Rust test's `unescape`: `\\n`, `\\t`, and `\\` before any other character."""
    out, chars = [], iter(text)
    for c in chars:
        if c != "\\":
            out.append(c)
            continue
        nxt = next(chars, None)
        out.append({"n": "\n", "t": "\t", None: "\\"}.get(nxt, nxt))
    return "".join(out)


def rows(name: str, fields: int):
    with open(os.path.join(CORPUS, name), encoding="utf-8") as tsv:
        for line in tsv.read().split("\n"):
            if line.startswith("#") or not line:
                continue
            row = [unescape(field) for field in line.split("\t", fields - 1)]
            assert len(row) == fields, line
            yield row


def family(rule: str) -> str:
    return rule.split("-")[0]


def masked(text: str) -> str:
    return sanitize_output(text, mask_pii=False, mask_secrets=True).content


def ours_table(path: str) -> dict:
    """`family -> (masked, samples)` from the Rust test's printed table."""
    table = {}
    with open(path, encoding="utf-8") as out:
        for line in out:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 4 and parts[3].endswith("%") and parts[1].isdigit():
                table[parts[0]] = (int(parts[1]), int(parts[2]))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", help="the output of the Rust test `masking_gitleaks` run with --nocapture")
    options = parser.parse_args()

    recall = defaultdict(lambda: [0, 0])
    bare = [0, 0]
    for rule, shape, secret, text in rows("true_positives.tsv", 4):
        hit = secret not in masked(text)
        tally = recall[family(rule)]
        tally[0] += hit
        tally[1] += 1
        if shape == "bare":
            bare[0] += hit
            bare[1] += 1
    changed = defaultdict(lambda: [0, 0])
    for rule, _shape, text in rows("false_positives.tsv", 3):
        tally = changed[family(rule)]
        tally[0] += masked(text) != text
        tally[1] += 1

    hits = sum(t[0] for t in recall.values())
    samples = sum(t[1] for t in recall.values())
    fps = sum(t[0] for t in changed.values())
    negatives = sum(t[1] for t in changed.values())
    print(f"agent-airlock {agent_airlock.__version__}, `sanitize_output(mask_secrets=True, mask_pii=False)`:")
    print(f"true positives masked {hits}/{samples} ({100 * hits / samples:.1f} %), "
          f"bare tokens {bare[0]}/{bare[1]} ({100 * bare[0] / max(bare[1], 1):.1f} %); "
          f"false positives changed {fps}/{negatives} ({100 * fps / negatives:.1f} %)\n")

    ours = ours_table(options.ours) if options.ours else {}
    if options.ours and set(ours) != set(recall):
        sys.exit(f"the families differ: ours only {sorted(set(ours) - set(recall))}, "
                 f"the corpus only {sorted(set(recall) - set(ours))}")
    head = "| family | samples | ours masked | Python masked | false positives | Python changed |"
    print(head)
    print("|---|---|---|---|---|---|")
    for name in sorted(set(recall) | set(changed)):
        hit, count = recall.get(name, (0, 0))
        ours_cell = ""
        if name in ours:
            ours_hit, ours_count = ours[name]
            assert ours_count == count, (name, ours_count, count)
            ours_cell = f"{100 * ours_hit / count:.1f} %"
        python_cell = f"{100 * hit / count:.1f} %" if count else ""
        fp_hit, fp_count = changed.get(name, (0, 0))
        fp_cell = f"{100 * fp_hit / fp_count:.1f} % ({fp_hit}/{fp_count})" if fp_count else ""
        print(f"| {name} | {count} | {ours_cell} | {python_cell} | {fp_count or ''} | {fp_cell} |")


if __name__ == "__main__":
    main()
