"""Feature rows the host gathers per epoch with the features on the host: the exact device path
against ``cache=True`` with and without write-back, refreshing on demand and in the background
(issue 21's acceptance 2, counted here).

With the features forced to the host, the GPU data path's epoch is bound by gathering each
batch's feature rows on the host and copying them (the first lent H200, 2026-11-27: the trainer
waited 17 ms a batch for them, 4.83 s an epoch against 1.87 s with the features on the GPU).
The historical-embedding cache saves rows: hot vertices reached at the last hop are not
expanded, so their neighbours are not gathered; but it gathers rows of its own, the
neighbourhoods of the hot rows it refreshes to keep them within the staleness bound. Where the
host gather bounds the epoch, (exact rows) / (cache rows) is the ceiling of the cache's
speed-up. The counts depend on the graph, the seeds and the sampling law, not on the machine,
so they are measured here with the CPU as the device.

For each configuration, one epoch of the same function (bench_gpu.py's GraphSAGE loop,
counting ``batch.num_nodes`` of every training batch: the rows the path gathered for it) in a
fresh process: the rows the batches gathered, plus for the cache the rows its refreshes
gathered (on demand and in the background), from ``last_run.stats``.

A third way to gather fewer host rows is not to keep all of them on the host: configurations
``split-f{fraction}`` give the device path a budget that holds the CSC and that fraction of the
node features' bytes, so it keeps the most-gathered rows there (`gnnorch.device.hot_rows`) and
gathers the others on the host (features ``"split"``); their host rows are the rows the batches
took from the host (``split_rows`` in the stats), beside the share the placement predicted.

    .venv/bin/python scripts/bench_cache_host_rows.py            # 2.45M nodes, ~3 min a row
    .venv/bin/python scripts/bench_cache_host_rows.py --nodes 40000 --train-seeds 8192
    .venv/bin/python scripts/bench_cache_host_rows.py --configs split-f0.1,split-f0.25,split-f0.5
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
import torch.nn.functional as F
import torch_geometric

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baselines  # noqa: E402


def train(data, epochs=1, hidden=16, batch_size=1024, fanout=(15, 10, 5), seed=0):
    """bench_gpu.py's SAGE loop on the device the runtime gives ("cpu" here), counting the rows
    of every training batch."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(seed)
    loader = NeighborLoader(data, num_neighbors=list(fanout), input_nodes=data.train_mask,
                            batch_size=batch_size, shuffle=True)
    net = GraphSAGE(data.num_features, hidden, num_layers=len(fanout),
                    out_channels=int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.003)
    rows = batches = 0
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = net(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            rows += batch.num_nodes
            batches += 1
    return {"batch_rows": rows, "batches": batches}


def cache_options(config: str) -> dict:
    """The cache of a configuration name: ``cache-s{staleness}`` then optional parts
    ``-r{hot ratio}``, ``-thread`` (background refresh; the default on this 2-core machine is
    on demand, as ``overlap="auto"`` picks below 4 trainer cores) and ``-nowb`` (no write-back
    of the rows batches compute)."""
    parts = config.split("-")
    if parts[0] != "cache" or not parts[1].startswith("s"):
        raise ValueError(f"not a cache configuration: {config}")
    options: dict = {"staleness": int(parts[1][1:])}
    for part in parts[2:]:
        if part.startswith("r"):
            options["hot_ratio"] = float(part[1:])
        elif part == "thread":
            options["overlap"] = "thread"
        elif part == "nowb":
            options["write_back"] = False
        else:
            raise ValueError(f"unknown part {part!r} of {config}")
    return options


def split_fraction(config: str) -> float:
    """The fraction of the node features' bytes a ``split-f{fraction}`` configuration's budget
    holds beside the CSC (`baselines.split_budget`)."""
    if not config.startswith("split-f"):
        raise ValueError(f"not a split configuration: {config}")
    return float(config[len("split-f"):])


def measure_here(config: str, graph: Path, epochs: int, hidden: int) -> dict:
    import gnnorch

    data = torch.load(graph, weights_only=False)
    options: dict = {"device": "cpu", "processes": 1, "autotune": False,
                     "data_path": {"mode": "device", "features": "host"}}
    if config.startswith("split"):
        options["data_path"] = {"mode": "device",
                                "budget_bytes": baselines.split_budget(split_fraction(config),
                                                                       data)}
    elif config != "exact":
        options["cache"] = cache_options(config)
    runtime = gnnorch.Runtime(train, **options)
    start = time.perf_counter()
    out = runtime(data, epochs=epochs, hidden=hidden)
    row = {"config": config, **out, "seconds": time.perf_counter() - start}
    cache = (runtime.last_run.stats[0].get("cache") or {}).get("loaders") or []
    if config.startswith("split"):
        loader = runtime.last_run.stats[0]["device"]["loaders"][0]
        split = loader.get("split_rows") or {}
        row.update({"features": loader["features"], "placement": loader["placement"],
                    "split_rows": split, "ranking_s": loader.get("ranking_s")})
        if loader["features"] != "split":
            row["error"] = f"no split: {loader['placement']['reasons']}"
            return row
        row["host_rows"] = split["host"]
        row["device_share_predicted"] = loader["placement"]["device_share"]
        row["device_share_measured"] = split["device"] / max(1, split["device"] + split["host"])
        return row
    if config != "exact":
        train_cache = next((c for c in cache if c.get("status") == "active"), None)
        if train_cache is None:
            row["error"] = f"the cache did not attach: {cache}"
            return row
        keys = ("refresh_gathered_vertices", "refresh_edges", "refresh_structure",
                "background_rows", "refresh_rows", "hit_rate",
                "hot_vertices", "max_staleness_seen", "refreshes", "pruned_vertices",
                "written_back_rows", "write_back", "overlap", "refresh_neighbourhood",
                "background_refreshes", "background_lookahead_jobs", "refresh_seconds",
                "background_seconds", "background_wait_seconds")
        row.update({k: train_cache.get(k) for k in keys})
        # every refresher's raw rows, on demand and in the background (`cache.report`)
        row["refresh_rows_gathered"] = train_cache.get("refresh_gathered_vertices") or 0
    row["host_rows"] = row["batch_rows"] + row.get("refresh_rows_gathered", 0)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_450_000)
    ap.add_argument("--train-seeds", type=int, default=196_615)
    ap.add_argument("--avg-degree", type=float, default=50.5)
    ap.add_argument("--configs", default="cache-s4-nowb,cache-s4,cache-s4-thread-nowb,"
                    "cache-s4-thread,cache-s4-r0.3",
                    help="cache configurations after the exact row (see cache_options)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=16, help="the counts do not depend on it")
    ap.add_argument("--out", type=Path, default=Path("bench-results/cache_host_rows.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        baselines.finish_child(measure_here(args.measure, args.graph, args.epochs, args.hidden))
    graph = baselines.ensure_graph(args.nodes, 0, args.train_seeds, args.avg_degree)
    configs = ["exact"] + args.configs.split(",")
    for config in configs[1:]:   # a typo fails before the first row
        split_fraction(config) if config.startswith("split") else cache_options(config)
    rows = []
    for config in configs:
        os.environ["GNNORCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="gnnorch-bench-")
        cmd = [sys.executable, __file__, "--measure", config, "--graph", str(graph),
               "--epochs", str(args.epochs), "--hidden", str(args.hidden)]
        row = baselines.fresh_json_row(cmd, config)
        rows.append(row)
        exact = rows[0]["host_rows"]
        if "host_rows" not in row:
            print(f"  {config:<10} failed: {row.get('error')}", flush=True)
            continue
        extra = (f"device share predicted {row['device_share_predicted']:.3f}, measured "
                 f"{row['device_share_measured']:.3f}; ranking {row['ranking_s']:.1f} s"
                 if config.startswith("split") else f"hit rate {row.get('hit_rate')}")
        print(f"  {config:<10} host rows {row['host_rows']:>12,}  (batches {row['batch_rows']:,}"
              f", refreshes {row.get('refresh_rows_gathered', 0):,}); exact / this "
              f"{exact / max(1, row['host_rows']):.2f}x; {extra}; "
              f"{row['seconds']:.0f} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_cache_host_rows", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__},
        "workload": {"nodes": args.nodes, "train_seeds": args.train_seeds,
                     "avg_degree": args.avg_degree, "epochs": args.epochs,
                     "fanout": [15, 10, 5], "batch_size": 1024},
        "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
