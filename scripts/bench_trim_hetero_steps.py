"""Trimmed against untrimmed training of a HeteroData model, step by step: the per-step losses
of the same `to_hetero` SAGE run (the ogbn-mag-like graph of `bench_hetero_feed.py`, batch 64,
fanout [5, 5], Adam) under `gnnorch.Runtime` with `trim=True` and `trim=False`, the same seed,
so the same batches. Prints and writes the absolute loss difference at every step: exact
trimming agrees to float rounding at first, then drifts as float differences do under Adam.

    .venv/bin/python scripts/bench_trim_hetero_steps.py --steps 40 \\
        --out benchmarks/results/trim_hetero_steps_session31.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "src"))
from bench_hetero_feed import mag_like  # noqa: E402


def train(data, steps: int, batch_size: int, fanout: tuple[int, ...]) -> list[float]:
    """The user's function: `steps` optimizer steps, their losses."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import Linear, SAGEConv, to_hetero

    classes = int(data["paper"].y.max()) + 1

    class GNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 128)
            self.conv2 = SAGEConv((-1, -1), 128)
            self.lin = Linear(-1, classes)

        def forward(self, x, edge_index):
            return self.lin(self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu())

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=list(fanout), batch_size=batch_size,
                            input_nodes=("paper", data["paper"].train_mask), shuffle=True)
    model = to_hetero(GNN(), data.metadata(), aggr="sum")
    with torch.no_grad():   # lazy layers
        first = next(iter(loader))
        model(first.x_dict, first.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    losses: list[float] = []
    while len(losses) < steps:
        for batch in loader:
            size = batch["paper"].batch_size
            opt.zero_grad()
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
            loss = F.cross_entropy(out, batch["paper"].y[:size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--papers", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--fanout", default="5,5", help="per hop, comma-separated integers")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        fanout = tuple(int(f) for f in args.fanout.split(","))
    except ValueError:
        parser.error(f"--fanout takes comma-separated integers such as 5,5, got {args.fanout!r}")
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch-size must be at least 1")
    import gnnorch

    data = mag_like(args.papers)
    runs = {trim: gnnorch.Runtime(train, data_path="host", seed=0, trim=trim,
                                  autotune=False)(data, args.steps, args.batch_size, fanout)
            for trim in (True, False)}
    diff = [abs(a - b) for a, b in zip(runs[True], runs[False])]
    for step, d in enumerate(diff, start=1):
        print(f"step {step:3d}  |loss trimmed - untrimmed| {d:.2e}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                        "torch": torch.__version__, "trimmed": runs[True],
                                        "untrimmed": runs[False], "abs_diff": diff}, indent=1))


if __name__ == "__main__":
    main()
