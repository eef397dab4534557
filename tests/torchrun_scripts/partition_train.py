"""Partitioned features in two ranks, started by tests/test_partition.py.

    python partition_train.py store RANK STORE_PATH OUT_DIR        # two plain processes
    python -m torch.distributed.run ... partition_train.py train OUT_DIR   # two torchrun nodes

MODE "store": a default gloo group over a FileStore; each rank builds its `FeatureStore` of a
small power-law graph (its partition plus 60 replicated hot rows by in-degree) and gathers
four batches of random ids of its own (different sizes per rank) through
`GroupExchange` rounds; then a `PartitionManager` (the loader seam's object, with a stand-in
context) feeds unequal numbers of batches per rank (5 and 3), and a prefetching feed is left
after 1 and 2 batches: the drain must end both. Writes OUT_DIR/store<r>.pt.
MODE "train": `Runtime(train, partition_features=...)` calls in one torchrun world: the
replicated run, hot budgets 0 / 1 MiB / 64 MiB, and loader workers (prefetch) with and
without partitioning; every rank writes OUT_DIR/train<r>.json (losses, validation accuracy,
the partition statistics of every call).
"""
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets import load_cora, power_law_graph
from gnnorch.intercept.exchange import GroupExchange
from gnnorch.intercept.features_fetch import PartitionManager
from gnnorch.partition import (FeatureStore, PartitionConfig, choose_hot, hot_scores,
                               partition_graph)


def store_mode(rank, store_path, out):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                            world_size=2)
    data = power_law_graph(num_nodes=2000, avg_degree=8.0, num_features=12, num_classes=4,
                           seed=3)
    n = data.num_nodes
    owner = partition_graph(data.edge_index, n, 2)
    row_bytes = data.x[0].numel() * data.x.element_size()
    scores, _ = hot_scores("degree", data.edge_index, n)
    hot = choose_hot(scores, owner, rank, 60 * row_bytes, row_bytes)
    store = FeatureStore.build(data.x, owner, rank, 2, hot)
    exchange = GroupExchange.create(rank, 2)
    gen = torch.Generator().manual_seed(100 + rank)
    gathers = []
    for step in range(4):
        n_id = torch.randperm(n, generator=gen)[:300 + 50 * rank + step]

        def through_group(counts, ids, serve, row_bytes, step=step):
            return exchange.round(7 + step, False, counts, ids, serve, row_bytes)[0]

        x, plan = store.gather(n_id, through_group)
        gathers.append({"n_id": n_id, "x": x, "local": plan.local, "hot": plan.hot,
                        "remote": plan.send_ids.numel()})
    # the loader seam's manager: unequal batch counts, then prefetching feeds left early
    ctx = SimpleNamespace(rank=rank, world_size=2, distributed=True, cache=None)
    manager = PartitionManager(ctx, PartitionConfig(hot_budget_mb=0.002, hotness="degree"))
    args, kwargs, feed = manager.adopt(NeighborLoader.__init__, (data,),
                                       {"num_neighbors": [3], "batch_size": 16}, "eval", -1)
    batches = [Data(n_id=torch.randperm(n, generator=gen)[:40 + i]) for i in range(5 - 2 * rank)]
    fed = list(manager.feed(iter(batches), SimpleNamespace(num_workers=0), feed, False))
    more = [Data(n_id=torch.randperm(n, generator=gen)[:30]) for _ in range(4)]
    left = []
    for batch in manager.feed(iter(more), SimpleNamespace(num_workers=2), feed, False):
        left.append(batch)
        if len(left) == 1 + rank:
            break
    manager.close()
    torch.save({"x": data.x, "owner": owner, "hot": hot, "gathers": gathers,
                "view_has_x": "x" in args[0], "fed": [(b.n_id, b.x) for b in fed],
                "left": [(b.n_id, b.x) for b in left], "stats": manager.stats(),
                "held": store.rows.shape[0], "local": store.local_count},
               Path(out) / f"store{rank}.pt")
    dist.destroy_process_group()


def train(data, epochs, workers):
    """GraphSAGE with dropout (the step draws from the torch RNG), a sharded training loader
    and an evaluation loader over the same data."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                            batch_size=32, shuffle=True, num_workers=workers)
    val = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.val_mask,
                         batch_size=128)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=7, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, accuracy = [], []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in val:
                pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
                correct += int((pred == batch.y[:batch.batch_size]).sum())
                total += batch.batch_size
        accuracy.append(correct / total)
    return {"losses": losses, "accuracy": accuracy}


RUNS = {  # name: (partition_features, loader workers, epochs)
    "replicated": (False, 0, 2),
    "budget_0": (True, 0, 2),
    "budget_small": ({"hot_budget_mb": 1.0}, 0, 2),
    "budget_large": ({"hot_budget_mb": 64.0}, 0, 2),
    "replicated_workers": (False, 1, 1),
    "budget_0_workers": ({"hot_budget_mb": 0.0, "prefetch": True}, 1, 1),
}


def train_mode(out):
    rank = int(os.environ["RANK"])
    data = load_cora()
    results = {}
    for name, (partition, workers, epochs) in RUNS.items():
        # rewrites off: their orders are chosen by timing, which may differ between calls
        runtime = gnnorch.Runtime(train, launch={"threads": 1, "bind": False}, seed=1234,
                                  sampler="gnnorch",
                                  rewrite=False, partition_features=partition)
        value = runtime(data, epochs, workers)
        results[name] = {**value, "partition": runtime.last_run.stats[rank].get("partition")}
    (Path(out) / f"train{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    if sys.argv[1] == "store":
        store_mode(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "train":
        train_mode(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
