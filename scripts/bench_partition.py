"""Partitioned features under torchrun: what the hot budget buys.

Two torchrun "nodes" x 1 rank on loopback (c10d rendezvous, gloo; one trainer thread each),
a power-law graph (`gnnorch.datasets.power_law_graph`, 100K nodes, mean degree 25, 100
float32 features, 47 classes), GraphSAGE (2 layers, hidden 128, fanouts [10, 10], global batch
1024, Adam; `sampler="gnnorch"`, `rewrite=False`: rewrite orders are chosen by timing and
could differ between calls). The same training function runs once replicated (every rank
holds all of ``data.x``) and then with ``partition_features={"hot_budget_mb": ...}`` for hot
budgets of 0 and 5 / 20 / 50 % of all rows (the 50 % budget holds every remote row a
training batch can reach). Per configuration, rank 0's view (rank 1's in the JSON):

* bytes fetched and rows remote per training epoch (the mean over epochs), rows local and
  replicated per epoch;
* fetch seconds per epoch (the exchange rounds) and wait seconds (the trainer blocked on
  them), epoch seconds (the mean over epochs after the first);
* the final loss and the largest difference of any step's loss to the replicated run.

Two more rows run the loader with worker processes (`--workers`, default 1 per rank), where
batch k+1's rows are fetched while the step on batch k runs (prefetch): replicated, and hot
budget 0 (compared with the replicated run with workers).

    .venv/bin/python scripts/bench_partition.py              # ~30 s on 2 cores
    .venv/bin/python scripts/bench_partition.py --quick      # 20K nodes, 2 epochs

Prints a markdown table and writes benchmarks/results/partition.json.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = (0.0, 0.05, 0.20, 0.50)   # share of all rows replicated per rank


# -- inside each torchrun rank -----------------------------------------------------------
def train(data, epochs, workers):
    import torch
    import torch.nn.functional as F
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                            batch_size=1024, shuffle=True, num_workers=workers)
    model = GraphSAGE(data.num_features, 128, num_layers=2, out_channels=47)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def rank_main(out: Path, nodes: int, epochs: int, workers: int) -> None:
    import torch

    import gnnorch
    from gnnorch.datasets import power_law_graph

    rank = int(os.environ["RANK"])
    data = power_law_graph(num_nodes=nodes, avg_degree=25.0, num_features=100, num_classes=47,
                           seed=0)
    row_bytes = data.x[0].numel() * data.x.element_size()
    # (name, partition_features, loader workers, the replicated run it must equal)
    configs = [("replicated", False, 0, "replicated")] + [
        (f"hot {int(b * 100)} %", {"hot_budget_mb": b * nodes * row_bytes / 2 ** 20}, 0,
         "replicated") for b in BUDGETS]
    if workers:
        configs += [(f"replicated, {workers} worker(s)", False, workers,
                     f"replicated, {workers} worker(s)"),
                    (f"hot 0 %, {workers} worker(s), prefetch", True, workers,
                     f"replicated, {workers} worker(s)")]
    results = []
    for name, partition, loader_workers, baseline in configs:
        runtime = gnnorch.Runtime(train, launch={"threads": 1, "bind": False}, seed=7,
                                  sampler="gnnorch",
                                  rewrite=False, partition_features=partition)
        start = time.perf_counter()
        losses = runtime(data, epochs, loader_workers)
        wall = time.perf_counter() - start
        ranks = {}
        for r, stats in runtime.last_run.stats.items():
            seconds = [e["seconds"] for e in runtime.last_run.epochs[r]]
            ranks[r] = {"epoch_seconds": seconds, "partition": stats.get("partition")}
        results.append({"name": name, "partition_features": partition, "workers": loader_workers,
                        "baseline": baseline, "wall_seconds": wall, "losses": losses,
                        "ranks": ranks})
        torch.distributed.barrier()
    if rank == 0:
        (out / "ranks.json").write_text(json.dumps(
            {"nodes": nodes, "edges": int(data.edge_index.size(1)), "row_bytes": row_bytes,
             "epochs": epochs, "workers": workers, "results": results}))


# -- the launcher --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, args: argparse.Namespace) -> dict:
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs = []
    for node in range(2):
        log = open(out / f"node{node}.log", "wb")  # noqa: SIM115 - the process owns it
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
             "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--nproc-per-node=1",
             "--max-restarts=0", __file__, "--rank-mode", str(out), "--nodes", str(args.nodes),
             "--epochs", str(args.epochs), "--workers", str(args.workers)],
            stdout=log, stderr=subprocess.STDOUT, env=env))
    try:
        for proc in procs:
            proc.wait(timeout=args.timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if any(p.returncode for p in procs):
        logs = "\n".join((out / f"node{i}.log").read_text(errors="replace") for i in range(2))
        raise SystemExit(f"torchrun failed:\n{logs}")
    return json.loads((out / "ranks.json").read_text())


def summarise(raw: dict) -> list[dict]:
    losses = {result["name"]: result["losses"] for result in raw["results"]}
    rows = []
    for result in raw["results"]:
        base = losses[result["baseline"]]
        row = {"name": result["name"], "workers": result["workers"],
               "final_loss": result["losses"][-1],
               "max_loss_diff_vs_replicated": max(abs(a - b) for a, b in
                                                  zip(result["losses"], base)),
               "ranks": {}}
        for r, rank in result["ranks"].items():
            seconds = rank["epoch_seconds"]
            entry = {"epoch_seconds": statistics.mean(seconds[1:] or seconds)}
            stats = rank["partition"]
            if stats is not None:
                train = [e for e in stats["epochs"] if e["training"]]
                store = stats["stores"][0]
                for key in ("bytes_fetched", "rows_remote", "rows_local", "rows_hot",
                            "fetch_seconds", "wait_seconds"):
                    entry[key] = statistics.mean(e[key] for e in train)
                entry.update(hot_rows=store["hot_rows"], held_bytes=store["held_bytes"],
                             full_bytes=store["full_bytes"], edge_cut=store["edge_cut"],
                             partition_sizes=store["partition_sizes"],
                             partition_seconds=store["partition_seconds"])
            row["ranks"][r] = entry
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| config | rows held / rank | bytes fetched / epoch | rows remote / epoch | "
             "rows hot / epoch | fetch s / epoch | wait s / epoch | epoch s | final loss | "
             "max loss diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r0 = row["ranks"].get("0") or row["ranks"].get(0)
        if "bytes_fetched" in r0:
            held = f"{r0['held_bytes'] / 2 ** 20:.1f} MiB of {r0['full_bytes'] / 2 ** 20:.1f}"
            cells = [held, f"{r0['bytes_fetched'] / 2 ** 20:.1f} MiB",
                     f"{r0['rows_remote']:,.0f}", f"{r0['rows_hot']:,.0f}",
                     f"{r0['fetch_seconds']:.2f}", f"{r0['wait_seconds']:.2f}"]
        else:
            cells = ["all", "-", "-", "-", "-", "-"]
        lines.append(f"| {row['name']} | " + " | ".join(cells) +
                     f" | {r0['epoch_seconds']:.2f} | {row['final_loss']:.4f} | "
                     f"{row['max_loss_diff_vs_replicated']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank-mode", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1,
                        help="loader workers per rank of the two extra rows (replicated, and "
                             "hot 0 %% with prefetch); 0: no such rows")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--quick", action="store_true", help="20K nodes, 2 epochs")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / "partition.json")
    args = parser.parse_args()
    if args.rank_mode is not None:
        rank_main(args.rank_mode, args.nodes, args.epochs, args.workers)
        return
    if args.quick:
        args.nodes, args.epochs = 20_000, 2
    with tempfile.TemporaryDirectory(prefix="bench-partition-") as tmp:
        start = time.perf_counter()
        raw = launch(Path(tmp), args)
        wall = time.perf_counter() - start
    rows = summarise(raw)
    text = table(rows)
    print(f"power-law graph: {raw['nodes']:,} nodes, {raw['edges']:,} edges, "
          f"{raw['row_bytes']} B per row; 2 torchrun nodes x 1 rank (loopback, gloo), "
          f"{raw['epochs']} epochs; rank 0:\n")
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"setup": {k: raw[k] for k in ("nodes", "edges", "row_bytes",
                                                                  "epochs", "workers")},
                                    "budgets_share_of_rows": list(BUDGETS),
                                    "wall_seconds": wall, "rows": rows, "table": text},
                                   indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
