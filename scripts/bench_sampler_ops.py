"""What one sampled batch costs gnnorch's sampler in torch operations, for each way of drawing
k-subsets (`gnnorch.sampling.uniform`: "floyd", the CPU default; "wide", the CUDA default).

On a GPU every torch operation is a kernel launch costing several microseconds of host time
whatever its size, and every operation whose output size depends on the data (``nonzero``,
``masked_select``, ``.item()``) waits for the device: the operation count per batch is the floor
of GPU sampling time that small batches cannot amortise. This script counts, per batch of
``--batch-size`` seeds with fanout ``--fanout`` on a products-like graph: all ATen operations
(`TorchDispatchMode`, views included), the data-dependent ones (host-device syncs on CUDA), and
the wall milliseconds per batch on ``--device`` (CUDA synchronised per batch), with the
sampler's body run eagerly and compiled (`gnnorch.sampling.uniform.compiled_sampler`: the same
operations in TorchScript's interpreter, without Python per operation).

    .venv/bin/python scripts/bench_sampler_ops.py --nodes 200000
    python3 scripts/bench_sampler_ops.py --nodes 2450000 --device cuda     # on a GPU machine
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch_geometric
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.sampler.utils import to_csc

from gnnorch.datasets import products_like
from gnnorch.sampling import new_workspace, sample_neighbors

#: ATen operations whose output size depends on the data: a host-device sync on CUDA
SYNCING = {"nonzero", "masked_select", "_local_scalar_dense", "item", "unique",
           "_unique2", "repeat_interleave"}


class OpCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched in this thread while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def measure(colptr, row, seeds_list, fanout, method, device, compiled) -> dict:
    ws = new_workspace(colptr.numel() - 1, device)

    def one(seeds):
        out = sample_neighbors(colptr, row, seeds, fanout, workspace=ws, method=method,
                               compiled=compiled)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out

    for seeds in seeds_list[:3]:
        one(seeds)                                  # warm-up (allocator, kernels)
    counter = OpCounter()
    with counter:
        one(seeds_list[0])
    times, nodes, edges = [], [], []
    for seeds in seeds_list:
        start = time.perf_counter()
        out = one(seeds)
        times.append(1e3 * (time.perf_counter() - start))
        nodes.append(out.node.numel())
        edges.append(out.edge.numel())
    return {"method": method, "compiled": compiled, "ops_per_batch": sum(counter.ops.values()),
            "syncing_ops_per_batch": sum(n for op, n in counter.ops.items() if op in SYNCING),
            "ms_per_batch_mean": statistics.fmean(times),
            "ms_per_batch_median": statistics.median(times),
            "nodes_mean": statistics.fmean(nodes), "edges_mean": statistics.fmean(edges),
            "top_ops": counter.ops.most_common(8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/sampler_ops.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = products_like(num_nodes=args.nodes, seed=args.seed, num_features=1)
    colptr, row, _ = to_csc(data, device="cpu")
    colptr, row = colptr.to(device), row.to(device)
    gen = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(args.nodes, generator=gen)
    seeds_list = [order[i * args.batch_size:(i + 1) * args.batch_size].to(device)
                  for i in range(args.batches)]
    rows = [measure(colptr, row, seeds_list, args.fanout, method, device, compiled)
            for method in ("floyd", "wide") for compiled in (False, True)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    print(f"{args.nodes} nodes, fanout {args.fanout}, batch {args.batch_size}, on {device} "
          f"({name}), {args.threads} thread(s)")
    print("| method | body | torch ops / batch | data-dependent (sync) ops | ms / batch (median) |"
          " sampled nodes | sampled edges |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        body = "compiled" if r["compiled"] else "eager"
        print(f"| {r['method']} | {body} | {r['ops_per_batch']} | {r['syncing_ops_per_batch']} | "
              f"{r['ms_per_batch_median']:.2f} | {r['nodes_mean']:.0f} | {r['edges_mean']:.0f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_sampler_ops", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"device": str(device), "name": name, "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__,
                    "python": platform.python_version()},
        "workload": {"nodes": args.nodes, "fanout": args.fanout,
                     "batch_size": args.batch_size, "batches": args.batches,
                     "threads": args.threads},
        "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
