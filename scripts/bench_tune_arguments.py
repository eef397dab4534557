"""Tuned calls of functions that change their arguments in place, and what the check costs.

Part 1 (outcome): two functions under ``gnnorch.Runtime(fn, tune=FORCE)``, tuning forced on
(``max_overhead`` 1e9, one-rank plans only, so every run is in the caller's process):

* ``mag240m``: PyG's ``examples/multi_gpu/mag240m_graphsage.py`` as adapted in the corpus
  (``tests/pyg_examples/ex_mag240m_graphsage.py``), on its MAG240M-shaped synthetic graph; it
  deletes the masks of the ``data`` it was given. Recorded: whether the call raised, its
  validation accuracy beside vanilla PyG's, and the report's decision.
* ``given_model``: a function handed its GraphSAGE model, trained on Cora (6 epochs of 7
  steps). Recorded: the largest difference between the tuned call's losses and an untuned
  call's from the same initial model (0 when no run before the real one touched the model).

Part 2 (cost): ``Fingerprint.of`` plus ``changes`` (one check) on Cora with a 20-layer MLP, on
a products-like graph (200K nodes, 100 features), and on a list of 50K small graphs (the walk
stops at ``MAX_ENTRIES``).

    .venv/bin/python scripts/bench_tune_arguments.py [--out PATH]

Writes ``benchmarks/results/tune_arguments.json``. Run it with ``PYTHONPATH=<old>/src`` to
measure another revision (part 2 needs ``gnnorch.tune.arguments``; it is skipped without it).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "pyg_examples"))
FORCE = {"max_overhead": 1e9, "max_processes": 1, "probe_batches": 6, "warmup_batches": 2}


def mag240m() -> dict:
    import gnnorch
    import ex_mag240m_graphsage as ex

    torch.manual_seed(0)
    vanilla = ex.run(0, ex.mag240m_like(0), num_epochs=3)
    torch.manual_seed(0)
    runtime = gnnorch.Runtime(ex.run, tune=FORCE, verbose=False)
    start = time.perf_counter()
    try:
        out = runtime(0, ex.mag240m_like(0), num_epochs=3)
        error = None
    except Exception as exc:  # noqa: BLE001 - the outcome is what is measured
        out, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return {"vanilla_val_acc": vanilla["val_acc"],
            "val_acc": None if out is None else out["val_acc"], "error": error,
            "seconds": round(time.perf_counter() - start, 2),
            "decision": (runtime.report.data["decision"]["reason"][:200]
                         if runtime.report is not None else None)}


def _train_given_model(model, data, epochs=6):
    from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                                   batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def given_model() -> dict:
    import gnnorch
    from gnnorch.datasets import load_cora
    from torch_geometric.nn import GraphSAGE

    data = load_cora()
    torch.manual_seed(5)
    init = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7).state_dict()

    def model():
        m = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
        m.load_state_dict(init)
        return m

    torch.manual_seed(1)
    expected = gnnorch.Runtime(_train_given_model, autotune=False, processes=1,
                               verbose=False)(model(), data)
    torch.manual_seed(1)
    runtime = gnnorch.Runtime(_train_given_model, tune=FORCE, verbose=False)
    losses = runtime(model(), data)
    diff = max(abs(a - b) for a, b in zip(losses, expected))
    return {"steps": len(losses), "max_loss_difference": diff, "tuned": runtime.report.tuned,
            "decision": runtime.report.data["decision"]["reason"][:200]}


def fingerprint_costs(repeats: int = 3) -> dict:
    try:
        from gnnorch.tune.arguments import Fingerprint
    except ImportError:
        return {"skipped": "no gnnorch.tune.arguments in this revision"}
    from gnnorch.datasets import load_cora, power_law_graph
    from torch_geometric.data import Data

    cases = {
        "cora + 20-layer MLP": ((load_cora(), torch.nn.Sequential(
            *[torch.nn.Linear(64, 64) for _ in range(20)])), {}),
        "products-like, 200K nodes": ((power_law_graph(200_000, num_features=100, num_classes=47), ), {}),
        "50K small graphs in a list": (([Data(x=torch.randn(5, 3), y=torch.tensor([1]),
                                              edge_index=torch.zeros(2, 4, dtype=torch.long))
                                         for _ in range(50_000)], ), {}),
    }
    out = {}
    for name, (args, kwargs) in cases.items():
        Fingerprint.of(args, kwargs)                         # imports, caches
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            first = Fingerprint.of(args, kwargs)
            first.changes(Fingerprint.of(args, kwargs))
            best = min(best, time.perf_counter() - start)
        out[name] = {"entries": len(first.entries), "ms_per_call": round(best * 1e3, 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                             "tune_arguments.json"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    result = {"mag240m": mag240m(), "given_model": given_model(),
              "fingerprint": fingerprint_costs()}
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
