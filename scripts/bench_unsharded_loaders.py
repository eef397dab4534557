"""Graph-level loaders whose batches cannot be dealt out over ranks, under the runtime: do they
run, train what vanilla PyG trains, and count their seeds once?

A GIN (two ``GINConv`` layers without BatchNorm, sum pooling, Adam) trains 3 epochs on a
MUTAG-like set (188 molecule-like graphs, `verbatim_datasets.mutag_like`) through a
``DataLoader`` built three ways:

* ``dynamic``: ``batch_sampler=DynamicBatchSampler(dataset, max_num=300, mode="node",
  shuffle=True)`` without ``num_steps``: batches of at most 300 nodes, and no length;
* ``iterable``: an ``IterableDataset`` streaming the graphs (no length, no index);
* ``sized`` (the control): ``batch_size=32, shuffle=True``, dealt out over ranks.

Each runs in vanilla PyG, then under ``gnnorch.Runtime`` with one process, two ranks
(``processes=2``) and the device path with the CPU as the device. Reported: whether it ran
(the error otherwise), the largest difference of the summed per-epoch losses from vanilla's
(the losses of rank 0's batches: the sized loader's two ranks each train half of every batch,
so their sums are not vanilla's and are not compared), and for two ranks the seeds (graphs)
the run's epoch records count over both ranks against the graphs trained (188 an epoch): the
tuner and the report read that count as the run's throughput.

    .venv/bin/python scripts/bench_unsharded_loaders.py [--out FILE]
    PYTHONPATH=/path/to/old/src .venv/bin/python scripts/bench_unsharded_loaders.py  # old code
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import gnnorch  # noqa: E402
from verbatim_datasets import mutag_like  # noqa: E402

EPOCHS = 3
MODES = {"one process": {"processes": 1}, "p2": {"processes": 2},
         "device": {"processes": 1, "data_path": "device"}}


class Gin(torch.nn.Module):
    """Two GIN layers (no BatchNorm: graph-level epochs may be sharded), sum pooling."""

    def __init__(self) -> None:
        from torch_geometric.nn import MLP, GINConv

        super().__init__()
        self.conv1 = GINConv(MLP([7, 32, 32], norm=None))
        self.conv2 = GINConv(MLP([32, 32, 32], norm=None))
        self.head = torch.nn.Linear(32, 2)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool

        x = self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu()
        return self.head(global_add_pool(x, batch))


class Stream(torch.utils.data.IterableDataset):
    """The graphs as a stream: no length, no index to deal out."""

    def __init__(self, graphs: list) -> None:
        self.graphs = graphs

    def __iter__(self):
        return iter(self.graphs)


def train(kind: str) -> list[float]:
    """3 epochs of the GIN over the `kind` loader; each epoch's summed batch losses."""
    from torch_geometric.loader import DataLoader, DynamicBatchSampler

    torch.manual_seed(0)
    graphs = mutag_like()
    if kind == "dynamic":
        loader = DataLoader(graphs, batch_sampler=DynamicBatchSampler(
            graphs, max_num=300, mode="node", shuffle=True))
    elif kind == "iterable":
        loader = DataLoader(Stream(graphs), batch_size=32)
    else:
        loader = DataLoader(graphs, batch_size=32, shuffle=True)
    model = Gin()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    sums = []
    for _ in range(EPOCHS):
        total = 0.0
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y)
            loss.backward()
            optimizer.step()
            total += float(loss)
        sums.append(total)
    return sums


def measure(kind: str) -> dict:
    vanilla = train(kind)
    row = {"loader": kind, "vanilla": vanilla, "modes": {}}
    for mode, options in MODES.items():
        start = time.perf_counter()
        try:
            runtime = gnnorch.Runtime(train, verbose=False, **options)
            sums = runtime(kind)
        except Exception as exc:   # the finding: reported, not raised
            row["modes"][mode] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        run = runtime.last_run
        out = {"seconds": round(time.perf_counter() - start, 2), "sums": sums}
        if not (mode == "p2" and kind == "sized"):
            out["max_abs_diff"] = max(abs(a - b) for a, b in zip(sums, vanilla))
        ranks = run.plan.processes
        timed = [e for r in range(ranks) for e in run.epochs[r]]
        out["epochs_timed"] = len(run.epochs[0])
        out["seeds_counted"] = sum(e["seeds"] for e in timed)
        out["seeds_trained"] = 188 * len(run.epochs[0])
        loaders = run.stats[0].get("sampler", {}).get("loaders", [])
        out["kept_whole"] = loaders[0].get("kept_whole") if loaders else None
        row["modes"][mode] = out
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    rows = [measure(kind) for kind in ("dynamic", "iterable", "sized")]
    for row in rows:
        for mode, out in row["modes"].items():
            if "error" in out:
                print(f"{row['loader']:9s} {mode:12s} FAILED {out['error']}")
                continue
            diff = out.get("max_abs_diff")
            print(f"{row['loader']:9s} {mode:12s} diff {'-' if diff is None else f'{diff:.1e}'}"
                  f"  seeds counted {out['seeds_counted']} / trained {out['seeds_trained']}"
                  f"  kept_whole: {(out['kept_whole'] or '-')[:60]}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.node()} ({torch.get_num_threads()} threads)",
            "gnnorch": str(Path(gnnorch.__file__).parent), "torch": torch.__version__,
            "command": " ".join(sys.argv), "epochs": EPOCHS, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
