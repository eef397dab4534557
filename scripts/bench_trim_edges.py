"""What a trimmed layer pays to keep its edges: a boolean mask of the edges into its rows, or
the prefix a batch laid out by its sampler holds them in (`gnnorch.trim.call`, session 22).

One trimmed GraphSAGE step (forward, loss on the seeds, backward) under the layer seam, on
batches gnnorch's sampler draws from a products-like graph, with the batch's edges known
grouped by hop (prefix) or not (mask; what every trimmed batch paid before). Per step: this
thread's CPU milliseconds (median over ``--steps``), the torch operations and the
comparisons (`lt`) it dispatches, the data-dependent operations a GPU would wait for
(``nonzero`` inside a boolean index counts: the index kernel sizes its output from the mask).
Both ways give the same outputs and gradients (``tests/test_trim.py``).

    .venv/bin/python scripts/bench_trim_edges.py --out benchmarks/results/trim_edges.json
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.nn import GraphSAGE
from torch_geometric.sampler.utils import to_csc

from gnnorch.datasets import products_like
from gnnorch.intercept.layers import LayerSeam
from gnnorch.sampling import sample_neighbors
from gnnorch.trim import HopLayout
from gnnorch.trim.batch import BatchGraph


class Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.bool_index = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if name == "index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                   for i in (args[1] if len(args) > 1 else ())):
            self.bool_index += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--out", type=Path, default=Path("bench-results/trim_edges.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fanout = [15, 10, 5]
    data = products_like(args.nodes, seed=0)
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.steps + 2):
        s = sample_neighbors(colptr, row, torch.randint(0, args.nodes, (args.batch_size,),
                                                        generator=gen), fanout, generator=gen)
        batches.append((data.x[s.node], torch.stack([s.row, s.col]),
                        data.y[s.node[:args.batch_size]],
                        HopLayout.from_counts(s.num_sampled_nodes, s.num_sampled_edges)))
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, args.hidden, num_layers=3,
                      out_channels=int(data.y.max()) + 1)
    rows = {}
    for way, grouped in (("mask", False), ("prefix", True), ("mask again", False),
                         ("prefix again", True)):
        seam = LayerSeam(trim=True)
        times, counter = [], None
        with seam.installed():
            for i, (x, edge_index, y, layout) in enumerate(batches):
                graph = BatchGraph(edge_index, x.size(0), args.batch_size, layout,
                                   edges_grouped=grouped)
                seam.set_batch(graph)
                counting = i == len(batches) - 1
                mode = Ops() if counting else None
                began = time.thread_time()
                with mode if mode is not None else contextlib.nullcontext():
                    model.zero_grad()
                    out = model(x, edge_index)[:args.batch_size]
                    F.cross_entropy(out, y).backward()
                if counting:
                    counter = mode
                elif i >= 2:   # the first two: calibration and the check
                    times.append(time.thread_time() - began)
        rows[way] = {"ms_per_step": round(1e3 * statistics.median(times), 2),
                     "ops_per_step": sum(counter.ops.values()),
                     "lt_per_step": counter.ops["lt"],
                     "boolean_index_per_step": counter.bool_index}
        print(way, rows[way], flush=True)
    result = {"benchmark": "bench_trim_edges", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": {"cpus": torch.get_num_threads(), "platform": platform.platform(),
                          "torch": torch.__version__},
              "workload": {"nodes": args.nodes, "batch_size": args.batch_size,
                           "fanout": fanout, "hidden": args.hidden, "steps": args.steps,
                           "threads": args.threads},
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
