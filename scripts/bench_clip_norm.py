"""clip_grad_norm_ with several ranks: what it is told, and what the NORM round costs.

Part 1 (fidelity): GraphSAGE on the bundled Cora, batch 32, ``clip_grad_norm_(max_norm=0.5)``
before every step (`idiom_knobs.clip_grad_norm`), run as one process (vanilla PyG) and under
``gnnorch.Runtime(processes=2)``, over ``--seeds`` seeds: the mean of the norms
``clip_grad_norm_`` returned. One process is told the norm of the batch's gradient; before the
NORM round each rank was told the norm of its own half-batch gradient (larger: noisier).

Part 2 (cost): one step of a 64-256-7 MLP (18K parameters, batch 32), 300 steps under
``processes=2``, with and without ``clip_grad_norm_``: milliseconds per step (the clip adds one
round and one gradient all-reduce per step).

    .venv/bin/python scripts/bench_clip_norm.py [--seeds 3] [--steps 300]

Writes ``benchmarks/results/clip_norm.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def mlp_steps(clip: bool, steps: int) -> dict:
    """`steps` optimizer steps of a small MLP on a fixed batch; ms per step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 7))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 7, (32,))
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return {"ms_per_step": (time.perf_counter() - start) / steps * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/clip_norm.json"))
    opts = parser.parse_args()
    import gnnorch
    from idiom_battery import cora
    from bench_link import _machine
    from idiom_knobs import clip_grad_norm

    rows = {}
    for mode, run in (("vanilla", clip_grad_norm),
                      ("p2", gnnorch.Runtime(clip_grad_norm, processes=2))):
        norms = []
        for seed in range(opts.seeds):
            torch.manual_seed(seed)
            norms.append(run(cora())["mean_norm"])
        rows[mode] = {"mean_norm": round(statistics.mean(norms), 4),
                      "per_seed": [round(n, 4) for n in norms]}
        print(json.dumps({"part": "fidelity", "mode": mode, **rows[mode]}), flush=True)
    cost = {}
    for clip in (False, True):
        out = gnnorch.Runtime(mlp_steps, processes=2)(clip, opts.steps)
        cost["clip" if clip else "no_clip"] = round(out["ms_per_step"], 2)
        print(json.dumps({"part": "cost", "clip": clip,
                          "ms_per_step": cost["clip" if clip else "no_clip"]}), flush=True)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({
        "benchmark": "bench_clip_norm", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": _machine(), "argv": sys.argv, "gnnorch": gnnorch.__file__,
        "fidelity": rows, "cost_ms_per_step_p2": cost}, indent=1))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
