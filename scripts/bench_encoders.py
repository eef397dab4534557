"""PyG's own programs whose models hop-aware trimming reaches since session 33, at a larger
scale: vanilla PyG against `gnnorch.Runtime` with trimming on and off, on this machine.

Workloads (the corpus adaptations in `tests/pyg_examples`, each program's `train(data, epochs)`
called unchanged, on a bigger synthetic graph than the corpus uses):
* ``infomax``: `examples/infomax_inductive.py`, DeepGraphInfomax over a 3-layer SAGE encoder
  that returns ``x[:batch_size]`` itself, called twice per step (the batch and its corruption);
  fanout [10, 10, 25], batch 256, over every node; then a logistic-regression test accuracy.
  gnnorch trims it at the encoder's two calls, pass by pass, since session 33.
* ``bipartite``: `examples/hetero/bipartite_sage_unsup.py` on a Taobao-shaped graph: an item
  encoder (2 layers, item<>item) and a user encoder (3 calls) scored by an MLP decoder, with a
  LinkNeighborLoader [8, 4], binary negatives; validation and test AUC. gnnorch trims it at
  both encoders (layers from the data flow) since session 33.

Rows, each in a fresh process (same graph, same seed): vanilla PyG (``--vanilla-python``,
e.g. ``.venv-baseline/bin/python`` with pyg-lib: the strongest baseline), called directly;
``gnnorch p=1`` (``processes=1, autotune=False``), ``gnnorch p=1 trim=False`` (the ablation:
what trimming adds), ``gnnorch`` (defaults: the tuner picks the layout); vanilla again last.
The time is the wall time of the user's whole call (training epochs and its evaluation), the
same work in every row; with ``--repeats N`` each row runs N times and the table shows the
fastest (this machine's run-to-run noise on the bipartite workload is 20 %).

    .venv/bin/python scripts/bench_encoders.py --vanilla-python .venv-baseline/bin/python \\
        --out benchmarks/results/encoders_session33.json
"""
from __future__ import annotations

import argparse
import json
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
    "gnnorch p=1 trim=False": dict(processes=1, autotune=False, trim=False),
    "gnnorch": {},
}


def workload(name: str, scale: int, epochs: int, seed: int):
    """(the program's train function, its arguments) for `name` at `scale`."""
    if name == "infomax":
        import ex_infomax_inductive as ex
        from gnnorch.datasets import power_law_graph

        data = power_law_graph(num_nodes=scale, avg_degree=10.0, num_features=64,
                               num_classes=8, train_ratio=0.5, val_ratio=0.1, test_ratio=0.4,
                               seed=seed)
        return ex.train, (data, epochs)
    if name == "bipartite":
        import ex_bipartite_sage_unsup as ex

        data = ex.taobao_like(seed, num_users=scale, num_items=scale // 2,
                              num_categories=50, num_groups=20)
        return ex.train, (data, epochs)
    raise SystemExit(f"unknown workload {name}")


def measure_one(label: str, args: argparse.Namespace) -> dict:
    """One row in this process."""
    train, call_args = workload(args.workload, args.scale, args.epochs, args.seed)

    def trimming(runtime) -> dict:
        trim = runtime.last_run.stats[0].get("trim") or {}
        return {"trim": [{k: m.get(k) for k in ("model", "trimmed", "encoder", "layer_plan",
                                                 "reason")} for m in trim.get("models", [])],
                "rows_computed": trim.get("rows_computed"),
                "rows_untrimmed": trim.get("rows_untrimmed")}

    return baselines.program_row(label, train, call_args, ROWS[label], args.seed, trimming)


def run_fresh(label: str, args: argparse.Namespace, python: str) -> dict:
    """The row `label`, run `--repeats` times, each in a fresh process: the fastest run, with
    every run's seconds in ``all_seconds``."""
    cmd = [python, __file__, "--measure", label, "--workload", args.workload, "--scale",
           str(args.scale), "--epochs", str(args.epochs), "--seed", str(args.seed)]
    return baselines.fastest_of(cmd, label, args.repeats)


def _trimmed(row: dict) -> str:
    if "trim" not in row:
        return "-"
    models = [m for m in row["trim"] if m.get("trimmed")]
    if not models:
        return "no"
    return ", ".join(f"at {m['encoder']}" if m.get("encoder") else "at the output"
                     for m in models)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("infomax", "bipartite"), action="append")
    ap.add_argument("--scale", type=int, help="nodes (infomax) or users (bipartite)")
    ap.add_argument("--epochs", type=int, default=1)
    args = baselines.parse_program_args(ap, "benchmarks/results/encoders.json")
    if args.scale is not None and args.scale < 10:
        ap.error(f"--scale must be at least 10 (nodes for infomax, users for bipartite), "
                 f"got {args.scale}")
    if args.epochs < 1:
        ap.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.measure:
        args.workload = args.workload[0]
        print(json.dumps(measure_one(args.measure, args)))
        return
    print(baselines.machine_line(), flush=True)
    results = []
    for name in args.workload or ["infomax", "bipartite"]:
        scale = args.scale or {"infomax": 50_000, "bipartite": 20_000}[name]
        sub = argparse.Namespace(**{**vars(args), "workload": name, "scale": scale})
        print(f"{name} (scale {scale}, {args.epochs} epoch(s))", flush=True)
        rows = baselines.rows_around_vanilla(
            lambda label: run_fresh(label, sub, args.vanilla_python if ROWS[label] is None
                                    else sys.executable),
            [label for label in ROWS if ROWS[label] is not None])
        print("\n| row | trimmed | rows computed / untrimmed | call s | vs vanilla | metrics |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            share = (f"{row['rows_computed'] / row['rows_untrimmed']:.2f}"
                     if row.get("rows_untrimmed") else "-")
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in row["metrics"].items())
            print(f"| {row['label']} | {_trimmed(row)} | {share} | {row['seconds']:.1f} | "
                  f"{row['speedup_vs_vanilla']:.2f}x | {metrics} |")
        results.append({"workload": name, "scale": scale, "rows": rows})
    baselines.write_results(args.out, "bench_encoders", results, epochs=args.epochs, repeats=args.repeats)


if __name__ == "__main__":
    main()
