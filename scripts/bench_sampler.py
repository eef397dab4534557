"""Neighbour-sampler throughput: gnnorch's vectorised sampler vs torch_sparse's and pyg-lib's.

Workload: products-like synthetic power-law graph(s) (``--nodes``, default 200K; mean degree
25), PyG's own CSC conversion (``to_csc``, as ``NeighborSampler`` builds it), fanout
[15, 10, 5], batches of 1024 training seeds drawn like one shuffled NeighborLoader epoch.
Both samplers get the identical seed batches, one after the other, on one intra-op thread
(``--threads``); the first ``--warmup`` batches of each are not timed. Reported per batch:
wall milliseconds (mean), process CPU milliseconds (mean: less sensitive to other processes on
a shared machine), batches per second (wall), mean sampled nodes and edges (both samplers
draw from the same law, so these should agree to within noise).

Node features do not influence the sampled structure, and ``products_like``'s edges do not
depend on the feature width, so the graph is built with one feature to save memory.

pyg-lib's ``neighbor_sample`` (PyG's fastest backend) is measured too when it is installed:
run the script with the baseline environment's python (`scripts/setup_baselines.sh`).

    .venv/bin/python scripts/bench_sampler.py --nodes 200000 1000000
    .venv-baseline/bin/python scripts/bench_sampler.py --nodes 100000 400000 1600000 \
        --out benchmarks/results/sampler.json
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.sampler.utils import to_csc

from gnnorch.datasets import products_like
from gnnorch.sampling import new_workspace, sample_neighbors

SampleFn = Callable[[torch.Tensor], tuple[int, int]]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[200_000])
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=40, help="timed batches per sampler")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/sampler.json"))
    return parser.parse_args()


def seed_batches(train: torch.Tensor, batch_size: int, count: int, seed: int) -> list:
    """``count`` batches of a shuffled pass over ``train`` (wrapping into new passes)."""
    gen = torch.Generator().manual_seed(seed)
    batches: list[torch.Tensor] = []
    while len(batches) < count:
        order = train[torch.randperm(train.numel(), generator=gen)]
        batches += list(order.split(batch_size))[: count - len(batches)]
    return batches


def gnnorch_sampler(colptr, row, fanout) -> SampleFn:
    workspace = new_workspace(colptr.numel() - 1)

    def sample(seeds: torch.Tensor) -> tuple[int, int]:
        out = sample_neighbors(colptr, row, seeds, fanout, workspace=workspace)
        return out.node.numel(), out.edge.numel()

    return sample


def torch_sparse_sampler(colptr, row, fanout) -> SampleFn | None:
    try:
        import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)
    except ImportError:
        return None

    def sample(seeds: torch.Tensor) -> tuple[int, int]:
        node, _, _, edge = torch.ops.torch_sparse.neighbor_sample(
            colptr, row, seeds, fanout, False, True)
        return node.numel(), edge.numel()

    return sample


def pyg_lib_sampler(colptr, row, fanout) -> SampleFn | None:
    try:
        import pyg_lib.sampler
    except ImportError:
        return None

    def sample(seeds: torch.Tensor) -> tuple[int, int]:
        # PyG's own call (NeighborSampler._sample): CSC, without replacement, directed
        out = pyg_lib.sampler.neighbor_sample(colptr, row, seeds.to(colptr.dtype), fanout,
                                              csc=True, replace=False, directed=True,
                                              return_edge_id=True)
        return out[2].numel(), out[3].numel()

    return sample


def measure(sample: SampleFn, batches: list, warmup: int) -> dict:
    """Mean wall / CPU milliseconds per timed batch and mean sampled sizes."""
    for seeds in batches[:warmup]:
        sample(seeds)
    wall, cpu, nodes, edges = [], [], [], []
    for seeds in batches[warmup:]:
        w0, c0 = time.perf_counter(), time.process_time()
        n, e = sample(seeds)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
        nodes.append(n)
        edges.append(e)
    wall_ms = 1e3 * statistics.fmean(wall)
    return {
        "wall_ms_per_batch": wall_ms,
        "cpu_ms_per_batch": 1e3 * statistics.fmean(cpu),
        "batches_per_s": 1e3 / wall_ms,
        "mean_nodes": statistics.fmean(nodes),
        "mean_edges": statistics.fmean(edges),
    }


def bench_graph(num_nodes: int, args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    data = products_like(num_nodes=num_nodes, num_features=1, seed=args.seed)
    colptr, row, _ = to_csc(data, device="cpu")
    build_s = time.perf_counter() - t0
    train = data.train_mask.nonzero().squeeze(1)
    batches = seed_batches(train, args.batch_size, args.warmup + args.batches, args.seed)
    result = {"num_nodes": num_nodes, "num_edges": int(row.numel()),
              "graph_build_s": build_s, "samplers": {}}
    samplers = {"gnnorch": gnnorch_sampler(colptr, row, args.fanout),
                "torch_sparse": torch_sparse_sampler(colptr, row, args.fanout),
                "pyg_lib": pyg_lib_sampler(colptr, row, args.fanout)}
    for name, sample in samplers.items():
        if sample is not None:
            result["samplers"][name] = measure(sample, batches, args.warmup)
    ours = result["samplers"]["gnnorch"]
    for name in ("torch_sparse", "pyg_lib"):
        ref = result["samplers"].get(name)
        if ref is not None:
            result[f"speedup_wall_vs_{name}"] = ref["wall_ms_per_batch"] / ours["wall_ms_per_batch"]
            result[f"speedup_cpu_vs_{name}"] = ref["cpu_ms_per_batch"] / ours["cpu_ms_per_batch"]
    return result


def markdown(results: list[dict]) -> str:
    lines = ["| graph (nodes / edges) | sampler | wall ms/batch | CPU ms/batch | batches/s "
             "| nodes/batch | edges/batch | gnnorch's speed-up over it (wall / CPU) |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for res in results:
        graph = f"{res['num_nodes']:,} / {res['num_edges']:,}"
        for name, m in res["samplers"].items():
            speedup = ""
            if f"speedup_wall_vs_{name}" in res:
                speedup = (f"{res[f'speedup_wall_vs_{name}']:.2f}x / "
                           f"{res[f'speedup_cpu_vs_{name}']:.2f}x")
            lines.append(f"| {graph} | {name} | {m['wall_ms_per_batch']:.1f} "
                         f"| {m['cpu_ms_per_batch']:.1f} | {m['batches_per_s']:.1f} "
                         f"| {m['mean_nodes']:,.0f} | {m['mean_edges']:,.0f} | {speedup} |")
    return "\n".join(lines)


def _version(module: str) -> str | None:
    try:
        return importlib.import_module(module).__version__
    except ImportError:
        return None


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    results = [bench_graph(n, args) for n in args.nodes]
    report = {
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "torch_sparse": _version("torch_sparse"),
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "fanout": args.fanout,
        "batch_size": args.batch_size,
        "timed_batches": args.batches,
        "warmup_batches": args.warmup,
        "results": results,
    }
    table = markdown(results)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**report, "table": table}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
