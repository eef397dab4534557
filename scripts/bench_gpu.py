"""The GPU data path (issue 21): epoch time, first epoch, peak GPU memory and test accuracy of
vanilla PyG, the PyG expert and gnnorch on one GPU, products-scale.

Workload: a products-like synthetic graph (`gnnorch.datasets.products_like`: by default 2.45M
nodes, mean degree 25 -> ~122M directed edges, 100 features, 47 classes, 196,615 training
seeds), GraphSAGE / GCN / GAT (3 layers, hidden 256; GAT: 4 heads of 64), fanout [15, 10, 5],
batch 1024, Adam. One ordinary PyG training function (`train` below: ``batch.to(device)`` in
the loop, test accuracy with a NeighborLoader at the end) runs in every row:

* ``vanilla-w<N>``: PyG as written, data on the host, ``num_workers=N`` (the table's "vanilla"
  is the best N of ``--workers``);
* ``expert-w<N>``: what a PyG expert adds by hand: pyg-lib when installed, BasicGNN trimming
  (``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``), ``pin_memory=True`` with
  ``non_blocking`` copies, workers pinned with ``enable_cpu_affinity`` (best N);
* ``gnnorch``: the vanilla function under ``gnnorch.Runtime(train, device=...)`` with its
  defaults (the device path: graph, sampling and features on the GPU);
* ``gnnorch-cache``: the same with ``cache=True``;
* ``gnnorch-features-host``: features forced to pinned host memory
  (``data_path={"features": "host"}``): ``x`` waits in pinned rows for DAHA's host transform
  (`gnnorch.rewrite.host`); ``-norewrite`` without rewrites (every attribute copied on the
  pipeline's side stream); ``gnnorch-cache-features-host`` with the cache.

Each row runs in a fresh interpreter (`baselines.run_fresh`, which also samples the PSS of its
process tree); the child times its own epochs with the GPU synchronised at each epoch's end,
and reports ``torch.cuda.max_memory_allocated``. Everything is written as JSON.

    .venv/bin/python scripts/bench_gpu.py --out benchmarks/results/gpu.json
    .venv/bin/python scripts/bench_gpu.py --dry-run     # small, on the CPU, a few rows
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric

import baselines  # graph generation on disk, fresh-process runs with PSS sampling

PRODUCTS = {"nodes": 2_450_000, "train_seeds": 196_615}
DEVICE_ENV = "GNNORCH_BENCH_DEVICE"   # the parent's --device, for its fresh children
HIDDEN_ENV = "GNNORCH_BENCH_HIDDEN"   # the parent's --hidden
MODELS = ("sage", "gcn", "gat")


def build_model(name: str, in_channels: int, hidden: int, layers: int, classes: int):
    from torch_geometric.nn import GAT, GCN, GraphSAGE

    if name == "sage":
        return GraphSAGE(in_channels, hidden, num_layers=layers, out_channels=classes)
    if name == "gcn":
        return GCN(in_channels, hidden, num_layers=layers, out_channels=classes)
    if name == "gat":
        return GAT(in_channels, hidden, num_layers=layers, out_channels=classes, heads=4)
    raise ValueError(f"unknown model {name!r}")


def _loader(data, mask, fanout, batch_size, shuffle, num_workers, expert):
    from torch_geometric.loader import NeighborLoader

    kwargs = {} if num_workers is None else {"num_workers": num_workers,
                                             "persistent_workers": num_workers > 0}
    if expert:
        kwargs["pin_memory"] = True
    return NeighborLoader(data, num_neighbors=list(fanout), input_nodes=mask,
                          batch_size=batch_size, shuffle=shuffle, **kwargs)


def train(data, model="sage", epochs=3, device="cuda", num_workers=None, expert=False,
          batch_size=1024, fanout=(15, 10, 5), hidden=256, seed=0):
    """An ordinary PyG training function on `device`; `expert` adds what a PyG expert adds.
    Returns its own per-epoch seconds (the device synchronised at each epoch's end), the final
    loss and the test accuracy."""
    torch.manual_seed(seed)
    device = torch.device(device)
    loader = _loader(data, data.train_mask, fanout, batch_size, True, num_workers, expert)
    net = build_model(model, data.num_features, hidden, len(fanout),
                      int(data.y.max()) + 1).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.003)
    affinity = (loader.enable_cpu_affinity(list(range(num_workers)))
                if expert and num_workers else contextlib.nullcontext())
    epoch_seconds, loss, trimmed = [], None, False
    with affinity:
        for _ in range(epochs):
            net.train()
            start = time.perf_counter()
            for batch in loader:
                batch = batch.to(device, non_blocking=expert)
                optimizer.zero_grad()
                # BasicGNN trimming needs the sampler's hop counts (pyg-lib reports them)
                hops = ({"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
                         "num_sampled_edges_per_hop": batch.num_sampled_edges}
                        if expert and "num_sampled_nodes" in batch else {})
                trimmed |= bool(hops)
                out = net(batch.x, batch.edge_index, **hops)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            epoch_seconds.append(time.perf_counter() - start)
    return {"epoch_seconds": epoch_seconds, "loss": float(loss), "trimmed_by_hand": trimmed,
            "test_accuracy": test_accuracy(net, data, fanout, device, num_workers, expert)}


@torch.no_grad()
def test_accuracy(net, data, fanout, device, num_workers, expert) -> float:
    net.eval()
    loader = _loader(data, data.test_mask, fanout, 4096, False, num_workers, expert)
    correct = total = 0
    for batch in loader:
        batch = batch.to(device, non_blocking=expert)
        pred = net(batch.x, batch.edge_index)[:batch.batch_size].argmax(dim=-1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / max(total, 1)


def gnnorch_options(config: str, device: str) -> dict:
    """Runtime options of a gnnorch row (on a CPU dry run the path runs with mode="device")."""
    path: dict = {} if device == "cuda" else {"mode": "device"}
    if "features-host" in config:
        path["features"] = "host"
    options = {"device": device, "processes": 1, "data_path": path or None}
    if "-cache" in config:
        options["cache"] = True
    if config.endswith("-norewrite"):
        options["rewrite"] = False
    return options


def measure_here(config: str, graph: Path, epochs: int, device: str, hidden: int) -> dict:
    """Run one row (``<model>/<config>``) in this process: its JSON row."""
    import torch_geometric.typing as pyg_typing

    model, name = config.split("/")
    data = torch.load(graph, weights_only=False)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    stats = None
    start = time.perf_counter()
    if name.startswith(("vanilla-w", "expert-w")):
        expert = name.startswith("expert")
        out = train(data, model=model, epochs=epochs, device=device, expert=expert,
                    num_workers=int(name.split("-w")[1]), hidden=hidden)
    elif name.startswith("gnnorch"):
        import gnnorch

        runtime = gnnorch.Runtime(train, **gnnorch_options(name, device))
        out = runtime(data, model=model, epochs=epochs, device=device, hidden=hidden)
        stats = runtime.last_run.stats[0]
    else:
        raise ValueError(f"unknown configuration {config!r}")
    seconds = out["epoch_seconds"]
    row = {"config": config, "model": model, "epoch_seconds": seconds,
           "first_epoch_seconds": seconds[0], "steady_epoch_seconds": min(seconds[1:] or seconds),
           "test_accuracy": out["test_accuracy"], "final_loss": out["loss"],
           "trimmed_by_hand": out["trimmed_by_hand"],
           "call_wall_seconds": time.perf_counter() - start,
           "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None,
           "pyg_lib": bool(pyg_typing.WITH_PYG_LIB)}
    if stats is not None:
        row["gnnorch"] = {key: stats.get(key) for key in ("device", "sampler", "cache")}
    return row


def rows_for(args: argparse.Namespace) -> list[str]:
    workers = [int(w) for w in args.workers.split(",")]
    names = ([f"vanilla-w{w}" for w in workers] + [f"expert-w{w}" for w in workers]
             + ["gnnorch", "gnnorch-cache", "gnnorch-features-host",
                "gnnorch-features-host-norewrite", "gnnorch-cache-features-host"])
    if args.configs:
        names = [n for n in names if n in args.configs.split(",")]
    return [f"{model}/{name}" for model in args.models.split(",") for name in names]


def summarise(rows: list[dict]) -> list[dict]:
    """Per model: the best vanilla and expert rows, and every row's ratios to them."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]

        def best(prefix: str) -> dict | None:
            cands = [r for r in mine if r["config"].split("/")[1].startswith(prefix)]
            return min(cands, key=lambda r: r["steady_epoch_seconds"]) if cands else None

        vanilla, expert = best("vanilla-w"), best("expert-w")
        for row in mine:
            for label, ref in (("vanilla", vanilla), ("expert", expert)):
                if ref is not None:
                    row[f"speedup_vs_{label}"] = (ref["steady_epoch_seconds"]
                                                  / row["steady_epoch_seconds"])
            if vanilla is not None:
                row["accuracy_minus_vanilla_pt"] = 100 * (row["test_accuracy"]
                                                          - vanilla["test_accuracy"])
        out.append({"model": model, "vanilla": vanilla and vanilla["config"],
                    "expert": expert and expert["config"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=PRODUCTS["nodes"])
    ap.add_argument("--train-seeds", type=int, default=PRODUCTS["train_seeds"])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--workers", default="0,4,8,12")
    ap.add_argument("--configs", default=None, help="comma-separated subset of row names")
    ap.add_argument("--device", default=os.environ.get(
        DEVICE_ENV, "cuda" if torch.cuda.is_available() else "cpu"))
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--dry-run", action="store_true",
                    help="10K nodes, one batch of 1024 seeds, hidden 64, 1 epoch, SAGE, "
                         "workers 0, five rows, on the CPU: checks the script")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one row, JSON to stdout
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        hidden = int(os.environ.get(HIDDEN_ENV, args.hidden))
        print(json.dumps(measure_here(args.measure, args.graph, args.epochs, args.device,
                                      hidden)))
        return
    if args.dry_run:
        args.nodes, args.train_seeds, args.epochs, args.hidden = 10_000, 1_024, 1, 64
        args.models, args.workers, args.device = "sage", "0", "cpu"
        args.configs = args.configs or ("vanilla-w0,expert-w0,gnnorch,gnnorch-cache,"
                                        "gnnorch-features-host")
        args.out = Path("bench-results/gpu_dry_run.json")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device visible: run on a GPU machine, or --dry-run on the CPU")
    graph = baselines.ensure_graph(args.nodes, args.seed, args.train_seeds)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{args.nodes} nodes, {args.train_seeds} training seeds; device {device_name}; torch "
          f"{torch.__version__}, torch_geometric {torch_geometric.__version__}, pyg-lib "
          f"{'yes' if importlib.util.find_spec('pyg_lib') else 'no'}", flush=True)
    script = str(Path(__file__).resolve())
    os.environ[DEVICE_ENV] = args.device
    os.environ[HIDDEN_ENV] = str(args.hidden)
    configs = rows_for(args)
    import torch_geometric.typing as pyg_typing

    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        configs = [c for c in configs if "/gnnorch" in c]
        print("PyG cannot sample here (neither pyg-lib nor torch_sparse): vanilla and expert "
              "rows skipped; build pyg-lib first (../shared/baselines/build-pyg-lib.sh)")
    rows = []
    for config in configs:
        row = baselines.run_fresh(script, config, graph, args.epochs, sys.executable)
        print(f"  {config:<34} first {row['first_epoch_seconds']:7.2f} s  steady "
              f"{row['steady_epoch_seconds']:7.2f} s  acc {row['test_accuracy']:.4f}  GPU "
              f"{row['peak_gpu_mb'] or 0:7.0f} MB  PSS {row['peak_pss_mb']:7.0f} MB", flush=True)
        rows.append(row)
    best = summarise(rows)
    print("\n| model / row | first epoch s | steady epoch s | vs vanilla | vs expert | "
          "test acc | peak GPU MB |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['config']} | {row['first_epoch_seconds']:.2f} | "
              f"{row['steady_epoch_seconds']:.3f} | {row.get('speedup_vs_vanilla', 0):.2f}x | "
              f"{row.get('speedup_vs_expert', 0):.2f}x | {row['test_accuracy']:.4f} | "
              f"{row['peak_gpu_mb'] or 0:.0f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_gpu", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"device": device_name, "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__, "argv": sys.argv},
        "workload": {"nodes": args.nodes, "train_seeds": args.train_seeds,
                     "fanout": [15, 10, 5], "batch_size": 1024, "hidden": args.hidden,
                     "epochs": args.epochs, "dry_run": args.dry_run},
        "best": best, "rows": rows,
    }, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
