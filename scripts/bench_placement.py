"""DGTP task placement on simulated clusters: ETP + OES flows vs DistDGL-style co-location.

Reproduces the shape of DGTP's simulation study (Luo, Bao, Wu, section VI-B) with gnnorch's
planner (`gnnorch.place`, docs/placement.md): an ogbn-products-like job on 8 machines and an
ogbn-papers100M-like job on 16, each on a homogeneous and a heterogeneous cluster, 10 seeds.

Workloads (one iteration; GraphSAGE, 3 layers, hidden 256; a mini-batch of 2000 seeds per
trainer as in DGTP's testbed; features float32; DistDGL's data path: samplers fetch sampled
structure from the stores, trainers pull their input nodes' features from the stores):

| | products (8 machines) | papers100M (16 machines) |
|---|---|---|
| tasks (DGTP VI-B) | 8 stores, 16 trainers x 2 samplers | 16 stores, 20 trainers x 4 samplers |
| fan-out (Table II) | 15, 10, 5 | 12, 12, 12 |
| sampled edges / sampler | ~760K (1000 seeds: 15K + 150K + 600K) | ~940K (500 seeds: 6K + 72K + 864K) |
| structure store -> sampler | 12 MB (edges x 16 B) | 15 MB |
| batch sampler -> trainer | 8 MB (blocks, int32 ids) | 10 MB |
| input nodes / trainer | ~600K (dedup. of 2 x 760K) | ~3M (little dedup. on 111M nodes) |
| features store -> trainer | 240 MB (x 100 x 4 B) | 1.5 GB (x 128 x 4 B) |
| home-partition share | 0.5 (METIS, 8 parts) | 0.4 (METIS, 16 parts) |
| gradient (ring all-reduce) | 0.83 MB (207K parameters) | 1.1 MB (285K parameters) |
| store time | 30 ms (3M edges served at ~100M/s) | 60 ms (4.7M edges) |
| sampler time | 40 ms (block construction) | 50 ms |
| trainer time | 40 ms (~30 GFLOP fwd+bwd + 240 MB PCIe copy, 1080Ti) | 150 ms (~66 GFLOP + 1.5 GB copy) |
| time cv / volume cv | 0.10 / 0.05 (PMR 1.16 ~ 1 + 3 cv) | 0.10 / 0.03 (PMR 1.08) |

Where they come from: graph sizes, feature widths, fan-outs, batch size, task counts and the
task demands are DGTP's (Table II, VI-A, VI-B; trainer 1 core + 3 GB + 1 GPU, sampler 2 cores +
7 GB; stores 1 core + their partition: 2 GB / 6 GB). Edge / node counts, locality, times and
the time cv are our estimates from those (the paper publishes no per-task profile); the
volume cv follows from DGTP's reported peak-to-mean ratios. Remote shares are uneven between
partition pairs (Gamma weights, cv 0.5, drawn per seed).

Clusters. Homogeneous: products on 8 x (16 logical cores, 48 GB, 2 GPUs, 20 Gbit/s) -- DGTP's
testbed server (8-core E5-1660 with SMT, 48 GB, 2 GPUs) with the middle of DGTP's simulated
NIC speeds; papers on 16 x (32 cores, 96 GB, 2 GPUs, 20 Gbit/s), since two trainers with
their eight samplers need 19 cores and 74 GB. Heterogeneous (DGTP VI-B ranges): per machine
4..16 cores (x 2 logical: read literally as logical cores the job would not fit the mean
machine), memory 32..128 GB (steps of 8), 1..4 GPUs, NIC 10 / 20 / 50 Gbit/s, all uniform;
redrawn until both a feasible placement and the co-location baseline exist.

Methods, all evaluated by the same OES simulator on the same random draws (4 iterations, 2
draws, makespan / 4): ETP + OES (the plan; scored during the search at the profiled means
over 2 iterations, 200 Metropolis steps for products, 100 for papers); ETP + FIFO (that
placement, DistDGL's first-in-first-out sending); DistDGL (co-location + FIFO, DGTP's
baseline); co-location + OES (the placement alone); random placement + OES.

    .venv/bin/python scripts/bench_placement.py             # 10 seeds, a few minutes
    .venv/bin/python scripts/bench_placement.py --quick     # smoke run, seconds
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gnnorch.place import (Cluster, PlacementError, Profile, TaskDemand,  # noqa: E402
                           colocation, evaluate, initial_placement, plan_placement,
                           random_placement)

MB = 1e6
WORKLOADS = {
    "products": dict(n_partitions=8, n_trainers=16, samplers_per_trainer=2, store_s=0.03,
                     sampler_s=0.04, trainer_s=0.04, structure_bytes=12 * MB,
                     batch_bytes=8 * MB, feature_bytes=240 * MB, grad_bytes=0.83 * MB,
                     locality=0.5, spread=0.5, time_cv=0.10, volume_cv=0.05,
                     store_demand=TaskDemand(1, 2, 0)),
    "papers100M": dict(n_partitions=16, n_trainers=20, samplers_per_trainer=4, store_s=0.06,
                       sampler_s=0.05, trainer_s=0.15, structure_bytes=15 * MB,
                       batch_bytes=10 * MB, feature_bytes=1500 * MB, grad_bytes=1.1 * MB,
                       locality=0.4, spread=0.5, time_cv=0.10, volume_cv=0.03,
                       store_demand=TaskDemand(1, 6, 0)),
}
HOMOGENEOUS = {"products": dict(cores=16, memory_gb=48, gpus=2, gbps=20),
               "papers100M": dict(cores=32, memory_gb=96, gpus=2, gbps=20)}
SEARCH = {"products": dict(steps=200, search_iterations=2),
          "papers100M": dict(steps=100, search_iterations=2)}
METHODS = {"etp_oes": "ETP + OES", "etp_fifo": "ETP + FIFO",
           "coloc_fifo": "DistDGL (co-loc. + FIFO)", "coloc_oes": "co-loc. + OES",
           "random_oes": "random + OES"}


def profile(workload: str, seed: int) -> Profile:
    return Profile.synthetic(**WORKLOADS[workload], sampler_demand=TaskDemand(2, 7, 0),
                             trainer_demand=TaskDemand(1, 3, 1), seed=seed, name=workload)


def heterogeneous(n: int, prof: Profile, rng: np.random.Generator) -> tuple[Cluster, int]:
    """A DGTP-range cluster on which a placement and co-location exist (and the redraws)."""
    for draws in range(1, 10_000):
        nic = rng.choice([10, 20, 50], n)
        cluster = Cluster(tuple(2 * rng.integers(4, 17, n)), tuple(8 * rng.integers(4, 17, n)),
                          tuple(rng.integers(1, 5, n)), tuple(nic), tuple(nic))
        try:
            initial_placement(cluster, prof, np.random.default_rng(0))
            colocation(cluster, prof)
            return cluster, draws
        except PlacementError:
            continue
    raise RuntimeError("no feasible heterogeneous cluster drawn")


def run_case(workload: str, setting: str, seed: int, args) -> dict:
    prof = profile(workload, seed)
    n = prof.n_partitions
    if setting == "homogeneous":
        cluster, redraws = Cluster.homogeneous(n, **HOMOGENEOUS[workload]), 0
    else:
        cluster, redraws = heterogeneous(n, prof, np.random.default_rng(10_000 + seed))
    search = dict(SEARCH[workload])
    if args.quick:
        search = dict(steps=search["steps"] // 15, search_iterations=2)
    began = time.perf_counter()
    plan = plan_placement(cluster, prof, seed=seed, eval_iterations=args.iterations,
                          eval_draws=args.draws, **search)
    plan_s = time.perf_counter() - began
    placements = {"etp": plan.assignment, "coloc": colocation(cluster, prof),
                  "random": random_placement(cluster, prof, np.random.default_rng(seed))}
    out = {}
    for method in METHODS:
        where, policy = method.split("_")
        out[method] = evaluate(cluster, prof, placements[where], policy, args.iterations,
                               args.draws, seed=1000 + seed).mean
    kept = plan.confirmation["kept"] if plan.confirmation else "start (no better found)"
    return {"seconds": out, "plan_s": plan_s, "start": plan.start, "redraws": redraws,
            "evaluations": plan.search.evaluations, "kept": kept}


def summarise(rows: list[dict]) -> dict:
    per = {m: [r["seconds"][m] for r in rows] for m in METHODS}
    ms = {m: {"mean_ms": 1e3 * statistics.fmean(v),
              "sd_ms": 1e3 * (statistics.stdev(v) if len(v) > 1 else 0.0)}
          for m, v in per.items()}

    def reduction(base: str) -> float:
        return 100 * statistics.fmean(1 - e / b for e, b in zip(per["etp_oes"], per[base]))

    return {"methods": ms,
            "reduction_vs_distdgl_pct": reduction("coloc_fifo"),
            "reduction_vs_coloc_oes_pct": reduction("coloc_oes"),
            "seeds_worse_than_distdgl": sum(e > b for e, b in
                                            zip(per["etp_oes"], per["coloc_fifo"])),
            "seeds_worse_than_coloc_oes": sum(e > b * (1 + 1e-9) for e, b in
                                              zip(per["etp_oes"], per["coloc_oes"])),
            "etp_started_from_colocation": sum(r["start"] == "colocation" for r in rows),
            "etp_kept": {k: sum(r["kept"] == k for r in rows) for k in
                         sorted({r["kept"] for r in rows})},
            "plan_s_mean": statistics.fmean(r["plan_s"] for r in rows),
            "per_seed_ms": {m: [round(1e3 * x, 2) for x in v] for m, v in per.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=4, help="iterations per evaluation")
    ap.add_argument("--draws", type=int, default=2, help="random draws per evaluation")
    ap.add_argument("--quick", action="store_true", help="1 seed, short searches (smoke run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "placement.json"))
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.iterations, args.draws = 1, 2, 1
    began = time.perf_counter()
    results = {}
    for workload in WORKLOADS:
        for setting in ("homogeneous", "heterogeneous"):
            rows = []
            for seed in range(args.seeds):
                rows.append(run_case(workload, setting, seed, args))
                r = rows[-1]
                print(f"  {workload}/{setting} seed {seed}: " + ", ".join(
                    f"{m} {1e3 * s:.1f} ms" for m, s in r["seconds"].items()) +
                    f" (plan {r['plan_s']:.1f} s, start {r['start']}, kept {r['kept']})",
                    file=sys.stderr,
                    flush=True)
            results[f"{workload}/{setting}"] = summarise(rows)
    total = time.perf_counter() - began
    head = "| workload / cluster | " + " | ".join(METHODS.values()) + \
        " | ETP+OES vs DistDGL | vs co-loc.+OES |"
    print(f"\nSimulated iteration time, ms (mean ± sd over {args.seeds} seeds; lower is better)"
          f"\n\n{head}\n|" + "---|" * (len(METHODS) + 3))
    for case, res in results.items():
        cells = [f"{v['mean_ms']:.1f} ± {v['sd_ms']:.1f}" for v in res["methods"].values()]
        print(f"| {case} | " + " | ".join(cells) +
              f" | {-res['reduction_vs_distdgl_pct']:+.1f} % | "
              f"{-res['reduction_vs_coloc_oes_pct']:+.1f} % |")
    print(f"\n(negative = ETP + OES is faster; per-seed mean of ETP/baseline - 1; "
          f"{total:.0f} s in all)")
    for case, res in results.items():
        print(f"  {case}: ETP+OES slower than DistDGL on {res['seeds_worse_than_distdgl']} "
              f"seed(s), slower than co-loc.+OES on {res['seeds_worse_than_coloc_oes']}; "
              f"chain started from co-location on {res['etp_started_from_colocation']}; "
              f"placement kept: {res['etp_kept']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {"seeds": args.seeds, "iterations": args.iterations, "draws": args.draws,
              "quick": args.quick, "search": SEARCH, "homogeneous": HOMOGENEOUS,
              "workloads": {k: {n: (vars(v) if isinstance(v, TaskDemand) else v)
                                for n, v in w.items()} for k, w in WORKLOADS.items()}}
    out.write_text(json.dumps({"config": config, "results": results, "seconds": total},
                              indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
