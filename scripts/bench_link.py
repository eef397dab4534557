"""Link prediction with PyG's LinkNeighborLoader: vanilla PyG against gnnorch.Runtime on this
machine (gnnorch serves LinkNeighborLoader since 2026-11-24, session 5).

Workload: products-like synthetic graph (default 100K nodes, avg degree 25, 100 features), 2-layer
GraphSAGE 100->256->256, a LinkNeighborLoader over 100K supervision edges (a fixed random subset
of the graph's edges), fanout [10, 5], batch 1024, binary negatives (ratio 1), scaled
dot-product decoder, binary cross-entropy: `examples/graph_sage_unsup.py`'s loop at a larger scale. After
the training epochs the function scores 4096 held-out supervision edges against as many random
negatives (ROC AUC, an evaluation LinkNeighborLoader with shuffle=False), so the rows can be
compared for quality too.

Rows, each in a fresh process (same graph, same seed), the function unchanged:
* vanilla PyG: called directly (``--vanilla-python`` runs it in another environment, e.g.
  ``.venv-baseline/bin/python`` with pyg-lib: the strongest baseline);
* PyG expert: vanilla PyG with PyG's own trimming enabled by hand (``expert=True``: the model
  gets ``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``, so BasicGNN computes only
  the rows the link objective reads: a link batch's first hop); needs pyg-lib's per-hop counts;
* gnnorch defaults: ``gnnorch.Runtime(train)`` (the tuner picks the layout);
* gnnorch p=1: ``Runtime(train, processes=1, autotune=False)``;
* gnnorch p=1 trim=False: the same without hop-aware trimming (link batches are trimmed since
  session 6: the ablation shows what trimming adds);
* gnnorch data path: ``Runtime(train, processes=1, autotune=False, data_path="device")``
  (issue 21's GPU path with the CPU as its device: sampling and negatives in a producer thread).

``--model encoder`` wraps the same GraphSAGE as the encoder of a model whose output is a
decoder's edge scores (PyG's link-prediction tutorials: ``Model = encoder + EdgeDecoder``, an
MLP on both ends' rows, as in ``examples/hetero/bipartite_sage_unsup.py``). gnnorch trims such a
model at its encoder since session 32; the PyG expert passes the per-hop counts through the
model to the encoder by hand.

    .venv/bin/python scripts/bench_link.py --out benchmarks/results/link.json \
        [--vanilla-python .venv-baseline/bin/python] [--model encoder]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import baselines  # fresh-process rows

ROWS = {
    "vanilla": None,
    "PyG expert": None,
    "gnnorch defaults": {},
    "gnnorch p=1": {"processes": 1, "autotune": False},
    "gnnorch p=1 trim=False": {"processes": 1, "autotune": False, "trim": False},
    "gnnorch data path (CPU as device)": {"processes": 1, "autotune": False,
                                          "data_path": "device"},
}


def make_data(nodes: int, seed: int, labels: int):
    from gnnorch.datasets import products_like

    data = products_like(num_nodes=nodes, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    pick = torch.randperm(data.num_edges, generator=gen)[:labels + 4096]
    data.train_label_index = data.edge_index[:, pick[:labels]]
    data.test_label_index = data.edge_index[:, pick[labels:]]
    return data


class EdgeDecoder(torch.nn.Module):
    """`examples/hetero/bipartite_sage_unsup.py`'s decoder: an MLP on both ends' rows."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lin1 = torch.nn.Linear(2 * hidden, hidden)
        self.lin2 = torch.nn.Linear(hidden, 1)

    def forward(self, z, edge_label_index):
        row, col = edge_label_index
        z = torch.cat([z[row], z[col]], dim=-1)
        return self.lin2(self.lin1(z).relu()).view(-1)


class EncoderDecoder(torch.nn.Module):
    """A GNN encoder and an edge decoder in one model: its output is a score per label edge."""

    def __init__(self, encoder: torch.nn.Module, hidden: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = EdgeDecoder(hidden)

    def forward(self, x, edge_index, edge_label_index, **trim):
        return self.decoder(self.encoder(x, edge_index, **trim), edge_label_index)


def train(data, epochs=2, batch_size=1024, fanout=(10, 5), hidden=256, seed=0, expert=False,
          model_kind="basic"):
    """An ordinary PyG link-prediction function; returns its own epoch seconds, mean training
    loss per epoch and the held-out ROC AUC. ``expert``: PyG's own trimming by hand (the
    per-hop counts passed to the model in training). ``model_kind`` "encoder": the GraphSAGE
    inside an encoder-decoder model that scores the label edges itself."""
    from sklearn.metrics import roc_auc_score
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(seed)
    loader = LinkNeighborLoader(data, num_neighbors=list(fanout), batch_size=batch_size,
                                edge_label_index=data.train_label_index, shuffle=True,
                                neg_sampling_ratio=1.0)
    model = GraphSAGE(data.num_features, hidden, num_layers=len(fanout))
    if model_kind == "encoder":
        model = EncoderDecoder(model, hidden)

    def score(batch, **trim):
        if model_kind == "encoder":
            return model(batch.x, batch.edge_index, batch.edge_label_index, **trim)
        h = model(batch.x, batch.edge_index, **trim)
        src, dst = batch.edge_label_index
        return (h[src] * h[dst]).sum(dim=-1) / hidden ** 0.5

    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    epoch_seconds, losses = [], []
    for _ in range(epochs):
        model.train()
        start, total, count = time.perf_counter(), 0.0, 0
        for batch in loader:
            optimizer.zero_grad()
            trim = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges) if expert else {}
            pred = score(batch, **trim)
            loss = F.binary_cross_entropy_with_logits(pred, batch.edge_label)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * pred.numel()
            count += pred.numel()
        epoch_seconds.append(time.perf_counter() - start)
        losses.append(total / count)
    model.eval()
    test = LinkNeighborLoader(data, num_neighbors=list(fanout), batch_size=8192,
                              edge_label_index=data.test_label_index, neg_sampling_ratio=1.0)
    scores, labels = [], []
    with torch.no_grad():
        for batch in test:
            scores.append(score(batch))
            labels.append(batch.edge_label)
    auc = roc_auc_score(torch.cat(labels).numpy(), torch.cat(scores).numpy())
    return {"epoch_seconds": epoch_seconds, "losses": losses, "auc": float(auc)}


