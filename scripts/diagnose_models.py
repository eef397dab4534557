"""Why the headline study's GCN and GAT rows read as they do (`bench_fastpath.py --baselines
--model`): three diagnoses on the products-like graph the study generated
(`bench-results/graphs/products_like_<nodes>_0_10240.pt`; run the study, or pass --nodes of
one it made).

``trim``: PyG's hierarchical trimming against no trimming. One sampled batch (1024 seeds,
[15, 10, 5], PyG's NeighborLoader), one model of each kind (BasicGNN GraphSAGE, GCN, GAT with 4
heads; hidden 256; eval mode, seed 0), the seeds' outputs with and without
``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``: the largest difference beside
the outputs' largest magnitude. 0 means the expert's trimming keeps the model; anything else
means the PyG expert's row trains another model.

``memory``: one process per row, 3 epochs of `bench_runtime.train` (vanilla, then
`gnnorch.Runtime(train)` with its defaults, then with ``launch={"allocator": "default"}``):
the epochs, the process's peak RSS and the runtime's allocator stats (the heap glibc holds,
and how much of it is free but retained).

``profile``: where a trimmed training step's CPU time goes, by torch operator
(`torch.profiler`, 3 steps after one warm-up, PyG with BasicGNN trimming: what both the PyG
expert and gnnorch compute). Needs pyg-lib for the hop counts: run with the baseline
environment.

    .venv-baseline/bin/python scripts/diagnose_models.py trim
    .venv-baseline/bin/python scripts/diagnose_models.py memory --model gcn
    .venv-baseline/bin/python scripts/diagnose_models.py profile --model gat
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch
import torch.nn.functional as F

import baselines  # build_model, graph_path (scripts/ is on sys.path)

MEMORY_ROWS = {"vanilla": None, "gnnorch": {}, "gnnorch-default-allocator":
               {"launch": {"allocator": "default"}}}


def _graph(nodes: int):
    path = baselines.graph_path(nodes, 0, 10 * 1024)
    if not path.exists():
        sys.exit(f"{path} is missing: run bench_fastpath.py --baselines --nodes {nodes} first")
    return torch.load(path, weights_only=False)


def _batches(data, count: int):
    from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=[15, 10, 5], input_nodes=data.train_mask,
                            batch_size=1024, shuffle=True)
    batches = [batch for _, batch in zip(range(count), loader)]
    if "num_sampled_nodes" not in batches[0]:
        sys.exit("PyG filled no hop counts: run with the baseline environment (pyg-lib)")
    return batches


def _hops(batch) -> dict:
    return {"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
            "num_sampled_edges_per_hop": batch.num_sampled_edges}


def trim(args: argparse.Namespace) -> None:
    data = _graph(args.nodes)
    torch.manual_seed(0)
    (batch,) = _batches(data, 1)
    for name in baselines.MODELS:
        torch.manual_seed(0)
        net = baselines.build_model(name, data.num_features, 256, 3, int(data.y.max()) + 1)
        net.eval()
        with torch.no_grad():
            whole = net(batch.x, batch.edge_index)[:batch.batch_size]
            trimmed = net(batch.x, batch.edge_index, **_hops(batch))[:batch.batch_size]
        print(json.dumps({"model": name, "max_abs_difference":
                          float((whole - trimmed).abs().max()),
                          "max_abs_output": float(whole.abs().max())}))


def memory(args: argparse.Namespace) -> None:
    for row in MEMORY_ROWS:
        out = subprocess.run([sys.executable, __file__, "memory-row", "--row", row,
                              "--model", args.model, "--nodes", str(args.nodes)],
                             check=True, capture_output=True, text=True).stdout
        print(out.strip().splitlines()[-1], flush=True)


def memory_row(args: argparse.Namespace) -> None:
    import gnnorch
    from bench_runtime import train

    data = _graph(args.nodes)
    options = MEMORY_ROWS[args.row]
    allocator = None
    if options is None:
        out = train(data, epochs=3, model=args.model)
    else:
        runtime = gnnorch.Runtime(train, **options)
        out = runtime(data, epochs=3, model=args.model)
        allocator = runtime.last_run.stats[0].get("allocator")
    print(json.dumps({"row": args.row, "model": args.model,
                      "epoch_seconds": [round(s, 2) for s in out["epoch_seconds"]],
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "allocator": allocator}))


def profile(args: argparse.Namespace) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    torch.set_num_threads(args.threads)
    data = _graph(args.nodes)
    torch.manual_seed(0)
    batches = _batches(data, 4)
    net = baselines.build_model(args.model, data.num_features, 256, 3, int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.003)

    def step(batch) -> None:
        optimizer.zero_grad()
        out = net(batch.x, batch.edge_index, **_hops(batch))[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()

    step(batches[0])
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[1:]:
            step(batch)
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events)
    print(f"{args.model}: {len(batches) - 1} trimmed steps, aten self CPU "
          f"{total / 1e6:.2f} s ({args.threads} threads)")
    for event in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]:
        print(f"  {event.key:<28} {event.self_cpu_time_total / total:6.1%}  "
              f"{event.count:5d} calls")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["trim", "memory", "profile", "memory-row"])
    ap.add_argument("--model", default="gcn", choices=baselines.MODELS)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--row", choices=list(MEMORY_ROWS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.nodes < 1 or args.threads < 1 or args.top < 1:
        ap.error("--nodes, --threads and --top must be positive")
    if args.what == "memory-row" and args.row is None:
        ap.error("memory-row is the memory diagnosis's child: run `memory`")
    {"trim": trim, "memory": memory, "profile": profile, "memory-row": memory_row}[args.what](args)


if __name__ == "__main__":
    main()
