"""The layer seam's own host cost on one trimmed training forward and backward, now and at a git
ref, in the regime of a GPU's trainer thread (tiny tensors: an operation costs its dispatch).

The user's model (PyG's GraphSAGE, 3 layers, 8 features, hidden 8) runs on a sampled Cora batch
of 4 seeds with fanout [3, 2, 2] under `gnnorch.intercept.layers.LayerSeam` (trimming on, no
rewrites, no runtime: the seam alone), after warm-up forwards that calibrate the model. Timed:
``set_batch`` + forward + ``out[:seeds].sum().backward()``, the trainer thread's CPU time (not
wall: the steadier figure on a shared machine), the minimum over ``--repeats`` repeats of
``--number`` steps, one intra-op thread. Also counted: the Python function calls of one step.
Vanilla is the same step without the seam. With ``--ref``, the same measurement runs with the
package as at that ref (a ``git worktree`` under a temporary directory, on ``PYTHONPATH``), in
alternating fresh processes, ``--rounds`` times each.

    .venv/bin/python scripts/bench_seam_forward.py --ref 5c13259 --out benchmarks/results/seam_forward.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import baselines  # noqa: E402  (package_at)


def measure(number: int, repeats: int) -> dict:
    """One process's measurement (the package on the path is the one measured)."""
    import torch
    from torch_geometric.nn import GraphSAGE
    from torch_geometric.sampler.utils import to_csc

    import gnnorch
    from gnnorch.datasets import load_cora
    from gnnorch.intercept.layers import LayerSeam
    from gnnorch.sampling.uniform import sample_neighbors
    from gnnorch.trim import HopLayout
    from gnnorch.trim.batch import BatchGraph

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = load_cora()
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    seeds = 4
    s = sample_neighbors(colptr, row, torch.randperm(data.num_nodes)[:seeds], [3, 2, 2])
    x = data.x[s.node][:, :8].contiguous()
    edge_index = torch.stack([s.row, s.col])
    graph = BatchGraph(edge_index, x.size(0), seeds,
                       HopLayout.from_counts(s.num_sampled_nodes, s.num_sampled_edges))
    model = GraphSAGE(8, 8, 3, 7)
    seam = LayerSeam(trim=True)

    def step() -> None:
        seam.set_batch(graph)
        model(x, edge_index)[:seeds].sum().backward()

    def plain() -> None:
        model(x, edge_index)[:seeds].sum().backward()

    def best_us(fn) -> float:
        timer = timeit.Timer(fn, timer=time.thread_time)
        return min(timer.repeat(number=number, repeat=repeats)) / number * 1e6

    def python_calls(fn) -> int:
        calls = 0

        def profile(frame, event, arg):
            nonlocal calls
            calls += event == "call"

        sys.setprofile(profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return calls

    vanilla_us, vanilla_calls = best_us(plain), python_calls(plain)
    with seam.installed():
        for _ in range(5):
            step()
        seam_us, seam_calls = best_us(step), python_calls(step)
        state = next(iter(seam.models.values()))
        assert state.trim and state.trimmed_forwards > 0, state.reason
    return {"package": str(Path(gnnorch.__file__).parent), "vanilla_us": vanilla_us,
            "vanilla_calls": vanilla_calls, "seam_us": seam_us, "seam_calls": seam_calls}


def run_child(pythonpath: str | None, number: int, repeats: int) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, __file__, "--child", "--number", str(number),
                          "--repeats", str(repeats)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default=None, help="a git ref to measure beside the checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--number", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.number, args.repeats)))
        return
    with baselines.package_at(args.ref) as ref_src:
        sides = {"now": None} if args.ref is None else {"now": None, args.ref: ref_src}
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, path in sides.items():
                runs[name].append(run_child(path, args.number, args.repeats))
    print("| code | seam step us (rounds) | vanilla step us (rounds) | over vanilla us (best) "
          "| Python calls: seam / vanilla |")
    print("|---|---|---|---|---|")
    for name, results in runs.items():
        seam = [r["seam_us"] for r in results]
        plain = [r["vanilla_us"] for r in results]
        print(f"| {name} | {', '.join(f'{v:.0f}' for v in seam)} "
              f"| {', '.join(f'{v:.0f}' for v in plain)} | {min(seam) - min(plain):.0f} "
              f"| {results[0]['seam_calls']} / {results[0]['vanilla_calls']} |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"),
                                        "command": " ".join(sys.argv), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
