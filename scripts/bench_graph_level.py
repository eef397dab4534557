"""PyG's graph-level programs (mini-batches of whole graphs from PyG's `DataLoader`) under
`gnnorch.Runtime`, against vanilla PyG, on this machine: what sharding their training epochs
over ranks (session 34) gives, and what it costs where it cannot be exact.

Workloads (the corpus adaptations in `tests/pyg_examples`, each program's `train(...)` called
unchanged, on more graphs than the corpus uses):
* ``pna``: `examples/pna.py`, PNA graph regression (4 `PNAConv` layers with towers, BatchNorm,
  `global_add_pool`) on ZINC-like molecules: ``--scale`` training graphs, a tenth of that
  for validation and for test, batch 128, L1 loss, Adam + ReduceLROnPlateau.
* ``mutag``: `examples/mutag_gin.py`, GIN graph classification (5 `GINConv` layers, hidden
  32) on MUTAG-like graphs: ``--scale`` graphs, 90 % for training, batch 128; each epoch the
  program also evaluates on the whole training set and on the test set.
* ``proteins`` (no BatchNorm): `examples/proteins_topk_pool.py`, three `GraphConv` +
  `TopKPooling` blocks on PROTEINS-like graphs of 12-40 nodes: ``--scale`` graphs, 90 % for
  training, batch 60, both loaders built without ``shuffle`` (the training one is promoted,
  and sharded, from its second epoch); each epoch also evaluates the training and test sets.
* ``qm9`` (no BatchNorm): `examples/qm9_nn_conv.py`, an edge network (`NNConv`, a 64 x 64
  weight per edge) + GRU + `Set2Set` on QM9-like molecules of 5-12 atoms made complete graphs
  by the dataset's transform: ``--scale`` molecules, 100 each for validation and test, batch
  128; compute-bound, where the BatchNorm-free programs' sharding has most to give.

Rows, each in a fresh process (same data, same seed): vanilla PyG (``--vanilla-python``,
e.g. ``.venv-baseline/bin/python`` with pyg-lib: the strongest baseline), called directly;
``gnnorch p=1`` (``processes=1, autotune=False``); ``gnnorch p=1 no seams`` (the same with
``trim=False, rewrite=False``: what the layer seam costs where nothing is trimmed);
``gnnorch p=1 glibc malloc`` (the same with ``launch={"allocator": "default"}``: what the
runtime's malloc setting, `gnnorch.launch.allocator`, gives);
``gnnorch p=2`` (``processes=2, autotune=False``, each rank one thread: training epochs
sharded by graph where that is exact, i.e. once the model has run and holds no BatchNorm:
pna and mutag hold one, so every rank runs every graph; proteins and qm9 are sharded);
``gnnorch`` (the defaults: the
tuner decides); vanilla again last. The time is the wall time of the user's whole
call (training and the program's own evaluation, which every rank runs whole); ``train epoch
s`` is rank 0's mean training epoch after the first, as the runtime timed it. Evaluation
epochs are not sharded, so a program that evaluates as much as it trains gains less. Metrics
that sum over a training epoch and divide by the dataset's size (PNA's ``loss``) are rank 0's
share with p ranks, as the README says.

    .venv/bin/python scripts/bench_graph_level.py --vanilla-python \\
        /work/main/.venv-baseline/bin/python --out benchmarks/results/graph_level.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests" / "pyg_examples"))
sys.path.insert(0, str(ROOT.parent / "src"))
import baselines  # noqa: E402  (fresh-process rows)

ROWS = {
    "vanilla": None,
    "gnnorch p=1": dict(processes=1, autotune=False),
    "gnnorch p=1 no seams": dict(processes=1, autotune=False, trim=False, rewrite=False),
    "gnnorch p=1 glibc malloc": dict(processes=1, autotune=False,
                                     launch={"allocator": "default"}),
    "gnnorch p=2": dict(processes=2, autotune=False),
    "gnnorch": {},
}
SCALES = {"pna": 1000, "mutag": 4000, "proteins": 4000, "qm9": 1000}   # default --scale
EPOCHS = {"pna": 3, "mutag": 10, "proteins": 6, "qm9": 3}               # default --epochs


def workload(name: str, scale: int, epochs: int, seed: int):
    """(the program's train function, its positional arguments) for `name` at `scale`."""
    import ex_mutag_gin

    if name == "pna":
        import ex_pna

        def split(offset: int, graphs: int):
            return ex_mutag_gin.MutagLike(ex_pna.zinc_like(1000 * seed + offset, graphs))

        held = max(scale // 10, 1)
        return ex_pna.train, (split(0, scale), split(1, held), split(2, held), epochs)
    if name == "mutag":
        return ex_mutag_gin.train, (ex_mutag_gin.mutag_like(seed, num_graphs=scale), epochs)
    if name == "proteins":
        import ex_proteins_topk_pool as ex

        return ex.train, (ex.proteins_like(seed, num_graphs=scale), epochs)
    if name == "qm9":
        import ex_qm9_nn_conv as ex

        return ex.train, (ex.qm9_like(seed, num_graphs=scale), epochs)
    raise SystemExit(f"unknown workload {name}")


def measure_one(label: str, args: argparse.Namespace) -> dict:
    """One row in this process (rank 0's training epochs as the runtime timed them)."""
    train, call_args = workload(args.workload, args.scale, args.epochs, args.seed)

    def epochs(runtime) -> dict:
        times = [e["seconds"] for e in runtime.last_run.epochs[0] if e["loader"] == 0]
        report = runtime.report   # the tuner's probes, when the defaults tuned
        trials = [{k: t.get(k) for k in ("config", "throughput", "status", "chosen_by",
                                         "batch_size_per_rank")}
                  for t in (report.trials if report is not None else [])]
        return {"train_epoch_s": statistics.mean(times[1:] or times) if times else None,
                "train_epochs_s": times, "trials": trials}

    return baselines.program_row(label, train, call_args, ROWS[label], args.seed, epochs)


def run_row(label: str, args: argparse.Namespace, python: str) -> dict:
    cmd = [python, __file__, "--measure", label, "--workload", args.workload, "--scale",
           str(args.scale), "--epochs", str(args.epochs), "--seed", str(args.seed)]
    return baselines.fastest_of(cmd, label, args.repeats)


def _plan(row: dict) -> str:
    plan = row.get("plan")
    if not plan:
        return "-"
    return f"p={plan.get('processes')}, t={plan.get('threads')}, s={plan.get('sampler_cores')}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=tuple(SCALES), action="append")
    ap.add_argument("--scale", type=int, help="training graphs (pna) or graphs (the others)")
    ap.add_argument("--epochs", type=int, help=f"epochs (default: {EPOCHS})")
    args = baselines.parse_program_args(ap, "benchmarks/results/graph_level.json")
    if args.scale is not None and args.scale < 20:
        ap.error(f"--scale must be at least 20 graphs, got {args.scale}")
    if args.scale is not None and args.scale < 300 and "qm9" in (args.workload or SCALES):
        ap.error(f"--scale must be at least 300 molecules for qm9 (100 each go to validation "
                 f"and test), got {args.scale}")
    if args.epochs is not None and args.epochs < 1:
        ap.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.measure:
        args.workload = (args.workload or list(SCALES))[0]
        args.scale = args.scale or SCALES[args.workload]
        args.epochs = args.epochs or EPOCHS[args.workload]
        print(json.dumps(measure_one(args.measure, args)))
        return
    print(baselines.machine_line(), flush=True)
    results = []
    for name in args.workload or list(SCALES):
        scale, epochs = args.scale or SCALES[name], args.epochs or EPOCHS[name]
        sub = argparse.Namespace(**{**vars(args), "workload": name, "scale": scale,
                                    "epochs": epochs})
        print(f"{name} (scale {scale}, {epochs} epoch(s))", flush=True)
        rows = baselines.rows_around_vanilla(
            lambda label: run_row(label, sub, args.vanilla_python if ROWS[label] is None
                                  else sys.executable),
            [label for label in ROWS if ROWS[label] is not None])
        print("\n| row | plan | call s | vs vanilla | train epoch s | metrics |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            epoch = f"{row['train_epoch_s']:.3f}" if row.get("train_epoch_s") else "-"
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in row["metrics"].items())
            print(f"| {row['label']} | {_plan(row)} | {row['seconds']:.1f} | "
                  f"{row['speedup_vs_vanilla']:.2f}x | {epoch} | {metrics} |")
        results.append({"workload": name, "scale": scale, "epochs": epochs, "rows": rows})
    baselines.write_results(args.out, "bench_graph_level", results, repeats=args.repeats)


if __name__ == "__main__":
    main()
