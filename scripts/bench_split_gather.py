"""The host's work per batch when a loader's features are split between the device and the
host, against gathering every row on the host (the features-host path).

On a GPU machine whose node features do not fit the device whole, the data path's producer
thread gathers each batch's feature rows on the host into pinned memory, and that host gather
bounds the epoch (the lent H200: 26 ms a batch with the features on the host, 9 ms with them
on the GPU). A split placement keeps the most-gathered rows on the device
(`gnnorch.device.hot_rows`): the host then looks up which of the batch's rows are hot and
gathers only the others (`gnnorch.device.split_rows.SplitRows.lookup`, and the host half of
`SplitRows.gather`). This times exactly that host work, with the CPU only (the device half of
the split, an index and two `index_copy_` on the GPU, and the copies are the device's and are
not timed here):

* ``all rows``: ``torch.index_select(x, 0, n_id, out=buffer)``, the features-host path's
  gather (into ordinary memory here, one buffer reused as the caching pinned allocator reuses
  its blocks: there is no pinned memory without a GPU);
* ``split F``: the lookup and the cold rows' gather into a buffer, with the hottest rows that
  fit F of the features' bytes on the "device".

Workload: the GPU table's products-like graph (2.45M nodes, 123.7M edges, 100 float32
features, 196,615 seeds), fanout [15, 10, 5], batch 1024; ``--batches`` batches drawn with
gnnorch's sampler, each timed ``--repeats`` times (the median per batch, then the median over
batches); the ranking's own time is reported once, and with ``--ranking-float64`` again with
float64 flows (otherwise the same passes), with the two rankings' shares at each fraction.
Intra-op threads: ``--threads``.

    .venv/bin/python scripts/bench_split_gather.py --out benchmarks/results/split_gather.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch_geometric

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baselines  # noqa: E402


def main() -> None:
    from torch_geometric.sampler.utils import to_csc

    from gnnorch.device.hot_rows import rank_rows
    from gnnorch.device.split_rows import SplitCounts, SplitRows
    from gnnorch.sampling.uniform import new_workspace, sample_neighbors

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_450_000)
    ap.add_argument("--train-seeds", type=int, default=196_615)
    ap.add_argument("--avg-degree", type=float, default=50.5)
    ap.add_argument("--fractions", default="0.1,0.25,0.5")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--ranking-float64", action="store_true",
                    help="also rank with float64 flows and compare time and shares")
    ap.add_argument("--out", type=Path, default=Path("bench-results/split_gather.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = torch.load(baselines.ensure_graph(args.nodes, 0, args.train_seeds, args.avg_degree),
                      weights_only=False)
    x = data.x.contiguous()
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    seeds = data.train_mask.nonzero().view(-1)
    fanouts, batch_size = [15, 10, 5], 1024
    start = time.perf_counter()
    ranking = rank_rows(colptr, row, seeds, fanouts, batch_size)
    ranking_s = time.perf_counter() - start
    reference = None
    if args.ranking_float64:
        start = time.perf_counter()
        ranking64 = rank_rows(colptr, row, seeds, fanouts, batch_size, flow_dtype=torch.float64)
        reference = {"ranking_seconds": time.perf_counter() - start, "shares": {}}
    gen = torch.Generator().manual_seed(0)
    perm = seeds[torch.randperm(seeds.numel(), generator=gen)]
    workspace = new_workspace(data.num_nodes)
    batches = [sample_neighbors(colptr, row, perm[b * batch_size:(b + 1) * batch_size], fanouts,
                                generator=gen, workspace=workspace).node
               for b in range(args.batches)]
    row_bytes = x[0].numel() * x.element_size()
    feature_bytes = x.numel() * x.element_size()

    def timed(work) -> float:
        per_batch = []
        for n_id in batches:
            runs = []
            for _ in range(args.repeats):
                began = time.perf_counter()
                work(n_id)
                runs.append((time.perf_counter() - began) * 1e3)
            per_batch.append(statistics.median(runs))
        return statistics.median(per_batch)

    # one buffer reused, as the caching pinned allocator reuses its blocks on a GPU machine
    # (a fresh allocation per batch would time page faults instead of the gather)
    buffer = torch.empty((max(b.numel() for b in batches), x.size(1)), dtype=x.dtype)

    def gather_all(n_id: torch.Tensor) -> None:
        torch.index_select(x, 0, n_id, out=buffer[:n_id.numel()])

    rows = [{"config": "all rows", "ms_per_batch": timed(gather_all), "host_rows_share": 1.0}]
    for fraction in (float(f) for f in args.fractions.split(",")):
        k = int(fraction * feature_bytes) // row_bytes
        counts = SplitCounts()
        split = SplitRows(ranking.hottest(k), data.num_nodes, torch.device("cpu"), False, counts)

        def host_half(n_id: torch.Tensor, split: SplitRows = split) -> None:
            found = split.lookup(n_id)
            torch.index_select(x, 0, found.cold_ids, out=buffer[:found.cold_ids.numel()])

        if reference is not None:
            reference["shares"][str(fraction)] = {"float32": ranking.share(k),
                                                  "float64": ranking64.share(k),
                                                  "same_rows": bool(torch.equal(
                                                      ranking.hottest(k), ranking64.hottest(k)))}
        lookup_ms = timed(lambda n_id, split=split: split.lookup(n_id))
        ms = timed(host_half)
        rows.append({"config": f"split {fraction}", "device_rows": k,
                     "ms_per_batch": ms, "lookup_ms_per_batch": lookup_ms,
                     "host_rows_share": counts.host / max(1, counts.host + counts.device),
                     "predicted_device_share": ranking.share(k)})
    base = rows[0]["ms_per_batch"]
    print(f"ranking: {ranking_s:.1f} s; {args.batches} batches of "
          f"{statistics.mean(b.numel() for b in batches):,.0f} rows; {args.threads} threads")
    if reference is not None:
        print(f"ranking with float64 flows: {reference['ranking_seconds']:.1f} s; shares "
              f"{reference['shares']}")
    print("| host work per batch | ms | of which the lookup | host rows | all rows / this |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['ms_per_batch']:.2f} | "
              f"{r.get('lookup_ms_per_batch', 0):.2f} | {100 * r['host_rows_share']:.1f} % | "
              f"{base / r['ms_per_batch']:.2f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_split_gather", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "torch_geometric": torch_geometric.__version__,
                    "threads": args.threads},
        "workload": {"nodes": args.nodes, "train_seeds": args.train_seeds,
                     "avg_degree": args.avg_degree, "fanout": fanouts,
                     "batch_size": batch_size, "batches": args.batches,
                     "repeats": args.repeats},
        "ranking_seconds": ranking_s, "ranking_float64": reference, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
