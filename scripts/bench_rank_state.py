#!/usr/bin/env python
"""Two ranks against one process where every rank trains every batch (full-batch GraphSAGE
on Cora), so that two ranks must leave exactly one process's parameters (up to float
summation order): what differs is the ranks' handling of the training state.

    .venv/bin/python scripts/bench_rank_state.py --out benchmarks/results/rank_state.json
    PYTHONPATH=<checkout>/src .venv/bin/python scripts/bench_rank_state.py --out before.json

Cases:
* ``set_optimizer``: the model is built in the function, the optimizer from a ``set`` of its
  parameters (as PyG's ``examples/tgn.py`` does). A set iterates by memory address, so its
  order differs between processes; repeated `--repeats` times, since whether two ranks' orders
  differ is chance.
* ``list_optimizer``: the same with ``model.parameters()`` (the control).
* ``model_argument``: the model and an SGD optimizer with momentum are built by the caller
  and passed to the function as arguments (they reach the ranks pickled).

Per run: the largest absolute difference of rank 0's parameters from one process's, the
largest between the two ranks, and (``model_argument``) between the caller's model after the
run and one process's trained model (one process trains the caller's model in place).
Every run, one process included, uses one thread (the ranks' default here), so that thread
count does not enter the difference.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

import gnnorch
from gnnorch.datasets import load_planetoid

STEPS = 30


def build(data, seed: int = 100):
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(seed)
    return GraphSAGE(data.num_features, 64, num_layers=3, out_channels=7)


def fit(model, opt, data, out_dir: str | None) -> dict:
    """STEPS full-batch steps; each rank saves its parameters to `out_dir`."""
    for _ in range(STEPS):
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        torch.nn.functional.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if out_dir is not None:
        rank = dist.get_rank() if dist.is_initialized() else 0
        torch.save(state, f"{out_dir}/rank{rank}.pt")
    return state


def train_built(data, container: str, out_dir: str | None) -> dict:
    model = build(data)
    params = set(model.parameters()) if container == "set" else list(model.parameters())
    return fit(model, torch.optim.Adam(params, lr=0.01), data, out_dir)


def train_given(model, opt, data, out_dir: str | None) -> dict:
    return fit(model, opt, data, out_dir)


def train_listed_set(model, data, out_dir: str | None) -> dict:
    return fit(model, torch.optim.Adam(list(set(model.parameters())), lr=0.01), data, out_dir)


def _given(data):
    model = build(data)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def run_case(case: str, data) -> dict:
    torch.set_num_threads(1)
    one = (train_given(*_given(data), data, None) if case == "model_argument"
           else train_built(data, "list", None))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        function = {"model_argument": train_given,
                    "model_argument_listed_set": train_listed_set}.get(case, train_built)
        runtime = gnnorch.Runtime(function, processes=2)
        if case == "model_argument":
            model, opt = _given(data)
            runtime(model, opt, data, tmp)
        elif case == "model_argument_listed_set":
            model = build(data)
            runtime(model, data, tmp)
        else:
            runtime(data, "set" if case == "set_optimizer" else "list", tmp)
        seconds = time.perf_counter() - start
        r0, r1 = (torch.load(f"{tmp}/rank{r}.pt") for r in (0, 1))
    row = {"rank0_vs_one_process": _diff(r0, one), "rank0_vs_rank1": _diff(r0, r1),
           "seconds": round(seconds, 2)}
    if case.startswith("model_argument"):
        row["caller_model_vs_one_process"] = _diff(model.state_dict(), one)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = load_planetoid("Cora")
    results = {}
    for case, repeats in (("set_optimizer", args.repeats), ("list_optimizer", 1),
                          ("model_argument", 2), ("model_argument_listed_set", args.repeats)):
        results[case] = [run_case(case, data) for _ in range(repeats)]
        for row in results[case]:
            print(case, row, flush=True)
    payload = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "versions": {"torch": torch.__version__,
                            "gnnorch_src": str(Path(gnnorch.__file__).parent)},
               "steps": STEPS, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
