"""The strong PyG baselines and the measuring harness of `bench_fastpath.py --baselines`.

Configurations (the same training loop, `bench_runtime.train`'s workload: a 3-layer BasicGNN
100->256->256->47, fanout [15, 10, 5], batch 1024, Adam; GraphSAGE unless ``--model`` names
GCN or GAT):

* ``vanilla-torch_sparse``: PyG's NeighborLoader on torch_sparse (pyg-lib hidden from PyG).
* ``vanilla-pyg_lib``: PyG's NeighborLoader on pyg-lib 0.9.0, everything else default.
* ``expert-w<N>``: what a PyG expert switches on by hand: pyg-lib, BasicGNN's hierarchical
  trimming (``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``), ``num_workers=N``
  with ``enable_cpu_affinity`` when N > 0. The table's "PyG expert" is the best N measured.
* ``gnnorch``: the vanilla (pyg-lib environment) training function under
  ``gnnorch.Runtime(train)`` with its defaults (auto-tuned plan, sampler="auto", trimming,
  rewrites, tuned allocator).

Each configuration runs in a fresh interpreter (allocator state drifts within a process) of the
baseline environment (`scripts/setup_baselines.sh`: pyg-lib and torch_sparse both installed),
on a graph generated once per size and loaded from disk. Memory: the parent samples the
proportional set size (PSS: shared pages divided among the processes sharing them, so forked
loader workers and rank processes are not double counted) of the child's whole process tree
every 0.2 s (from /proc/PID/smaps_rollup); the peak is reported.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import psutil
import torch
import torch.nn.functional as F

GRAPH_DIR = Path("bench-results/graphs")
REPO = Path(__file__).resolve().parent.parent
NO_PYG_LIB = "GNNORCH_BENCH_NO_PYG_LIB"
#: the benchmark models: PyG's BasicGNN GraphSAGE, GCN and GAT (4 heads)
MODELS = ("sage", "gcn", "gat")


def build_model(name: str, in_channels: int, hidden: int, layers: int, classes: int):
    """One of `MODELS` as PyG's BasicGNN builds it (GAT: 4 heads, concatenated)."""
    from torch_geometric.nn import GAT, GCN, GraphSAGE

    if name == "sage":
        return GraphSAGE(in_channels, hidden, num_layers=layers, out_channels=classes)
    if name == "gcn":
        return GCN(in_channels, hidden, num_layers=layers, out_channels=classes)
    if name == "gat":
        return GAT(in_channels, hidden, num_layers=layers, out_channels=classes, heads=4)
    raise ValueError(f"unknown model {name!r}: pass one of {', '.join(MODELS)}")


def graph_path(nodes: int, seed: int, train_seeds: int, avg_degree: float = 25.0) -> Path:
    degree = "" if avg_degree == 25.0 else f"_d{avg_degree:g}"
    return GRAPH_DIR / f"products_like_{nodes}_{seed}_{train_seeds}{degree}.pt"


def ensure_graph(nodes: int, seed: int, train_seeds: int, avg_degree: float = 25.0) -> Path:
    """Generate the products-like graph once per (size, seed, training seeds, mean degree:
    directed edges per node) and keep it."""
    path = graph_path(nodes, seed, train_seeds, avg_degree)
    if not path.exists():
        from gnnorch.datasets import products_like

        GRAPH_DIR.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        data = products_like(num_nodes=nodes, seed=seed, train_ratio=train_seeds / nodes,
                             avg_degree=avg_degree)
        tmp = path.with_suffix(".tmp")
        torch.save(data, tmp)
        os.replace(tmp, path)
        print(f"  generated {path} in {time.perf_counter() - start:.0f} s", flush=True)
    return path


def split_budget(fraction: float, data) -> int:
    """A device-path budget (``data_path={"budget_bytes": ...}``) that holds `data`'s CSC and
    `fraction` of its node features' bytes (every node-level tensor the batches gather), so
    the path splits the features: the most-gathered rows on the device, the rest on the host."""
    from gnnorch.device.gather import device_attributes
    from gnnorch.device.placement import feature_bytes, structure_bytes

    node = {k: t for k, t in device_attributes(data).items() if data.is_node_attr(k)}
    return (structure_bytes(data.num_nodes, data.edge_index.size(1))
            + int(fraction * feature_bytes(node)))


