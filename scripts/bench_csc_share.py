"""Building a script's loaders over one graph: vanilla PyG against the same function under
gnnorch, whose samplers share one CSC per graph (`gnnorch.sampling.csc`).

The function builds the loaders a PyG script typically holds over one `Data`: training
(shuffled), validation and test (`shuffle=False`), fanout [15, 10, 5], batch 1024. It times
each constructor and reads the process's resident memory after each one. It runs once as
vanilla PyG and once inside `gnnorch.Runtime` (one process, autotune off, so the same
function runs once), each in a fresh process on the same saved graph.

    .venv/bin/python scripts/bench_csc_share.py                  # 2.45M nodes, 124M edges
    .venv/bin/python scripts/bench_csc_share.py --nodes 200000 --train-seeds 4096
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import psutil
import torch
import torch_geometric

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baselines  # noqa: E402


def build_loaders(data, fanout=(15, 10, 5), batch_size=1024):
    """Three loaders over `data`: seconds and resident MB after each constructor."""
    from torch_geometric.loader import NeighborLoader

    process, rows, loaders = psutil.Process(), [], []
    for name, mask, shuffle in (("train", data.train_mask, True),
                                ("val", data.val_mask, False), ("test", data.test_mask, False)):
        start = time.perf_counter()
        loaders.append(NeighborLoader(data, num_neighbors=list(fanout), input_nodes=mask,
                                      batch_size=batch_size, shuffle=shuffle))
        rows.append({"loader": name, "seconds": time.perf_counter() - start,
                     "rss_mb": process.memory_info().rss / 2 ** 20})
    return rows


def measure_here(config: str, graph: Path) -> dict:
    data = torch.load(graph, weights_only=False)
    before = psutil.Process().memory_info().rss / 2 ** 20
    if config == "vanilla":
        rows = build_loaders(data)
    else:
        import gnnorch

        runtime = gnnorch.Runtime(build_loaders, processes=1, autotune=False, verbose=False)
        rows = runtime(data)
    return {"config": config, "rss_before_mb": before, "loaders": rows,
            "seconds": sum(r["seconds"] for r in rows),
            "rss_growth_mb": rows[-1]["rss_mb"] - before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_450_000)
    ap.add_argument("--train-seeds", type=int, default=196_615)
    ap.add_argument("--avg-degree", type=float, default=50.5)
    ap.add_argument("--out", type=Path, default=Path("bench-results/csc_share.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        baselines.finish_child(measure_here(args.measure, args.graph))
    graph = baselines.ensure_graph(args.nodes, 0, args.train_seeds, args.avg_degree)
    rows = []
    for config in ("vanilla", "gnnorch", "vanilla"):
        row = baselines.fresh_json_row([sys.executable, __file__, "--measure", config,
                                        "--graph", str(graph)], config)
        rows.append(row)
        each = ", ".join(f"{r['loader']} {r['seconds']:.2f} s" for r in row["loaders"])
        print(f"  {config:<8} {row['seconds']:6.2f} s ({each}); resident +"
              f"{row['rss_growth_mb']:.0f} MB", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_csc_share", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__,
                    "cpus": len(psutil.Process().cpu_affinity())},
        "workload": {"nodes": args.nodes, "train_seeds": args.train_seeds,
                     "avg_degree": args.avg_degree},
        "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
