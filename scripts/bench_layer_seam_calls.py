"""The layer seam's own time per MessagePassing call inside a real run, now and at a git ref.

A corpus program (`bench_graph_level.py`'s workloads: PyG's `mutag_gin.py` by default, 5
`GINConv` layers of width 32 on batches of 128 small graphs) runs under
``gnnorch.Runtime(train, processes=1, autotune=False)``: once to warm up, then timed. Every
call of `gnnorch.intercept.layers.LayerSeam._on_layer` (the patched `MessagePassing.__call__`:
trimming, the rewrite engine, the cache hooks) is timed, less the time of PyG's own layer call
inside it: what remains is the seam's own host cost per call. Reported: its median and mean
per call, PyG's layer call's mean, the calls, and the timed call's wall seconds; the call's
wall seconds also with ``trim=False, rewrite=False`` (no layer seam is installed then). With ``--ref``, the
package as at that ref (a ``git worktree``, on ``PYTHONPATH``) is measured in alternating fresh
processes, ``--rounds`` times each.

    .venv/bin/python scripts/bench_layer_seam_calls.py --ref 68ced9e \\
        --out benchmarks/results/layer_seam_calls.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import baselines  # noqa: E402  (package_at)

ROWS = {"seams": {}, "trim and rewrite off": {"trim": False, "rewrite": False}}


def measure(workload: str, scale: int, epochs: int, row: str) -> dict:
    """One row in this process: the package on the path is the one measured."""
    import gnnorch          # first: bench_graph_level puts the checkout's src on the path
    from gnnorch.intercept.layers import LayerSeam

    sys.path.insert(0, str(ROOT / "tests" / "pyg_examples"))
    import bench_graph_level

    own: list[float] = []
    inner_total = [0.0]
    on_layer = LayerSeam._on_layer

    def timed_on_layer(self, layer, original, args, kwargs):
        inner = [0.0]

        def layer_call(*a, **k):
            start = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                inner[0] += time.perf_counter() - start

        start = time.perf_counter()
        try:
            return on_layer(self, layer, layer_call, args, kwargs)
        finally:
            own.append(time.perf_counter() - start - inner[0])
            inner_total[0] += inner[0]

    LayerSeam._on_layer = timed_on_layer
    train, call_args = bench_graph_level.workload(workload, scale, epochs, seed=0)
    runtime = gnnorch.Runtime(train, processes=1, autotune=False, **ROWS[row])
    runtime(*call_args[:-1], 1)          # warm-up: first calls, compat checks, decisions
    own.clear()
    inner_total[0] = 0.0
    start = time.perf_counter()
    runtime(*call_args)
    seconds = time.perf_counter() - start
    calls = len(own)
    return {"package": str(Path(gnnorch.__file__).parent), "row": row, "calls": calls,
            "seam_own_us_median": statistics.median(own) * 1e6 if own else None,
            "seam_own_us_mean": statistics.mean(own) * 1e6 if own else None,
            "layer_us_mean": inner_total[0] / calls * 1e6 if calls else None,
            "call_s": seconds}


def run_child(pythonpath: str | None, args: argparse.Namespace, row: str) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, __file__, "--child", row, "--workload", args.workload,
                          "--scale", str(args.scale), "--epochs", str(args.epochs)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _fmt(values: list[float | None], digits: int = 1) -> str:
    """The rounds' values; "-" where a row has no seam call (trim and rewrite off: the layer
    seam is not installed)."""
    return ", ".join("-" if v is None else f"{v:.{digits}f}" for v in values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mutag", choices=("mutag", "proteins", "qm9", "pna"))
    ap.add_argument("--scale", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--ref", default=None, help="a git ref to measure beside the checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", choices=tuple(ROWS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name, least in (("rounds", 1), ("epochs", 1), ("scale", 20)):
        if getattr(args, name) < least:
            ap.error(f"--{name} must be at least {least}, got {getattr(args, name)}")
    if args.workload == "qm9" and args.scale < 300:
        ap.error(f"--scale must be at least 300 molecules for qm9 (100 each go to validation "
                 f"and test), got {args.scale}")
    if args.child:
        print(json.dumps(measure(args.workload, args.scale, args.epochs, args.child)))
        return
    print(baselines.machine_line(), flush=True)
    with baselines.package_at(args.ref) as ref_src:
        sides = {"now": None} if args.ref is None else {"now": None, args.ref: ref_src}
        runs: dict[str, dict[str, list[dict]]] = {
            name: {row: [] for row in ROWS} for name in sides}
        for _ in range(args.rounds):
            for name, path in sides.items():
                for row in ROWS:
                    runs[name][row].append(run_child(path, args, row))
    print(f"\n{args.workload}, scale {args.scale}, {args.epochs} epochs; rounds: "
          f"{args.rounds}\n")
    print("| code | row | seam's own us per call, median (rounds) | mean | PyG's layer call us "
          "| calls | call s (rounds) |")
    print("|---|---|---|---|---|---|---|")
    for name, rows in runs.items():
        for row, results in rows.items():
            print(f"| {name} | {row} | {_fmt([r['seam_own_us_median'] for r in results])} "
                  f"| {_fmt([r['seam_own_us_mean'] for r in results])} "
                  f"| {_fmt([r['layer_us_mean'] for r in results], 0)} "
                  f"| {results[0]['calls']} | {_fmt([r['call_s'] for r in results], 2)} |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"),
                                        "machine": baselines.machine_line(),
                                        "command": " ".join(sys.argv), "runs": runs},
                                       indent=1))


if __name__ == "__main__":
    main()
