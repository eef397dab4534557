"""DAHA's pre-transformation on a GPU: bottom-layer transform on the host vs PyG's copy-then-GPU.

Features live in host memory and the model on the GPU (the usual PyG set-up for graphs whose
features do not fit on the GPU). Per sampled, hop-trimmed batch of a products-like graph
(fanout [15, 10, 5], ``--seeds`` seeds; shapes from ``bench_rewrite.sampled_shapes``), for the
bottom layer of each configuration, forward + backward (weight gradients), CUDA-synchronised:

* ``pyg``: ``x.to(cuda)`` of the ``n_src x f_in`` rows, then the layer as PyG runs it;
* ``host``: ``X W^T`` on the CPU (chunked, overlapped with the copy), ``n_src x f_out`` copied,
  aggregation on the GPU (``rule.forward_host``);
* ``chosen``: the rewrite engine's call after it has seen ``--fit`` batches (it measures both
  placements on each bucket's first calls and keeps the faster).

The edge_index is on the GPU beforehand in all three (the user's ``batch.to(device)`` copies
it either way). ``--e2e`` also times whole epochs of a 3-layer GraphSAGE (hidden 256) under
``Runtime(device="cuda")`` with ``rewrite=True`` vs ``rewrite=False``.

    python scripts/bench_host_transform.py --nodes 200000 --e2e
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.nn import MLP, GCNConv, GINConv, SAGEConv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rewrite import sampled_shapes  # noqa: E402

from gnnorch.rewrite import RewriteEngine, rule_for  # noqa: E402
from gnnorch.rewrite.host import DeferredFeatures  # noqa: E402
from gnnorch.rewrite.timing import time_call  # noqa: E402

CONFIGS = [
    ("SAGE 602->256", lambda: SAGEConv(602, 256)),
    ("SAGE 602->64", lambda: SAGEConv(602, 64)),
    ("SAGE 100->256", lambda: SAGEConv(100, 256)),
    ("GCN 100->256", lambda: GCNConv(100, 256)),
    ("GCN 602->64", lambda: GCNConv(602, 64)),
    ("GIN 500->128", lambda: GINConv(MLP([500, 128, 128]))),
]


def width(layer) -> int:
    return layer.nn.in_channels if isinstance(layer, GINConv) else layer.in_channels


def call_args(layer, x, n_dst, edge_index):
    if isinstance(layer, GCNConv):
        return (x, edge_index)
    return ((x, x[:n_dst]), edge_index)


def bench_config(label, factory, shapes, fit, repeats, cuda, gen):
    torch.manual_seed(0)
    layer = factory().to(cuda)
    rule = rule_for(layer)
    params = list(layer.parameters())
    engine = RewriteEngine(True, device=cuda)
    for n_src, n_dst, ei in shapes[:fit]:     # as a training loop: the engine measures
        x = torch.randn(n_src, width(layer), generator=gen)
        ei_dev = ei.to(cuda)
        d = DeferredFeatures.defer(x, cuda)
        engine.forward(layer, layer.forward, call_args(layer, d, n_dst, ei_dev), {}).sum() \
            .backward()
    layer.zero_grad(set_to_none=True)
    rows = []
    for n_src, n_dst, ei in shapes[fit:]:
        x = torch.randn(n_src, width(layer), generator=gen)
        ei = ei.to(cuda)

        def pyg():
            return layer(*call_args(layer, x.to(cuda), n_dst, ei))

        def host():
            d = DeferredFeatures.defer(x, cuda)
            call = rule.bind(layer, call_args(layer, d, n_dst, ei), {})
            return rule.forward_host(layer, call)

        def chosen():
            d = DeferredFeatures.defer(x, cuda)
            return engine.forward(layer, layer.forward, call_args(layer, d, n_dst, ei), {})

        variants = {"pyg": pyg, "host": host, "chosen": chosen}
        for fn in variants.values():
            time_call(fn, params, True, cuda)               # warm-up
        times = {k: [] for k in variants}
        for r in range(repeats):
            names = list(variants)[r % 3:] + list(variants)[:r % 3]
            for name in names:
                times[name].append(time_call(variants[name], params, True, cuda)[0])
        rows.append({"n_src": n_src, "n_dst": n_dst, "edges": int(ei.size(1)),
                     "ms": {k: 1e3 * statistics.median(v) for k, v in times.items()}})
    med = {k: statistics.median(r["ms"][k] for r in rows) for k in ("pyg", "host", "chosen")}
    placement = engine.report()["layers"][0]["host_transform"]
    choices = sorted({b["choice"] for b in placement["buckets"]})
    return {"config": label, "shape": rows[0], "ms": med,
            "speedup_host": med["pyg"] / med["host"], "speedup_chosen": med["pyg"] / med["chosen"],
            "choice": choices, "reason_not": placement["reason_not"], "held_out": rows}


def e2e(args, cuda) -> dict:
    import gnnorch
    from gnnorch.datasets import products_like

    data = products_like(num_nodes=args.nodes, seed=0, num_features=args.features)

    def train(data, epochs=3):
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.nn import GraphSAGE

        torch.manual_seed(0)
        loader = NeighborLoader(data, num_neighbors=[15, 10, 5], input_nodes=data.train_mask,
                                batch_size=1024, shuffle=True)
        model = GraphSAGE(data.num_features, 256, 3, 47).to(cuda)
        opt = torch.optim.Adam(model.parameters(), lr=0.003)
        seconds, loss = [], None
        for _ in range(epochs):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for batch in loader:
                batch = batch.to(cuda)
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        return {"epoch_seconds": seconds, "loss": float(loss)}

    out = {}
    for rewrite in (False, True):
        runtime = gnnorch.Runtime(train, device="cuda", rewrite=rewrite, seed=0)
        res = runtime(data, epochs=args.epochs)
        steady = res["epoch_seconds"][1:] or res["epoch_seconds"]
        row = {"epoch_seconds": res["epoch_seconds"], "steady": statistics.median(steady),
               "loss": res["loss"]}
        if rewrite:
            stats = runtime.last_run.stats[0]["rewrite"]
            row["placement"] = [{"layer": layer["name"], **layer["host_transform"]}
                                for layer in stats["layers"]]
        out[f"rewrite={rewrite}"] = row
        print(f"  e2e rewrite={rewrite}: epochs {[round(s, 2) for s in res['epoch_seconds']]}"
              f" loss {res['loss']:.3f}", flush=True)
    off, on = out["rewrite=False"]["steady"], out["rewrite=True"]["steady"]
    print(f"  steady epoch: rewrite off {off:.2f} s, on {on:.2f} s -> {off / on:.2f}x")
    return {"graph": {"nodes": data.num_nodes, "edges": data.num_edges,
                      "features": data.num_features}, "runs": out, "speedup": off / on}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, default=1024)
    ap.add_argument("--fit", type=int, default=3)
    ap.add_argument("--held-out", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--features", type=int, default=602, help="--e2e: feature width")
    ap.add_argument("--epochs", type=int, default=4, help="--e2e: epochs per run")
    ap.add_argument("--out", default="bench-results/host_transform.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_host_transform.py needs a CUDA device")
    cuda = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    shapes = [batch[0] for batch in sampled_shapes(args.nodes, args.seeds,
                                                   args.fit + args.held_out, seed=0)]
    print(f"{torch.cuda.get_device_name()}, {torch.get_num_threads()} CPU threads, torch "
          f"{torch.__version__}; bottom-layer shapes (n_src, n_dst, edges): "
          f"{[(s[0], s[1], int(s[2].size(1))) for s in shapes]}", flush=True)
    results = []
    print("| layer | PyG (copy + GPU) ms | host transform ms | chosen ms | host speed-up | "
          "chosen speed-up | planner |")
    print("|---|---|---|---|---|---|---|")
    for label, factory in CONFIGS:
        r = bench_config(label, factory, shapes, args.fit, args.repeats, cuda, gen)
        results.append(r)
        print(f"| {label} | {r['ms']['pyg']:.2f} | {r['ms']['host']:.2f} | "
              f"{r['ms']['chosen']:.2f} | {r['speedup_host']:.2f}x | {r['speedup_chosen']:.2f}x"
              f" | {'/'.join(r['choice']) or r['reason_not']} |", flush=True)
    out = {"platform": {"gpu": torch.cuda.get_device_name(), "threads": torch.get_num_threads(),
                        "torch": torch.__version__, "python": platform.python_version()},
           "layers": results}
    if args.e2e:
        out["e2e"] = e2e(args, cuda)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
