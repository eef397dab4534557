"""The heterogeneous sampler's body eager against compiled (TorchScript, `gnnorch.compat.jit`):
the host's cost of a batch, and what a sampling thread takes from a training thread beside it.

Why: since session 30 the GPU data path samples HeteroData loaders on the device in its
producer thread, beside the trainer thread, both launching small operations from Python under
one GIL (`scripts/bench_sampler_gil.py` measured this for the homogeneous body, session 22).
The eager heterogeneous body issues a few operations per edge type per hop, each needing the
GIL; the compiled one takes it once per call. Measured with the CPU standing in for the device:

* ``compile_s``: seconds the body takes to compile (once per process);
* ``host``: this thread's CPU ms per batch (median), eager and compiled alternated, for each
  k-subset draw ("floyd": the CPU's default; "wide": CUDA's), on a MAG-shaped graph
  (`bench_hetero_sampler.mag_shaped`: papers, authors, institutions, fields; 8 edge types with
  the reverses) at two sizes: ``tiny`` (8 paper seeds, fanout [3, 2]: the per-operation cost
  alone) and ``full`` (1024 seeds, [10, 10]: to_hetero_mag's batches);
* ``beside``: a producer thread sampling tiny batches ("wide") while this thread runs training
  steps of a tiny `to_hetero` SAGE model on a tiny batch of that graph, for ``--seconds``:
  steps and batches per second, the sampler eager and compiled, and each thread alone; as a
  control, the same trainer beside the homogeneous compiled body (8 seeds, [3, 2, 2], a
  products-like graph of as many nodes as the papers).

    .venv/bin/python scripts/bench_hetero_sampler_gil.py \\
        --out benchmarks/results/hetero_sampler_gil.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "src"))
from bench_hetero_sampler import mag_shaped  # noqa: E402
from bench_sampler_gil import side_by_side  # noqa: E402

from gnnorch.sampling.hetero import (compiled_hetero_sampler,  # noqa: E402
                                     new_hetero_workspace, sample_hetero_neighbors)
from gnnorch.sampling.hetero_neighbor import FastHeteroNeighborSampler  # noqa: E402


def _structure(data):
    """(colptr, row, node counts) of every edge type, as the loaders' sampler holds them."""
    sampler = FastHeteroNeighborSampler(data, [1])
    rel = sampler.to_rel_type
    colptr = {e: sampler.colptr_dict[rel[e]] for e in sampler.edge_types}
    row = {e: sampler.row_dict[rel[e]] for e in sampler.edge_types}
    return colptr, row, {t: int(sampler.num_nodes[t]) for t in sampler.node_types}


def host_cost(structure, batch: int, fanout: list[int], repeats: int) -> dict:
    """Median thread-CPU ms per batch, eager and compiled alternated, per draw method."""
    colptr, row, counts = structure
    gen = torch.Generator().manual_seed(0)
    workspace = new_hetero_workspace(counts)
    fanouts = {e: fanout for e in colptr}
    out = {}
    for method in ("floyd", "wide"):
        times: dict[str, list[float]] = {"eager": [], "compiled": []}
        for rep in range(repeats + 3):
            seeds = {"paper": torch.randint(0, counts["paper"], (batch,), generator=gen)}
            for name in times:
                began = time.thread_time()
                sample_hetero_neighbors(colptr, row, seeds, fanouts, counts, method=method,
                                        workspace=workspace, compiled=name == "compiled")
                if rep >= 3:   # warm-up
                    times[name].append(time.thread_time() - began)
        med = {name: 1e3 * statistics.median(v) for name, v in times.items()}
        out[method] = {"eager_ms": round(med["eager"], 3),
                       "compiled_ms": round(med["compiled"], 3),
                       "eager_over_compiled": round(med["eager"] / med["compiled"], 2)}
    return out


def beside(data, structure, seconds: float) -> dict:
    """Producer (sampling) and trainer (to_hetero training steps) threads side by side."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import SAGEConv, to_hetero

    colptr, row, counts = structure

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 8)
            self.conv2 = SAGEConv((-1, -1), 5)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    batch = next(iter(NeighborLoader(data, num_neighbors=[3, 2], batch_size=8,
                                     input_nodes="paper")))
    net = to_hetero(GNN(), data.metadata(), aggr="sum")
    with torch.no_grad():
        net(batch.x_dict, batch.edge_index_dict)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    y = torch.randint(0, 5, (8,))

    def step():
        opt.zero_grad()
        F.cross_entropy(net(batch.x_dict, batch.edge_index_dict)["paper"][:8], y).backward()
        opt.step()

    def sample(compiled: bool, scratch: list) -> None:
        if not scratch:
            scratch.append(new_hetero_workspace(counts))
        seeds = {"paper": torch.randint(0, counts["paper"], (8,))}
        sample_hetero_neighbors(colptr, row, seeds, {e: [3, 2] for e in colptr}, counts,
                                method="wide", workspace=scratch[0], compiled=compiled)

    rows = side_by_side(step, sample, seconds, python_only=False)
    # control: the same trainer beside the homogeneous compiled body (session 22's), on a
    # products-like graph of as many nodes: what the trainer loses to any compiled sampler
    from bench_sampler_gil import _csc

    from gnnorch.sampling import new_workspace, sample_neighbors

    _, h_colptr, h_row = _csc(counts["paper"], 12.0)
    n = h_colptr.numel() - 1

    def sample_homogeneous(compiled: bool, scratch: list) -> None:
        if not scratch:
            scratch.append(new_workspace(n))
        sample_neighbors(h_colptr, h_row, torch.randint(0, n, (8,)), [3, 2, 2],
                         method="wide", workspace=scratch[0], compiled=compiled)

    control = side_by_side(step, sample_homogeneous, seconds, python_only=False)
    rows["control: both, homogeneous compiled"] = control["both, compiled"]
    rows["control: homogeneous sampler alone, compiled"] = control["sampler alone, compiled"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=Path("bench-results/hetero_sampler_gil.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)   # an operation costs its dispatch, as on a launch-bound GPU host
    began = time.perf_counter()
    compiled = compiled_hetero_sampler()   # compiled here, once per process
    compile_s = time.perf_counter() - began
    if compiled is None:
        raise SystemExit("the heterogeneous body does not compile here (gnnorch.compat."
                         "unavailable() says why): nothing to compare")
    data = mag_shaped(args.papers)
    for t in data.node_types:   # tiny features for the `beside` trainer
        data[t].x = torch.randn(data[t].num_nodes, 8)
    structure = _structure(data)
    result = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "cpus": len(__import__("os").sched_getaffinity(0)), "threads": 1},
        "args": {k: str(v) for k, v in vars(args).items()},
        "compile_s": round(compile_s, 4),
        "graph": {"node_types": {t: data[t].num_nodes for t in data.node_types},
                  "edge_types": len(data.edge_types),
                  "edges": sum(data[e].num_edges for e in data.edge_types)},
        "host": {"tiny": host_cost(structure, 8, [3, 2], args.repeats),
                 "full": host_cost(structure, 1024, [10, 10], max(args.repeats // 3, 5))},
        "beside": beside(data, structure, args.seconds),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("compile_s", "host", "beside")}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
