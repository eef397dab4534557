"""What the *trainer thread* issues per batch, in torch operations: getting the batch (``next``
on the loader and the user's ``batch.to(device)``) and the training step, for vanilla PyG, gnnorch's
host path and gnnorch's GPU data path (issue 21; here with the CPU as its device), without and
with the historical-embedding cache (``cache=True``: its lookups, pruning and refreshes on the
trainer's side).

On a GPU every operation the trainer thread issues is a kernel launch paid on the critical path,
and a data-dependent one (``nonzero``, ``.item()``, ...) also waits for the device. The data
path moves sampling, gathering and copies to its producer thread; this counts what is left on
the trainer's. Counting is per thread (`TorchDispatchMode` is thread-local), so the producer
thread's and loader workers' operations are not in the "get the batch" column: that is the
point. Counts do not depend on the machine; they are the same with the CPU as the device except
for the copies a real device adds (none on the trainer's side: they are the producer's).

    .venv/bin/python scripts/bench_trainer_ops.py [--nodes 50000] [--batches 6]
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "src"))

from bench_sampler_ops import SYNCING, OpCounter  # noqa: E402


def train(data, batches: int, hidden: int) -> dict:
    """A PyG user's loop, unchanged but for counting: per batch, the ops of ``next`` + ``.to``
    and of the step, on this (the trainer) thread."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    device = torch.device("cpu")
    model = GraphSAGE(data.num_features, hidden, 3, out_channels=int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[15, 10, 5], batch_size=1024, shuffle=True,
                            input_nodes=data.train_mask)
    rows: list[dict] = []
    for _ in range(2):                  # the second epoch counts (first-epoch set-up aside)
        rows.clear()
        iterator = iter(loader)
        for _ in range(batches):
            with OpCounter() as fetch:
                batch = next(iterator).to(device)
            with OpCounter() as step:
                optimizer.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                optimizer.step()
            rows.append({"fetch": sum(fetch.ops.values()),
                         "fetch_syncing": sum(n for op, n in fetch.ops.items() if op in SYNCING),
                         "step": sum(step.ops.values()),
                         "step_syncing": sum(n for op, n in step.ops.items() if op in SYNCING),
                         "fetch_ops": dict(fetch.ops), "step_ops": dict(step.ops)})
        del iterator
    return {key: statistics.median(r[key] for r in rows)
            for key in ("fetch", "fetch_syncing", "step", "step_syncing")} | {
        "fetch_ops_example": collections.Counter(rows[-1]["fetch_ops"]).most_common(8),
        "step_ops": rows[-1]["step_ops"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--out", default=str(ROOT.parent / "benchmarks/results/trainer_ops.json"))
    args = parser.parse_args()
    import gnnorch
    from gnnorch.datasets import products_like

    data = products_like(args.nodes)
    runs = {"vanilla PyG (num_workers=0)": lambda: train(data, args.batches, args.hidden)}
    for name, options in (
            ("gnnorch host path", {}),
            ("gnnorch data path, CPU as device", {"data_path": "device"}),
            ("gnnorch data path + cache=True (refresh on demand)",
             {"data_path": "device", "cache": {"overlap": "off"}}),
            ("gnnorch data path + cache=True (background refresh: the GPU machine's default)",
             {"data_path": "device", "cache": {"overlap": "thread"}})):
        runtime = gnnorch.Runtime(train, processes=1, autotune=False, verbose=False, **options)
        runs[name] = (lambda rt: lambda: rt(data, args.batches, args.hidden))(runtime)
    results = {}
    for name, run in runs.items():
        torch.manual_seed(0)
        results[name] = run()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print("| trainer thread, per batch (median, 2nd epoch) | get the batch: ops (data-dependent) "
          "| training step: ops (data-dependent) |")
    print("|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['fetch']:.0f} ({r['fetch_syncing']:.0f}) | {r['step']:.0f} "
              f"({r['step_syncing']:.0f}) |")
    base = collections.Counter(next(iter(results.values()))["step_ops"])
    for name, r in results.items():
        print(f"{name}: most frequent ops getting a batch: {r['fetch_ops_example']}")
        extra = collections.Counter(r["step_ops"])
        extra.subtract(base)
        print(f"{name}: step ops beyond vanilla's: "
              f"{sorted(((op, n) for op, n in extra.items() if n), key=lambda x: -abs(x[1]))}")
        print(f"{name}: data-dependent ops in the step: "
              f"{ {op: n for op, n in r['step_ops'].items() if op in SYNCING} }")


if __name__ == "__main__":
    main()