def measure_one(label: str, args: argparse.Namespace) -> dict:
    """One row in this process."""
    data = make_data(args.nodes, args.seed, args.labels)
    options = ROWS[label]
    start = time.perf_counter()
    if options is None:
        out = train(data, epochs=args.epochs, expert=label == "PyG expert",
                    model_kind=args.model)
        extra = {}
    else:
        import gnnorch

        runtime = gnnorch.Runtime(train, **options)
        out = runtime(data, epochs=args.epochs, model_kind=args.model)
        run = runtime.last_run
        loaders = run.stats[0].get("sampler", {}).get("loaders", [])
        extra = {"plan": run.plan.to_dict(), "summary": runtime.summary(),
                 "trim": [{k: m.get(k) for k in ("model", "trimmed", "encoder", "reason")}
                          for m in (run.stats[0].get("trim") or {}).get("models", [])],
                 "loaders": [{k: s.get(k) for k in ("kind", "role", "backend")}
                             for s in loaders]}
    import torch_geometric.typing as pyg_typing

    return {"label": label, **out, **extra, "call_wall_seconds": time.perf_counter() - start,
            "best_epoch_seconds": min(out["epoch_seconds"]),
            "pyg_lib": bool(pyg_typing.WITH_PYG_LIB), "python": sys.executable}


def run_fresh(label: str, args: argparse.Namespace, python: str) -> dict:
    cmd = [python, __file__, "--measure", label, "--nodes", str(args.nodes), "--epochs",
           str(args.epochs), "--seed", str(args.seed), "--labels", str(args.labels),
           "--model", args.model]
    row = baselines.fresh_json_row(cmd, label)
    print(f"  {label:<36} epoch {row['best_epoch_seconds']:7.2f} s  loss "
          f"{row['losses'][-1]:.4f}  AUC {row['auc']:.4f}  wall {row['call_wall_seconds']:.1f} s",
          flush=True)
    return row


def _trimmed(row: dict) -> str:
    """How a row's model was trimmed: by hand (the expert), by gnnorch (at its output or at its
    encoder), or not."""
    if "trim" not in row:
        return "by hand (PyG)" if row["label"] == "PyG expert" else "no"
    models = row["trim"]
    if not models or not all(m.get("trimmed") for m in models):
        return "no"
    return ", ".join(f"at {m['encoder']}" if m.get("encoder") else "at the output"
                     for m in models)


def _machine() -> dict:
    import os

    import torch_geometric

    return {"platform": platform.platform(), "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--labels", type=int, default=100_000, help="supervision edges")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vanilla-python", default=sys.executable)
    ap.add_argument("--model", choices=("basic", "encoder"), default="basic",
                    help="encoder: GraphSAGE inside an encoder-decoder model")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/link.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)   # internal: one row, JSON to stdout
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_one(args.measure, args)))
        return
    import torch_geometric

    print(f"machine: {platform.platform()}, python {platform.python_version()}, torch "
          f"{torch.__version__}, PyG {torch_geometric.__version__}; each row a fresh process",
          flush=True)
    rows = [run_fresh("vanilla", args, args.vanilla_python)]
    rows.append(run_fresh("PyG expert", args, args.vanilla_python))
    rows += [run_fresh(label, args, sys.executable) for label in ROWS if ROWS[label] is not None]
    rows.append(run_fresh("vanilla", args, args.vanilla_python))
    rows[0]["label"], rows[-1]["label"] = "vanilla PyG (first)", "vanilla PyG (last)"
    vanilla = (rows[0]["best_epoch_seconds"] + rows[-1]["best_epoch_seconds"]) / 2
    print("\n| row | sampler | trimmed | epoch s | vs vanilla | mean loss, last epoch | "
          "held-out AUC |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        row["speedup_vs_vanilla"] = vanilla / row["best_epoch_seconds"]
        sampler = ("pyg-lib" if row["pyg_lib"] else "torch_sparse") if "plan" not in row else \
            ", ".join(f"{s['role']} {s['backend']}" for s in row["loaders"])
        plan = f" ({row['plan']['processes']} rank(s))" if "plan" in row else ""
        print(f"| {row['label']}{plan} | {sampler} | {_trimmed(row)} | "
              f"{row['best_epoch_seconds']:.2f} | "
              f"{row['speedup_vs_vanilla']:.2f}x | {row['losses'][-1]:.4f} | "
              f"{row['auc']:.4f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_link", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": _machine(), "argv": sys.argv, "nodes": args.nodes, "labels": args.labels,
        "epochs": args.epochs, "model": args.model, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
