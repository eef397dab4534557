"""What one background refresh job of the historical-embedding cache costs (issue 21's
acceptance 2: on the lent H200 a job of about 22,800 hot rows ran 27-39 ms, longer than a
training step, and the trainer waited for it).

A job (`gnnorch.cache.refresh.Refresher.compute`) draws the refresh neighbourhood of each hot
row, builds the refresh graph (the distinct sources, relabelled), gathers the raw feature rows,
runs the bottom layer's snapshot and, with ``gradient="linear"`` (the default for SAGEConv),
keeps each row's raw aggregate beside it. For a random `--rows` of the hot set (the hottest
`--hot-ratio` by the cache's own estimate) on a products-like graph, this times

* each part alone, on the host's CSC and features: the draw, the refresh graph, the gather,
  the layer, the aggregate from the gathered rows (now) and over a gather of its own (before
  session 20: a second host gather, and a host aggregation, whenever the features are on the
  host);
* whole jobs: as built before session 20 (host CSC, second gather) and now, with the
  features on the host and (with a GPU) on the device, on the host's CSC and the device's.

Median of `--repeats` after a warm-up, one intra-op thread unless `--threads`, glibc's malloc
tuned as a run tunes it (large temporaries reused, not page-faulted in afresh); with a CUDA
`--device` each timing ends with a synchronisation.

    .venv/bin/python scripts/bench_refresh_job.py                 # 2.45M nodes, ~5 min
    .venv/bin/python scripts/bench_refresh_job.py --nodes 200000 --rows 4000
    python scripts/bench_refresh_job.py --device cuda --threads 16  # the lent GPU machine
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "src"))

import baselines  # noqa: E402


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """(median milliseconds of `repeats` calls after one warm-up, the last result)."""
    out = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_450_000)
    ap.add_argument("--avg-degree", type=float, default=50.5)
    ap.add_argument("--train-seeds", type=int, default=196_615)
    ap.add_argument("--rows", type=int, default=22_800, help="hot rows a job refreshes")
    ap.add_argument("--hot-ratio", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--fanout", type=int, default=5, help="the loader's bottom fanout")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="the layer's device (cuda: the lent GPU)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from gnnorch.launch.allocator import tune_allocator

    tune_allocator()   # as in a run (the default `launch={"allocator": "tuned"}`)

    from torch_geometric.nn import SAGEConv

    from gnnorch.cache.hotness import estimate_hotness, top_fraction
    from gnnorch.cache.refresh import (Neighbourhoods, Refresher, raw_aggregate,
                                       refresh_graph, rows_on)
    from gnnorch.device.transfer import to_device

    start = time.perf_counter()
    # the GPU benchmark's graph (generated once, kept under bench-results/graphs)
    data = torch.load(baselines.ensure_graph(args.nodes, 0, args.train_seeds, args.avg_degree),
                      weights_only=False)
    src_all, dst_all = data.edge_index
    row = src_all[torch.sort(dst_all, stable=True).indices]   # CSC: in-edges by destination
    colptr = torch.zeros(data.num_nodes + 1, dtype=torch.long)
    colptr[1:] = torch.bincount(dst_all, minlength=data.num_nodes).cumsum(0)
    del src_all, dst_all
    seeds = data.train_mask.nonzero().view(-1)
    scores = estimate_hotness(colptr, row, seeds, [15, 10, args.fanout], 1024)
    hot = top_fraction(scores, args.hot_ratio)
    pick = torch.randperm(hot.numel(), generator=torch.Generator().manual_seed(1))
    ids = hot[pick[:args.rows]].sort().values
    setup = time.perf_counter() - start

    device = torch.device(args.device)
    layer = SAGEConv(data.num_features, args.hidden).to(device).eval()
    x = data.x
    x_device = x.to(device)

    def unpatched(module, *a, **k):
        return module(*a, **k)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def job(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            out = fn()
            sync()
            return out
        return run

    # the parts, on the host's CSC and features (the CPU's own device when no --device)
    host_hood = Neighbourhoods(colptr, row, args.fanout, False, False, seed=2)
    parts: dict[str, float] = {}
    parts["neighbourhoods on the host CSC"], (src, dst) = timed(
        lambda: host_hood.edges(ids), args.repeats)
    parts["refresh graph on the host"], (nodes, edge_index) = timed(
        lambda: refresh_graph(ids, src, dst), args.repeats)
    parts["gather distinct host rows"], xs = timed(
        job(lambda: rows_on(x, nodes, device)), args.repeats)
    n = ids.numel()
    edge_index = edge_index.to(device)
    with torch.no_grad():
        parts["layer"], _ = timed(job(lambda: layer((xs, xs[:n]), edge_index)), args.repeats)
    parts["aggregate from the gathered rows"], _ = timed(
        job(lambda: raw_aggregate(xs, n, edge_index[0], edge_index[1], "mean")), args.repeats)
    parts["aggregate with a host gather of its own (now's code)"], _ = timed(
        job(lambda: to_device(raw_aggregate(x, n, src, dst, "mean"), device)), args.repeats)

    def before(features: Tensor) -> Callable[[], Any]:
        """A job as built before session 20 (the code of d1b8ec6, restated here): the
        neighbourhoods and the refresh graph on the host; the distinct rows gathered by
        advanced indexing where the features sit on the layer's device, else into pinned
        memory; the layer; then the raw aggregate over a gather of its own (advanced indexing)
        where the features live, copied to the layer's device."""
        def run() -> Any:
            s, d = host_hood.edges(ids)
            nodes, graph = refresh_graph(ids, s, d)
            if features.device == device:
                xs = features[to_device(nodes, device)]
            else:
                xs = rows_on(features, nodes, device)   # pinned: unchanged since
            with torch.no_grad():
                rows = layer((xs, xs[:n]), to_device(graph, device))
            at = to_device(s, features.device)
            agg = features.new_zeros((n,) + tuple(features.shape[1:]))
            agg.index_add_(0, to_device(d, features.device), features[at])
            count = torch.bincount(to_device(d, features.device), minlength=n).clamp_min(1)
            agg /= count.to(features.dtype).view(-1, 1)
            aux = to_device(agg, device)
            sync()
            return rows, aux
        return run

    # whole jobs, interleaved repeat by repeat (the machine's drift spreads over all of them)
    candidates: dict[str, Callable[[], Any]] = {}
    structures = {"host CSC": (colptr, row)}
    if device.type != "cpu":
        structures["device CSC"] = (colptr.to(device), row.to(device))
    for features_name, features in (("host features", x), ("device features", x_device)):
        if device.type == "cpu" and features_name == "device features":
            continue
        candidates[f"before: host CSC, {features_name}"] = before(features)
        for name, (cp, rw) in structures.items():
            hood = Neighbourhoods(cp, rw, args.fanout, False, False, seed=2)
            refresher = Refresher(layer, lambda f=features: f, hood, 32768,
                                  unpatched=unpatched)
            refresher.linear = "mean"
            candidates[f"now: {name}, {features_name}"] = job(
                lambda r=refresher: r.compute(ids))
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for fn in candidates.values():
        fn()                                   # warm-up
    for _ in range(args.repeats):
        for name, fn in candidates.items():
            begin = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - begin) * 1e3)
    jobs = {name: statistics.median(times) for name, times in samples.items()}

    result = {
        "benchmark": "bench_refresh_job",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__,
                    "gpu": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else None)},
        "workload": {"nodes": data.num_nodes, "edges": int(row.numel()),
                     "hot_rows": int(hot.numel()), "rows": n, "fanout": args.fanout,
                     "edges_drawn": int(src.numel()), "distinct_rows": int(nodes.numel()),
                     "hidden": args.hidden, "setup_s": round(setup, 1)},
        "device": str(device),
        "parts_ms": {k: round(v, 3) for k, v in parts.items()},
        "job_ms": {k: round(v, 3) for k, v in jobs.items()},
    }
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
