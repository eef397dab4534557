"""The sampler's body eager against compiled (TorchScript, `gnnorch.compat.jit`): the host's cost
of a batch, and what a sampling thread takes from the thread beside it.

On a GPU a batch of the device data path is a few hundred small operations on each of two
Python threads sharing one GIL: the producer (sampling and gathering) and the trainer (the
step). Each operation costs the host its dispatch whatever the tensor sizes, so both threads are
host-bound, and the eager sampler needs the GIL at every operation. The compiled body runs the
same operations in TorchScript's interpreter, which takes the GIL once per call. This script
measures, on whatever machine runs it (the CPU stands in for the device; tiny tensors make the
arithmetic negligible, as a launch-bound GPU's host sees it):

* ``host``: this thread's CPU ms per batch (median), eager and compiled, for each k-subset
  draw ("floyd": the CPU default; "wide": CUDA's), at two sizes: ``tiny`` (8 seeds, fanout
  [3, 2, 2]: the host's per-operation cost alone) and ``full`` (1024 seeds, [15, 10, 5] on a
  products-like graph: the CPU path's real batches);
* ``beside``: a producer thread sampling tiny batches ("wide") while this thread runs
  GraphSAGE training steps on a tiny batch for ``--seconds``: batches per second of each
  thread, the sampler eager and compiled, and each thread alone; and the same sampler beside
  a thread that runs Python only (a counting loop: the GIL's worst case);
* ``path``: the device data path end to end (``Runtime(train, data_path="device",
  processes=1)``, the CPU as the device; tiny features, hidden 8, fanout [3, 2, 2], batch 8):
  the steady epoch's ms per batch with the sampler eager and compiled, each in a fresh process,
  alternated ``--repeats`` times.

    .venv/bin/python scripts/bench_sampler_gil.py --out benchmarks/results/sampler_gil.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch_geometric.sampler.utils import to_csc

from gnnorch.datasets import products_like
from gnnorch.sampling import new_workspace, sample_neighbors
from gnnorch.sampling.uniform import compiled_sampler

EAGER_ENV = "GNNORCH_BENCH_EAGER_SAMPLER"   # the `path` child: run the sampler eagerly


def _csc(nodes: int, avg_degree: float):
    data = products_like(nodes, seed=0, avg_degree=avg_degree, num_features=8, num_classes=5)
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    return data, colptr, row


def host_cost(colptr, row, batch: int, fanout: list[int], repeats: int) -> dict:
    """Median thread-CPU ms per batch, eager and compiled alternated, per draw method."""
    n = colptr.numel() - 1
    gen = torch.Generator().manual_seed(0)
    workspace = new_workspace(n)
    out = {}
    for method in ("floyd", "wide"):
        times: dict[str, list[float]] = {"eager": [], "compiled": []}
        for rep in range(repeats + 3):
            seeds = torch.randint(0, n, (batch,), generator=gen)
            for name in times:
                began = time.thread_time()
                sample_neighbors(colptr, row, seeds, fanout, method=method,
                                 workspace=workspace, compiled=name == "compiled")
                if rep >= 3:   # warm-up
                    times[name].append(time.thread_time() - began)
        med = {name: 1e3 * statistics.median(v) for name, v in times.items()}
        out[method] = {"eager_ms": round(med["eager"], 3), "compiled_ms": round(med["compiled"], 3),
                       "eager_over_compiled": round(med["eager"] / med["compiled"], 2)}
    return out


def beside(colptr, row, seconds: float) -> dict:
    """Producer (sampling) and trainer (training steps) threads side by side, per second."""
    from torch_geometric.nn import GraphSAGE

    n = colptr.numel() - 1
    torch.manual_seed(0)
    net = GraphSAGE(8, 8, num_layers=3, out_channels=5)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = torch.randn(120, 8), torch.randint(0, 5, (8,))
    edge_index = torch.randint(0, 120, (2, 240))

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x, edge_index)[:8], y).backward()
        opt.step()

    def sample(compiled: bool, workspace: list) -> None:
        if not workspace:
            workspace.append(new_workspace(n))
        sample_neighbors(colptr, row, torch.randint(0, n, (8,)), [3, 2, 2], method="wide",
                         workspace=workspace[0], compiled=compiled)

    return side_by_side(step, sample, seconds)


def side_by_side(step: Callable[[], None], sample: Callable[[bool, list], None],
                 seconds: float, python_only: bool = True) -> dict:
    """This thread calls `step` (a training step) for `seconds` while a producer thread calls
    ``sample(compiled, scratch)`` (one batch; ``scratch``: a list of the thread's own, for its
    workspace) as often as it can: steps and batches per second, the sampler eager and
    compiled, and each thread alone; with `python_only`, the sampler beside a loop that runs
    Python only (thousands of iterations per second: the GIL's worst case)."""
    def produce(compiled: bool, stop: threading.Event, count: list[int]):
        scratch: list = []
        while not stop.is_set():
            sample(compiled, scratch)
            count[0] += 1

    def spin_python(began: float) -> int:
        count = 0
        while time.perf_counter() - began < seconds:
            for _ in range(1000):
                count += 1
        return count

    cases = [("trainer alone", None), ("sampler alone, eager", False),
             ("sampler alone, compiled", True), ("both, eager", False), ("both, compiled", True)]
    if python_only:
        cases += [("python only, eager", False), ("python only, compiled", True)]
    rows = {}
    for name, compiled in cases:
        stop, produced, steps = threading.Event(), [0], 0
        producer = (threading.Thread(target=produce, args=(compiled, stop, produced))
                    if compiled is not None else None)
        if producer is not None:
            producer.start()
        began = time.perf_counter()
        if name.startswith("sampler alone"):
            time.sleep(seconds)
        elif name.startswith("python only"):
            steps = spin_python(began) // 1000   # thousands of loop iterations
        else:
            while time.perf_counter() - began < seconds:
                step()
                steps += 1
        elapsed = time.perf_counter() - began
        stop.set()
        if producer is not None:
            producer.join()
        this_thread = ("python_kiloiterations_per_s" if name.startswith("python only")
                       else "trainer_steps_per_s")
        rows[name] = {this_thread: round(steps / elapsed, 1),
                      "sampler_batches_per_s": round(produced[0] / elapsed, 1)}
    return rows


def path_child(epochs: int) -> None:
    """One end-to-end run in this process; prints the steady epoch's ms per batch as JSON."""
    import gnnorch
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    if os.environ.get(EAGER_ENV) == "1":
        sample_neighbors.__kwdefaults__["compiled"] = False
    torch.set_num_threads(1)
    data, _, _ = _csc(20_000, 12.0)
    data.train_mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    data.train_mask[torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
                    [:2048]] = True

    def train(data, epochs):
        torch.manual_seed(0)
        loader = NeighborLoader(data, num_neighbors=[3, 2, 2], input_nodes=data.train_mask,
                                batch_size=8, shuffle=True)
        net = GraphSAGE(8, 8, num_layers=3, out_channels=5)
        opt = torch.optim.Adam(net.parameters(), lr=0.01)
        seconds, batches = [], 0
        for _ in range(epochs):
            began, batches = time.perf_counter(), 0
            for batch in loader:
                opt.zero_grad()
                out = net(batch.x, batch.edge_index)[:batch.batch_size]
                F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                opt.step()
                batches += 1
            seconds.append(time.perf_counter() - began)
        return {"epoch_s": seconds, "batches": batches}

    got = gnnorch.Runtime(train, data_path="device", processes=1, launch={"threads": 1},
                          verbose=False)(data, epochs)
    print(json.dumps(got))


def path(repeats: int, epochs: int) -> dict:
    runs: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(repeats):
        for name in runs:
            env = dict(os.environ, **{EAGER_ENV: "1" if name == "eager" else "0"})
            proc = subprocess.run([sys.executable, __file__, "--path-child", str(epochs)],
                                  env=env, capture_output=True, text=True, check=True)
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            steady = min(got["epoch_s"][1:])
            runs[name].append(1e3 * steady / got["batches"])
    med = {name: statistics.median(v) for name, v in runs.items()}
    return {"eager_ms_per_batch": [round(v, 3) for v in runs["eager"]],
            "compiled_ms_per_batch": [round(v, 3) for v in runs["compiled"]],
            "eager_over_compiled": round(med["eager"] / med["compiled"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--path-repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--full-nodes", type=int, default=200_000)
    ap.add_argument("--out", type=Path, default=Path("bench-results/sampler_gil.json"))
    ap.add_argument("--path-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.path_child is not None:
        return path_child(args.path_child)
    torch.set_num_threads(1)
    if compiled_sampler() is None:
        raise SystemExit("TorchScript cannot compile the sampler here: nothing to compare")
    _, colptr, row = _csc(20_000, 12.0)
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "torch": torch.__version__},
              "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}
    result["host_tiny"] = host_cost(colptr, row, 8, [3, 2, 2], args.repeats)
    print("host, tiny batches:", result["host_tiny"], flush=True)
    result["beside"] = beside(colptr, row, args.seconds)
    print("beside the trainer:", result["beside"], flush=True)
    result["path"] = path(args.path_repeats, args.epochs)
    print("device data path (CPU as the device):", result["path"], flush=True)
    _, colptr, row = _csc(args.full_nodes, 25.0)
    result["host_full"] = host_cost(colptr, row, 1024, [15, 10, 5], max(5, args.repeats // 3))
    print("host, full batches:", result["host_full"], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
