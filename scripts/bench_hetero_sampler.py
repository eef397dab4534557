"""HeteroData neighbour sampling: gnnorch's vectorised sampler vs torch_sparse's and pyg-lib's,
and what it gives an unchanged PyG training function.

Part 1 (``sampler``): a MAG-shaped synthetic HeteroData (``--papers``; authors 1.5x, fields of
study 1/12, institutions 1/85 of the papers; writes ~9.7, cites ~7.3 and has_topic ~10.2 edges
per paper, affiliated_with ~0.9 per author, as ogbn-mag; targets drawn with a power-law
preference, so in-degrees are skewed; made undirected by ``T.ToUndirected()`` as PyG's
to_hetero_mag.py does: 7 edge types, ``cites`` made symmetric in place). PyG's own ``NeighborSampler`` builds the CSC; every
backend samples the identical seed dicts (``paper`` seeds of a shuffled pass), one after the
other, at ``--threads`` intra-op threads; the first ``--warmup`` batches are not timed.
Reported per batch: wall ms (median and mean), and the mean sampled nodes and edges (the same
law: these agree within noise).

Part 2 (``program``): PyG's ``examples/hetero/to_hetero_mag.py`` training function as the
test corpus runs it (``tests/pyg_examples/ex_to_hetero_mag.py``: ``to_hetero`` of a lazy SAGE
model, a HeteroData NeighborLoader with [10, 10], batch 128), on its MAG-like graph at
``--program-papers`` papers: vanilla ``train(...)`` against ``gnnorch.Runtime(train)`` with
its defaults, and ``Runtime(train, sampler="pyg")`` (the runtime without this sampler); each
row a fresh process, ``--epochs`` epochs, wall seconds of the call and the returned metrics.

Run it with the baseline environment's python for pyg-lib's rows (`scripts/setup_baselines.sh`):

    .venv-baseline/bin/python scripts/bench_hetero_sampler.py --papers 200000 \
        --out benchmarks/results/hetero_sampler.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch_geometric
import torch_geometric.transforms as T
import torch_geometric.typing as pyg_typing
from torch_geometric.data import HeteroData
from torch_geometric.sampler import NeighborSampler

from gnnorch.sampling.hetero_neighbor import FastHeteroNeighborSampler

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--papers", type=int, default=200_000)
    parser.add_argument("--fanouts", default="10,10;15,10,5", help="';'-separated fanouts")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--batches", type=int, default=30, help="timed batches per backend")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--program-papers", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--parts", default="sampler,program")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/hetero_sampler.json"))
    parser.add_argument("--program-row", help=argparse.SUPPRESS)   # a fresh process's row
    return parser.parse_args()


def mag_shaped(papers: int, seed: int = 0) -> HeteroData:
    """The MAG-shaped graph of the module docstring (structure only: one feature per type)."""
    gen = torch.Generator().manual_seed(seed)
    authors, fields, institutions = int(1.5 * papers), max(1, papers // 12), max(1, papers // 85)

    def skewed(n: int, count: int) -> torch.Tensor:
        """`count` targets in [0, n), node i drawn with weight (i + 1)^-0.8, ids shuffled."""
        weights = torch.arange(1, n + 1, dtype=torch.float64).pow_(-0.8)
        picks = torch.multinomial(weights, count, replacement=True, generator=gen)
        return torch.randperm(n, generator=gen)[picks]

    def edges(n_src: int, n_dst: int, count: int) -> torch.Tensor:
        return torch.stack([torch.randint(0, n_src, (count,), generator=gen),
                            skewed(n_dst, count)])

    data = HeteroData()
    for name, n in (("paper", papers), ("author", authors), ("field_of_study", fields),
                    ("institution", institutions)):
        data[name].x = torch.zeros(n, 1)
    data["author", "writes", "paper"].edge_index = edges(authors, papers, int(9.7 * papers))
    data["paper", "cites", "paper"].edge_index = edges(papers, papers, int(7.3 * papers))
    data["paper", "has_topic", "field_of_study"].edge_index = edges(papers, fields,
                                                                    int(10.2 * papers))
    data["author", "affiliated_with", "institution"].edge_index = edges(
        authors, institutions, int(0.9 * authors))
    return T.ToUndirected()(data)


def seed_batches(papers: int, batch_size: int, count: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(papers, generator=gen)
    return [order[(i * batch_size) % papers:][:batch_size] for i in range(count)]


def time_backend(sample, batches: list[torch.Tensor], warmup: int) -> dict:
    times, nodes, edges = [], [], []
    for i, seeds in enumerate(batches):
        start = time.perf_counter()
        out = sample({"paper": seeds})
        took = time.perf_counter() - start
        if i >= warmup:
            times.append(took)
            nodes.append(sum(int(v.numel()) for v in out.node.values()))
            edges.append(sum(int(v.numel()) for v in out.row.values()))
    return {"ms_median": 1e3 * statistics.median(times), "ms_mean": 1e3 * statistics.mean(times),
            "nodes_mean": statistics.mean(nodes), "edges_mean": statistics.mean(edges)}


def sampler_part(args: argparse.Namespace) -> list[dict]:
    start = time.perf_counter()
    data = mag_shaped(args.papers, args.seed)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges, "
          f"{len(data.edge_types)} edge types ({time.perf_counter() - start:.1f} s)", flush=True)
    rows = []
    for fanout_text in args.fanouts.split(";"):
        fanout = [int(k) for k in fanout_text.split(",")]
        ours = FastHeteroNeighborSampler(data, fanout)
        assert ours.fallback_reason is None, ours.fallback_reason
        backends = {"gnnorch": ours.sample_ours}
        if pyg_typing.WITH_TORCH_SPARSE and not pyg_typing.WITH_PYG_LIB:
            backends["torch_sparse"] = ours.sample_pyg
        elif pyg_typing.WITH_PYG_LIB:
            backends["pyg-lib"] = ours.sample_pyg
            if pyg_typing.WITH_TORCH_SPARSE:   # PyG prefers pyg-lib: call torch_sparse itself
                backends["torch_sparse"] = _torch_sparse_call(ours)
        for batch_size in args.batch_sizes:
            batches = seed_batches(args.papers, batch_size, args.batches + args.warmup,
                                   args.seed)
            for threads in args.threads:
                torch.set_num_threads(threads)
                row = {"fanout": fanout, "batch_size": batch_size, "threads": threads,
                       "backends": {}}
                for name, sample in backends.items():
                    torch.manual_seed(args.seed)
                    row["backends"][name] = time_backend(sample, batches, args.warmup)
                ms = row["backends"]["gnnorch"]["ms_median"]
                row["speedup"] = {name: r["ms_median"] / ms for name, r in
                                  row["backends"].items() if name != "gnnorch"}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def _torch_sparse_call(sampler: NeighborSampler):
    """torch_sparse's hetero sampler on the sampler's CSC (PyG calls it without pyg-lib)."""
    fanouts = sampler.num_neighbors.get_mapped_values(sampler.edge_types)

    def sample(seed: dict) -> object:
        node, row, col, edge = torch.ops.torch_sparse.hetero_neighbor_sample(
            sampler.node_types, sampler.edge_types, sampler.colptr_dict, sampler.row_dict, seed,
            fanouts, sampler.num_neighbors.num_hops, sampler.replace, True)
        return argparse.Namespace(node=node, row=row)
    return sample


PROGRAM_ROWS = ("vanilla", "gnnorch", "gnnorch-sampler-pyg")


def program_row(label: str, papers: int, epochs: int, seed: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "pyg_examples"))
    import ex_to_hetero_mag as example

    import gnnorch

    data = example.mag_like(seed, num_papers=papers, num_authors=papers * 2 // 3,
                            num_institutions=max(40, papers // 40),
                            num_fields=max(150, papers // 10))
    torch.manual_seed(seed)
    fn = example.train
    if label == "gnnorch":
        fn = gnnorch.Runtime(example.train)
    elif label == "gnnorch-sampler-pyg":
        fn = gnnorch.Runtime(example.train, sampler="pyg")
    start = time.perf_counter()
    metrics = fn(data, epochs=epochs, use_hgt_loader=False)
    row = {"row": label, "seconds": time.perf_counter() - start, "metrics": metrics}
    if label != "vanilla":
        stats = fn.last_run.stats[0]
        row["epochs_s"] = stats.get("epochs")
        row["loaders"] = [{k: loader.get(k) for k in ("role", "backend", "reason")}
                          for loader in stats["sampler"]["loaders"]]
    return row


def program_part(args: argparse.Namespace) -> list[dict]:
    rows = []
    for label in PROGRAM_ROWS:
        cmd = [sys.executable, __file__, "--program-row", label, "--program-papers",
               str(args.program_papers), "--epochs", str(args.epochs), "--seed", str(args.seed)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise SystemExit(f"{label} failed:\n{done.stdout}\n{done.stderr}")
        row = json.loads(lines[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    args = parse_args()
    if args.program_row:
        print(json.dumps(program_row(args.program_row, args.program_papers, args.epochs,
                                     args.seed), default=str))
        return
    parts = set(args.parts.split(","))
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
        "pyg_lib": pyg_typing.WITH_PYG_LIB, "torch_sparse": pyg_typing.WITH_TORCH_SPARSE,
        "papers": args.papers,
    }
    if "sampler" in parts:
        result["sampler"] = sampler_part(args)
    if "program" in parts:
        torch.set_num_threads(os.cpu_count() or 1)
        result["program"] = program_part(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
