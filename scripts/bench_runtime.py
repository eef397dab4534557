"""Epoch time of vanilla PyG vs gnnorch.Runtime for every feasible (p, s, t) on this machine.

Workload (issue #2): products-like synthetic power-law graph (default 200K nodes, avg degree 25,
100 features, 47 classes), 3-layer GraphSAGE 100->256->256->47, fanout [15, 10, 5], batch 1024,
one epoch over the training seeds. The same `train` function runs vanilla (called directly) and
under `Runtime` with each plan; it times its own epoch loop (time.perf_counter around the loop),
so both sides are measured the same way. Start-up cost (process launch, first batches) is reported
separately as the call's wall time. Ratios are vanilla / runtime from one run, on one machine.

Each configuration is measured in a fresh Python process (same graph, same seed): a process's
first epoch runs measurably faster than later ones (allocator state), so measuring several
configurations in one process would favour whichever runs first. Vanilla is measured first and
last; both appear in the table so drift is visible, and ratios use their mean.

    .venv/bin/python scripts/bench_runtime.py --nodes 200000 --out bench-results/runtime.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.loader import NeighborLoader

import gnnorch
from gnnorch.datasets import products_like
from gnnorch.launch.plan import enumerate_plans
from gnnorch.launch.topology import current_topology

from baselines import build_model  # noqa: E402  (scripts/ is on sys.path)


def train(data, epochs=1, batch_size=1024, fanout=(15, 10, 5), hidden=256, seed=0,
          model="sage"):
    """An ordinary PyG training function (`model`: GraphSAGE, or GCN / GAT, as
    `baselines.build_model` builds them); returns its own per-epoch seconds and final loss."""
    torch.manual_seed(seed)
    loader = NeighborLoader(data, num_neighbors=list(fanout), input_nodes=data.train_mask,
                            batch_size=batch_size, shuffle=True)
    net = build_model(model, data.num_features, hidden, len(fanout), int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.003)
    epoch_seconds, loss = [], None
    for _ in range(epochs):
        net.train()
        start = time.perf_counter()
        for batch in loader:
            optimizer.zero_grad()
            out = net(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
        epoch_seconds.append(time.perf_counter() - start)
    return {"epoch_seconds": epoch_seconds, "loss": loss.item()}


def measure(label, fn, data, epochs):
    start = time.perf_counter()
    out = fn(data, epochs=epochs)
    wall = time.perf_counter() - start
    epoch = min(out["epoch_seconds"])
    print(f"  {label:<22} epoch {epoch:8.2f} s   call wall {wall:8.2f} s   loss {out['loss']:.3f}",
          flush=True)
    return {"label": label, "epoch_seconds": out["epoch_seconds"], "best_epoch_seconds": epoch,
            "call_wall_seconds": wall, "final_loss": out["loss"]}


def measure_one(config: str, nodes: int, epochs: int, seed: int) -> dict:
    """Measure one configuration ("vanilla" or "p,s,t") in this process."""
    data = products_like(num_nodes=nodes, seed=seed)
    if config == "vanilla":
        return measure("vanilla PyG", train, data, epochs)
    p, s, t = (int(v) for v in config.split(","))
    runtime = gnnorch.Runtime(train, processes=p, launch={"sampler_cores": s, "threads": t})
    row = measure(f"gnnorch {runtime.plan}", runtime, data, epochs)
    row["plan"] = runtime.plan.to_dict()
    row["cores"] = [c.to_dict() for c in runtime.last_run.cores]
    return row


def run_fresh(config: str, args: argparse.Namespace) -> dict:
    """Measure one configuration in a fresh interpreter; its JSON row is the last stdout line."""
    cmd = [sys.executable, __file__, "--measure", config, "--nodes", str(args.nodes),
           "--epochs", str(args.epochs), "--seed", str(args.seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    lines = proc.stdout.strip().splitlines()
    print("\n".join(line for line in lines[:-1]), flush=True)
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench-results/runtime.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one config, JSON to stdout
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_one(args.measure, args.nodes, args.epochs, args.seed)))
        return

    topo = current_topology()
    t0 = time.perf_counter()
    data = products_like(num_nodes=args.nodes, seed=args.seed)
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, "
          f"{int(data.train_mask.sum())} training seeds (built in {time.perf_counter() - t0:.1f} s)")
    print(f"machine: {topo}; torch {torch.__version__}, torch_geometric "
          f"{torch_geometric.__version__}, python {platform.python_version()}")
    print("each configuration in a fresh process:", flush=True)

    first = run_fresh("vanilla", args)
    rows = [run_fresh(",".join(map(str, plan.as_tuple())), args) for plan in enumerate_plans(topo)]
    last = run_fresh("vanilla", args)
    first["label"], last["label"] = "vanilla PyG (first)", "vanilla PyG (last)"
    vanilla = (first["best_epoch_seconds"] + last["best_epoch_seconds"]) / 2
    rows = [first] + rows + [last]
    for row in rows:
        row["speedup_vs_vanilla"] = vanilla / row["best_epoch_seconds"]

    print(f"\nvanilla reference: mean of first and last = {vanilla:.2f} s")
    print("| configuration | epoch s | speedup vs vanilla | call wall s (incl. start-up) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['label']} | {row['best_epoch_seconds']:.2f} | "
              f"{row['speedup_vs_vanilla']:.2f}x | {row['call_wall_seconds']:.2f} |")
    best = max((r for r in rows if "plan" in r), key=lambda r: r["speedup_vs_vanilla"])
    print(f"\nbest: {best['label']} at {best['speedup_vs_vanilla']:.2f}x vanilla")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_runtime", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"topology": topo.to_dict(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__, "argv": sys.argv},
        "workload": {"nodes": data.num_nodes, "edges": data.num_edges,
                     "train_seeds": int(data.train_mask.sum()), "model": "GraphSAGE 3 layers",
                     "hidden": 256, "fanout": [15, 10, 5], "batch_size": 1024,
                     "epochs": args.epochs},
        "vanilla_reference_seconds": vanilla,
        "rows": rows,
    }, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
