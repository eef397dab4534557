#!/usr/bin/env python
"""Two ranks on a heterogeneous, lazily initialised model (PyG's `hetero/hierarchical_sage.py`
model on the OGB_MAG stand-in of `verbatim_datasets`, pyg-lib installed): are the two-rank
steps one process's, and which sampler does each rank keep?

    .venv-baseline/bin/python scripts/diagnose_two_rank_draws.py --out r.json

* ``replay``: two ranks train `--steps` batches with every neighbour taken
  (``num_neighbors=[-1, -1]``: a batch is its seeds alone) and plain SGD; one process then
  replays each step's union of the ranks' seeds from rank 0's parameters after its first
  forward. Reported: the largest absolute parameter difference after each step (one process's
  arithmetic, up to rounding, when the sharding and the weighted average are exact).
* ``choices``: `--runs` two-rank runs of `sampler="auto"` ([10, 10] neighbours); per run, each
  rank's kept backend and its measured times, and the sum of the first batch's edge indices
  on rank 0 (equal between runs only when the draw repeats).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _model(data, classes: int) -> torch.nn.Module:
    from torch_geometric.nn import HeteroConv, Linear, SAGEConv
    from torch_geometric.utils import trim_to_layer

    class Hierarchical(torch.nn.Module):   # hetero/hierarchical_sage.py's model
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([
                HeteroConv({et: SAGEConv((-1, -1), 64) for et in data.edge_types}, aggr="sum")
                for _ in range(2)])
            self.lin = Linear(64, classes)

        def forward(self, x, edges, edge_hops, node_hops):
            for i, conv in enumerate(self.convs):
                x, edges, _ = trim_to_layer(layer=i, num_sampled_nodes_per_hop=node_hops,
                                            num_sampled_edges_per_hop=edge_hops, x=x,
                                            edge_index=edges)
                x = {k: v.relu() for k, v in conv(x, edges).items()}
            return self.lin(x["paper"])

    return Hierarchical()


def _dataset(root: str):
    import torch_geometric.transforms as T
    from verbatim_datasets import install_stand_ins

    install_stand_ins(Path(root))
    from torch_geometric.datasets import OGB_MAG

    dataset = OGB_MAG(root, preprocess="metapath2vec", transform=T.ToUndirected(merge=True))
    return dataset, dataset[0]


def _step(model, opt, batch) -> float:
    opt.zero_grad()
    out = model(batch.x_dict, batch.edge_index_dict, batch.num_sampled_edges_dict,
                batch.num_sampled_nodes_dict)
    size = batch["paper"].batch_size
    loss = F.cross_entropy(out[:size], batch["paper"].y[:size])
    loss.backward()
    opt.step()
    return float(loss)


def ranks_train(root: str, out: str, steps: int, fanout: int) -> None:
    """In each rank: `steps` batches; saves seeds, parameters after the first forward and
    after each step, and the first batch's edge-index sum."""
    import torch.distributed as dist
    from torch_geometric.loader import NeighborLoader

    dataset, data = _dataset(root)
    torch.manual_seed(0)
    model = _model(data, dataset.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = NeighborLoader(data, num_neighbors=[fanout] * 2, shuffle=True, batch_size=1024,
                            input_nodes=("paper", data["paper"].train_mask))
    record = {"seeds": [], "states": [], "init": None, "edges": None}
    for k, batch in enumerate(loader):
        if k == steps:
            break
        record["seeds"].append(batch["paper"].n_id[:batch["paper"].batch_size].tolist())
        if record["edges"] is None:
            record["edges"] = int(sum(int(e.sum()) for e in batch.edge_index_dict.values()))
        if record["init"] is None:   # materialise the lazy layers, as the step's forward does
            with torch.no_grad():
                model(batch.x_dict, batch.edge_index_dict, batch.num_sampled_edges_dict,
                      batch.num_sampled_nodes_dict)
            record["init"] = {n: p.detach().clone() for n, p in model.state_dict().items()}
        _step(model, opt, batch)
        record["states"].append({n: p.detach().clone() for n, p in model.state_dict().items()})
    torch.save(record, f"{out}/rank{dist.get_rank()}.pt")


def replay(root: str, tmp: str, steps: int) -> list[float]:
    from torch_geometric.loader import NeighborLoader

    dataset, data = _dataset(root)
    a, b = (torch.load(f"{tmp}/rank{r}.pt") for r in (0, 1))
    model = _model(data, dataset.num_classes)
    opt, diffs = None, []
    for k in range(min(steps, len(a["seeds"]))):
        seeds = torch.tensor(a["seeds"][k] + b["seeds"][k])
        batch = next(iter(NeighborLoader(data, num_neighbors=[-1] * 2, batch_size=len(seeds),
                                         input_nodes=("paper", seeds))))
        if opt is None:
            with torch.no_grad():
                model(batch.x_dict, batch.edge_index_dict, batch.num_sampled_edges_dict,
                      batch.num_sampled_nodes_dict)
            model.load_state_dict(a["init"])
            opt = torch.optim.SGD(model.parameters(), lr=0.5)
        _step(model, opt, batch)
        state = model.state_dict()
        diffs.append(max(float((state[n] - a["states"][k][n]).abs().max()) for n in state))
    return diffs


def main() -> None:
    import gnnorch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.steps < 1 or args.runs < 1:
        parser.error("--steps and --runs must be at least 1")
    results: dict = {"replay_max_diff_per_step": None, "choices": []}
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        gnnorch.Runtime(ranks_train, processes=2, verbose=False, sampler="gnnorch")(
            tmp, tmp, args.steps, -1)
        results["replay_max_diff_per_step"] = replay(tmp, tmp, args.steps)
    print("replay:", results["replay_max_diff_per_step"], flush=True)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            torch.manual_seed(0)
            runtime = gnnorch.Runtime(ranks_train, processes=2, verbose=False)
            runtime(tmp, tmp, 1, 10)
            edges = torch.load(f"{tmp}/rank0.pt")["edges"]
        row = {"rank0_first_batch_edge_sum": edges, "ranks": [
            {k: v for k, v in (runtime.last_run.stats[r].get("sampler") or {}).items()
             if k in ("train", "backend", "loaders")} or
            str(runtime.last_run.stats[r].get("sampler"))[:400] for r in range(2)]}
        results["choices"].append(row)
        print("choice:", json.dumps(row)[:400], flush=True)
    payload = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
               "torch": torch.__version__, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
