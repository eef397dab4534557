"""HeteroData NeighborLoader batches on a GPU run (issue 21): what the device data path is worth
for a heterogeneous graph. Since session 30 the path serves HeteroData loaders: every edge
type's CSC and every store's attributes on the GPU when they fit, sampled there by
`FastHeteroNeighborSampler` and gathered there (`gnnorch.device.hetero_gather`), batch k+1
drawn while batch k trains (sessions 18-29 measured PyG's batches copied ahead instead).

Workload: an ogbn-mag-like heterogeneous graph (papers, authors, institutions, fields of study;
``writes``, ``cites``, ``affiliated_with``, ``has_topic`` and their reverses from
``T.ToUndirected``), 128 random features on every node type, paper labels from a planted linear
signal; PyG's ``to_hetero`` of a 2-layer ``SAGEConv((-1, -1))`` model (hidden 128, as PyG's
``examples/hetero/to_hetero_mag.py``), a hetero NeighborLoader over the training papers
(fanout [10, 10] per edge type, batch 1024, ``num_workers`` workers, persistent as in PyG's
example, or not with ``--persistent 0``), Adam; the loop calls ``batch.to(device)`` and
``float(loss)`` every batch, as PyG's examples do.

Rows, each in a fresh process:

* ``vanilla``: the function called as it is;
* ``gnnorch-host``: ``Runtime(train, data_path="host")`` (PyG's batches in the trainer's
  thread, the user's ``batch.to(device)`` copying them: pageable);
* ``gnnorch-notrim`` / ``gnnorch-host-notrim``: those rows with ``trim=False`` (since session
  31 HeteroData batches are trimmed per node and edge type, `gnnorch.trim.hetero`);
* ``gnnorch``: ``Runtime(train)`` (on CUDA the path serves the loader: sampled and gathered on
  the GPU in the pipeline's thread, the user's workers dropped; where the graph does not fit
  the budget, sampled by the user's workers on the host and gathered into pinned memory;
  with ``--device cpu`` it runs ``data_path="device"``, the CPU standing in for the device:
  gnnorch's sampler and gather in one thread of the trainer's process against PyG's workers,
  which measures the path's work, not what copies save).

Per row: every epoch's seconds (steady: the fastest after the first), the trainer thread's
seconds in ``next`` (waiting for a batch) and in ``batch.to(device)`` per steady epoch, the last
epoch's mean loss, peak GPU memory, and the path's record of the loader.

    python3 scripts/bench_hetero_feed.py --device cuda --out hetero_feed.json     # lent GPU
    python3 scripts/bench_hetero_feed.py --device cuda --persistent 0 --out ...   # drawn ahead
    .venv/bin/python scripts/bench_hetero_feed.py --device cpu --papers 20000 --epochs 2 \\
        --workers 2                                                               # here: checks it
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "src"))
import baselines  # noqa: E402

ROWS = ("vanilla", "gnnorch-host", "gnnorch", "gnnorch-notrim", "gnnorch-host-notrim")
DEFAULT_ROWS = ROWS[:4]


def mag_like(papers: int, seed: int = 0):
    """The ogbn-mag-like HeteroData (module docstring); sizes in ogbn-mag's proportions
    (736K papers: 1.13M authors, 8.7K institutions, 60K fields; 7.3 citations and 7.3 authors
    a paper, 1.2 affiliations an author, 10 fields a paper)."""
    import torch_geometric.transforms as T
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    sizes = {"paper": papers, "author": int(papers * 1.54), "institution": max(papers // 85, 8),
             "field_of_study": max(papers // 12, 8)}
    data = HeteroData()
    for node_type, n in sizes.items():
        data[node_type].x = torch.randn(n, 128, generator=gen)
    classes = 64
    signal = torch.randn(128, classes, generator=gen)
    data["paper"].y = (data["paper"].x @ signal).argmax(dim=1)
    split = torch.rand(papers, generator=gen)
    data["paper"].train_mask = split < 0.8
    data["paper"].test_mask = split >= 0.9

    def edges(src: str, dst: str, per_src: float) -> torch.Tensor:
        m = int(sizes[src] * per_src)
        return torch.stack([torch.randint(0, sizes[src], (m,), generator=gen),
                            torch.randint(0, sizes[dst], (m,), generator=gen)])

    data["author", "writes", "paper"].edge_index = edges("author", "paper", 7.3 / 1.54)
    data["paper", "cites", "paper"].edge_index = edges("paper", "paper", 7.3)
    data["author", "affiliated_with", "institution"].edge_index = edges("author", "institution",
                                                                        1.2)
    data["paper", "has_topic", "field_of_study"].edge_index = edges("paper", "field_of_study",
                                                                    10.0)
    return T.ToUndirected()(data)


def train(data, device: str, epochs: int, workers: int, persistent: bool = True,
          batch_size: int = 1024, hidden: int = 128,
          fanout: tuple[int, ...] = (10, 10)) -> dict:
    """The user's function (module docstring): per-epoch seconds and trainer-thread times."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import Linear, SAGEConv, to_hetero

    class GNN(torch.nn.Module):
        def __init__(self, hidden: int, out: int) -> None:
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), hidden)
            self.conv2 = SAGEConv((-1, -1), hidden)
            self.lin = Linear(-1, out)

        def forward(self, x, edge_index):
            x = self.conv1(x, edge_index).relu()
            x = self.conv2(x, edge_index).relu()
            return self.lin(x)

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=list(fanout), batch_size=batch_size,
                            input_nodes=("paper", data["paper"].train_mask), shuffle=True,
                            num_workers=workers, persistent_workers=persistent and workers > 0)
    model = to_hetero(GNN(hidden, int(data["paper"].y.max()) + 1), data.metadata(),
                      aggr="sum").to(device)
    with torch.no_grad():   # lazy layers: one forward over one batch
        first = next(iter(loader)).to(device)
        model(first.x_dict, first.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    epoch_s, next_s, to_s, losses = [], [], [], []
    for _ in range(epochs):
        model.train()
        sync()
        start = time.perf_counter()
        waiting = copying = total = 0.0
        count = 0
        iterator = iter(loader)
        while True:
            t0 = time.perf_counter()
            batch = next(iterator, None)
            t1 = time.perf_counter()
            waiting += t1 - t0
            if batch is None:
                break
            batch = batch.to(device)
            copying += time.perf_counter() - t1
            size = batch["paper"].batch_size
            opt.zero_grad()
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
            loss = F.cross_entropy(out, batch["paper"].y[:size])
            loss.backward()
            opt.step()
            total += float(loss) * size
            count += size
        sync()
        epoch_s.append(time.perf_counter() - start)
        next_s.append(waiting)
        to_s.append(copying)
        losses.append(total / max(count, 1))
    return {"epoch_s": epoch_s, "next_s": next_s, "to_s": to_s, "losses": losses}


def measure(row: str, args: argparse.Namespace) -> dict:
    data = mag_like(args.papers)
    call = dict(device=args.device, epochs=args.epochs, workers=args.workers,
                persistent=bool(args.persistent), batch_size=args.batch_size,
                fanout=tuple(int(f) for f in args.fanout.split(",")))
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    record = None
    start = time.perf_counter()
    if row == "vanilla":
        out = train(data, **call)
    else:
        import gnnorch

        path = "host" if row.startswith("gnnorch-host") else (
            "auto" if args.device != "cpu" else "device")
        # seed: the path's sampling generator is seeded from the run's seed, so rows drawn
        # by it see the same batches in every process (the host rows: the function's own
        # manual_seed)
        runtime = gnnorch.Runtime(train, data_path=path, device=args.device, seed=0,
                                  trim=not row.endswith("-notrim"))
        out = runtime(data, **call)
        stats = runtime.last_run.stats[0]
        loaders = (stats.get("device") or {}).get("loaders") or []
        record = {k: loaders[0].get(k) for k in ("served", "reason", "copied", "prefetch",
                                                 "prefetch_reason", "batches", "wait_s")
                  } if loaders else None
        trim = stats.get("trim") or {}
        models = trim.get("models") or [{}]
        out["trim"] = {"trimmed": models[0].get("trimmed"), "reason": models[0].get("reason"),
                       "rows_computed": trim.get("rows_computed"),
                       "rows_untrimmed": trim.get("rows_untrimmed")}
    steady = min(range(1, len(out["epoch_s"])), key=lambda e: out["epoch_s"][e], default=0)
    return {"row": row, "call_s": time.perf_counter() - start, **out,
            "steady_epoch_s": out["epoch_s"][steady], "steady_next_s": out["next_s"][steady],
            "steady_to_s": out["to_s"][steady], "last_loss": out["losses"][-1],
            "peak_gpu_mb": (torch.cuda.max_memory_allocated() / 2 ** 20
                            if args.device.startswith("cuda") else None),
            "path": record}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--papers", type=int, default=736_389)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--persistent", type=int, choices=(0, 1), default=1)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", default="10,10", help="per hop, comma-separated")
    parser.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    parser.add_argument("--measure", choices=ROWS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        fanout = [int(f) for f in args.fanout.split(",")]
    except ValueError:
        fanout = []
    if not fanout or args.batch_size < 1:
        parser.error(f"--fanout takes comma-separated integers such as 10,10 (got "
                     f"{args.fanout!r}) and --batch-size a positive integer")
    if args.measure:
        baselines.finish_child(measure(args.measure, args))
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}; rows: {', '.join(ROWS)}")
    results = []
    for row in rows:
        cmd = [sys.executable, __file__, "--measure", row, "--device", args.device,
               "--papers", str(args.papers), "--epochs", str(args.epochs),
               "--workers", str(args.workers), "--persistent", str(args.persistent),
               "--batch-size", str(args.batch_size), "--fanout", args.fanout]
        result = baselines.fresh_json_row(cmd, row)
        results.append(result)
        print(f"{row:13s} steady {result['steady_epoch_s']:.2f} s  "
              f"next {result['steady_next_s']:.2f} s  to {result['steady_to_s']:.2f} s  "
              f"loss {result['last_loss']:.4f}", flush=True)
    base = next((r for r in results if r["row"] == "vanilla"), None)
    for result in results:
        if base is not None:
            result["vs_vanilla"] = base["steady_epoch_s"] / result["steady_epoch_s"]
    out = {"machine": {"python": platform.python_version(), "torch": torch.__version__,
                       "cpus": len(__import__("os").sched_getaffinity(0)),
                       "gpu": (torch.cuda.get_device_name() if args.device.startswith("cuda")
                               and torch.cuda.is_available() else None)},
           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "rows": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["rows"], indent=1) if not args.out else f"wrote {args.out}")


if __name__ == "__main__":
    main()
