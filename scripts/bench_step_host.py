"""What gnnorch's seams add to the *host* cost of one training step on the GPU data path.

On a GPU the trainer thread's step is bound by the host: each torch operation is a launch of
several microseconds, and every line of Python between them (PyG's and gnnorch's) runs on the
same thread, under the same GIL as the data path's producer. This measures that host cost where
it can be isolated without a GPU: the CPU stands in for the device, and the tensors are tiny
(8 features, hidden 8, batches of 4 seeds with fanout [3, 2, 2]) so that an operation costs its
dispatch rather than its arithmetic: the regime of a GPU's trainer thread. With ``--device
cuda`` (a lent GPU) the same loop runs there, the data path's graph on the device, and each
step is timed from a synchronised device to the end of its work on the device ("step ms"), and
to the return of ``optimizer.step()`` ("host ms": what the trainer thread spends launching).

Per row, the user's unchanged loop (GraphSAGE, 3 layers, Adam) runs on the data path
(``data_path="device"``, one rank, one intra-op thread); before each step the loop sleeps long
enough for the producer thread to fill its queue and block, so the step runs alone. Columns:
the step's wall milliseconds (``zero_grad`` .. ``optimizer.step()``, median over the steps of
epochs 2-3, then the median over ``--rounds`` rounds that alternate the rows), the trainer
thread's CPU milliseconds for the same steps (not counting time the thread was preempted: the
steadier figure on a shared machine), and the Python
function calls a step makes, in all and by the code they belong to (gnnorch, PyG, torch,
other; counted with ``sys.setprofile`` in a separate epoch, so the counting does not slow the
timed ones). Calls count generator resumptions too; they do not depend on the machine.
Vanilla PyG runs the same loop on PyG's loader.

    .venv/bin/python scripts/bench_step_host.py --out benchmarks/results/step_host.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROWS = {
    "vanilla PyG (its loader, no seam)": None,
    "gnnorch data path: trimming and rewrites (the default)": {},
    "gnnorch data path: trimming only": {"rewrite": False},
    "gnnorch data path: rewrites only": {"trim": False},
    "gnnorch data path: neither (no layer seam)": {"trim": False, "rewrite": False},
}


def _origin(filename: str) -> str:
    """Which code a Python function belongs to: gnnorch, PyG, torch or anything else."""
    for marker, name in (("/gnnorch/", "gnnorch"), ("torch_geometric", "pyg"),
                         ("/torch/", "torch")):
        if marker in filename:
            return name
    return "other"


class CallCounter:
    """Counts Python function calls (not C calls) made on this thread while active, in all and
    by the code they belong to (`_origin`)."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_origin: dict[str, int] = {}
        self._origins: dict[str, str] = {}

    def _profile(self, frame, event, arg) -> None:
        if event == "call":
            self.calls += 1
            filename = frame.f_code.co_filename
            origin = self._origins.get(filename)
            if origin is None:
                origin = self._origins[filename] = _origin(filename)
            self.by_origin[origin] = self.by_origin.get(origin, 0) + 1

    def __enter__(self) -> "CallCounter":
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)


def train(data, batches: int, settle_s: float, device_name: str = "cpu") -> dict:
    """A PyG user's loop; returns per-step wall ms (epochs 2-3) and Python calls (epoch 4)."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.set_num_threads(1)
    device = torch.device(device_name)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = GraphSAGE(data.num_features, 8, 3, out_channels=int(data.y.max()) + 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[3, 2, 2], batch_size=4, shuffle=True,
                            input_nodes=data.train_mask)
    step_ms: list[float] = []
    host_ms: list[float] = []
    cpu_ms: list[float] = []
    calls: list[int] = []
    origins: list[dict[str, int]] = []
    for epoch in range(4):
        iterator = iter(loader)
        for _ in range(batches):
            batch = next(iterator).to(device)
            time.sleep(settle_s)       # the producer fills its queue and blocks: the step is alone
            counter = CallCounter() if epoch == 3 else None
            sync()
            began, began_cpu = time.perf_counter(), time.thread_time()
            if counter is not None:
                counter.__enter__()
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            launched = time.perf_counter()
            sync()
            if counter is not None:
                counter.__exit__()
                calls.append(counter.calls)
                origins.append(counter.by_origin)
            elif epoch >= 1:
                step_ms.append((time.perf_counter() - began) * 1e3)
                host_ms.append((launched - began) * 1e3)
                cpu_ms.append((time.thread_time() - began_cpu) * 1e3)
        del iterator
    return {"step_ms": statistics.median(step_ms), "host_ms": statistics.median(host_ms),
            "cpu_ms": statistics.median(cpu_ms),
            "python_calls": statistics.median(calls),
            "python_calls_by_origin": {k: statistics.median(o.get(k, 0) for o in origins)
                                       for k in ("gnnorch", "pyg", "torch", "other")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle-ms", type=float, default=30.0)
    parser.add_argument("--device", default="cpu", help="cpu (the CPU as the device) or cuda")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import gnnorch
    from gnnorch.datasets import products_like

    data = products_like(args.nodes)
    data.x = data.x[:, :8].contiguous()
    runs: dict[str, list[dict]] = {name: [] for name in ROWS}
    for _ in range(args.rounds):
        for name, options in ROWS.items():
            torch.manual_seed(0)
            if options is None:
                runs[name].append(train(data, args.batches, args.settle_ms / 1e3, args.device))
                continue
            runtime = gnnorch.Runtime(train, processes=1, autotune=False, verbose=False,
                                      device=args.device, data_path="device", **options)
            runs[name].append(runtime(data, args.batches, args.settle_ms / 1e3, args.device))
    base = statistics.median(r["step_ms"] for r in runs["vanilla PyG (its loader, no seam)"])
    rows = {}
    print(f"device: {args.device}")
    print("| row | step ms (rounds) | median | over vanilla ms | host ms | thread CPU ms (rounds) "
          "| Python calls / step |")
    print("|---|---|---|---|---|---|---|")
    for name, results in runs.items():
        ms = [r["step_ms"] for r in results]
        host = statistics.median(r["host_ms"] for r in results)
        cpu = [r["cpu_ms"] for r in results]
        calls = statistics.median(r["python_calls"] for r in results)
        by_origin = results[0]["python_calls_by_origin"]   # counts do not vary by round
        rows[name] = {"step_ms_rounds": ms, "step_ms": statistics.median(ms),
                      "over_vanilla_ms": statistics.median(ms) - base, "host_ms": host,
                      "cpu_ms_rounds": cpu,
                      "python_calls": calls, "python_calls_by_origin": by_origin}
        print(f"| {name} | {', '.join(f'{m:.2f}' for m in ms)} | {statistics.median(ms):.2f} "
              f"| {statistics.median(ms) - base:+.2f} | {host:.2f} "
              f"| {', '.join(f'{c:.2f}' for c in cpu)} | {calls:.0f} |")
    print("\nPython calls per step by the code they belong to:")
    print("| row | gnnorch | PyG | torch | other |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        o = row["python_calls_by_origin"]
        print(f"| {name} | {o['gnnorch']:.0f} | {o['pyg']:.0f} | {o['torch']:.0f} "
              f"| {o['other']:.0f} |")
    if args.out:
        result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "python": platform.python_version(), "torch": torch.__version__},
                  "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
                  "args": vars(args), "rows": rows}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
