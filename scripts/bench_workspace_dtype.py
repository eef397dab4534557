"""The samplers' global-to-local maps, int32 (the default since session 30) against int64 (what
they were): bytes a node and time per batch, on this machine.

An int64 map passed as ``workspace`` runs exactly the code the int64 default ran (the map's
dtype is the only difference), so the two are compared in one process, batches alternated:
the homogeneous sampler on a products-like graph (1024 seeds, [15, 10, 5]) and the
heterogeneous one on a MAG-shaped graph (1024 paper seeds, [10, 10]), both draws, one thread
and all threads.

    .venv/bin/python scripts/bench_workspace_dtype.py --out benchmarks/results/workspace_dtype.json
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

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bench_hetero_sampler import mag_shaped  # noqa: E402
from bench_hetero_sampler_gil import _structure  # noqa: E402
from bench_sampler_gil import _csc  # noqa: E402

from gnnorch.sampling import UNSEEN, new_workspace, sample_neighbors  # noqa: E402
from gnnorch.sampling.hetero import new_hetero_workspace, sample_hetero_neighbors  # noqa: E402


def _median_ms(times: list[float]) -> float:
    return round(1e3 * statistics.median(times), 3)


def homogeneous(nodes: int, repeats: int) -> dict:
    _, colptr, row = _csc(nodes, 12.0)
    n = colptr.numel() - 1
    maps = {"int32": new_workspace(n), "int64": torch.full((n,), UNSEEN, dtype=torch.long)}
    gen = torch.Generator().manual_seed(0)
    out = {"map_bytes": {k: m.numel() * m.element_size() for k, m in maps.items()}}
    for method in ("floyd", "wide"):
        times: dict[str, list[float]] = {k: [] for k in maps}
        for rep in range(repeats + 2):
            seeds = torch.randint(0, n, (1024,), generator=gen)
            for name, workspace in maps.items():
                began = time.perf_counter()
                sample_neighbors(colptr, row, seeds, [15, 10, 5], method=method,
                                 workspace=workspace)
                if rep >= 2:
                    times[name].append(time.perf_counter() - began)
        out[method] = {f"{k}_ms": _median_ms(v) for k, v in times.items()}
    return out


def heterogeneous(papers: int, repeats: int) -> dict:
    colptr, row, counts = _structure(mag_shaped(papers))
    maps = {"int32": new_hetero_workspace(counts),
            "int64": {t: torch.full((n,), UNSEEN, dtype=torch.long) for t, n in counts.items()}}
    gen = torch.Generator().manual_seed(0)
    out = {"map_bytes": {k: sum(t.numel() * t.element_size() for t in m.values())
                         for k, m in maps.items()}}
    for method in ("floyd", "wide"):
        times: dict[str, list[float]] = {k: [] for k in maps}
        for rep in range(repeats + 2):
            seeds = {"paper": torch.randint(0, counts["paper"], (1024,), generator=gen)}
            for name, workspace in maps.items():
                began = time.perf_counter()
                sample_hetero_neighbors(colptr, row, seeds, {e: [10, 10] for e in colptr},
                                        counts, method=method, workspace=workspace)
                if rep >= 2:
                    times[name].append(time.perf_counter() - began)
        out[method] = {f"{k}_ms": _median_ms(v) for k, v in times.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--papers", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("bench-results/workspace_dtype.json"))
    args = ap.parse_args()
    result = {"machine": {"python": platform.python_version(), "torch": torch.__version__,
                          "threads": torch.get_num_threads()},
              "args": {k: str(v) for k, v in vars(args).items()}, "rows": {}}
    for threads in sorted({1, torch.get_num_threads()}):
        torch.set_num_threads(threads)
        result["rows"][f"{threads} thread(s)"] = {
            "homogeneous": homogeneous(args.nodes, args.repeats),
            "heterogeneous": heterogeneous(args.papers, args.repeats)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["rows"], indent=2))


if __name__ == "__main__":
    main()
