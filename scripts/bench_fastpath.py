"""The exact fast path (issue #4): epoch time of vanilla PyG vs gnnorch's sampler and hop-aware
trimming, and test accuracy on Cora / CiteSeer with and without them.

Part 1, epoch time. Workload: products-like power-law graph (default 200K nodes, mean degree
25, 100 features, 47 classes, 10% training seeds), 3-layer GraphSAGE 100->256->256->47, fanout
[15, 10, 5], batch 1024, one epoch. The same `train` function runs vanilla (called directly:
PyG's NeighborLoader on torch_sparse, model on every sampled vertex) and under `Runtime` with
one rank on all cores and each feature combination:

    sampler="pyg",     trim=False   the runtime's own overhead
    sampler="gnnorch", trim=False   the vectorised sampler alone
    sampler="pyg",     trim=True    trimming alone (hop counts recovered from the edges)
    sampler="gnnorch", trim=True    the fast path

`train` times its own epoch loop, so every configuration is measured the same way, each in a
fresh process (allocator state drifts within a process); vanilla runs first and last and the
reference is their mean. Other features (rewrites, cache, auto-tuning) are off, so the table
isolates the fast path. The sampler's own throughput is `scripts/bench_sampler.py`.

Part 2, accuracy. `examples/train_vanilla.py`'s GraphSAGE on Cora and CiteSeer, 20 epochs,
seeds 0..2: test accuracy of vanilla vs the fast path.

    .venv/bin/python scripts/bench_fastpath.py --nodes 200000 --out bench-results/fastpath.json

Strong baselines (`--baselines`, issue 14; `scripts/baselines.py` says what each row is):
vanilla PyG on torch_sparse, vanilla PyG on pyg-lib, the "PyG expert" set-up (pyg-lib + its
hierarchical trimming + pinned workers, the best `num_workers`), and gnnorch with its defaults,
side by side in one run at each size, with the first and the steady epoch and the peak memory
(PSS of the process tree). Runs in the baseline environment (`bash scripts/setup_baselines.sh`):

    .venv-baseline/bin/python scripts/bench_fastpath.py --baselines \
        --nodes 100000 400000 1600000 --out benchmarks/results/fastpath_baselines.json

``--model gcn`` / ``--model gat`` runs the same side-by-side study with PyG's BasicGNN GCN or
GAT (4 heads) in place of GraphSAGE, in every configuration (the expert trims them the same
way).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.loader import NeighborLoader

import gnnorch
from gnnorch.datasets import load_citeseer, load_cora, products_like
from gnnorch.launch.topology import current_topology

import baselines  # the strong-baseline configurations and the memory-sampling harness
from bench_runtime import train  # the same ordinary PyG training function (scripts/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
MODEL_NAMES = {"sage": "GraphSAGE", "gcn": "GCN", "gat": "GAT (4 heads)"}
CONFIGS = {
    "runtime, sampler=pyg, trim=False": dict(sampler="pyg", trim=False),
    "runtime, sampler=gnnorch, trim=False": dict(sampler="gnnorch", trim=False),
    "runtime, sampler=pyg, trim=True": dict(sampler="pyg", trim=True),
    "runtime, fast path (gnnorch + trim)": dict(sampler="gnnorch", trim=True),
}
# Features the fast-path comparison keeps off, where this version of gnnorch has them.
OTHER_FEATURES_OFF = {"rewrite": False, "cache": False, "autotune": False}


def runtime_options(features: dict) -> dict:
    threads = current_topology().num_usable
    options = dict(processes=1, launch={"threads": threads}, **features)
    options.update({k: v for k, v in OTHER_FEATURES_OFF.items() if k in gnnorch.VALID_OPTIONS})
    return options


def measure_one(label: str, nodes: int, epochs: int, seed: int, train_ratio: float) -> dict:
    data = products_like(num_nodes=nodes, seed=seed, train_ratio=train_ratio)
    start = time.perf_counter()
    if label == "vanilla":
        out, stats = train(data, epochs=epochs), None
    else:
        runtime = gnnorch.Runtime(train, **runtime_options(CONFIGS[label]))
        out = runtime(data, epochs=epochs)
        stats = runtime.last_run.stats[0]
    wall = time.perf_counter() - start
    row = {"label": label, "epoch_seconds": out["epoch_seconds"],
           "best_epoch_seconds": min(out["epoch_seconds"]), "call_wall_seconds": wall,
           "final_loss": out["loss"]}
    if stats is not None:
        row["trim"] = stats.get("trim")
        row["sampler"] = stats.get("sampler")
    return row


def run_fresh(label: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--measure", label, "--nodes", str(args.nodes),
           "--epochs", str(args.epochs), "--seed", str(args.seed),
           "--train-ratio", str(train_ratio(args))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {label:<40} epoch {row['best_epoch_seconds']:8.2f} s  "
          f"loss {row['final_loss']:.3f}", flush=True)
    return row


def train_ratio(args: argparse.Namespace) -> float:
    """Fraction of training seeds: 10%, or `--train-seeds` seeds when given (so a 1M-node graph
    can be timed over the same number of batches as a 200K one)."""
    return args.train_seeds / args.nodes if args.train_seeds else 0.1


def accuracy_study(seeds: int) -> list[dict]:
    spec = importlib.util.spec_from_file_location("train_vanilla", ROOT / "examples" / "train_vanilla.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rows = []
    for name, load in (("Cora", load_cora), ("CiteSeer", load_citeseer)):
        data = load()
        for label in ("vanilla", "fast path"):
            accs = []
            for seed in range(seeds):
                fn = example.train if label == "vanilla" else gnnorch.Runtime(
                    example.train, **runtime_options(CONFIGS["runtime, fast path (gnnorch + trim)"]))
                model = fn(data, epochs=20, seed=seed)
                accs.append(example.evaluate(model, NeighborLoader(
                    data, num_neighbors=[-1, -1], input_nodes=data.test_mask, batch_size=512)))
            rows.append({"dataset": name, "label": label, "accuracies": accs,
                         "mean": statistics.mean(accs)})
            print(f"  {name:<9} {label:<10} test accuracy {statistics.mean(accs):.4f} "
                  f"({', '.join(f'{a:.3f}' for a in accs)})", flush=True)
    return rows


def baseline_study(args: argparse.Namespace) -> None:
    """`--baselines`: every configuration of `scripts/baselines.py` at every size, one run."""
    import torch_geometric.typing as pyg_typing

    if not pyg_typing.WITH_PYG_LIB:
        sys.exit("--baselines needs pyg-lib: bash scripts/setup_baselines.sh, then run this "
                 "script with .venv-baseline/bin/python")
    train_seeds = args.train_seeds or 10 * 1024
    epochs = max(2, args.epochs)
    workers = [int(w) for w in args.workers.split(",")]
    configs = (["vanilla-torch_sparse", "vanilla-pyg_lib"]
               + [f"expert-w{w}" for w in workers] + ["gnnorch"])
    if args.configs:  # a subset (the table then has no speed-up / memory ratios)
        configs = [c for c in configs if c in args.configs.split(",")]
    topo = current_topology()
    print(f"machine: {topo}; torch {torch.__version__}, torch_geometric "
          f"{torch_geometric.__version__}, pyg-lib {importlib.metadata.version('pyg_lib')}, "
          f"python {platform.python_version()}; {train_seeds} training seeds, {epochs} epochs, "
          f"model {args.model}")
    sizes = []
    for nodes in args.nodes:
        path = baselines.ensure_graph(nodes, args.seed, train_seeds)
        print(f"\nproducts-like graph, {nodes} nodes; each configuration in a fresh process:")
        rows = []
        for config in configs:
            row = baselines.run_fresh(__file__, config, path, epochs, sys.executable,
                                      model=args.model)
            print(f"  {config:<22} first {row['first_epoch_seconds']:7.2f} s  steady "
                  f"{row['steady_epoch_seconds']:7.2f} s  peak PSS {row['peak_pss_mb']:7.0f} MB"
                  f"  loss {row['final_loss']:.3f}", flush=True)
            rows.append(row)
        by = {row["config"]: row for row in rows}
        if not ("vanilla-pyg_lib" in by and all(f"expert-w{w}" in by for w in workers)):
            sizes.append({"nodes": nodes, "train_seeds": train_seeds, "rows": rows})
            continue
        expert = min((by[f"expert-w{w}"] for w in workers),
                     key=lambda row: row["steady_epoch_seconds"])
        vanilla = by["vanilla-pyg_lib"]
        for row in rows:
            row["speedup_vs_expert"] = expert["steady_epoch_seconds"] / row["steady_epoch_seconds"]
            row["memory_vs_vanilla_pyg_lib"] = row["peak_pss_mb"] / vanilla["peak_pss_mb"]
        sizes.append({"nodes": nodes, "train_seeds": train_seeds, "expert": expert["config"],
                      "rows": rows})
        print(f"\n| {nodes} nodes | first epoch s | steady epoch s | vs PyG expert | "
              f"peak PSS MB | memory vs vanilla (pyg-lib) |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            label = row["config"] + (" (PyG expert)" if row is expert else "")
            print(f"| {label} | {row['first_epoch_seconds']:.2f} | "
                  f"{row['steady_epoch_seconds']:.2f} | {row['speedup_vs_expert']:.2f}x | "
                  f"{row['peak_pss_mb']:.0f} | {row['memory_vs_vanilla_pyg_lib']:.2f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_fastpath --baselines", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"topology": topo.to_dict(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__,
                    "pyg_lib": importlib.metadata.version("pyg_lib"), "argv": sys.argv},
        "workload": {"model": f"{MODEL_NAMES[args.model]} 3 layers", "hidden": 256,
                     "fanout": [15, 10, 5], "batch_size": 1024, "epochs": epochs,
                     "train_seeds": train_seeds},
        "sizes": sizes,
    }, indent=1))
    print(f"wrote {args.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[200_000])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-seeds", type=int, default=None,
                    help="training seeds per graph (default: 10%% of the nodes)")
    ap.add_argument("--train-ratio", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--accuracy-seeds", type=int, default=3)
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench-results/fastpath.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--baselines", action="store_true",
                    help="vanilla (torch_sparse, pyg-lib), PyG expert and gnnorch side by side")
    ap.add_argument("--configs", default=None,
                    help="--baselines: comma-separated subset of the configurations")
    ap.add_argument("--workers", default="0,1,2",
                    help="--baselines: num_workers values tried for the PyG expert")
    ap.add_argument("--model", default="sage", choices=baselines.MODELS,
                    help="--baselines: the BasicGNN every configuration trains (GAT: 4 heads)")
    args = ap.parse_args()
    if args.model != "sage" and not (args.baselines or args.graph):
        ap.error("--model applies to --baselines only (part 1's table is GraphSAGE's)")
    if args.measure and args.graph:
        baselines.finish_child(baselines.measure_here(args.measure, args.graph, args.epochs,
                                                      model=args.model))
    if args.baselines:
        baseline_study(args)
        return
    if args.measure:
        print(json.dumps(measure_one(args.measure, args.nodes[0], args.epochs, args.seed,
                                     args.train_ratio)))
        return

    topo = current_topology()
    print(f"machine: {topo}; torch {torch.__version__}, torch_geometric "
          f"{torch_geometric.__version__}, python {platform.python_version()}")
    graphs = []
    for nodes in args.nodes:
        sub = argparse.Namespace(**{**vars(args), "nodes": nodes})
        print(f"\nproducts-like graph, {nodes} nodes; each configuration in a fresh process:")
        first = run_fresh("vanilla", sub)
        rows = [run_fresh(label, sub) for label in CONFIGS]
        last = run_fresh("vanilla", sub)
        first["label"], last["label"] = "vanilla PyG (first)", "vanilla PyG (last)"
        vanilla = (first["best_epoch_seconds"] + last["best_epoch_seconds"]) / 2
        rows = [first] + rows + [last]
        for row in rows:
            row["speedup_vs_vanilla"] = vanilla / row["best_epoch_seconds"]
        graphs.append({"nodes": nodes, "train_ratio": train_ratio(sub),
                       "vanilla_reference_seconds": vanilla, "rows": rows})
        print(f"\n| {nodes} nodes: configuration | epoch s | speedup vs vanilla | final loss |")
        print("|---|---|---|---|")
        for row in rows:
            print(f"| {row['label']} | {row['best_epoch_seconds']:.2f} | "
                  f"{row['speedup_vs_vanilla']:.2f}x | {row['final_loss']:.3f} |")
        trim = rows[4].get("trim") or {}
        if trim.get("rows_untrimmed"):
            print(f"trimming: layer output rows computed {trim['rows_computed']} of "
                  f"{trim['rows_untrimmed']} ({trim['rows_computed'] / trim['rows_untrimmed']:.1%})")

    accuracy = []
    if not args.skip_accuracy:
        print(f"\naccuracy, {args.accuracy_seeds} seeds:")
        accuracy = accuracy_study(args.accuracy_seeds)
        print("\n| dataset | vanilla | fast path | difference (pt) |")
        print("|---|---|---|---|")
        for van, fast in zip(accuracy[::2], accuracy[1::2]):
            print(f"| {van['dataset']} | {van['mean']:.4f} | {fast['mean']:.4f} | "
                  f"{100 * (fast['mean'] - van['mean']):+.2f} |")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_fastpath", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"topology": topo.to_dict(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__, "argv": sys.argv},
        "workload": {"model": "GraphSAGE 3 layers", "hidden": 256, "fanout": [15, 10, 5],
                     "batch_size": 1024, "epochs": args.epochs},
        "graphs": graphs, "accuracy": accuracy,
    }, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
