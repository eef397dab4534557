"""How far two ranks' training is from one process's, for batch sizes the ranks do and do not
divide, and whether runs that seed only inside the function repeat.

Part 1 (sharding). GraphSAGE (2 layers, hidden 32, no dropout) trained with plain SGD on a real
Planetoid graph (Cora, CiteSeer) with full neighbourhoods (``num_neighbors=[-1, -1]``: sampling
draws nothing, so only the seeds' order and batching matter). For each batch size b:

* ``gnnorch p=2``: ``Runtime(train, processes=2, seed=S)``;
* ``one process``: the same function in one process, fed the runtime's per-epoch seed orders
  unshuffled with batch size b: what the two ranks should equal;
* ``old scheme, replayed``: one process fed the *previous* sharding's steps (sessions <= 40):
  each epoch's order padded by wrap-around to a multiple of p, in batches of p * ceil(b / p),
  which is what two equally weighted ranks of ceil(b / p) seeds each averaged to.

It prints the largest parameter difference from ``one process`` and the test accuracy of each,
and the seeds trained per epoch. A difference of ~1e-7 is float summation order.

Part 2 (the data seed). A function that calls ``torch.manual_seed`` itself, run twice from a
caller whose generator is in different states: are the two results identical (the trained
seeds' order, the losses)? For ``processes=2`` (the shard order) and for one process on the
device path with the CPU as the device (its own sampling generators).

    .venv/bin/python scripts/bench_shard_exactness.py [--epochs 3] [--out FILE]
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
sys.path.insert(0, str(ROOT.parent / "src"))

import gnnorch  # noqa: E402
from gnnorch.datasets import load_citeseer, load_cora  # noqa: E402

SEED = 99
P = 2


def train(data, batch_size, epochs, orders=None):
    """SGD over full-neighbourhood NeighborLoader batches; `orders`: one seed order per epoch,
    fed unshuffled (a replay), else the training mask shuffled. The trained model's state and
    the seeds trained per epoch."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 32, num_layers=2,
                      out_channels=int(data.y.max()) + 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader, seen = None, []
    for epoch in range(epochs):
        if orders is not None:
            loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=orders[epoch],
                                    batch_size=batch_size, shuffle=False)
        elif loader is None:
            loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=data.train_mask,
                                    batch_size=batch_size, shuffle=True)
        seeds = 0
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            seeds += int(batch.batch_size)
        seen.append(seeds)
    return {"state": model.state_dict(), "seeds": seen}


def runtime_orders(data, epochs, batch_size):
    """The runtime's per-epoch permutations of the training seeds (its first training loader,
    run seed SEED given), as node ids."""
    from gnnorch.intercept.loader import _loader_seed
    from gnnorch.intercept.shard import ShardSampler
    from gnnorch.launch.context import RankContext
    from gnnorch.launch.plan import CorePlan

    ctx = RankContext(rank=0, world_size=P, plan=CorePlan(P, 0, 1), cores=None, seed=SEED,
                      seed_given=True)
    sampler = ShardSampler(0, P, _loader_seed(ctx, 0), batch_size=batch_size)
    train_idx = data.train_mask.nonzero().view(-1)
    sampler.num_items = train_idx.numel()
    return [train_idx[sampler.permutation(e)] for e in range(epochs)]


def padded(order, p):
    """The previous sharding's epoch: `order` padded by wrap-around to a multiple of p."""
    total = -(-order.numel() // p) * p
    return order.repeat(-(-total // order.numel()))[:total]


def accuracy(state, data) -> float:
    from torch_geometric.nn import GraphSAGE

    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=int(data.y.max()) + 1)
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


def max_diff(a, b) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def sharding_rows(epochs: int) -> list[dict]:
    rows = []
    for name, load in (("Cora", load_cora), ("CiteSeer", load_citeseer)):
        data = load()
        n = int(data.train_mask.sum())
        for b in (20, 21, 25, 64, n - 1):
            orders = runtime_orders(data, epochs, b)
            runtime = gnnorch.Runtime(train, processes=P, seed=SEED, autotune=False,
                                      verbose=False, launch={"threads": 1})
            start = time.perf_counter()
            got = runtime(data, b, epochs)
            wall = time.perf_counter() - start
            ref = train(data, b, epochs, orders=orders)
            per_rank = -(-b // P)
            old = train(data, P * per_rank, epochs, orders=[padded(o, P) for o in orders])
            ranks_seeds = [sum(e["seeds"] for e in runtime.last_run.epochs[r]) // epochs
                           for r in range(P)]
            row = {
                "graph": name, "train_seeds": n, "batch_size": b,
                "p_divides_b": b % P == 0,
                "gnnorch_p2_max_diff": max_diff(got["state"], ref["state"]),
                "old_scheme_max_diff": max_diff(old["state"], ref["state"]),
                "acc_one_process": accuracy(ref["state"], data),
                "acc_gnnorch_p2": accuracy(got["state"], data),
                "acc_old_scheme": accuracy(old["state"], data),
                "seeds_per_epoch_gnnorch_p2": sum(ranks_seeds),
                "seeds_per_epoch_old_scheme": old["seeds"][0],
                "steps_gnnorch_p2": runtime.last_run.stats[0]["gradsync"]["steps"],
                "uneven_batch": runtime.last_run.stats[0]["sampler"]["loaders"][0].get(
                    "uneven_batch"),
                "wall_s_gnnorch_p2": round(wall, 2),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def seeded_inside(data, epochs):
    """Seeds torch itself, then trains on a shuffled, sampled loader; each batch's seed ids
    and loss."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(7)
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    seen, losses = [], []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            seen.append(batch.n_id[:batch.batch_size].tolist())
            losses.append(round(loss.item(), 6))
    return {"seen": seen, "losses": losses}


def data_seed_rows() -> list[dict]:
    data = load_cora()
    rows = []
    for label, options in (("processes=2", {"processes": 2, "launch": {"threads": 1}}),
                           ("processes=1, data_path='device' (CPU as the device)",
                            {"processes": 1, "data_path": "device"})):
        runtime = gnnorch.Runtime(seeded_inside, autotune=False, verbose=False, **options)
        results = []
        for caller in (100, 200):
            torch.manual_seed(caller)
            results.append(runtime(data, 2))
        record = runtime.last_run.stats[0].get("data_seed", {})   # (none before it existed)
        row = {"run": label, "identical": results[0] == results[1],
               "same_seed_order": results[0]["seen"] == results[1]["seen"],
               "source": record.get("source"), "batches": len(results[0]["losses"])}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--parts", nargs="+", choices=("sharding", "data_seed"),
                        default=["sharding", "data_seed"],
                        help="data_seed alone also runs on code before the data seed existed")
    parser.add_argument("--out", type=Path,
                        default=ROOT.parent / "benchmarks/results/shard_exactness.json")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = {
        "command": " ".join(sys.argv), "date": started,
        "machine": {"cpus": len(__import__("os").sched_getaffinity(0)),
                    "python": platform.python_version(), "torch": torch.__version__},
        "epochs": args.epochs, "processes": P, "seed": SEED,
        "sharding": sharding_rows(args.epochs) if "sharding" in args.parts else None,
        "data_seed": data_seed_rows() if "data_seed" in args.parts else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
