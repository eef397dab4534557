"""`Runtime(launch={"allocator": ...})`: epoch times with glibc malloc left alone vs tuned.

Workload: the products-like graph (``--nodes``, default 60K), the ordinary 3-layer GraphSAGE
[15, 10, 5] / batch 1024 training function of bench_runtime.py, one process with all usable
cores as trainer threads, ``--epochs`` epochs. Each run is a fresh process (malloc settings are
process-wide); the two settings alternate, ``--repeats`` times each.

    .venv/bin/python scripts/bench_allocator.py --nodes 60000 --epochs 5 --repeats 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def measure(allocator: str, args: argparse.Namespace) -> list[float]:
    """Epoch seconds of one run in this (fresh) process."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gnnorch
    from bench_runtime import train
    from gnnorch.datasets import products_like

    data = products_like(num_nodes=args.nodes, seed=0)
    threads = len(os.sched_getaffinity(0))
    runtime = gnnorch.Runtime(train, processes=1, device="cpu",
                              launch={"sampler_cores": 0, "threads": threads,
                                      "allocator": allocator})
    return runtime(data, epochs=args.epochs)["epoch_seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=60_000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="bench-results/allocator.json")
    ap.add_argument("--measure", choices=["default", "tuned"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args)))
        return
    runs: dict[str, list[list[float]]] = {"default": [], "tuned": []}
    for _ in range(args.repeats):
        for allocator in runs:
            cmd = [sys.executable, __file__, "--measure", allocator, "--nodes", str(args.nodes),
                   "--epochs", str(args.epochs)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            epochs = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[allocator].append(epochs)
            print(f"  allocator={allocator}: epochs {[round(e, 2) for e in epochs]}", flush=True)
    print("\n| allocator | first epoch s (median) | later epochs s (median) |\n|---|---|---|")
    summary = {}
    for allocator, rows in runs.items():
        first = statistics.median(r[0] for r in rows)
        later = statistics.median(e for r in rows for e in r[1:])
        summary[allocator] = {"first": first, "later": later}
        print(f"| {allocator} | {first:.2f} | {later:.2f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
