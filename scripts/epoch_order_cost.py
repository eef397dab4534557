#!/usr/bin/env python
"""What dealing PyG's own permutation costs a sharded epoch (`gnnorch.intercept.epoch_order`):

1. the digest the ranks compare, for a permutation of n seeds (Cora's 140, ogbn-products'
   196,615 training seeds, 2.45M: every node of products);
2. the whole start of a training epoch in each of two ranks (`EpochOrder.begin`: the draws,
   the digest, the rank's join and the ``ORDER`` round), over the epochs of a small loader
   whose steps are short, so the round's wait is not hidden behind a slow step.

    .venv/bin/python scripts/epoch_order_cost.py [--epochs 30] [--out results.md]
        [--src PATH]

`--src` runs another checkout's ``src`` (one from before `epoch_order` existed times the
epochs only): the epoch times of the two are the cost of the epoch start's round in place.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

SRC = Path(__file__).resolve().parents[1] / "src"
if "--src" in sys.argv:
    SRC = Path(sys.argv[sys.argv.index("--src") + 1]).resolve()
sys.path.insert(0, str(SRC))
os.environ["PYTHONPATH"] = os.pathsep.join(   # the ranks' interpreters import it too
    [str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import gnnorch  # noqa: E402


def digest_us(n: int, repeats: int = 20) -> float:
    """Median microseconds of `permutation_digest` of a permutation of n."""
    from gnnorch.intercept.epoch_order import permutation_digest

    perm = torch.randperm(n)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        permutation_digest(perm)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def timed_epochs(epochs: int) -> dict:
    """Trains a linear model over a shuffled PyG DataLoader of 256 small graphs for `epochs`
    epochs, timing every `EpochOrder.begin` of this rank; the times (s) and the record."""
    import importlib.util

    times: list[float] = []
    if importlib.util.find_spec("gnnorch.intercept.epoch_order") is None:   # before it
        return {"times": times, "order": None, **_trained(epochs)}
    from gnnorch.intercept import epoch_order

    begin = epoch_order.EpochOrder.begin

    def timed_begin(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return begin(self, *args, **kwargs)
        finally:
            times.append(time.perf_counter() - start)

    epoch_order.EpochOrder.begin = timed_begin
    try:
        trained = _trained(epochs)
    finally:
        epoch_order.EpochOrder.begin = begin
    return {"times": times, **trained}


def _trained(epochs: int) -> dict:
    """The epochs of `timed_epochs`; this rank's loader record's order, and the loop's wall
    seconds (epoch starts included)."""
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn import global_mean_pool

    from gnnorch.launch import context

    torch.manual_seed(0)
    graphs = [Data(x=torch.randn(6, 8), y=torch.tensor([i % 2])) for i in range(256)]
    loader = DataLoader(graphs, batch_size=32, shuffle=True)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = global_mean_pool(model(batch.x), batch.batch)
            torch.nn.functional.cross_entropy(out, batch.y).backward()
            optimizer.step()
    seconds = time.perf_counter() - start
    [record] = context.current().stats["sampler"]["loaders"]
    return {"order": record.get("order"), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--src", type=Path, default=SRC, help="the gnnorch src to run")
    args = parser.parse_args()
    rows = []
    if args.src == Path(__file__).resolve().parents[1] / "src":
        rows += ["| permutation of n | digest (median of 20) |", "|---|---|"]
        rows += [f"| {n:,} | {digest_us(n):,.0f} us |" for n in (140, 196_615, 2_449_029)]
    runtime = gnnorch.Runtime(timed_epochs, processes=2, verbose=False)
    got = runtime(args.epochs)
    times = got["times"][1:] or [float("nan")]   # the first also makes the side group
    steps = runtime.last_run.stats[0]["gradsync"]["steps"]
    rows += ["", f"`{args.src}`:", "",
             "| two ranks, epochs | epoch start (`EpochOrder.begin`), median / max | "
             "wall time an epoch (loop / epochs) | order |", "|---|---|---|---|"]
    rows.append(f"| {args.epochs} ({steps} steps) | {statistics.median(times) * 1e6:.0f} us / "
                f"{max(times) * 1e6:.0f} us | {got['seconds'] / args.epochs * 1e3:.1f} ms | "
                f"{got['order']} |")
    text = "\n".join(rows)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
