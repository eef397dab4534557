"""Behaviour-unchanged check for a refactoring: `bench_fastpath.py`'s configurations measured
in two source trees, alternately, in pairs, on the same machine in one run.

Each measurement is `bench_fastpath.py --measure LABEL` run in a fresh process from the given
tree, with that tree's `src/` first on PYTHONPATH (the same virtual environment), so the two
trees differ only in gnnorch's own code. Pairs alternate their order (A B, B A, A B, ...), so a
drift of the machine over the run does not favour one side. Prints each pair and the ratio of
the medians, and writes JSON.

    git worktree add /tmp/base <commit>
    .venv/bin/python scripts/bench_pairs.py --before /tmp/base --after . --pairs 3 \
        --out benchmarks/results/refactor_pairs.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

LABELS = ("vanilla", "runtime, sampler=gnnorch, trim=False",
          "runtime, fast path (gnnorch + trim)")


def measure(tree: Path, label: str, args: argparse.Namespace) -> dict:
    """One fresh-process measurement of `label` with `tree`'s gnnorch."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    cmd = [sys.executable, str(tree / "scripts" / "bench_fastpath.py"), "--measure", label,
           "--nodes", str(args.nodes), "--epochs", str(args.epochs), "--seed", str(args.seed),
           "--train-ratio", str(args.train_ratio)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the tree before the change")
    ap.add_argument("--after", type=Path, default=Path("."), help="the tree after the change")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--labels", default=";".join(LABELS), help="labels separated by ;")
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-ratio", type=float, default=0.1)
    ap.add_argument("--out", type=Path, default=Path("bench-results/refactor_pairs.json"))
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    labels = [label.strip() for label in args.labels.split(";")]
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus; {args.nodes} nodes, "
          f"{args.epochs} epoch(s); before={trees['before']} after={trees['after']}")
    results: dict[str, dict[str, list[float]]] = {label: {"before": [], "after": []}
                                                   for label in labels}
    for pair in range(args.pairs):
        order = ("before", "after") if pair % 2 == 0 else ("after", "before")
        for label in labels:
            for side in order:
                row = measure(trees[side], label, args)
                results[label][side].append(row["best_epoch_seconds"])
            print(f"pair {pair + 1}: {label:<40} before {results[label]['before'][-1]:7.2f} s"
                  f"  after {results[label]['after'][-1]:7.2f} s", flush=True)
    print("\n| configuration (epoch s) | before (each) | after (each) | after / before "
          "(medians) |\n|---|---|---|---|")
    summary = []
    for label in labels:
        before, after = results[label]["before"], results[label]["after"]
        ratio = statistics.median(after) / statistics.median(before)
        summary.append({"label": label, "before": before, "after": after,
                        "ratio_of_medians": ratio})
        print(f"| {label} | {', '.join(f'{x:.2f}' for x in before)} | "
              f"{', '.join(f'{x:.2f}' for x in after)} | {ratio:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"nodes": args.nodes, "epochs": args.epochs,
                                    "trees": {k: str(v) for k, v in trees.items()},
                                    "pairs": args.pairs, "rows": summary}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
