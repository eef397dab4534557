"""Paired many-seed accuracy study of the historical-embedding cache (issue #5, acceptance 3):
for each seed, the test suite's recipe (`tests/test_cache.py::_accuracy_train`: 2-layer model,
hidden 64, dropout 0.5, Adam with weight decay, batch 32, fanout [10, 10], 60 epochs, exact
full-neighbourhood evaluation) trained exactly and with ``cache=--cache``; prints the mean drop
(exact - cached, points) with its standard error as seeds accumulate. With ``--write-back-pair``
each seed also trains with the same cache and ``write_back=False``, and the write-back's own
effect (cached without it - cached with it) is printed beside. Seeds are split over `--jobs`
processes of one thread each.

    .venv/bin/python scripts/bench_cache_seeds.py --dataset citeseer --model sage --seeds 40
    .venv/bin/python scripts/bench_cache_seeds.py --dataset cora --model sage --seeds 20 \\
        --cache '{"refresh": "sample"}' --write-back-pair
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


def one_seed(job: tuple[str, str, int, dict, bool, dict | None]) -> dict:
    dataset, model, seed, cache, pair, data_path = job
    sys.path.insert(0, str(ROOT / "tests"))
    import torch

    torch.set_num_threads(1)
    from test_cache import _accuracy_train, run

    from gnnorch.datasets import load_citeseer, load_cora

    data = load_cora() if dataset == "cora" else load_citeseer()
    path = {"data_path": data_path} if data_path else {}
    exact, _ = run(_accuracy_train, data, model, 60, seed, seed=seed, **path)
    cached, stats = run(_accuracy_train, data, model, 60, seed, seed=seed, cache=cache or True,
                        **path)
    row = {"seed": seed, "exact": exact, "cached": cached, "hit_rate": stats["hit_rate"],
           "write_back": stats.get("write_back"),
           "written_back_rows": stats.get("written_back_rows"),
           "refresh_rows": stats.get("refresh_rows"),
           "background_rows": stats.get("background_rows"),
           "background_lookahead_jobs": stats.get("background_lookahead_jobs"),
           "max_staleness_seen": stats.get("max_staleness_seen")}
    if pair:
        off, stats_off = run(_accuracy_train, data, model, 60, seed, seed=seed,
                             cache={**cache, "write_back": False}, **path)
        row.update({"cached_no_write_back": off,
                    "refresh_rows_no_write_back": stats_off.get("refresh_rows")})
    return row


def _mean_sem(values: list[float]) -> tuple[float, float]:
    sem = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return statistics.mean(values), sem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=["cora", "citeseer"], default="citeseer")
    ap.add_argument("--model", choices=["sage", "gcn", "gat", "gin"], default="sage")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", type=json.loads, default={},
                    help="the cache's fields as JSON (default: cache=True)")
    ap.add_argument("--write-back-pair", action="store_true",
                    help="also train each seed with the same cache and write_back=False")
    ap.add_argument("--data-path", type=json.loads, default=None,
                    help="Runtime(data_path=...) of both runs, as JSON (e.g. "
                         "'{\"mode\": \"device\"}': the GPU data path with the CPU as the "
                         "device, whose batches drawn ahead steer the background refresher)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    jobs = [(args.dataset, args.model, s, args.cache, args.write_back_pair, args.data_path)
            for s in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(one_seed, jobs):
            rows.append(row)
            drop, sem = _mean_sem([100 * (r["exact"] - r["cached"]) for r in rows])
            line = (f"seed {row['seed']:3d}: exact {row['exact']:.3f} cache {row['cached']:.3f} "
                    f"(hit {row['hit_rate']:.2f}) | {len(rows)} seeds: mean drop {drop:+.2f} "
                    f"pt, s.e. {sem:.2f}")
            if args.write_back_pair:
                gain, gsem = _mean_sem([100 * (r["cached"] - r["cached_no_write_back"])
                                        for r in rows])
                line += (f" | without write-back {row['cached_no_write_back']:.3f}; write-back "
                         f"{gain:+.2f} pt, s.e. {gsem:.2f}")
            print(line, flush=True)
    out = args.out or ROOT / f"bench-results/cache_seeds_{args.dataset}_{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    drop, sem = _mean_sem([100 * (r["exact"] - r["cached"]) for r in rows])
    result = {"dataset": args.dataset, "model": args.model, "cache": args.cache,
              "data_path": args.data_path, "rows": rows,
              "mean_drop_pt": drop, "sem_pt": sem}
    if args.write_back_pair:
        gain, gsem = _mean_sem([100 * (r["cached"] - r["cached_no_write_back"]) for r in rows])
        result.update({"write_back_gain_pt": gain, "write_back_gain_sem_pt": gsem})
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
