"""The auto-tuner, measured (part A, this machine) and simulated (part B, large machines).

Part A (real): products-like synthetic graph, 3-layer GraphSAGE [15, 10, 5], batch 1024,
hidden 256 (the `train` of bench_runtime.py). Every feasible plan is measured exhaustively
(each in a fresh process, `--ex-epochs` epochs, throughput = training seeds / median epoch
seconds after the first two, which carry one-off costs); then `Runtime(train)` trains
`--epochs` epochs in a fresh process twice: with tuning forced on (``max_overhead`` = inf: what
the tuner picks and what it costs) and as shipped (the tuner decides whether tuning pays);
vanilla PyG trains the same epochs in another. Reported: the plan used as a fraction of the
exhaustive best (goal >= 0.95), the tuning time against one epoch, each probe's throughput
next to the plan's steady full-run throughput, and the end-to-end speedup over vanilla PyG
including the tuning.

Part B (simulated): the same tuner (skopt GP + EI, the runtime's `Tuner`) on the analytical
epoch-time model of `scripts/tuner_simulator.py` for 64- and 112-core machines (3% log-normal
measurement noise), over 20 seeds, against random search and simulated annealing with equal
numbers of probes: true throughput of the best *measured* plan / the true optimum, at 1-10% of
the feasible space explored; and where the tuner's stopping rule (expected gain < 1%) stops.

    .venv/bin/python scripts/bench_tuner.py --part B
    .venv/bin/python scripts/bench_tuner.py --part A --nodes 60000 --epochs 30
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRACTIONS = (0.01, 0.02, 0.03, 0.05, 0.10)
STOP_RULES = {"default": {},
              "ei-only": {"patience": 0, "consecutive": 1, "min_model_points": 3}}


# =========================================================================== part B
def part_b(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(HERE))
    import tuner_simulator as sim

    results = {}
    for cores in args.machines:
        machine = sim.MACHINES[cores]
        model = sim.EpochModel(machine)
        space = sim.space_for(machine)
        values, points = sim.landscape(model, space)
        optimum = float(values.max())
        best_point = points[int(values.argmax())]
        start = sim.default_point(machine)
        default_tp = model.throughput(1, 0, cores)
        size = len(points)
        budget = math.ceil(max(FRACTIONS) * size)
        print(f"\n## {machine.name}: {size} feasible plans (p<=8, s<=4), optimum "
              f"p={best_point['processes']} s={best_point['sampler_cores']} "
              f"t={best_point['threads']} = {optimum / default_tp:.2f}x the default "
              f"(1, 0, {cores}); plans within 95% of it: {int((values >= 0.95 * optimum).sum())}",
              flush=True)
        runs = []
        if args.replay:     # recompute the tables (and the stopping rule) from stored runs
            runs = json.loads(Path(args.replay).read_text())["result"][str(cores)]["runs"]
            for run in runs:
                run["stop"] = {name: sim.stop_index(run["checks"], len(run["curves"]["bo"]),
                                                    **rule)
                               for name, rule in STOP_RULES.items()}
        for seed in ([] if args.replay else
                     range(args.seed_offset, args.seed_offset + args.seeds)):
            measure = sim.noisy(model, seed, args.noise)
            t0 = time.perf_counter()
            bo = sim.run_bo(space, measure, budget, seed, start)
            wall = time.perf_counter() - t0
            curves = {
                "bo": sim.best_fraction(model, measure, bo["trace"], optimum),
                "random": sim.best_fraction(model, measure,
                                            sim.run_random(space, budget, seed, start), optimum),
                "annealing": sim.best_fraction(
                    model, measure, sim.run_annealing(space, measure, budget, seed, start),
                    optimum),
            }
            stops = {name: sim.stop_index(bo["checks"], len(bo["trace"]), **rule)
                     for name, rule in STOP_RULES.items()}
            runs.append({"seed": seed, "curves": curves, "stop": stops,
                         "bo_seconds": bo["bo_seconds"], "wall_seconds": wall,
                         "trace": bo["trace"], "checks": bo["checks"]})
            k = stops["default"]
            print(f"  seed {seed:2d}: BO at 5% {curves['bo'][math.ceil(0.05 * size) - 1]:.3f}, "
                  f"at 10% {curves['bo'][-1]:.3f}; rule stops after {k} probes at "
                  f"{curves['bo'][k - 1]:.3f}; random {curves['random'][-1]:.3f}; "
                  f"annealing {curves['annealing'][-1]:.3f}  ({wall:.0f} s)", flush=True)

        def at(curve: list[float], k: int) -> float:
            return curve[min(k, len(curve)) - 1]

        rows = []
        for frac in FRACTIONS:
            k = max(1, math.ceil(frac * size))
            row = {"explored": frac, "probes": k}
            for method in ("bo", "random", "annealing"):
                vals = [at(r["curves"][method], k) for r in runs]
                row[method] = {"mean": statistics.mean(vals), "min": min(vals),
                               "p95": sum(v >= 0.95 for v in vals) / len(vals)}
            rows.append(row)
        stop_rows = {}
        for m in STOP_RULES:
            ks = [r["stop"][m] for r in runs]
            vals = [at(r["curves"]["bo"], k) for r, k in zip(runs, ks)]
            eq_rs = [at(r["curves"]["random"], k) for r, k in zip(runs, ks)]
            eq_sa = [at(r["curves"]["annealing"], k) for r, k in zip(runs, ks)]
            stop_rows[m] = {"probes_mean": statistics.mean(ks), "probes_max": max(ks),
                            "explored_mean": statistics.mean(ks) / size,
                            "mean": statistics.mean(vals), "min": min(vals),
                            "p95": sum(v >= 0.95 for v in vals) / len(vals),
                            "random_mean": statistics.mean(eq_rs),
                            "annealing_mean": statistics.mean(eq_sa)}
        print(f"\n| explored | probes | BO mean (min) | random mean (min) | annealing mean (min) "
              f"| runs >= 0.95: BO / random / annealing |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            print(f"| {row['explored']:.0%} | {row['probes']} | "
                  + " | ".join(f"{row[m]['mean']:.3f} ({row[m]['min']:.3f})"
                               for m in ("bo", "random", "annealing"))
                  + f" | {row['bo']['p95']:.0%} / {row['random']['p95']:.0%} / "
                    f"{row['annealing']['p95']:.0%} |")
        print("\nBO with its stopping rule (expected gain < 1%), as shipped ('default': EI below "
              "the threshold at 2 successive proposals, no better throughput in the last 5 "
              "probes, >= 5 model-chosen probes) and the EI test alone after 3 model-chosen "
              "probes ('ei-only'):\n")
        print("| rule | probes mean (max) | explored | BO mean (min) | runs >= 0.95 | random / "
              "annealing at the same probes |")
        print("|---|---|---|---|---|---|")
        for m, s in stop_rows.items():
            print(f"| {m} | {s['probes_mean']:.1f} ({s['probes_max']}) | "
                  f"{s['explored_mean']:.1%} | {s['mean']:.3f} ({s['min']:.3f}) | "
                  f"{s['p95']:.0%} | {s['random_mean']:.3f} / {s['annealing_mean']:.3f} |")
        bo_per_probe = statistics.mean(r["bo_seconds"] / len(r["curves"]["bo"]) for r in runs)
        print(f"\nBO compute: {bo_per_probe:.2f} s per probe on this machine "
              f"(GP fit + acquisition), {statistics.mean(r['bo_seconds'] for r in runs):.0f} s "
              f"per {budget}-probe run")
        results[str(cores)] = {
            "machine": machine.__dict__, "space_size": size, "optimum": optimum,
            "optimum_plan": best_point, "default_throughput": default_tp,
            "within_95": int((values >= 0.95 * optimum).sum()), "budget": budget,
            "rows": rows, "stop_rule": {str(k): v for k, v in stop_rows.items()},
            "bo_seconds_per_probe": bo_per_probe, "runs": runs,
        }
        save(args, results, partial=True)       # a machine's runs survive a later crash
    return results


def save(args: argparse.Namespace, result: dict, partial: bool = False) -> None:
    import torch
    import torch_geometric

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({
        "benchmark": "bench_tuner", "part": args.part, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
                    "cpus": len(os.sched_getaffinity(0)), "argv": sys.argv},
        "partial": partial, "result": result}, indent=1, default=str))
    os.replace(tmp, args.out)


# =========================================================================== part A
def measure_one(kind: str, args: argparse.Namespace) -> dict:
    """One measurement in this (fresh) process; JSON on the last stdout line. Kinds:
    "vanilla", "tuned" (Runtime(train) as shipped), "forced" (tuning forced on:
    tune={"max_overhead": inf}, to measure what the tuner picks), or a plan "p,s,t"."""
    import torch  # noqa: F401

    import gnnorch
    from gnnorch.datasets import products_like

    sys.path.insert(0, str(HERE))
    from bench_runtime import train as bench_train

    data = products_like(num_nodes=args.nodes, seed=args.seed)
    seeds = int(data.train_mask.sum())
    start = time.perf_counter()
    if kind == "vanilla":
        out = bench_train(data, epochs=args.epochs)
        row = {"kind": kind}
    elif kind in ("tuned", "forced"):
        report_dir = Path(args.out).with_suffix("") / f"{kind}-report"
        tune = {"max_overhead": 1e9} if kind == "forced" else None
        tune = dict(tune or {}, report_dir=report_dir)
        runtime = gnnorch.Runtime(bench_train, tune=tune, device="cpu")
        out = runtime(data, epochs=args.epochs)
        row = {"kind": kind, "report": runtime.report.data, "report_path": str(report_dir),
               "plan": runtime.last_run.plan.to_dict()}
    else:
        p, s, t = (int(v) for v in kind.split(","))
        runtime = gnnorch.Runtime(bench_train, processes=p, device="cpu",
                                  launch={"sampler_cores": s, "threads": t})
        out = runtime(data, epochs=args.ex_epochs)
        row = {"kind": kind, "plan": runtime.last_run.plan.to_dict()}
    wall = time.perf_counter() - start
    # the first epochs carry one-off costs (sampler set-up, layer-rewrite calibration and
    # probing): steady state = median of the epochs after the first two (after the first if
    # there are fewer than four)
    secs = out["epoch_seconds"]
    steady = secs[2:] if len(secs) >= 4 else (secs[1:] or secs)
    row.update(wall_seconds=wall, epoch_seconds=secs,
               steady_epoch_seconds=statistics.median(steady),
               throughput=seeds / statistics.median(steady), train_seeds=seeds,
               final_loss=out["loss"])
    return row


def fresh(kind: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--measure", kind, "--nodes", str(args.nodes),
           "--epochs", str(args.epochs), "--ex-epochs", str(args.ex_epochs),
           "--seed", str(args.seed), "--out", str(args.out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def part_a(args: argparse.Namespace) -> dict:
    from gnnorch.datasets import products_like
    from gnnorch.launch.topology import current_topology
    from gnnorch.tune.space import SearchSpace

    topo = current_topology()
    data = products_like(num_nodes=args.nodes, seed=args.seed)
    seeds = int(data.train_mask.sum())
    steps = math.ceil(seeds / 1024)
    space = SearchSpace.from_topology(topo)
    plans = [SearchSpace.plan(p) for p in space.points()]
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, {seeds} training seeds "
          f"({steps} steps of 1024 per epoch); machine: {topo}; feasible plans: {len(plans)}",
          flush=True)
    default_plan = (1, 0, topo.num_usable)
    if args.min_cores:   # a big machine: exhaustive over the plans that use most cores
        plans = [p for p in plans if p.processes * (p.sampler_cores + p.threads)
                 >= args.min_cores or p.as_tuple() == default_plan]
        print(f"exhaustive over the {len(plans)} plans using >= {args.min_cores} cores (and "
              f"the default); plans the tuner picks outside them are measured afterwards",
              flush=True)
    import torch_geometric.typing as pyg_typing

    have_sparse = bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)  # PyG can sample
    workload = {"nodes": data.num_nodes, "edges": data.num_edges, "train_seeds": seeds,
                "epochs": args.epochs, "ex_epochs": args.ex_epochs}
    if args.sweep_from:     # the sweep was measured by an earlier call (a device's time limit)
        exhaustive = json.loads(Path(args.sweep_from).read_text())["result"]["exhaustive"]
        plans = [SearchSpace.plan(r["plan"]) for r in exhaustive]
        print(f"exhaustive rows of {len(plans)} plans read from {args.sweep_from}", flush=True)
    else:
        exhaustive = []
        for plan in plans:
            row = fresh(",".join(map(str, plan.as_tuple())), args)
            print(f"  exhaustive {plan}: epochs {[round(x, 2) for x in row['epoch_seconds']]} "
                  f"-> {row['throughput']:.0f} seeds/s", flush=True)
            exhaustive.append(row)
            save(args, {"workload": workload, "exhaustive": exhaustive}, partial=True)
    if args.stage == "sweep":
        return {"workload": workload, "exhaustive": exhaustive}
    runs = {}
    for kind in ("forced", "tuned"):
        runs[kind] = fresh(kind, args)
        print(f"  {kind} run ({args.epochs} epochs): wall {runs[kind]['wall_seconds']:.1f} s, "
              f"plan {runs[kind]['plan']}", flush=True)
        save(args, {"workload": workload, "exhaustive": exhaustive, "runs": runs}, partial=True)
    key = ("processes", "sampler_cores", "threads")
    for run in runs.values():   # a plan picked outside a restricted exhaustive set
        picked = tuple(run["plan"][k] for k in key)
        if picked not in {p.as_tuple() for p in plans}:
            plans.append(SearchSpace.plan(dict(zip(key, picked))))
            row = fresh(",".join(map(str, picked)), args)
            print(f"  measured the picked plan {picked}: {row['throughput']:.0f} seeds/s",
                  flush=True)
            exhaustive.append(row)
    if args.confirm:
        # one full run per plan is noisy (±20 % on a VM): re-measure the contenders (the top
        # three and every picked plan) `confirm` more times, interleaved, and rank by medians
        picked = {tuple(run["plan"][k] for k in key) for run in runs.values()}
        top = sorted(exhaustive, key=lambda r: r["throughput"], reverse=True)[:3]
        contenders = [r for r in exhaustive
                      if r in top or tuple(r["plan"][k] for k in key) in picked]
        for r in contenders:
            r.setdefault("repeat_throughputs", [r["throughput"]])
        for _ in range(args.confirm):
            for r in contenders:
                again = fresh(",".join(str(r["plan"][k]) for k in key), args)
                r["repeat_throughputs"].append(again["throughput"])
                print(f"  confirm {tuple(r['plan'][k] for k in key)}: "
                      f"{again['throughput']:.0f} seeds/s", flush=True)
        for r in contenders:
            r["single_throughput"] = r["repeat_throughputs"][0]
            r["throughput"] = statistics.median(r["repeat_throughputs"])
        save(args, {"workload": workload, "exhaustive": exhaustive, "runs": runs}, partial=True)
    best = max(exhaustive, key=lambda r: r["throughput"])
    vanilla = fresh("vanilla", args) if have_sparse else None
    if vanilla:
        print(f"  vanilla PyG ({args.epochs} epochs): wall {vanilla['wall_seconds']:.1f} s, "
              f"epochs {[round(x, 2) for x in vanilla['epoch_seconds'][:6]]} ...", flush=True)

    by_plan = {tuple(r["plan"][k] for k in key): r for r in exhaustive}
    default_row = by_plan[(1, 0, topo.num_usable)]
    epoch_ref = vanilla["steady_epoch_seconds"] if vanilla else default_row["steady_epoch_seconds"]
    forced = runs["forced"]["report"]
    probes = {tuple(t["config"][k] for k in key): t for t in forced["trials"]}
    print("\n| plan | full-run steady seeds/s | of best | probe seeds/s (forced tuning) | "
          "probe / full | probe s | chosen by |")
    print("|---|---|---|---|---|---|---|")
    for row in exhaustive:
        k = tuple(row["plan"][x] for x in key)
        pr = probes.get(k)
        reps = row.get("repeat_throughputs")
        runs_cell = (f" (median of {', '.join(f'{x:.0f}' for x in reps)})" if reps else "")
        print(f"| p={k[0]} s={k[1]} t={k[2]} | {row['throughput']:.0f}{runs_cell} | "
              f"{row['throughput'] / best['throughput']:.3f} | "
              + (f"{pr['throughput']:.0f} | {pr['throughput'] / row['throughput']:.2f} | "
                 f"{pr['seconds']:.1f} | {pr['chosen_by']} |" if pr and pr["throughput"]
                 else "- | - | - | not probed |"))
    summary: dict = {"epoch_reference_seconds": epoch_ref,
                     "exhaustive_best": best["plan"], "exhaustive_default": default_row["plan"]}
    for kind, run in runs.items():
        rep = run["report"]
        chosen = tuple(run["plan"][k] for k in key)
        fraction = by_plan[chosen]["throughput"] / best["throughput"]
        tuning = rep["overhead"]["tuning_seconds"]
        print(f"\n{kind}: decision: {'tuned' if rep['decision']['tuned'] else 'not tuned'}: "
              f"{rep['decision']['reason']}")
        if rep["stop_reason"]:
            print(f"  stop: {rep['stop_reason']}")
        print(f"  plan used p={chosen[0]} s={chosen[1]} t={chosen[2]}: {fraction:.3f} of the "
              f"exhaustive best (p={best['plan']['processes']} s={best['plan']['sampler_cores']} "
              f"t={best['plan']['threads']}); goal >= 0.95")
        print(f"  tuning: {tuning:.1f} s ({len(rep['trials'])} probes; BO "
              f"{rep['overhead']['bo_seconds']:.2f} s, probes "
              f"{rep['overhead']['probe_seconds']:.1f}"
              f" s) = {tuning / epoch_ref:.1f} steady epochs of "
              f"{'vanilla PyG' if vanilla else 'the default plan'} ({epoch_ref:.2f} s/epoch)")
        entry = {"fraction_of_best": fraction, "tuning_seconds": tuning,
                 "tuning_in_epochs": tuning / epoch_ref, "wall_seconds": run["wall_seconds"],
                 "plan": run["plan"], "tuned": rep["decision"]["tuned"]}
        if vanilla:
            speedup = vanilla["wall_seconds"] / run["wall_seconds"]
            print(f"  end to end, {args.epochs} epochs: vanilla PyG {vanilla['wall_seconds']:.1f}"
                  f" s vs gnnorch {run['wall_seconds']:.1f} s (tuning included) -> "
                  f"{speedup:.2f}x")
            entry["end_to_end_speedup_vs_vanilla"] = speedup
        summary[kind] = entry
    if not vanilla:
        print("vanilla PyG not measured: neither pyg-lib nor torch_sparse is installed (PyG's "
              "NeighborLoader needs one outside gnnorch)")
    return {"workload": workload, "exhaustive": exhaustive, "runs": runs, "vanilla": vanilla,
            "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["A", "B"], required=False, default="B")
    ap.add_argument("--nodes", type=int, default=60_000)
    ap.add_argument("--epochs", type=int, default=30, help="part A: epochs of the runs")
    ap.add_argument("--ex-epochs", type=int, default=5, help="part A: epochs per exhaustive plan")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-cores", type=int, default=0,
                    help="part A: exhaustive only over plans using at least this many cores")
    ap.add_argument("--stage", choices=["all", "sweep"], default="all",
                    help="part A: 'sweep' measures the exhaustive plans only")
    ap.add_argument("--sweep-from", type=Path, default=None,
                    help="part A: read the exhaustive rows from this JSON instead of measuring")
    ap.add_argument("--confirm", type=int, default=0,
                    help="part A: re-measure the top three and the picked plans this many times")
    ap.add_argument("--seeds", type=int, default=20, help="part B: seeds")
    ap.add_argument("--seed-offset", type=int, default=0, help="part B: first seed")
    ap.add_argument("--replay", help="part B: recompute the tables from this JSON's runs")
    ap.add_argument("--noise", type=float, default=0.03, help="part B: log-normal sigma")
    ap.add_argument("--machines", type=int, nargs="+", default=[64, 112])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.out is None:
        args.out = Path(f"bench-results/tuner_part{args.part}.json")
    if args.measure:
        print(json.dumps(measure_one(args.measure, args)))
        return
    start = time.perf_counter()
    result = part_a(args) if args.part == "A" else part_b(args)
    save(args, result)
    print(f"\nwrote {args.out} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
