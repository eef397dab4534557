"""Original vs rewritten vs planner-chosen layer order on sampled, hop-trimmed batches.

Workload (issue #6): a products-like power-law graph (``--nodes``, default 100K, mean degree
25), seeds drawn at random, fanout [15, 10, 5] sampled with gnnorch's own uniform sampler.
Each 3-hop sample gives three layer shapes after hop-aware trimming (layer 0 at the bottom):

    layer l: sources = nodes of hops 0..3-l, destinations = nodes of hops 0..2-l,
             edges = the sampled edges ending in hops 0..2-l.

Layers take the bipartite pair ``(x[:n_src], x[:n_dst])`` (GCNConv, which has no bipartite
form, takes ``x[:n_src]``); bottom layers get inputs without gradient, upper layers inputs
that need one, as in training. For every configuration one :class:`RewriteEngine` (shared,
calibrated once) sees ``--fit`` batches as a training loop would (forward + backward through
``engine.forward``: it probes and decides), then on ``--held-out`` other batches the script
times forward + backward of PyG's order, the rewritten order and the engine's choice
(median of ``--repeats`` -- more for short layers, so that each variant runs for at least
0.5 s -- one warm-up excluded, variants interleaved) and compares the cost
model's predictions with them. Held-out is rolling-origin: each prediction is made before
its batch is measured, and that measurement then joins the fit (as the engine's own
re-probes would), so the model follows a machine whose speed drifts. The model is fitted
to the best of a probe's two runs (the uncontended time), so its MAPE is taken against the
best of the first two (interleaved) runs, the same estimator; the MAPE against the median
of all runs is printed beside it, and so is the
within-call spread (max / min - 1 over the repeats), the noise floor of any time model.

    .venv/bin/python scripts/bench_rewrite.py --nodes 100000 --seeds 512
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.nn import MLP, GATConv, GCNConv, GINConv, SAGEConv

from gnnorch.datasets import products_like
from gnnorch.rewrite import CostModel, RewriteEngine, rule_for
from gnnorch.rewrite.timing import time_call
from gnnorch.sampling.uniform import sample_neighbors

#: (label, layer factory, layer position counted from the bottom)
CONFIGS = [
    ("SAGE 602->256", lambda: SAGEConv(602, 256), 0),
    ("SAGE 100->256", lambda: SAGEConv(100, 256), 0),
    ("SAGE 256->47", lambda: SAGEConv(256, 47), 2),
    ("GCN 100->256", lambda: GCNConv(100, 256), 0),
    ("GCN 256->256", lambda: GCNConv(256, 256), 1),
    ("GIN 500->128", lambda: GINConv(MLP([500, 128, 128])), 0),
    ("GAT1 128->256", lambda: GATConv(128, 256, heads=1), 0),
]
FANOUT = (15, 10, 5)
MIN_SECONDS, MAX_REPEATS = 0.5, 60


def sampled_shapes(nodes: int, seeds: int, batches: int, seed: int) -> list[list[tuple]]:
    """Per batch, per layer (bottom first): (n_src, n_dst, edge_index) after trimming."""
    data = products_like(num_nodes=nodes, seed=seed)
    src, dst = data.edge_index
    order = dst.argsort()
    row = src[order]
    colptr = torch.zeros(data.num_nodes + 1, dtype=torch.long)
    colptr[1:] = torch.bincount(dst, minlength=data.num_nodes).cumsum(0)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batches):
        batch_seeds = torch.randperm(data.num_nodes, generator=gen)[:seeds]
        s = sample_neighbors(colptr, row, batch_seeds, FANOUT, generator=gen)
        n, e = s.num_sampled_nodes, s.num_sampled_edges
        layers = []
        for layer in range(len(FANOUT)):
            hops = len(FANOUT) - layer
            n_src, n_dst, n_edges = sum(n[:hops + 1]), sum(n[:hops]), sum(e[:hops])
            edge_index = torch.stack([s.row[:n_edges], s.col[:n_edges]])
            layers.append((n_src, n_dst, edge_index))
        out.append(layers)
    return out


def layer_inputs(layer, n_src: int, n_dst: int, edge_index, grad: bool, gen):
    """Positional arguments of one call: features of the right width, pair or Tensor."""
    rule = rule_for(layer)
    width = layer.in_channels if not isinstance(layer, GINConv) else layer.nn.in_channels
    x = torch.randn(n_src, width, generator=gen).requires_grad_(grad)
    if isinstance(layer, GCNConv):
        return (x, edge_index), rule
    return ((x, x[:n_dst]), edge_index), rule


def fwd_bwd(fn, layer, args) -> float:
    inputs = [t for t in (args[0] if isinstance(args[0], tuple) else (args[0],))
              if t.requires_grad][:1]
    return time_call(fn, [*layer.parameters(), *inputs], True, torch.device("cpu"))[0]


def bench_config(label, factory, position, shapes, engine, fit, repeats, gen):
    torch.manual_seed(0)
    layer = factory()
    rule = rule_for(layer)
    grad = position > 0
    for batch in shapes[:fit]:  # as a training loop: the engine probes and decides
        args, _ = layer_inputs(layer, *batch[position], grad, gen)
        out = engine.forward(layer, layer.forward, args, {})
        out.sum().backward()
    layer.zero_grad(set_to_none=True)
    rows, pairs = [], []
    for batch in shapes[fit:]:
        args, _ = layer_inputs(layer, *batch[position], grad, gen)
        call = rule.bind(layer, args, {})
        shape = rule.shape(layer, call, True)
        predicted = engine.predict(layer, shape)  # made before this batch is measured
        variants = {
            "original": lambda: layer(*args),
            "rewritten": lambda: rule.forward(layer, call),
            "chosen": lambda: engine.forward(layer, layer.forward, args, {}),
        }
        times = {name: [] for name in variants}
        warm = max(fwd_bwd(fn, layer, args) for fn in variants.values())  # warm-up
        while engine.bucket_state(layer, shape).probes < engine.planner.probes_per_bucket:
            fwd_bwd(variants["chosen"], layer, args)  # a new bucket: let the engine settle
        # small layers get more repeats (at least MIN_SECONDS per variant): their times are
        # often bimodal on a shared machine
        for r in range(max(repeats, min(MAX_REPEATS, math.ceil(MIN_SECONDS / warm)))):
            names = list(variants)[r % 3:] + list(variants)[:r % 3]
            for name in names:
                times[name].append(fwd_bwd(variants[name], layer, args))
        measured = {name: statistics.median(ts) for name, ts in times.items()}
        best = {name: min(ts[:2]) for name, ts in times.items()}  # a probe's estimator
        engine.observe(layer, shape, {k: best[k] for k in ("original", "rewritten")})
        pairs += [(predicted[k], best[k], measured[k]) for k in ("original", "rewritten")]
        state = engine.bucket_state(layer, shape)
        spread = statistics.mean(max(ts) / min(ts) - 1 for ts in times.values())
        rows.append({"shape": shape.as_dict(), "predicted_s": predicted, "measured_s": measured,
                     "best_of_2_s": best, "spread": spread, "planner_rewrites": state.rewrite,
                     "decided_by": state.decided_by})
    med = {k: statistics.median(r["measured_s"][k] for r in rows)
           for k in ("original", "rewritten", "chosen")}
    return {
        "config": label,
        "position": position,
        "shape": rows[0]["shape"],
        "ms": {k: 1e3 * v for k, v in med.items()},
        "speedup_rewritten": med["original"] / med["rewritten"],
        "speedup_chosen": med["original"] / med["chosen"],
        "planner_rewrites": sum(r["planner_rewrites"] for r in rows) / len(rows),
        "decided_by": sorted({r["decided_by"] for r in rows}),
        "mape_held_out": CostModel.mape_of((p, b) for p, b, _ in pairs),
        "mape_held_out_vs_median": CostModel.mape_of((p, m) for p, _, m in pairs),
        "spread": statistics.mean(r["spread"] for r in rows),
        "held_out": rows,
    }, pairs


def planner_column(result: dict) -> str:
    """'rewrite' / 'original' over the held-out batches (or the share that rewrote)."""
    share = result["planner_rewrites"]
    choice = "rewrite" if share == 1 else "original" if share == 0 else f"rewrite {share:.0%}"
    return f"{choice} ({', '.join(result['decided_by'])})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=512, help="seed nodes per batch")
    parser.add_argument("--fit", type=int, default=3, help="batches seen by the engine first")
    parser.add_argument("--held-out", type=int, default=3, help="batches measured afterwards")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--calibration-s", type=float, default=2.0)
    parser.add_argument("--only", default="", help="comma-separated config label prefixes")
    parser.add_argument("--out", default="bench-results/rewrite.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shapes = sampled_shapes(args.nodes, args.seeds, args.fit + args.held_out, seed=0)
    start = time.perf_counter()
    engine = RewriteEngine(True, device="cpu", calibration_s=args.calibration_s)
    calibration_wall = time.perf_counter() - start
    gen = torch.Generator().manual_seed(1)
    results, all_pairs = [], []
    configs = [c for c in CONFIGS
               if not args.only or any(c[0].startswith(p) for p in args.only.split(","))]
    for label, factory, position in configs:
        result, pairs = bench_config(label, factory, position, shapes, engine, args.fit,
                                     args.repeats, gen)
        results.append(result)
        all_pairs += pairs
        print(f"done {label}: {result['speedup_chosen']:.2f}x", flush=True)
    report = engine.report()
    mape = CostModel.mape_of((p, b) for p, b, _ in all_pairs)
    mape_median = CostModel.mape_of((p, m) for p, _, m in all_pairs)
    print()
    print(f"torch {torch.__version__}, PyG {torch_geometric.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}; "
          f"{args.nodes} nodes, {args.seeds} seeds, fanout {list(FANOUT)}; "
          f"calibration {calibration_wall:.2f} s")
    print()
    print("| layer | pos | n_src / n_dst / E | original ms | rewritten ms | chosen ms "
          "| rewrite speedup | chosen speedup | planner | held-out MAPE | spread |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["shape"]
        print(f"| {r['config']} | {r['position']} | {s['n_src']} / {s['n_dst']} / {s['n_edges']} "
              f"| {r['ms']['original']:.1f} | {r['ms']['rewritten']:.1f} | {r['ms']['chosen']:.1f} "
              f"| {r['speedup_rewritten']:.2f}x | {r['speedup_chosen']:.2f}x "
              f"| {planner_column(r)} "
              f"| {100 * r['mape_held_out']:.1f}% | {100 * r['spread']:.0f}% |")
    print(f"\ncost model held-out MAPE over all configurations: {100 * mape:.1f}% against the "
          f"best of 2 runs (the probes' estimator), {100 * mape_median:.1f}% "
          f"against the median ({len(all_pairs)} predictions); engine prequential MAPE: "
          f"{100 * (report['mape_prequential'] or 0):.1f}% over all probes, "
          f"{100 * (report['mape_prequential_warm'] or 0):.1f}% after each bucket's first probe")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
        "threads": torch.get_num_threads(), "machine": platform.machine(),
        "processor": platform.processor(), "python": platform.python_version(),
        "args": vars(args), "calibration_wall_s": calibration_wall, "fanout": list(FANOUT),
        "mape_held_out": mape, "mape_held_out_vs_median": mape_median, "results": results,
        "engine": report,
    }, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
