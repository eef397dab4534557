"""Trimmed against untrimmed training of a link model trimmed at its encoder, step by step: the
per-step losses of `bench_link.py --model encoder`'s function (GraphSAGE encoder + MLP edge
decoder, LinkNeighborLoader, binary negatives, Adam) under `gnnorch.Runtime` with `trim=True`
and `trim=False`, the same seed, so the same batches. Prints and writes the absolute loss
difference at every step: exact trimming agrees to float rounding at first, then drifts as
float differences do under Adam.

    .venv/bin/python scripts/bench_trim_link_steps.py --steps 40 \\
        --out benchmarks/results/trim_link_steps_session32.json
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
from bench_link import EncoderDecoder, make_data  # noqa: E402


def train(data, steps: int, batch_size: int, fanout: tuple[int, ...], hidden: int) -> list:
    """The user's function: `steps` optimizer steps, their losses."""
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    loader = LinkNeighborLoader(data, num_neighbors=list(fanout), batch_size=batch_size,
                                edge_label_index=data.train_label_index, shuffle=True,
                                neg_sampling_ratio=1.0)
    model = EncoderDecoder(GraphSAGE(data.num_features, hidden, num_layers=len(fanout)), hidden)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    losses: list[float] = []
    while len(losses) < steps:
        for batch in loader:
            opt.zero_grad()
            score = model(batch.x, batch.edge_index, batch.edge_label_index)
            loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def main() -> None:
    import gnnorch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--labels", type=int, default=20_000)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if min(args.nodes, args.labels, args.steps, args.batch_size, args.hidden) < 1:
        ap.error("--nodes, --labels, --steps, --batch-size and --hidden must be at least 1")
    data = make_data(args.nodes, 0, args.labels)
    runs, trim_stats = {}, None
    for trim in (True, False):
        runtime = gnnorch.Runtime(train, processes=1, autotune=False, seed=0, trim=trim,
                                  verbose=False)
        runs[trim] = runtime(data, args.steps, args.batch_size, (10, 5), args.hidden)
        if trim:
            trim_stats = runtime.last_run.stats[0]["trim"]["models"]
    diffs = [abs(a - b) for a, b in zip(runs[True], runs[False])]
    print(f"trim: {[{k: m.get(k) for k in ('model', 'trimmed', 'encoder')} for m in trim_stats]}")
    for step, (a, b, d) in enumerate(zip(runs[True], runs[False], diffs)):
        print(f"step {step:3d}  trimmed {a:.7f}  untrimmed {b:.7f}  |diff| {d:.2e}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "bench_trim_link_steps", "argv": sys.argv,
                                        "trim": trim_stats, "trimmed": runs[True],
                                        "untrimmed": runs[False], "abs_diff": diffs}, indent=1))


if __name__ == "__main__":
    main()