def train_expert(data, epochs=1, batch_size=1024, fanout=(15, 10, 5), hidden=256, seed=0,
                 num_workers=0, model="sage"):
    """`bench_runtime.train` as a PyG expert writes it: hierarchical trimming with pyg-lib's
    hop counts, and loader workers pinned with `enable_cpu_affinity`."""
    import contextlib

    from torch_geometric.loader import NeighborLoader

    torch.manual_seed(seed)
    loader = NeighborLoader(data, num_neighbors=list(fanout), input_nodes=data.train_mask,
                            batch_size=batch_size, shuffle=True, num_workers=num_workers,
                            persistent_workers=num_workers > 0)
    net = build_model(model, data.num_features, hidden, len(fanout), int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.003)
    epoch_seconds, loss = [], None
    affinity = (loader.enable_cpu_affinity(list(range(num_workers))) if num_workers > 0
                else contextlib.nullcontext())
    with affinity:
        for _ in range(epochs):
            net.train()
            start = time.perf_counter()
            for batch in loader:
                optimizer.zero_grad()
                out = net(batch.x, batch.edge_index,
                          num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                          num_sampled_edges_per_hop=batch.num_sampled_edges)
                loss = F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
                loss.backward()
                optimizer.step()
            epoch_seconds.append(time.perf_counter() - start)
    return {"epoch_seconds": epoch_seconds, "loss": loss.item()}


def measure_here(config: str, path: Path, epochs: int, model: str = "sage") -> dict:
    """Run one configuration on `model` (one of `MODELS`) in this process; its JSON row."""
    import torch_geometric.typing as pyg_typing

    from bench_runtime import train

    if os.environ.get(NO_PYG_LIB):
        pyg_typing.WITH_PYG_LIB = False
    data = torch.load(path, weights_only=False)
    start = time.perf_counter()
    stats = None
    if config.startswith("vanilla"):
        out = train(data, epochs=epochs, model=model)
    elif config.startswith("expert-w"):
        out = train_expert(data, epochs=epochs, num_workers=int(config[len("expert-w"):]),
                           model=model)
    elif config == "gnnorch":
        import gnnorch

        runtime = gnnorch.Runtime(train)
        out = runtime(data, epochs=epochs, model=model)
        stats = runtime.last_run.stats[0]
    else:
        raise ValueError(f"unknown configuration {config!r}")
    row = {"config": config, "model": model, "epoch_seconds": out["epoch_seconds"],
           "first_epoch_seconds": out["epoch_seconds"][0],
           "steady_epoch_seconds": min(out["epoch_seconds"][1:] or out["epoch_seconds"]),
           "call_wall_seconds": time.perf_counter() - start, "final_loss": out["loss"],
           "pyg_lib": bool(pyg_typing.WITH_PYG_LIB)}
    if stats is not None:
        row["gnnorch"] = {
            "plan": runtime.last_run.plan.to_dict() if hasattr(runtime.last_run, "plan") else None,
            "tuning": (runtime.report.data["decision"] if runtime.report is not None else None),
            "sampler": (stats.get("sampler") or {}).get("loaders"),
            "rewrite_buckets_probed": sum(
                b["probes"] > 0 for layer in (stats.get("rewrite") or {}).get("layers", [])
                for b in layer["buckets"]),
            "trim": {k: (stats.get("trim") or {}).get(k)
                     for k in ("rows_computed", "rows_untrimmed")},
        }
    return row


def _pss_bytes(pid: int) -> int:
    """Proportional set size of one process from /proc/PID/smaps_rollup (the kernel's own
    sum: cheap to read, unlike walking smaps)."""
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _tree_pss(root: psutil.Process) -> int:
    total = 0
    for proc in [root] + root.children(recursive=True):
        try:
            total += _pss_bytes(proc.pid)
        except (OSError, psutil.NoSuchProcess):
            pass
    return total


def finish_child(row: dict) -> NoReturn:
    """End a measuring child process (a script's ``--measure`` mode) once its row is printed:
    its numbers are taken, and the interpreter's teardown is skipped. That teardown (DataLoader
    workers shut down one by one, each join waiting up to 5 s; pinned and device memory freed)
    took up to 140 s after the expert row on the lent H200 (2026-11-27: 55 s of measured call,
    196 s of process), time the device lease paid and no row reports. The process's children
    (loader workers) are killed first, so none outlives the row or holds its output pipes.

    torch's DataLoader installs a SIGCHLD handler that raises when one of its workers dies by
    a signal; it is reset to the default first, else killing the workers raises in this
    process and fails a row already measured (the vanilla row on the lent H200, session 19).
    Whatever happens while the children are killed, the process ends with status 0: the row
    is printed."""
    print(json.dumps(row), flush=True)
    sys.stderr.flush()
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
    finally:
        os._exit(0)


