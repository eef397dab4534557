"""Where one batch of the GPU data path spends its time (issue 21): the parts of bench_gpu.py's
`sage/gnnorch` row, measured one at a time on the same products-like graph.

The first lent GPU (an H200, 2026-11-27) ran that row at 1.87 s per epoch: 193 batches of 1024
seeds, 9.7 ms a batch, with the trainer waiting for the pipeline only 0.8 ms a batch. Whether
those 9.7 ms are GPU work (kernels), host work (launching hundreds of small kernels from two
Python threads that share the GIL) or neither alone decides what to make faster. Each part:

* ``sample``: gnnorch's sampler on the device-resident CSC (the loader's fanout, "wide" draws
  on CUDA), seeds from the host as the loader hands them;
* ``gather``: building the batch from those sampler outputs with the device path's
  `GatherPlan` (``x`` and ``y`` indexed in their device copies, ids twinned on the host);
* ``step``: the training step alone (GraphSAGE, hop-count trimming as PyG documents it, which
  is what gnnorch's trimming computes; cross-entropy, backward, Adam) on batches built before;
* ``serial``: sample, gather and step in one thread, one batch after another;
* ``pipeline``: sample and gather in a producer thread on a side stream, two batches ahead
  (`gnnorch.device.pipeline.Prefetcher`), the step in this thread: the row's loop, without
  the runtime around it.

For each: wall milliseconds per batch (the device synchronised at the window's ends), this
thread's CPU milliseconds per batch (``time.thread_time``: close to the wall means the thread
is busy launching, not waiting for the GPU; on CUDA autograd runs the backward pass in a
thread of its own, which this leaves out), the process's CPU milliseconds per batch (every
thread: the producer's, autograd's, the intra-op pool's), the sum of CUDA kernel times per batch from
``torch.profiler`` (the GPU's busy time; CUDA only) and the torch operations per batch
(`TorchDispatchMode`, this thread).

    python3 scripts/bench_gpu_breakdown.py --device cuda     # on the lent GPU, ~1-2 min
    .venv/bin/python scripts/bench_gpu_breakdown.py --nodes 20000 --train-seeds 4096 \\
        --hidden 64 --batches 6                               # here, on the CPU: checks it
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
import torch_geometric

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baselines  # noqa: E402
from bench_sampler_ops import OpCounter  # noqa: E402

FANOUT = (15, 10, 5)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kernel_ms(fn: Callable[[], Any], repeats: int, device: torch.device) -> float | None:
    """CUDA kernel time per call of `fn` (ms), summed from torch.profiler; None off CUDA or
    when the profiler cannot see the device."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    try:
        _sync(device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                fn()
            _sync(device)
        total = 0.0
        for event in prof.key_averages():
            value = getattr(event, "self_device_time_total", None)
            if value is None:
                value = getattr(event, "self_cuda_time_total", 0.0)
            total += value
        return total / 1e3 / repeats
    except Exception:  # noqa: BLE001 - a missing CUPTI must not cost the other numbers
        traceback.print_exc()
        return None


def measure(name: str, fn: Callable[[int], Any], batches: int, device: torch.device,
            warmup: int = 3, profiled: bool = True) -> dict:
    """Run ``fn(i)`` for i in range(batches) after `warmup` calls: the part's row."""
    for i in range(warmup):
        fn(i)
    _sync(device)
    counter = OpCounter()
    with counter:
        fn(0)
    _sync(device)
    cpu0, all0, wall0 = time.thread_time(), time.process_time(), time.perf_counter()
    for i in range(batches):
        fn(i)
    _sync(device)
    wall = (time.perf_counter() - wall0) * 1e3 / batches
    cpu = (time.thread_time() - cpu0) * 1e3 / batches
    process_cpu = (time.process_time() - all0) * 1e3 / batches
    gpu = kernel_ms(lambda: fn(0), 3, device) if profiled else None
    row = {"part": name, "wall_ms": wall, "thread_cpu_ms": cpu, "process_cpu_ms": process_cpu,
           "gpu_kernel_ms": gpu, "ops": sum(counter.ops.values())}
    print(f"  {name:<9} wall {wall:8.2f} ms  thread CPU {cpu:8.2f} ms  process CPU "
          f"{process_cpu:8.2f} ms  GPU kernels "
          f"{'-' if gpu is None else f'{gpu:8.2f} ms'}  ops {row['ops']}", flush=True)
    return row


class Parts:
    """The sampler, gather plan, model and optimizer of one `sage/gnnorch`-like run."""

    def __init__(self, data: Any, device: torch.device, hidden: int, batch_size: int,
                 seed: int) -> None:
        from torch_geometric.nn import GraphSAGE

        from gnnorch.device.gather import GatherPlan, ResidentTensors
        from gnnorch.sampling.neighbor import FastNeighborSampler

        self.device = device
        start = time.perf_counter()
        self.sampler = FastNeighborSampler(data, num_neighbors=list(FANOUT))
        self.sampler.move_to(device)
        self.plan = GatherPlan(data, device, "gpu", ResidentTensors())
        _sync(device)
        self.setup_s = time.perf_counter() - start
        gen = torch.Generator().manual_seed(seed)
        train = data.train_mask.nonzero().view(-1)
        train = train[torch.randperm(train.numel(), generator=gen)]
        self.seeds = [train[i:i + batch_size] for i in range(0, train.numel(), batch_size)]
        torch.manual_seed(seed)
        self.model = GraphSAGE(data.num_features, hidden, num_layers=len(FANOUT),
                               out_channels=int(data.y.max()) + 1).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.003)

    def seeds_of(self, i: int) -> torch.Tensor:
        return self.seeds[i % len(self.seeds)]

    def sample(self, i: int) -> Any:
        from torch_geometric.sampler import NodeSamplerInput

        seeds = self.seeds_of(i)
        return self.sampler.sample_from_nodes(NodeSamplerInput(input_id=seeds, node=seeds))

    def gather(self, out: Any) -> Any:
        return self.plan.batch(out, self.sampler.perm)

    def step(self, batch: Any) -> torch.Tensor:
        batch = batch.to(self.device, non_blocking=True)
        self.optimizer.zero_grad()
        out = self.model(batch.x, batch.edge_index,
                         num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                         num_sampled_edges_per_hop=batch.num_sampled_edges)
        loss = F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
        loss.backward()
        self.optimizer.step()
        return loss


