"""Per-step cost of the exactness guards that trimming added in issue 12, measured in isolation.

A trimmed training forward now (1) reads the parameters' in-place version counters, (2) keeps a
detached copy of the parameters (so rows read after `optimizer.step()` are still exact), (3)
wraps the output as a `PrefixExact` tensor, and the user's `out[:batch_size]` goes through its
`__torch_function__` (4). This script times each on the workload of `bench_fastpath.py`
(3-layer GraphSAGE 100->256->256->47, batch 1024 seeds, output rows = a typical sampled batch)
and prints them beside that workload's measured steady step time, so the overhead is stated as
a share of a step. Timings: median of `--repeat` runs of `--number` calls, one thread.

    .venv/bin/python scripts/bench_safety.py --out bench-results/safety.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from torch_geometric.nn import GraphSAGE

from gnnorch.trim.materialize import parameter_snapshot as _parameter_snapshot, parameter_versions as _parameter_versions
from gnnorch.trim.exact_output import prefix_exact


def per_call(fn, number: int, repeat: int) -> float:
    """Median seconds per call of `fn` over `repeat` runs of `number` calls."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=160_000,
                        help="output rows of one sampled batch (default: 1024 seeds, [15,10,5])")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--step-seconds", type=float, default=None,
                        help="steady step time of the fast path to compare with (seconds); "
                             "default: read from --fastpath JSON if given")
    parser.add_argument("--fastpath", type=Path, default=None,
                        help="bench_fastpath.py JSON output to read the step time from")
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GraphSAGE(100, 256, 3, 47)
    out = torch.randn(args.rows, 47, requires_grad=True) * 1.0
    bs = args.batch_size

    def wrap_and_slice():
        wrapped = prefix_exact(out, bs, lambda reason: out)
        return wrapped[:bs]

    timings = {
        "parameter_versions": per_call(lambda: _parameter_versions(model), args.number,
                                       args.repeat),
        "parameter_snapshot": per_call(lambda: _parameter_snapshot(model), args.number,
                                       args.repeat),
        "wrap_and_slice": per_call(wrap_and_slice, args.number, args.repeat),
        "plain_slice": per_call(lambda: out[:bs], args.number, args.repeat),
    }
    added = (timings["parameter_versions"] + timings["parameter_snapshot"]
             + timings["wrap_and_slice"] - timings["plain_slice"])
    step = args.step_seconds
    if step is None and args.fastpath is not None:
        rows = json.loads(args.fastpath.read_text())
        step = rows.get("fast_path_step_seconds")
    result = {"machine": platform.node(), "torch": torch.__version__, "threads": 1,
              "rows": args.rows, "batch_size": bs,
              "parameters": sum(p.numel() for p in model.parameters()),
              "seconds": timings, "added_per_step_seconds": added,
              "step_seconds": step,
              "added_share_of_step": (added / step) if step else None}
    print(f"{'guard':<22}{'us per step':>14}")
    for name, value in timings.items():
        print(f"{name:<22}{value * 1e6:>14.1f}")
    print(f"{'added per step':<22}{added * 1e6:>14.1f}")
    if step:
        print(f"share of a {step * 1e3:.1f} ms step: {100 * added / step:.3f} %")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