def fresh_json_row(cmd: list[str], label: str) -> dict:
    """Run `cmd` (a script's own ``--measure`` mode) in a fresh process and return the JSON
    object on the last line of its stdout; exit naming `label` and its stderr's tail if it
    failed."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def program_row(label: str, train: Callable[..., dict], call_args: tuple,
                options: dict | None, seed: int,
                details: Callable[[Any], dict] | None = None) -> dict:
    """One row of a PyG program called unchanged, timed in this process: ``train(*call_args)``
    itself (`options` None: vanilla) or under ``gnnorch.Runtime(train, seed=seed,
    **options)``; the wall time of the whole call, the metrics it returns, and for a runtime
    row its plan, summary and `details(runtime)`."""
    import torch_geometric.typing as pyg_typing

    torch.manual_seed(seed)
    start = time.perf_counter()
    extra: dict = {}
    if options is None:
        out = train(*call_args)
    else:
        import gnnorch

        runtime = gnnorch.Runtime(train, seed=seed, **options)
        out = runtime(*call_args)
        extra = {"plan": runtime.last_run.plan.to_dict(), "summary": runtime.summary(),
                 **(details(runtime) if details is not None else {})}
    seconds = time.perf_counter() - start
    return {"label": label, "seconds": seconds,
            "metrics": {k: float(v) for k, v in out.items() if isinstance(v, (int, float))},
            "pyg_lib": bool(pyg_typing.WITH_PYG_LIB), **extra}


def rows_around_vanilla(run_row: Callable[[str], dict], labels: list[str]) -> list[dict]:
    """Vanilla's row first and last (`run_row("vanilla")`), the `labels` between; each row's
    ``speedup_vs_vanilla`` against the mean of the two vanilla times."""
    rows = [run_row("vanilla"), *(run_row(label) for label in labels), run_row("vanilla")]
    rows[0]["label"], rows[-1]["label"] = "vanilla PyG (first)", "vanilla PyG (last)"
    vanilla = (rows[0]["seconds"] + rows[-1]["seconds"]) / 2
    for row in rows:
        row["speedup_vs_vanilla"] = vanilla / row["seconds"]
    return rows


def parse_program_args(ap: argparse.ArgumentParser, out: str) -> argparse.Namespace:
    """`ap`'s arguments with the options every program benchmark shares (``--seed``,
    ``--repeats``, ``--vanilla-python``, ``--out`` defaulting to `out`, the internal
    ``--measure``), ``--repeats`` checked."""
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each row (fresh processes); the table shows the fastest")
    ap.add_argument("--vanilla-python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--measure", help=argparse.SUPPRESS)   # internal: one row, JSON to stdout
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1 (runs of each row), got {args.repeats}")
    return args


def machine_line() -> str:
    """The machine and versions, for the head of a benchmark's output."""
    import platform

    import torch_geometric

    return (f"machine: {platform.platform()}, {len(os.sched_getaffinity(0))} cpus, torch "
            f"{torch.__version__}, PyG {torch_geometric.__version__}; each row a fresh process")


def write_results(out: Path, benchmark: str, results: list, **fields: Any) -> None:
    """`results` as JSON at `out`, with the benchmark's name, the date, the machine, the command
    line and `fields`."""
    import platform

    import torch_geometric

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": benchmark, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "torch_geometric": torch_geometric.__version__},
        "argv": sys.argv, **fields, "results": results}, indent=1))
    print(f"wrote {out}")


def fastest_of(cmd: list[str], label: str, repeats: int) -> dict:
    """`cmd` (see `fresh_json_row`) run `repeats` times, each in a fresh process, printing
    each run's seconds and metrics: the fastest run's row, with every run's seconds in
    ``all_seconds``."""
    runs = []
    for _ in range(repeats):
        runs.append(fresh_json_row(cmd, label))
        print(f"  {label:<26} {runs[-1]['seconds']:7.1f} s  {runs[-1]['metrics']}", flush=True)
    row = min(runs, key=lambda run: run["seconds"])
    row["all_seconds"] = [run["seconds"] for run in runs]
    return row


def run_fresh(script: str, config: str, path: Path, epochs: int, python: str,
              model: str = "sage") -> dict:
    """Run one configuration on `model` in a fresh interpreter of `python` (`script`
    ``--measure``); sample its tree's PSS."""
    env = dict(os.environ)
    env.pop(NO_PYG_LIB, None)
    if config == "vanilla-torch_sparse":
        env[NO_PYG_LIB] = "1"
    cmd = [python, script, "--measure", config, "--graph", str(path), "--epochs", str(epochs),
           "--model", model]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peak[0] = max(peak[0], _tree_pss(root))
            except psutil.NoSuchProcess:
                return
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{config} failed:\n{stderr[-3000:]}")
    row = json.loads(stdout.strip().splitlines()[-1])
    row["peak_pss_mb"] = peak[0] / 2 ** 20
    return row


if __name__ == "__main__":  # pragma: no cover - used through bench_fastpath.py
    sys.exit("run scripts/bench_fastpath.py --baselines")


@contextlib.contextmanager
def package_at(ref: str | None) -> Iterator[str | None]:
    """The ``src`` folder of the package as at git `ref` (a detached ``git worktree`` in a
    temporary directory, removed afterwards), for a child's ``PYTHONPATH``; None for no ref."""
    if ref is None:
        yield None
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "ref"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=REPO,
                       check=True, capture_output=True)
        try:
            yield str(tree / "src")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO,
                           check=False, capture_output=True)
