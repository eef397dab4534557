"""Paired many-seed accuracy study of the historical-embedding cache (issue #5, acceptance 3):
for each seed, the test suite's recipe (`tests/test_cache.py::_accuracy_train`: 2-layer model,
hidden 64, dropout 0.5, Adam with weight decay, batch 32, fanout [10, 10], 60 epochs, exact
full-neighbourhood evaluation) trained exactly and with ``cache=True``; prints the mean drop
(exact - cached, points) with its standard error as seeds accumulate. Seeds are split over
`--jobs` processes of one thread each.

    .venv/bin/python scripts/bench_cache_seeds.py --dataset citeseer --model sage --seeds 40
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_seed(job: tuple[str, str, int]) -> dict:
    dataset, model, seed = job
    sys.path.insert(0, str(ROOT / "tests"))
    import torch

    torch.set_num_threads(1)
    from test_cache import _accuracy_train, run

    from gnnorch.datasets import load_citeseer, load_cora

    data = load_cora() if dataset == "cora" else load_citeseer()
    exact, _ = run(_accuracy_train, data, model, 60, seed, seed=seed)
    cached, stats = run(_accuracy_train, data, model, 60, seed, seed=seed, cache=True)
    return {"seed": seed, "exact": exact, "cached": cached, "hit_rate": stats["hit_rate"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=["cora", "citeseer"], default="citeseer")
    ap.add_argument("--model", choices=["sage", "gcn", "gat", "gin"], default="sage")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    jobs = [(args.dataset, args.model, s) for s in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(one_seed, jobs):
            rows.append(row)
            drops = [100 * (r["exact"] - r["cached"]) for r in rows]
            sem = statistics.stdev(drops) / math.sqrt(len(drops)) if len(drops) > 1 else math.nan
            print(f"seed {row['seed']:3d}: exact {row['exact']:.3f} cache {row['cached']:.3f} "
                  f"(hit {row['hit_rate']:.2f}) | {len(drops)} seeds: mean drop "
                  f"{statistics.mean(drops):+.2f} pt, s.e. {sem:.2f}", flush=True)
    out = args.out or ROOT / f"bench-results/cache_seeds_{args.dataset}_{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    drops = [100 * (r["exact"] - r["cached"]) for r in rows]
    out.write_text(json.dumps({"dataset": args.dataset, "model": args.model, "rows": rows,
                               "mean_drop_pt": statistics.mean(drops),
                               "sem_pt": statistics.stdev(drops) / math.sqrt(len(drops))},
                              indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
