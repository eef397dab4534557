"""Trimming must not change a single loss: per-batch training losses with trimming on and off.

For each model, the same function runs twice under the runtime (same seed, so the same
batches and initial weights): `trim=True` (the default) and `trim=False`. It prints, per model,
whether the model was trimmed (and why not) and the largest per-batch loss difference, which
must be 0 up to float rounding. Models with normalisation inside their layers (a GINConv whose
`nn` holds a BatchNorm1d, GENConv's default MLP) must be left untrimmed; row-local ones trimmed.

    .venv/bin/python scripts/trim_exactness.py [--epochs 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GAT, GENConv, GINConv, GraphSAGE

import gnnorch
from gnnorch.datasets import products_like

C_IN, HIDDEN, CLASSES = 32, 32, 8


def _gin_bn(i, o):
    return GINConv(torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.BatchNorm1d(o),
                                       torch.nn.ReLU(), torch.nn.Linear(o, o)))


class Stack(torch.nn.Module):
    """Two layers of one kind with a ReLU between them."""

    def __init__(self, conv):
        super().__init__()
        self.conv1, self.conv2 = conv(C_IN, HIDDEN), conv(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


MODELS = {
    "GraphSAGE (BasicGNN)": lambda: GraphSAGE(C_IN, HIDDEN, 2, CLASSES),
    "GAT (BasicGNN)": lambda: GAT(C_IN, HIDDEN, 2, CLASSES, heads=2),
    "GINConv, nn with BatchNorm1d": lambda: Stack(_gin_bn),
    "GENConv, norm='batch' (default)": lambda: Stack(lambda i, o: GENConv(i, o)),
    "GENConv, norm='layer'": lambda: Stack(lambda i, o: GENConv(i, o, norm="layer")),
}


def train(data, name, epochs):
    torch.manual_seed(0)
    model = MODELS[name]()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[10, 5],
                            batch_size=256, shuffle=True)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    data = products_like(num_nodes=20000, num_features=C_IN, num_classes=CLASSES)
    rows = []
    for name in MODELS:
        runtime = gnnorch.Runtime(train, seed=0, verbose=False)
        trimmed = runtime(data, name, args.epochs)
        model = runtime.last_run.stats[0]["trim"]["models"][0]
        plain = gnnorch.Runtime(train, seed=0, trim=False, verbose=False)(data, name, args.epochs)
        diff = max(abs(a - b) for a, b in zip(trimmed, plain))
        rows.append({"model": name, "trimmed": model["trimmed"], "reason": model["reason"],
                     "batches": len(plain), "max_loss_diff": diff})
        print(f"| {name} | {'yes' if model['trimmed'] else 'no'} | {len(plain)} | {diff:.2e} |"
              + ("" if model["trimmed"] else f" {model['reason'][:60]}"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
