#!/usr/bin/env python
"""Which way a mode moves a printed metric against vanilla, over many summary lines of one
verbatim run (`scripts/pyg_examples_verbatim.py --out X.json`).

Where a mode cannot print vanilla's lines (two ranks deal a shuffled epoch in another order), a
bias shows as a sign: over n independent models, a mode that trains as one process does ends
above vanilla about n/2 times. PyG's ``benchmark/kernel/main.py`` prints one summary line per
(dataset, model), ``Val Loss: v, Test Accuracy: a ± s, Duration: d``, under a header line
``<dataset> - <model>``:

    .venv/bin/python scripts/verbatim_metric_sign.py results.json --example kernel_main \\
        --mode p2 --line "Val Loss" --header " - " --metrics "Val Loss" "Test Accuracy"

prints one row per summary line (the header before it names it), then per metric how many rows
the mode ends above, equal to and below vanilla, and the two-sided sign-test p-value of the
above/below split.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pyg_examples_verbatim import kept_lines  # noqa: E402


def metric(line: str, name: str) -> float:
    """The number after ``name:`` in `line`."""
    found = re.search(re.escape(name) + r"\s*[:=]\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)",
                      line)
    if found is None:
        raise SystemExit(f"no {name!r} in line {line!r}")
    return float(found.group(1))


def summaries(lines: list[str], prefix: str, header: str) -> list[tuple[str, str]]:
    """(the last header line before it, the line) for each line starting with `prefix`."""
    out, last = [], ""
    for line in lines:
        if header in line and not line.startswith(prefix):
            last = line
        elif line.startswith(prefix):
            out.append((last, line))
    return out


def sign_test(above: int, below: int) -> float:
    """Two-sided binomial sign test of `above` against `below` (ties left out)."""
    n, k = above + below, min(above, below)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a pyg_examples_verbatim.py --out JSON")
    p.add_argument("--example", required=True)
    p.add_argument("--mode", required=True, help="the mode compared with vanilla, e.g. p2")
    p.add_argument("--line", required=True, help="the summary lines' prefix")
    p.add_argument("--header", default=" - ", help="text of the lines that name a summary")
    p.add_argument("--metrics", nargs="+", required=True)
    args = p.parse_args(argv)
    report = json.loads(args.results.read_text())
    found = [r for r in report["results"] if r["example"] == args.example]
    if not found:
        raise SystemExit(f"--example {args.example!r} is not in {args.results}; it has: "
                         + ", ".join(r["example"] for r in report["results"]))
    result = found[-1]
    for mode in ("vanilla", args.mode):
        run = result["runs"].get(mode)
        if run is None or run.get("status", "ok") != "ok":
            raise SystemExit(f"--mode {mode!r}: no finished run of it in {args.results}; "
                             f"runs: {', '.join(result['runs'])}")
    ref = summaries(kept_lines(result["runs"]["vanilla"]["stdout"]), args.line, args.header)
    got = summaries(kept_lines(result["runs"][args.mode]["stdout"]), args.line, args.header)
    if [h for h, _ in ref] != [h for h, _ in got]:
        raise SystemExit("the two runs printed different summaries")
    print("| summary | " + " | ".join(f"{m}: vanilla -> {args.mode}" for m in args.metrics)
          + " |")
    print("|---|" + "---|" * len(args.metrics))
    for (head, a), (_, b) in zip(ref, got):
        cells = [f"{metric(a, m):g} -> {metric(b, m):g}" for m in args.metrics]
        print(f"| {head} | " + " | ".join(cells) + " |")
    print()
    for m in args.metrics:
        diffs = [metric(b, m) - metric(a, m) for (_, a), (_, b) in zip(ref, got)]
        above, below = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        print(f"{m}: {args.mode} above vanilla in {above} of {len(diffs)}, equal in "
              f"{len(diffs) - above - below}, below in {below} (sign test p = "
              f"{sign_test(above, below):.3f}); mean change {sum(diffs) / len(diffs):+.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
