#!/usr/bin/env python
"""Sparse gradients over two ranks: exact, and what averaging them costs a step.

    .venv/bin/python scripts/bench_sparse_grads.py --out benchmarks/results/sparse_grads.json

Two parts, both with two CPU ranks on gloo:

* ``exactness``: a Node2Vec-shaped model (``Embedding(N, 128, sparse=True)`` trained by
  ``SparseAdam``, a dense head by ``Adam``) under ``gnnorch.Runtime(processes=2)``, each rank
  drawing its own batch of rows a step (`--exact-rows` rows, duplicates and rows shared
  between the ranks included), against one process whose loss is the mean of the two ranks' losses (the
  loss whose gradient the ranks' average is). Reported: the largest absolute difference of
  rank 0's table and head from one process's after `--steps` steps, whether the ranks' tables
  are identical, and the table rows that moved against the rows some batch touched (SparseAdam
  moves those only).
* ``cost``: one step's average of such a gradient (each rank `--rows` rows of 128 floats)
  over two ranks: gnnorch's row-sparse average (`FlatCollectives.average_rows`: all-gathers of
  the row counts, the row indices and the rows, then a coalesce) against the exact dense
  alternative (the gradient made dense, one all-reduce of the whole table), at tables of
  `--tables` rows. Median of `--repeats` rounds after one warm-up.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gnnorch
from gnnorch.intercept.collectives import FlatCollectives

DIM = 128


class Shallow(torch.nn.Module):
    def __init__(self, nodes: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(nodes, DIM, sparse=True)
        self.head = torch.nn.Linear(DIM, 1)

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(index)).squeeze(-1)


def _rows(step: int, rank: int, nodes: int, rows: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randint(0, nodes, (rows,), generator=g)


def _loss(model: Shallow, step: int, rank: int, nodes: int, rows: int) -> torch.Tensor:
    index = _rows(step, rank, nodes, rows)
    return (model(index) - (index % 7).float()).pow(2).mean()


def _optimizers(model: Shallow) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    return (torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.01),
            torch.optim.Adam(model.head.parameters(), lr=0.01))


def _trained(nodes: int, steps: int, loss: Callable[[Shallow, int], torch.Tensor]
             ) -> tuple[Shallow, float]:
    """A model from seed 3 after `steps` steps of `loss(model, step)`, and the seconds."""
    torch.manual_seed(3)
    model = Shallow(nodes)
    opts = _optimizers(model)
    start = time.perf_counter()
    for step in range(steps):
        for opt in opts:
            opt.zero_grad()
        loss(model, step).backward()
        for opt in opts:
            opt.step()
    return model, time.perf_counter() - start


def train(nodes: int, rows: int, steps: int) -> dict:
    rank = dist.get_rank() if dist.is_initialized() else 0
    model, seconds = _trained(nodes, steps,
                              lambda model, step: _loss(model, step, rank, nodes, rows))
    identical = True
    if dist.is_initialized():   # every rank's table against rank 0's
        table = model.emb.weight.detach().clone()
        dist.broadcast(table, src=0)
        same = torch.tensor([int(torch.equal(table, model.emb.weight.detach()))])
        dist.all_reduce(same)
        identical = int(same) == dist.get_world_size()
    return {"state": {k: v.clone() for k, v in model.state_dict().items()},
            "seconds": seconds, "identical": identical}


def exactness(nodes: int, rows: int, steps: int) -> dict:
    runtime = gnnorch.Runtime(train, processes=2, verbose=False)
    ranks = runtime(nodes, rows, steps)
    model, one = _trained(nodes, steps, lambda model, step: (
        _loss(model, step, 0, nodes, rows) + _loss(model, step, 1, nodes, rows)) / 2)
    want = model.state_dict()
    got = ranks["state"]
    torch.manual_seed(3)
    start_table = Shallow(nodes).emb.weight.detach()
    moved = int((got["emb.weight"] != start_table).any(dim=1).sum())
    touched = int(torch.cat([_rows(step, r, nodes, rows) for step in range(steps)
                             for r in (0, 1)]).unique().numel())
    return {"nodes": nodes, "rows_per_rank": rows, "steps": steps,
            "max_abs_diff": {k: float((got[k] - want[k]).abs().max()) for k in want},
            "ranks_identical": bool(ranks["identical"]),
            "table_rows_moved": moved, "table_rows_touched": touched,
            "one_process_s": round(one, 3), "rank0_s": round(ranks["seconds"], 3)}


def _cost_worker(rank: int, port: int, tables: list[int], rows: int, repeats: int,
                 out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    collectives = FlatCollectives(2)
    result = []
    for nodes in tables:
        g = torch.Generator().manual_seed(rank)
        index = torch.randint(0, nodes, (rows,), generator=g)
        grad = torch.sparse_coo_tensor(index.view(1, -1), torch.randn(rows, DIM, generator=g),
                                       (nodes, DIM), check_invariants=False)
        times = {"row_sparse": [], "dense_all_reduce": []}
        for _ in range(repeats + 1):
            dist.barrier()
            tick = time.perf_counter()
            collectives.average_rows([grad], 2)
            times["row_sparse"].append(time.perf_counter() - tick)
            dist.barrier()
            tick = time.perf_counter()
            dense = grad.to_dense()
            dist.all_reduce(dense)
            dense /= 2
            times["dense_all_reduce"].append(time.perf_counter() - tick)
        sparse_avg = collectives.average_rows([grad], 2)[0].to_dense()
        result.append({"table_rows": nodes, "rows_per_rank": rows,
                       "ms": {k: round(1e3 * statistics.median(v[1:]), 2)
                              for k, v in times.items()},
                       "max_abs_diff_between_the_two": float((sparse_avg - dense).abs().max())})
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    dist.destroy_process_group()


def cost(tables: list[int], rows: int, repeats: int) -> list[dict]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/cost.json"
        mp.start_processes(_cost_worker, args=(port, tables, rows, repeats, out), nprocs=2,
                           start_method="spawn")
        return json.loads(Path(out).read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--exact-rows", type=int, default=2_000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--tables", type=int, nargs="+", default=[100_000, 1_000_000, 2_449_029])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    result = {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
              "cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__,
              "exactness": exactness(args.nodes, args.exact_rows, args.steps),
              "cost": cost(args.tables, args.rows, args.repeats)}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
