"""Training on a NeighborLoader built without shuffle (as PyG's benchmark/multi_gpu/training
does): vanilla PyG against gnnorch.Runtime on this machine, and the same program shuffled.

Until 2026-11-24 (session 8) gnnorch took an unshuffled loader for an evaluation loader for
good: never sharded over ranks, never timed, so the tuner found nothing to tune. Now such a
loader is promoted at its first epoch that trains (`gnnorch.intercept.epoch_role`); its first
epoch (before any model was seen) still runs unpromoted, so the best epoch is reported and the
runtime's first epoch shows in `epoch_seconds`.

Workload: products-like synthetic graph (default 50K nodes, avg degree 25, 100 features, 47
classes), GraphSAGE 100->256->47, fanout [10, 5], batch 1024, Adam; a training NeighborLoader
over the training mask built WITHOUT shuffle; then test accuracy over an unshuffled loader
under no_grad.

Rows, each in a fresh process (same graph, same seed), the function unchanged:
* vanilla PyG (``--vanilla-python``, e.g. ``.venv-baseline/bin/python`` with pyg-lib: the
  strongest baseline), first and last;
* gnnorch defaults, unshuffled: ``gnnorch.Runtime(train)`` (the tuner picks the layout);
* gnnorch p=2, unshuffled: ``Runtime(train, processes=2, autotune=False)`` (sharded in order);
* gnnorch defaults, shuffled: the same function with ``shuffle=True``: what the runtime made of
  the program before it saw unshuffled training loaders as training.

    .venv/bin/python scripts/bench_unshuffled.py --vanilla-python .venv-baseline/bin/python
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import baselines  # fresh-process rows

from bench_link import _machine

ROWS = {
    "vanilla": (None, False),
    "gnnorch defaults, unshuffled": ({}, False),
    "gnnorch p=2, unshuffled": ({"processes": 2, "autotune": False}, False),
    "gnnorch defaults, shuffled": ({}, True),
}


def train(data, epochs=3, shuffle=False, batch_size=1024, fanout=(10, 5), hidden=256):
    """An ordinary PyG node-classification function; returns its own epoch seconds, the last
    epoch's mean loss and the test accuracy."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=list(fanout), input_nodes=data.train_mask,
                            batch_size=batch_size, shuffle=shuffle)
    model = GraphSAGE(data.num_features, hidden, len(fanout), int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    seconds, losses = [], []
    for _ in range(epochs):
        model.train()
        start, total, count = time.perf_counter(), 0.0, 0
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * batch.batch_size
            count += batch.batch_size
        seconds.append(time.perf_counter() - start)
        losses.append(total / count)
    model.eval()
    test = NeighborLoader(data, num_neighbors=list(fanout), input_nodes=data.test_mask,
                          batch_size=4096)
    correct = seen = 0
    with torch.no_grad():
        for batch in test:
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            seen += batch.batch_size
    return {"epoch_seconds": seconds, "loss": losses[-1], "test_acc": correct / seen}


def measure_one(label: str, args: argparse.Namespace) -> dict:
    """One row in this process."""
    from gnnorch.datasets import products_like

    data = products_like(num_nodes=args.nodes, seed=args.seed)
    options, shuffle = ROWS[label]
    start = time.perf_counter()
    extra = {}
    if options is None:
        out = train(data, epochs=args.epochs, shuffle=shuffle)
    else:
        import gnnorch

        runtime = gnnorch.Runtime(train, **options)
        out = runtime(data, epochs=args.epochs, shuffle=shuffle)
        extra = {"processes": runtime.last_run.plan.processes, "summary": runtime.summary()}
    return {"label": label, **out, **extra, "call_wall_seconds": time.perf_counter() - start,
            "best_epoch_seconds": min(out["epoch_seconds"])}


def run_fresh(label: str, args: argparse.Namespace, python: str) -> dict:
    cmd = [python, __file__, "--measure", label, "--nodes", str(args.nodes), "--epochs",
           str(args.epochs), "--seed", str(args.seed)]
    row = baselines.fresh_json_row(cmd, label)
    print(f"  {label:<32} epochs {[round(s, 2) for s in row['epoch_seconds']]} s  "
          f"acc {row['test_acc']:.4f}  wall {row['call_wall_seconds']:.1f} s", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=50_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vanilla-python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/unshuffled.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)   # internal: one row, JSON to stdout
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_one(args.measure, args)))
        return
    rows = [run_fresh("vanilla", args, args.vanilla_python)]
    rows += [run_fresh(label, args, sys.executable) for label in ROWS if label != "vanilla"]
    rows.append(run_fresh("vanilla", args, args.vanilla_python))
    rows[0]["label"], rows[-1]["label"] = "vanilla PyG (first)", "vanilla PyG (last)"
    vanilla = (rows[0]["best_epoch_seconds"] + rows[-1]["best_epoch_seconds"]) / 2
    print("\n| row | ranks | best epoch s | epochs s | vs vanilla | loss | test acc |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        row["speedup_vs_vanilla"] = vanilla / row["best_epoch_seconds"]
        epochs = ", ".join(f"{s:.2f}" for s in row["epoch_seconds"])
        print(f"| {row['label']} | {row.get('processes', 1)} | {row['best_epoch_seconds']:.2f} "
              f"| {epochs} | {row['speedup_vs_vanilla']:.2f}x | {row['loss']:.4f} | "
              f"{row['test_acc']:.4f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_unshuffled", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": _machine(), "argv": sys.argv, "nodes": args.nodes, "epochs": args.epochs,
        "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
