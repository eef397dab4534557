"""One-off costs of gnnorch's first epoch, and rewrites on vs off over a short run (issue 14).

Workload: `bench_runtime.train` (3-layer GraphSAGE 100->256->256->47, fanout [15, 10, 5], batch
1024) on the products-like graph of `--nodes` vertices with `--train-seeds` training seeds
(default 10 batches per epoch), `--epochs` epochs (default 5), one rank on every core
(`processes=1`, autotune off, so the rows compare the features, not plans). Each row runs in a
fresh interpreter:

* ``rewrite=False``: trimming, sampler="auto", tuned allocator; no rewrite engine.
* ``rewrite=True (cold)``: the same with the rewrite engine and an empty decision cache.
* ``rewrite=True (warm)``: the same again, its decision cache left by a long run before it
  (``--warm-epochs`` epochs, default 20, run first and not reported): what a user's second
  run on this machine gets.

With ``--repeats R`` the three rows run R times in rotating order (each time in a fresh
interpreter; the warm row's cache is made once, by its long run) and
the medians are reported, so a difference between rows is not the noise of one run.
Reported per row: first epoch, steady epoch (median of epochs 2..n), total of all epochs, and
the measured one-off costs: the trimming check's forwards, the rewrite engine's probes and
calibration, the sampler choice (at loader construction, before the first epoch). Goals:
first epoch <= 1.5x steady; rewrite=True never slower than rewrite=False over the run.

    .venv/bin/python scripts/bench_oneoff.py --nodes 100000 --out benchmarks/results/oneoff.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import baselines

ROWS = {"rewrite=False": dict(rewrite=False), "rewrite=True (cold)": dict(rewrite=True),
        "rewrite=True (warm)": dict(rewrite=True)}


def measure_here(label: str, graph: Path, epochs: int) -> dict:
    import gnnorch
    from bench_runtime import train

    data = torch.load(graph, weights_only=False)
    runtime = gnnorch.Runtime(train, processes=1, autotune=False, **ROWS.get(label, {}))
    out = runtime(data, epochs=epochs)
    stats = runtime.last_run.stats[0]
    epochs_s = out["epoch_seconds"]
    rewrite = stats.get("rewrite") or {}
    loaders = (stats.get("sampler") or {}).get("loaders", [])
    choice = next((l["sampler_choice"] for l in loaders if l.get("sampler_choice")), None)
    return {"label": label, "epoch_seconds": epochs_s, "first_epoch_seconds": epochs_s[0],
            "steady_epoch_seconds": statistics.median(epochs_s[1:] or epochs_s),
            "total_seconds": sum(epochs_s), "final_loss": out["loss"],
            "one_off": {"trim_check_s": (stats.get("trim") or {}).get("check_s"),
                        "rewrite_probe_and_calibration_s": rewrite.get("overhead_s"),
                        "rewrite_adopted_from_disk": rewrite.get("adopted_from_disk"),
                        "sampler_choice_s": choice["measure_s"] if choice else None,
                        "sampler": choice["backend"] if choice else None},
            "rewritten_calls": sum(l["rewritten_calls"] for l in rewrite.get("layers", []))}


def run_fresh(label: str, graph: Path, epochs: int, cache_dir: str) -> dict:
    env = dict(os.environ, GNNORCH_CACHE_DIR=cache_dir)
    cmd = [sys.executable, __file__, "--measure", label, "--graph", str(graph),
           "--epochs", str(epochs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--train-seeds", type=int, default=10 * 1024)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warm-epochs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/oneoff.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_here(args.measure, args.graph, args.epochs)))
        return
    graph = baselines.ensure_graph(args.nodes, args.seed, args.train_seeds)
    runs: dict[str, list[dict]] = {label: [] for label in ROWS}
    labels = list(ROWS)
    with tempfile.TemporaryDirectory() as warm, tempfile.TemporaryDirectory() as colds:
        for repeat in range(args.repeats):
            order = labels[repeat % 3:] + labels[:repeat % 3]
            for label in order:
                if "warm" in label:
                    cache = warm
                    if not runs[label]:  # the long run that leaves its decisions on disk
                        run_fresh("rewrite=True (cold)", graph, args.warm_epochs, warm)
                else:
                    cache = tempfile.mkdtemp(dir=colds)  # empty: a first run
                row = run_fresh(label, graph, args.epochs, cache)
                runs[label].append(row)
                print(f"  {label:<22} first {row['first_epoch_seconds']:6.2f} s  steady "
                      f"{row['steady_epoch_seconds']:6.2f} s  total {row['total_seconds']:6.2f} s"
                      f"  one-off {row['one_off']}", flush=True)
    rows = []
    for label in labels:
        row = dict(runs[label][-1])
        for key in ("first_epoch_seconds", "steady_epoch_seconds", "total_seconds"):
            row[key] = statistics.median(r[key] for r in runs[label])
        row["repeats"] = [{k: r[k] for k in ("first_epoch_seconds", "steady_epoch_seconds",
                                             "total_seconds")} for r in runs[label]]
        rows.append(row)
    base = rows[0]["total_seconds"]
    print(f"\nmedians of {args.repeats} run(s) each")
    print(f"\n| {args.nodes} nodes, {args.epochs} epochs | first epoch s | steady epoch s | "
          f"first / steady | total s | total vs rewrite=False | trim check s | "
          f"rewrite probes s | sampler choice s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        one = row["one_off"]
        print(f"| {row['label']} | {row['first_epoch_seconds']:.2f} | "
              f"{row['steady_epoch_seconds']:.2f} | "
              f"{row['first_epoch_seconds'] / row['steady_epoch_seconds']:.2f} | "
              f"{row['total_seconds']:.2f} | {row['total_seconds'] / base:.3f} | "
              f"{one['trim_check_s'] or 0:.2f} | {one['rewrite_probe_and_calibration_s'] or 0:.2f}"
              f" | {one['sampler_choice_s'] or 0:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_oneoff", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "argv": sys.argv},
        "nodes": args.nodes, "train_seeds": args.train_seeds, "epochs": args.epochs,
        "repeats": args.repeats,
        "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
