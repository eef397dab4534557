"""How long a training function's persistent loader workers outlive it, vanilla vs gnnorch.

    .venv/bin/python scripts/run_end_workers.py [--loaders 3] [--workers 2] [--repeats 3]

The function is written as PyG's examples write one (`examples/hetero/temporal_link_pred.py`,
`examples/reddit.py`): loaders with `persistent_workers=True` built inside it, used by nested
`train()` / `test()` closures. A PyG loader with persistent workers is never freed when the
function returns: it keeps its iterator, which keeps the loader's bound `filter_fn` (PyG's
`DataLoaderIterator`), a reference cycle of PyG's own (`--no-cycle` drops the closures' extra
cycle and changes nothing). After each call the script times what the caller pays to get rid
of the workers: `gc.collect()` and then waiting for every `pt_data_worker` child to exit (at
most 60 s). Vanilla calls the function; gnnorch runs it
with `gnnorch.Runtime(fn, processes=1)`, which stops its loaders' persistent workers when the
run ends. Prints one JSON line per mode, per repeat: the function's seconds, the workers left
when it returned, the seconds `gc.collect()` blocked, and the seconds until no worker was left.
"""
from __future__ import annotations

import argparse
import gc
import json
import time

import psutil
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE


def workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "pt_data_worker"]


def train_fn(data, loaders: int, num_workers: int, cycle: bool = True, epochs: int = 2) -> float:
    kwargs = dict(num_neighbors=[10, 5], batch_size=64, num_workers=num_workers,
                  persistent_workers=True)
    train_loader = NeighborLoader(data, input_nodes=data.train_mask, shuffle=True, **kwargs)
    eval_loaders = [NeighborLoader(data, input_nodes=data.test_mask, **kwargs)
                    for _ in range(loaders - 1)]
    model = GraphSAGE(data.num_features, 32, 2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def train():
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()

    @torch.no_grad()
    def test(loader):
        model.eval()
        correct = total = 0
        for batch in loader:
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
        return correct / total

    if cycle:      # the closures reference each other: a cycle, as in the examples
        train.test = test
        test.train = train
    acc = 0.0
    for _ in range(epochs):
        train()
        for loader in eval_loaders:
            acc = test(loader)
    return acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaders", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-cycle", action="store_true",
                        help="no reference cycle: the loaders are freed when the function returns")
    opts = parser.parse_args()

    import gnnorch
    from gnnorch.datasets import load_planetoid

    data = load_planetoid("Cora")[0]
    gc.disable()   # collect only when the caller does (an automatic collection would land anywhere)
    for mode in ("vanilla", "gnnorch"):
        rows = []
        for _ in range(opts.repeats):
            start = time.perf_counter()
            if mode == "vanilla":
                train_fn(data, opts.loaders, opts.workers, not opts.no_cycle)
            else:
                gnnorch.Runtime(train_fn, processes=1)(data, opts.loaders, opts.workers,
                                                       not opts.no_cycle)
            ran = time.perf_counter() - start
            left = len(workers())
            start = time.perf_counter()
            gc.collect()
            collected = time.perf_counter() - start
            psutil.wait_procs(workers(), timeout=60)
            rows.append({"run_s": round(ran, 2), "workers_left": left,
                         "gc_collect_s": round(collected, 2),
                         "until_no_worker_s": round(time.perf_counter() - start, 2),
                         "still_alive": len(workers())})
        print(json.dumps({"mode": mode, "loaders": opts.loaders, "workers": opts.workers,
                          "cycle": not opts.no_cycle,
                          "repeats": rows}), flush=True)
    gc.enable()


if __name__ == "__main__":
    main()