def pipeline_part(parts: Parts, batches: int, depth: int) -> Callable[[int], Any]:
    """`fn(i)` for `measure`: the i-th step on a batch a Prefetcher thread sampled and gathered
    on a side stream; one Prefetcher per window of `batches` (+ warm-up) steps."""
    from gnnorch.device.pipeline import Prefetcher

    device = parts.device
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    state: dict[str, Any] = {"it": None}

    def produce():
        i = 0
        while True:
            batch = parts.gather(parts.sample(i))
            event = None
            if side is not None:
                event = torch.cuda.Event()
                event.record(side)
            yield batch, event
            i += 1

    def produce_in():
        return torch.cuda.stream(side) if side is not None else _null()

    def ready(item):
        batch, event = item
        if event is not None:
            torch.cuda.current_stream(device).wait_event(event)
        return batch

    def fn(_: int) -> Any:
        if state["it"] is None:
            state["it"] = iter(Prefetcher(produce(), depth=depth, ready=ready,
                                          produce_in=produce_in))
        return parts.step(next(state["it"]))

    fn.close = lambda: state.update(it=None)  # type: ignore[attr-defined]
    return fn


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_450_000)
    ap.add_argument("--train-seeds", type=int, default=196_615)
    ap.add_argument("--avg-degree", type=float, default=50.5)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench-results/gpu_breakdown.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    graph = baselines.ensure_graph(args.nodes, args.seed, args.train_seeds, args.avg_degree)
    data = torch.load(graph, weights_only=False)
    parts = Parts(data, device, args.hidden, args.batch_size, args.seed)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    print(f"{data.num_nodes} nodes, {data.num_edges} edges, hidden {args.hidden}, batch "
          f"{args.batch_size}, fanout {list(FANOUT)}, on {device} ({name}); set-up "
          f"{parts.setup_s:.1f} s", flush=True)
    rows, errors = [], {}
    outs = [parts.sample(i) for i in range(args.batches)]
    built = [parts.gather(out) for out in outs[:8]]
    sizes = {"nodes_per_batch": sum(b.num_nodes for b in built) / len(built),
             "edges_per_batch": sum(b.num_edges for b in built) / len(built)}
    pipe = pipeline_part(parts, args.batches, depth=2)
    plan = [("sample", parts.sample, True),
            ("gather", lambda i: parts.gather(outs[i % len(outs)]), True),
            ("step", lambda i: parts.step(built[i % len(built)]), True),
            ("serial", lambda i: parts.step(parts.gather(parts.sample(i))), True),
            ("pipeline", pipe, False)]
    for part, fn, profiled in plan:
        try:
            rows.append(measure(part, fn, args.batches, device, profiled=profiled))
        except Exception as exc:  # noqa: BLE001 - one part failing keeps the others
            traceback.print_exc()
            errors[part] = f"{type(exc).__name__}: {exc}"
    pipe.close()   # type: ignore[attr-defined]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_gpu_breakdown", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"device": str(device), "name": name, "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__,
                    "python": platform.python_version(), "cpus": torch.get_num_threads()},
        "workload": {"nodes": data.num_nodes, "edges": data.num_edges, "hidden": args.hidden,
                     "batch_size": args.batch_size, "fanout": list(FANOUT),
                     "batches": args.batches, **sizes},
        "setup_s": parts.setup_s, "rows": rows, "errors": errors}, indent=1))
    print(f"wrote {args.out}")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
