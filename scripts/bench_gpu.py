"""The GPU data path (issue 21): epoch time, first epoch, peak GPU memory and test accuracy of
vanilla PyG, the PyG expert and gnnorch on one GPU, products-scale.

Workload: a products-like synthetic graph (`gnnorch.datasets.products_like`: by default 2.45M
nodes, mean degree 50.5 -> ~124M directed edges as ogbn-products (61.9M undirected edges
stored in both directions), 100 features, 47 classes, 196,615 training seeds; ``--avg-degree``),
GraphSAGE / GCN / GAT (3 layers, hidden 256; GAT: 4 heads of 64), fanout [15, 10, 5], batch
1024, Adam. The graph's edge count as measured is in every row
(``num_edges``). One ordinary PyG training function (`train` below: ``batch.to(device)`` in
the loop, test accuracy with a NeighborLoader at the end) runs in every row:

* ``vanilla-w<N>``: PyG as written, data on the host, ``num_workers=N`` (the table's "vanilla"
  is the best N of ``--workers``); on a GPU it must sample with pyg-lib (a row that would fall
  back to torch_sparse is refused);
* ``expert-w<N>``: what a PyG expert adds by hand: pyg-lib, BasicGNN trimming
  (``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``), ``pin_memory=True`` with
  ``non_blocking`` copies, workers pinned with ``enable_cpu_affinity`` (best N);
* ``gnnorch``: the vanilla function under ``gnnorch.Runtime(train, device=...)`` with its
  defaults (the device path: graph, sampling and features on the GPU);
* ``gnnorch-cache``: the same with ``cache=True``;
* ``gnnorch-features-host``: features forced to pinned host memory
  (``data_path={"features": "host"}``): ``x`` waits in pinned rows for DAHA's host transform
  (`gnnorch.rewrite.host`); ``-norewrite`` without rewrites (every attribute copied on the
  pipeline's side stream); ``gnnorch-cache-features-host`` with the cache;
  ``gnnorch-cache-r0.3-features-host`` with the cache at hot ratio 0.3 (not acceptance 2's
  ``cache=True``: the row that says whether pruning more pays where the host gathers the
  features; `bench_cache_host_rows.py` counts its rows: the batches gather 1.87x fewer than
  the exact path, the refreshes more than at 0.1); ``gnnorch-eager-sampler``: the ``gnnorch``
  row with the sampler's body run eagerly, as before session 22 (``sample_neighbors``'s
  ``compiled`` default set to False in that row's process only): the compiled body's effect
  on the epoch, within one run; ``gnnorch-notrim``, ``gnnorch-norewrite``, ``gnnorch-noseams``:
  the ``gnnorch`` row without hop-aware trimming, without rewrites, without either (no layer
  seam): whether the layer seams pay on a GPU, where the step is bound by the host's
  launches and Python rather than by the arithmetic they save (`bench_step_host.py`);
  ``gnnorch-split-f<F>``: a budget that holds the CSC and the fraction F of the node
  features' bytes (`baselines.split_budget`), so the features are split: the most-gathered
  rows on the GPU, the rest gathered on the host (`bench_cache_host_rows.py` counts its host
  rows; this row says what they cost in time, between ``gnnorch`` and
  ``gnnorch-features-host``); ``gnnorch-cache-split-f0.25``: that row with ``cache=True``
  (the cache's background refreshes still gather every row they read on the host: whether
  routing them through the split is worth building is what this row against the two
  features-host rows says).

Each row runs in a fresh interpreter (`baselines.run_fresh`, which also samples the PSS of its
process tree); the child times its own epochs with the GPU synchronised at each epoch's end,
and reports ``torch.cuda.max_memory_allocated``. A gnnorch row records where its loaders were
served (``device_path``, from ``last_run.stats[0]["device"]``) and FAILS (an ``error`` field,
the table says FAILED, the script exits 1) when its training loader was not served by the
device path: a silent fallback is never reported as a GPU number. Mismatches that do not make
the row's name false (e.g. the placement kept the structure on the host) are ``warnings``.
Rows are written to ``--out`` as they finish (``"partial": true`` until the end); a row that
crashes is recorded with its error and the others still run.

Bounding the cost on products scale (without workers, PyG's sampling and feature gathering
alone took 228 ms per batch on a 2-core EPYC here with pyg-lib: about 45 s per epoch of 193
batches, before the test pass): ``--epochs-baseline N`` runs vanilla and expert rows for N
epochs (2: the first and one steady); ``--worker-sweep-model sage`` sweeps ``--workers`` for
SAGE only and runs the other models' vanilla / expert rows at SAGE's best counts (from this
run, or from the JSON of an earlier run given with ``--workers-from``; rows and table say
so); ``--screen-batches N`` picks each family's best worker count by a screen instead of
a full row per count: one fresh process builds PyG's ``NeighborSampler`` once and, for every
count of ``--workers`` and both families, times max(N, 4 x workers) batches of the same
training step after a warm-up of max(10, 3 x workers) batches (past the burst of the workers'
first batches, which all start together); only each family's fastest count is then measured in full (its row says
``workers_screen``; the JSON's ``screens`` keeps every count's ms per batch);
``--time-budget S`` skips (and records) rows that would not finish within S seconds, judged
from the time the same kind of row took so
far. ``--merge A.json B.json ...`` combines runs (rows of later files win) into one table and
JSON without measuring. ``scripts/device_session.sh`` drives all this on a lent GPU
(docs/gpu-runbook.md).

    .venv/bin/python scripts/bench_gpu.py --out benchmarks/results/gpu.json
    .venv/bin/python scripts/bench_gpu.py --dry-run     # small, on the CPU, a few rows
    .venv/bin/python scripts/bench_gpu.py --merge r/gpu_*.json --out benchmarks/results/gpu.json
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric

import baselines  # graph generation on disk, fresh-process runs with PSS sampling
import gil_profile as gil_profile_module  # who holds the GIL in an epoch: --gil-profile

# ogbn-products: 2,449,029 nodes, 61.86M undirected edges (123.7M directed: mean degree 50.5)
PRODUCTS = {"nodes": 2_450_000, "train_seeds": 196_615, "avg_degree": 50.5}
DEVICE_ENV = "GNNORCH_BENCH_DEVICE"   # the parent's --device, for its fresh children
HIDDEN_ENV = "GNNORCH_BENCH_HIDDEN"   # the parent's --hidden
GIL_ENV = "GNNORCH_BENCH_GIL_PROFILE"   # the parent's --gil-profile (a directory)
MODELS = baselines.MODELS
GNNORCH_ROWS = ("gnnorch", "gnnorch-cache", "gnnorch-features-host",
                "gnnorch-cache-features-host", "gnnorch-features-host-norewrite",
                "gnnorch-cache-r0.3-features-host", "gnnorch-eager-sampler",
                "gnnorch-notrim", "gnnorch-norewrite", "gnnorch-noseams",
                "gnnorch-split-f0.25", "gnnorch-cache-split-f0.25")
BASELINES = ("vanilla", "expert")


def _loader(data, mask, fanout, batch_size, shuffle, num_workers, expert):
    from torch_geometric.loader import NeighborLoader

    kwargs = {} if num_workers is None else {"num_workers": num_workers,
                                             "persistent_workers": num_workers > 0}
    if expert:
        kwargs["pin_memory"] = True
    return NeighborLoader(data, num_neighbors=list(fanout), input_nodes=mask,
                          batch_size=batch_size, shuffle=shuffle, **kwargs)


def train_step(net, optimizer, batch, device, expert: bool) -> tuple[torch.Tensor, bool]:
    """One step of the ordinary loop (``batch.to(device)``, forward, loss, backward, step); an
    expert adds ``non_blocking`` copies and BasicGNN trimming. Returns the loss and whether
    the step trimmed."""
    batch = batch.to(device, non_blocking=expert)
    optimizer.zero_grad()
    # BasicGNN trimming needs the sampler's hop counts (pyg-lib reports them)
    hops = ({"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
             "num_sampled_edges_per_hop": batch.num_sampled_edges}
            if expert and "num_sampled_nodes" in batch else {})
    out = net(batch.x, batch.edge_index, **hops)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    optimizer.step()
    return loss, bool(hops)


def train(data, model="sage", epochs=3, device="cuda", num_workers=None, expert=False,
          batch_size=1024, fanout=(15, 10, 5), hidden=256, seed=0, test=True,
          gil_profile=None):
    """An ordinary PyG training function on `device`; `expert` adds what a PyG expert adds.
    Returns its own per-epoch seconds (the device synchronised at each epoch's end), the final
    loss and the test accuracy (None with ``test=False``). `gil_profile` (a file path): the
    last epoch runs under `gil_profile.GilProbe` (py-spy's GIL samples per thread), its
    summary returned as ``"gil_profile"``."""
    torch.manual_seed(seed)
    device = torch.device(device)
    loader = _loader(data, data.train_mask, fanout, batch_size, True, num_workers, expert)
    net = baselines.build_model(model, data.num_features, hidden, len(fanout),
                                int(data.y.max()) + 1).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.003)
    affinity = (loader.enable_cpu_affinity(list(range(num_workers)))
                if expert and num_workers else contextlib.nullcontext())
    epoch_seconds, loss, trimmed, probe = [], None, False, None
    with affinity:
        for epoch in range(epochs):
            net.train()
            probe = (gil_profile_module.GilProbe(Path(gil_profile))
                     if gil_profile is not None and epoch == epochs - 1 else None)
            with probe or contextlib.nullcontext():
                start = time.perf_counter()
                for batch in loader:
                    loss, trimmed_now = train_step(net, optimizer, batch, device, expert)
                    trimmed |= trimmed_now
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                epoch_seconds.append(time.perf_counter() - start)
    out = {"epoch_seconds": epoch_seconds, "loss": float(loss.detach()),
           "trimmed_by_hand": trimmed,
           "test_accuracy": (test_accuracy(net, data, fanout, device, num_workers, expert)
                             if test else None)}
    if probe is not None:
        out["gil_profile"] = probe.summary or {"error": probe.error}
    return out


def screen_windows(workers: int, batches: int) -> tuple[int, int]:
    """(warm-up, timed) batches of one screened worker count: the timed window starts past
    the burst of the workers' first batches (they all start together) and spans several
    rounds of every worker."""
    return max(10, 3 * workers), max(batches, 4 * workers)


def screen_here(model: str, graph: Path, workers: list[int], batches: int, device: str,
                hidden: int, fanout=(15, 10, 5), batch_size: int = 1024) -> dict:
    """Time the ordinary training step, ms per batch, for every worker count of vanilla and
    expert (`screen_windows`), in this process: PyG's ``NeighborSampler`` is built once and
    given to every loader (``neighbor_sampler=``, PyG's own argument), so the screen pays
    the graph's CSC conversion once. Worker processes end with each count's iterator."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NeighborSampler

    data = torch.load(graph, weights_only=False)
    dev = torch.device(device)
    began = time.perf_counter()
    sampler = NeighborSampler(data, num_neighbors=list(fanout), share_memory=True)
    setup_seconds = time.perf_counter() - began
    entries = []
    for count in workers:
        for family in BASELINES:
            expert = family == "expert"
            torch.manual_seed(0)
            net = baselines.build_model(model, data.num_features, hidden, len(fanout),
                                        int(data.y.max()) + 1).to(dev)
            optimizer = torch.optim.Adam(net.parameters(), lr=0.003)
            loader = NeighborLoader(data, num_neighbors=list(fanout),
                                    input_nodes=data.train_mask, batch_size=batch_size,
                                    shuffle=True, num_workers=count, pin_memory=expert,
                                    neighbor_sampler=sampler)
            affinity = (loader.enable_cpu_affinity(list(range(count)))
                        if expert and count else contextlib.nullcontext())
            warmup, timed = screen_windows(count, batches)
            if warmup + timed > len(loader):
                raise ValueError(f"a screen of {warmup} + {timed} batches needs more than "
                                 f"the epoch's {len(loader)} batches")
            net.train()
            start = time.perf_counter()
            with affinity:
                iterator = iter(loader)
                for _ in range(warmup):
                    train_step(net, optimizer, next(iterator), dev, expert)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                window = time.perf_counter()
                for _ in range(timed):
                    train_step(net, optimizer, next(iterator), dev, expert)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                end = time.perf_counter()
                del iterator   # its workers end here
            entries.append({"config": f"{model}/{family}-w{count}", "family": family,
                            "num_workers": count, "warmup_batches": warmup,
                            "timed_batches": timed,
                            "ms_per_batch": 1000 * (end - window) / timed,
                            "warmup_seconds": window - start})
    return {"model": model, "setup_seconds": setup_seconds, "entries": entries,
            "best": {family: min((e for e in entries if e["family"] == family),
                                 key=lambda e: e["ms_per_batch"])["num_workers"]
                     for family in BASELINES}}


@torch.no_grad()
def test_accuracy(net, data, fanout, device, num_workers, expert) -> float:
    net.eval()
    loader = _loader(data, data.test_mask, fanout, 4096, False, num_workers, expert)
    correct = total = 0
    for batch in loader:
        batch = batch.to(device, non_blocking=expert)
        pred = net(batch.x, batch.edge_index)[:batch.batch_size].argmax(dim=-1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / max(total, 1)


def gnnorch_options(config: str, device: str, data=None) -> dict:
    """Runtime options of a gnnorch row (on a CPU dry run the path runs with mode="device";
    `data`: the graph, which a ``-split-f<F>`` row's budget is sized on)."""
    path: dict = {} if device == "cuda" else {"mode": "device"}
    if "features-host" in config:
        path["features"] = "host"
    if "-split-f" in config:
        path["budget_bytes"] = baselines.split_budget(float(config.split("-split-f")[1]), data)
    options = {"device": device, "processes": 1, "data_path": path or None}
    if "-cache-r" in config:   # a hot ratio of its own: -cache-r<ratio>-...
        options["cache"] = {"hot_ratio": float(config.split("-cache-r")[1].split("-")[0])}
    elif "-cache" in config:
        options["cache"] = True
    if config.endswith("-norewrite") or config.endswith("-noseams"):
        options["rewrite"] = False
    if config.endswith("-notrim") or config.endswith("-noseams"):
        options["trim"] = False
    return options


def device_path_summary(stats: dict) -> dict:
    """What the device path did, per loader (from ``last_run.stats[0]["device"]``)."""
    section = stats.get("device") or {}
    keys = ("role", "served", "samples_on_device", "structure", "features", "deferred",
            "num_workers", "prefetch", "batches", "reason", "split_rows", "ranking_s",
            "ranking_on")
    return {"active": bool(section.get("active")), "device": section.get("device"),
            "reason": section.get("reason"),
            "loaders": [{k: loader.get(k) for k in keys} for loader in section.get("loaders")
                        or []]}


def check_device_path(name: str, device: str, path: dict, stats: dict) -> tuple[list, list]:
    """(errors, warnings) of gnnorch row `name` against what its name claims. An error: the
    training loader was not served by the device path, or a features-host row gathered on
    the device; a warning: a choice of the defaults the table's label does not describe."""
    errors: list[str] = []
    warnings: list[str] = []
    train_loaders = [lo for lo in path["loaders"] if lo["role"] == "train"]
    if not path["active"] or not train_loaders:
        errors.append(f"the device path did not serve this run ({path['reason']})")
        return errors, warnings
    for lo in train_loaders:
        if not lo["served"]:
            errors.append(f"training loader not served on {device}: {lo['reason']}")
    if errors:
        return errors, warnings
    host_features = "features-host" in name
    split = "-split-f" in name
    for lo in train_loaders:
        if host_features and lo["features"] == "gpu":
            errors.append("a features-host row gathered the features on the device")
        if split and lo["features"] != "split":
            errors.append(f"a split row's features were not split: {lo['reason']}")
        if not host_features and not split and lo["features"] != "gpu":
            warnings.append(f"features gathered from {lo['features']}, not the device: "
                            f"{lo['reason']}")
        if name == "gnnorch" and not lo["samples_on_device"]:
            warnings.append(f"training batches sampled on the host: {lo['reason']}")
        if device == "cuda" and host_features:
            rewrite = not name.endswith("-norewrite")
            # DAHA's deferral of x only without prefetching (`intercept.device_path`)
            if rewrite and not lo["prefetch"] and "x" not in (lo["deferred"] or []):
                warnings.append("x was not left in pinned rows for DAHA's host transform")
            if (not rewrite or lo["prefetch"]) and lo["deferred"]:
                warnings.append(f"rewrites off but attributes deferred: {lo['deferred']}")
    if "-cache" in name:
        caches = (stats.get("cache") or {}).get("loaders") or []
        if not any(c.get("status") == "active" for c in caches):
            warnings.append("the cache did not become active: "
                            + "; ".join(str(c.get("reason")) for c in caches))
    return errors, warnings


def sampler_backend() -> str | None:
    """The backend PyG's own NeighborLoader samples with in this process."""
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB:
        return "pyg-lib"
    return "torch_sparse" if pyg_typing.WITH_TORCH_SPARSE else None


def measure_here(config: str, graph: Path, epochs: int, device: str, hidden: int) -> dict:
    """Run one row (``<model>/<config>``) in this process: its JSON row."""
    import torch_geometric.typing as pyg_typing

    model, name = config.split("/")
    cuda = device == "cuda"
    baseline = name.startswith(("vanilla-w", "expert-w"))
    backend = sampler_backend()
    if baseline and cuda and backend != "pyg-lib":
        return {"config": config, "model": model, "pyg_backend": backend,
                "error": f"PyG would sample with {backend} here, not pyg-lib: build pyg-lib "
                         "first (the vanilla and expert rows are defined with pyg-lib)"}
    data = torch.load(graph, weights_only=False)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    stats = None
    gil = os.environ.get(GIL_ENV)
    gil = str(Path(gil) / (config.replace("/", "_") + ".pyspy.txt")) if gil else None
    start = time.perf_counter()
    if baseline:
        expert = name.startswith("expert")
        workers = int(name.split("-w")[1])
        out = train(data, model=model, epochs=epochs, device=device, expert=expert,
                    num_workers=workers, hidden=hidden, gil_profile=gil)
    elif name.startswith("gnnorch"):
        import gnnorch

        if name.endswith("-eager-sampler"):   # this child only: the body before session 22
            from gnnorch.sampling import sample_neighbors
            sample_neighbors.__kwdefaults__["compiled"] = False
        runtime = gnnorch.Runtime(train, **gnnorch_options(name, device, data))
        out = runtime(data, model=model, epochs=epochs, device=device, hidden=hidden,
                      gil_profile=gil)
        stats = runtime.last_run.stats[0]
    else:
        raise ValueError(f"unknown configuration {config!r}")
    seconds = out["epoch_seconds"]
    row = {"config": config, "model": model, "epoch_seconds": seconds,
           "first_epoch_seconds": seconds[0], "steady_epoch_seconds": min(seconds[1:] or seconds),
           "test_accuracy": out["test_accuracy"], "final_loss": out["loss"],
           "trimmed_by_hand": out["trimmed_by_hand"],
           "call_wall_seconds": time.perf_counter() - start,
           "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None,
           "pyg_lib": bool(pyg_typing.WITH_PYG_LIB), "pyg_backend": backend,
           "epochs": epochs, "num_nodes": data.num_nodes, "num_edges": data.num_edges,
           "gnnorch_imported": "gnnorch" in sys.modules}
    if "gil_profile" in out:
        row["gil_profile"] = out["gil_profile"]
    if baseline:
        row["num_workers"] = workers
        if cuda and expert and not out["trimmed_by_hand"]:
            row["error"] = "the expert row did not trim (no hop counts in its batches)"
    if stats is not None:
        row["gnnorch"] = {key: stats.get(key) for key in ("device", "sampler", "cache")}
        row["device_path"] = device_path_summary(stats)
        errors, warnings = check_device_path(name, device, row["device_path"], stats)
        if errors:
            row["error"] = "; ".join(errors)
        if warnings:
            row["warnings"] = warnings
    return row


# --------------------------------------------------------------------------- the rows
def _family(name: str) -> str:
    return next((f for f in BASELINES if name.startswith(f + "-w")), "gnnorch")


def best_workers(rows: list[dict], model: str) -> dict[str, int]:
    """The worker counts of `model`'s fastest measured vanilla and expert rows."""
    out = {}
    for family in BASELINES:
        done = [r for r in rows if r.get("model") == model and "error" not in r
                and r["config"].split("/")[1].startswith(family + "-w")]
        if done:
            fastest = min(done, key=lambda r: r["steady_epoch_seconds"])
            out[family] = int(fastest["config"].split("-w")[1])
    return out


def names_for(args: argparse.Namespace, model: str,
              known: list[dict]) -> tuple[list[str], dict | None, list[dict]]:
    """Row names of `model`, where its worker counts come from (None: its own sweep) and the
    rows skipped for want of a sweep's result."""
    workers = {f: [int(w) for w in args.workers.split(",")] for f in BASELINES}
    source, skipped = None, []
    sweep = args.worker_sweep_model
    if sweep and model != sweep:
        best = best_workers(known, sweep)
        source = {"model": sweep, "workers": best,
                  "from": [str(p) for p in args.workers_from or []] or "this run"}
        for family in BASELINES:
            workers[family] = [best[family]] if family in best else []
            if family not in best:
                skipped.append({"config": f"{model}/{family}",
                                "reason": f"no measured {family} row of {sweep} to take the "
                                          f"worker count from"})
    # by worker count in --workers order, vanilla and expert side by side (a sweep cut short
    # by the time budget loses the same counts of both)
    counts = list(dict.fromkeys(workers["vanilla"] + workers["expert"]))
    names = [f"{family}-w{w}" for w in counts for family in BASELINES if w in workers[family]]
    names += list(GNNORCH_ROWS)
    if args.configs:  # row names, or families ("vanilla" / "expert": every worker count),
        wanted = args.configs.split(",")   # measured in this order
        names = list(dict.fromkeys(n for token in wanted for n in names
                                   if n == token or (n not in GNNORCH_ROWS
                                                     and _family(n) == token)))
        skipped = [s for s in skipped if s["config"].split("/")[1] in wanted]
    return names, source, skipped


def summarise(rows: list[dict], screens: list[dict]) -> list[dict]:
    """Per model: the best vanilla and expert rows (and the worker screen that chose their
    counts), and every row's ratios to them (rows with an error take no part)."""
    out = []
    ok = [r for r in rows if "error" not in r]
    for model in dict.fromkeys(r["model"] for r in ok):
        mine = [r for r in ok if r["model"] == model]

        def best(prefix: str) -> dict | None:
            cands = [r for r in mine if r["config"].split("/")[1].startswith(prefix)]
            return min(cands, key=lambda r: r["steady_epoch_seconds"]) if cands else None

        vanilla, expert = best("vanilla-w"), best("expert-w")
        for row in mine:
            for label, ref in (("vanilla", vanilla), ("expert", expert)):
                if ref is not None:
                    row[f"speedup_vs_{label}"] = (ref["steady_epoch_seconds"]
                                                  / row["steady_epoch_seconds"])
            if vanilla is not None and row["test_accuracy"] is not None:
                row["accuracy_minus_vanilla_pt"] = 100 * (row["test_accuracy"]
                                                          - vanilla["test_accuracy"])
        out.append({"model": model, "vanilla": vanilla and vanilla["config"],
                    "expert": expert and expert["config"],
                    "vanilla_workers_measured": sorted(
                        int(r["config"].split("-w")[1]) for r in mine
                        if r["config"].split("/")[1].startswith("vanilla-w")),
                    "expert_workers_measured": sorted(
                        int(r["config"].split("-w")[1]) for r in mine
                        if r["config"].split("/")[1].startswith("expert-w")),
                    "worker_screen": screen_summary(screens, model)})
    return out


def screen_summary(screens: list[dict], model: str) -> dict | None:
    """`model`'s worker screen: ms per batch of every count, per family, and the best."""
    screen = next((s for s in reversed(screens) if s["model"] == model), None)
    if screen is None or "error" in screen:
        return screen and {"error": screen["error"]}
    return {"best": screen["best"],
            "ms_per_batch": {family: {str(e["num_workers"]): round(e["ms_per_batch"], 2)
                                      for e in screen["entries"] if e["family"] == family}
                             for family in BASELINES},
            "timed_batches": {str(e["num_workers"]): e["timed_batches"]
                              for e in screen["entries"]}}


def acceptance(rows: list[dict]) -> dict:
    """Issue 21's targets, judged where their rows exist (meaningful on a GPU run only): SAGE
    steady epoch <= 0.5 s, >= 10x vanilla, >= 3x the expert, test accuracy within 0.5 pt of
    vanilla; cache=True with host features >= 1.5x the exact host-features row."""
    by = {r["config"]: r for r in rows if "error" not in r}
    out: dict = {}
    row = by.get("sage/gnnorch")
    if row is not None:
        out["sage_steady_epoch_s<=0.5"] = row["steady_epoch_seconds"]
        for key, name in (("speedup_vs_vanilla", "sage_vs_vanilla>=10x"),
                          ("speedup_vs_expert", "sage_vs_expert>=3x"),
                          ("accuracy_minus_vanilla_pt", "sage_accuracy_within_0.5pt")):
            if key in row:
                out[name] = row[key]
    host, cached = by.get("sage/gnnorch-features-host"), by.get("sage/gnnorch-cache-features-host")
    if host is not None and cached is not None:
        out["sage_cache_host_features_vs_host_features>=1.5x"] = (
            host["steady_epoch_seconds"] / cached["steady_epoch_seconds"])
    limits = {"sage_steady_epoch_s<=0.5": lambda v: v <= 0.5,
              "sage_vs_vanilla>=10x": lambda v: v >= 10, "sage_vs_expert>=3x": lambda v: v >= 3,
              "sage_accuracy_within_0.5pt": lambda v: abs(v) <= 0.5,
              "sage_cache_host_features_vs_host_features>=1.5x": lambda v: v >= 1.5}
    return {name: {"value": value, "met": bool(limits[name](value))}
            for name, value in out.items()}


def _acc(row: dict) -> str:
    return "–" if row.get("test_accuracy") is None else f"{row['test_accuracy']:.4f}"


def _notes(row: dict) -> str:
    notes = []
    if "error" in row:
        notes.append(f"FAILED: {row['error'][:200]}")
    path = row.get("device_path")
    if path:
        for lo in path["loaders"]:
            where = "device" if lo["samples_on_device"] else "host"
            notes.append(f"{lo['role']}: {'served' if lo['served'] else 'NOT served'}, "
                         f"sampled on {where}, features {lo['features']}"
                         + (f", deferred {','.join(lo['deferred'])}" if lo["deferred"] else ""))
    if row.get("workers_screen"):
        notes.append(f"workers: best of {row['workers_screen']} by the screen")
    if row.get("workers_from"):
        src = row["workers_from"]
        notes.append(f"workers from {src['model']}'s sweep")
    if row.get("epochs") is not None and row.get("config", "").split("/")[-1].startswith(
            BASELINES):
        notes.append(f"{row['epochs']} epoch{'s' if row['epochs'] != 1 else ''}")
    for warning in row.get("warnings", []):
        notes.append(f"warning: {warning[:160]}")
    return "; ".join(notes)


def print_table(rows: list[dict], best: list[dict], skipped: list[dict],
                on_gpu: bool = True) -> None:
    print("\n| model / row | first epoch s | steady epoch s | vs vanilla | vs expert | "
          "test acc | peak GPU MB | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:     # never a number in the table: the JSON keeps what it measured
            print(f"| {row['config']} | – | – | – | – | – | – | {_notes(row)} |")
            continue
        ratio = {k: (f"{row[k]:.2f}x" if k in row else "–")
                 for k in ("speedup_vs_vanilla", "speedup_vs_expert")}
        print(f"| {row['config']} | {row['first_epoch_seconds']:.2f} | "
              f"{row['steady_epoch_seconds']:.3f} | {ratio['speedup_vs_vanilla']} | "
              f"{ratio['speedup_vs_expert']} | {_acc(row)} | "
              f"{row['peak_gpu_mb'] or 0:.0f} | {_notes(row)} |")
    for entry in best:
        print(f"{entry['model']}: vanilla = {entry['vanilla']} (of workers "
              f"{entry['vanilla_workers_measured']} measured in full), expert = "
              f"{entry['expert']} (of workers {entry['expert_workers_measured']})")
        screen = entry.get("worker_screen")
        if screen and "error" in screen:
            print(f"  worker screen FAILED: {screen['error'][:300]}")
        elif screen:
            for family in BASELINES:
                cells = ", ".join(f"w{w}: {ms:.1f}" for w, ms in
                                  screen["ms_per_batch"][family].items())
                print(f"  worker screen, {family}, ms per batch ({cells}) -> "
                      f"w{screen['best'][family]}")
    for entry in skipped:
        print(f"skipped {entry['config']}: {entry['reason']}")
    label = "acceptance" if on_gpu else "acceptance (not a GPU run: meaningless)"
    for name, check in acceptance(rows).items():
        print(f"{label} {name}: {check['value']:.3f} -> {'met' if check['met'] else 'NOT met'}")


def _print_row(row: dict) -> None:
    config = row["config"]
    if "steady_epoch_seconds" not in row:
        print(f"  {config:<34} FAILED: {row.get('error', '?')[-600:]}", flush=True)
        return
    print(f"  {config:<34} first {row['first_epoch_seconds']:7.2f} s  steady "
          f"{row['steady_epoch_seconds']:7.2f} s  acc {_acc(row):>6}  GPU "
          f"{row['peak_gpu_mb'] or 0:7.0f} MB  PSS {row.get('peak_pss_mb', 0):7.0f} MB  "
          f"wall {row.get('row_wall_seconds', 0):5.0f} s", flush=True)
    if row.get("error"):
        print(f"    FAILED: {row['error']}", flush=True)
    if row.get("device_path"):
        print(f"    device path: {_notes({'device_path': row['device_path']})}", flush=True)
    for warning in row.get("warnings", []):
        print(f"    warning: {warning}", flush=True)
    gil = row.get("gil_profile")
    if gil:
        text = (gil_profile_module.format_summary(gil) if "threads" in gil
                else f"GIL profile failed: {gil.get('error')}")
        print("    " + text.replace("\n", "\n    "), flush=True)


def _machine(device_name: str) -> dict:
    try:
        pyg_lib = importlib.metadata.version("pyg_lib")
    except importlib.metadata.PackageNotFoundError:
        pyg_lib = None
    return {"device": device_name, "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__, "pyg_lib": pyg_lib,
            "cpus": len(os.sched_getaffinity(0)), "argv": sys.argv}


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def merge(args: argparse.Namespace) -> int:
    """`--merge`: several runs' rows (later files win) in one table and JSON."""
    docs = [json.loads(Path(p).read_text()) for p in args.merge]
    if not docs:
        sys.exit("--merge: no files")
    nodes = {d["workload"]["nodes"] for d in docs}
    devices = {d["machine"]["device"] for d in docs}
    if len(nodes) > 1 or len(devices) > 1:
        sys.exit(f"--merge: runs of different graphs or devices ({nodes}, {devices})")
    by_config: dict[str, dict] = {}
    skipped: list[dict] = []
    screens: list[dict] = []   # a later file's screen of a model wins (screen_summary)
    for doc in docs:
        screens += doc.get("screens", [])
        for row in doc["rows"]:
            row = {k: v for k, v in row.items() if not k.startswith(("speedup_vs_",
                                                                     "accuracy_minus_"))}
            by_config[row["config"]] = row
        skipped += doc.get("skipped", [])
    rows = list(by_config.values())
    skipped = [s for s in skipped if s["config"] not in by_config]
    best = summarise(rows, screens)
    print_table(rows, best, skipped, on_gpu=docs[0]["machine"]["device"] != "cpu")
    doc = dict(docs[0], date=time.strftime("%Y-%m-%d %H:%M:%S"), best=best,
               acceptance=acceptance(rows), rows=rows, screens=screens,
               skipped=skipped, partial=any(d.get("partial") for d in docs),
               merged_from=[str(p) for p in args.merge])
    doc["workload"] = dict(docs[0]["workload"], epochs_baseline=sorted(
        {d["workload"].get("epochs_baseline") for d in docs} - {None}))
    if args.out is None:
        sys.exit("--merge needs --out")
    _write(args.out, doc)
    print(f"wrote {args.out}")
    return 1 if any("error" in r for r in rows) else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=PRODUCTS["nodes"])
    ap.add_argument("--train-seeds", type=int, default=PRODUCTS["train_seeds"])
    ap.add_argument("--avg-degree", type=float, default=PRODUCTS["avg_degree"],
                    help="directed edges per node (ogbn-products: 50.5, ~124M edges)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epochs-baseline", type=int, default=None,
                    help="epochs of the vanilla and expert rows (default: --epochs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--workers", default="0,4,8,12")
    ap.add_argument("--worker-sweep-model", default=None, choices=MODELS,
                    help="sweep --workers for this model only; the others' vanilla and "
                         "expert rows use its best worker counts")
    ap.add_argument("--workers-from", type=Path, nargs="+", default=None,
                    help="JSON of earlier runs holding the sweep model's rows")
    ap.add_argument("--configs", default=None,
                    help="comma-separated subset of row names; 'vanilla' / 'expert' select "
                         "those rows at any worker count")
    ap.add_argument("--device", default=os.environ.get(
        DEVICE_ENV, "cuda" if torch.cuda.is_available() else "cpu"))
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--screen-batches", type=int, default=None,
                    help="choose each family's worker count by a screen (ms per batch of the "
                         "training step over max(N, 4 x workers) batches, every count of "
                         "--workers, one process) and measure only the best in full")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds: skip rows that would not finish in it (judged from the "
                         "time of rows of the same kind so far)")
    ap.add_argument("--dry-run", action="store_true",
                    help="10K nodes, one batch of 1024 seeds, hidden 64, 1 epoch, SAGE, "
                         "workers 0, five rows, on the CPU: checks the script")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="combine these runs' JSON into --out and print the table")
    ap.add_argument("--out", type=Path, default=None,
                    help="default benchmarks/results/gpu.json (--dry-run: "
                         "bench-results/gpu_dry_run.json)")
    ap.add_argument("--gil-profile", type=Path, default=None, metavar="DIR",
                    help="run every row's last epoch under py-spy (its GIL-holding samples per "
                         "thread, scripts/gil_profile.py; raw files in DIR): a diagnosis, "
                         "whose epoch times include py-spy's sampling")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one row, JSON to stdout
    ap.add_argument("--measure-screen", help=argparse.SUPPRESS)  # internal: one model's screen
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.screen_batches is not None and args.screen_batches < 1:
        ap.error("--screen-batches must be a positive number of batches")
    if args.measure_screen:
        hidden = int(os.environ.get(HIDDEN_ENV, args.hidden))
        baselines.finish_child(screen_here(args.measure_screen, args.graph,
                                           [int(w) for w in args.workers.split(",")],
                                           args.screen_batches, args.device, hidden))
    if args.measure:
        hidden = int(os.environ.get(HIDDEN_ENV, args.hidden))
        baselines.finish_child(measure_here(args.measure, args.graph, args.epochs,
                                            args.device, hidden))
    if args.merge:
        sys.exit(merge(args))
    if args.dry_run:
        args.nodes, args.train_seeds, args.epochs, args.hidden = 10_000, 1_024, 1, 64
        args.models, args.workers, args.device = "sage", "0", "cpu"
        args.configs = args.configs or ("vanilla-w0,expert-w0,gnnorch,gnnorch-cache,"
                                        "gnnorch-features-host")
        args.out = args.out or Path("bench-results/gpu_dry_run.json")
    args.out = args.out or Path("benchmarks/results/gpu.json")
    epochs_baseline = args.epochs_baseline or args.epochs
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device visible: run on a GPU machine, or --dry-run on the CPU")
    cuda = args.device == "cuda"
    known: list[dict] = []      # rows of earlier runs, for --worker-sweep-model
    for path in args.workers_from or []:
        known += [r for r in json.loads(path.read_text())["rows"]]
    start = time.perf_counter()
    graph = baselines.ensure_graph(args.nodes, args.seed, args.train_seeds, args.avg_degree)
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    backend = sampler_backend()
    print(f"{args.nodes} nodes, {args.train_seeds} training seeds; device {device_name}; torch "
          f"{torch.__version__}, torch_geometric {torch_geometric.__version__}, pyg-lib "
          f"{'yes' if importlib.util.find_spec('pyg_lib') else 'no'}; PyG samples with "
          f"{backend}; {len(os.sched_getaffinity(0))} cpus", flush=True)
    script = str(Path(__file__).resolve())
    os.environ[DEVICE_ENV] = args.device
    os.environ[HIDDEN_ENV] = str(args.hidden)
    if args.gil_profile is not None:
        if gil_profile_module.find_pyspy() is None:
            sys.exit("--gil-profile: py-spy not found (pip install py-spy, or $PYSPY)")
        os.environ[GIL_ENV] = str(args.gil_profile.resolve())
    models = args.models.split(",")
    if args.worker_sweep_model in models:   # the sweep first: the others take its result
        models.remove(args.worker_sweep_model)
        models.insert(0, args.worker_sweep_model)
    rows: list[dict] = []
    skipped: list[dict] = []
    screens: list[dict] = []
    sweep_best: dict = ({args.worker_sweep_model: best_workers(known, args.worker_sweep_model)}
                        if args.worker_sweep_model and known else {})

    def write(partial: bool) -> list[dict]:
        best = summarise(rows, screens)
        edges = next((r["num_edges"] for r in rows if "num_edges" in r), None)
        _write(args.out, {
            "benchmark": "bench_gpu", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": _machine(device_name),
            "workload": {"nodes": args.nodes, "num_edges": edges, "avg_degree": args.avg_degree,
                         "train_seeds": args.train_seeds, "fanout": [15, 10, 5],
                         "batch_size": 1024, "hidden": args.hidden, "epochs": args.epochs,
                         "epochs_baseline": epochs_baseline, "dry_run": args.dry_run,
                         "rewrite_decisions": "measured afresh in every gnnorch row (an empty "
                                              "GNNORCH_CACHE_DIR each)"},
            "worker_sweep": {"model": args.worker_sweep_model, "workers": args.workers,
                             "best": sweep_best, "screen_batches": args.screen_batches},
            "partial": partial, "best": best, "acceptance": acceptance(rows), "rows": rows,
            "screens": screens, "skipped": skipped})
        return best

    def fresh(config: str, epochs: int) -> dict:
        """One row in a fresh interpreter (a crash is recorded, the other rows still run)."""
        if _family(config.split("/")[1]) == "gnnorch":   # no measured rewrite decisions
            os.environ["GNNORCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="gnnorch-bench-")
        load, began = os.getloadavg(), time.perf_counter()
        try:
            row = baselines.run_fresh(script, config, graph, epochs, sys.executable)
        except RuntimeError as exc:
            row = {"config": config, "model": config.split("/")[0], "error": str(exc)[-3000:]}
        row["row_wall_seconds"] = time.perf_counter() - began
        row["loadavg_before"], row["loadavg_after"] = load, os.getloadavg()
        return row

    def over_budget(config: str, name: str, family: str) -> bool:
        if args.time_budget is None:
            return False
        same = ([r["row_wall_seconds"] for r in rows if r["config"].endswith("/" + name)]
                or [r["row_wall_seconds"] for r in rows
                    if _family(r["config"].split("/")[1]) == family])
        left = args.time_budget - (time.perf_counter() - start)
        if max(same, default=0.0) <= left and left > 0:
            return False
        took = f", the same kind of row took {max(same):.0f} s" if same else ""
        skipped.append({"config": config,
                        "reason": f"time budget: {max(left, 0):.0f} s left{took}"})
        print(f"  {config:<34} skipped: {skipped[-1]['reason']}", flush=True)
        return True

    def screen_workers(model: str) -> dict | None:
        """`model`'s worker screen in a fresh interpreter (a failure is recorded: every
        count is then measured in full, as without a screen)."""
        began = time.perf_counter()
        cmd = [sys.executable, script, "--measure-screen", model, "--graph", str(graph),
               "--workers", args.workers, "--screen-batches", str(args.screen_batches)]
        try:
            screen = baselines.fresh_json_row(cmd, f"the {model} worker screen")
        except SystemExit as exc:   # fresh_json_row's way of naming a failed child
            screen = {"model": model, "error": str(exc)[-3000:]}
        screen["wall_seconds"] = time.perf_counter() - began
        screens.append(screen)
        write(partial=True)
        if "error" in screen:
            print(f"  {model} worker screen FAILED: {screen['error'][-600:]}", flush=True)
            return None
        for entry in screen["entries"]:
            print(f"  {entry['config']:<34} screen {entry['ms_per_batch']:8.1f} ms per batch "
                  f"({entry['timed_batches']} batches after {entry['warmup_batches']})",
                  flush=True)
        return screen["best"]

    counts = list(dict.fromkeys(int(w) for w in args.workers.split(",")))
    for model in models:
        names, source, none = names_for(args, model, rows + known)
        skipped += none
        screened: dict | None = None   # the screen's best count per family, once it ran
        for name in names:
            config = f"{model}/{name}"
            family = _family(name)
            if family in BASELINES and backend is None:
                skipped.append({"config": config, "reason": "PyG cannot sample here (neither "
                                "pyg-lib nor torch_sparse): build pyg-lib first"})
                continue
            if family in BASELINES and cuda and backend != "pyg-lib":
                skipped.append({"config": config, "reason": f"PyG would sample with {backend}, "
                                "not pyg-lib: build pyg-lib first"})
                continue
            if (family in BASELINES and args.screen_batches and source is None
                    and len(counts) > 1):
                if screened is None:   # once per model; {}: no screen, every count in full
                    screened = ({} if over_budget(f"{model}/worker-screen", "worker-screen",
                                                  "screen") else screen_workers(model) or {})
                if screened and int(name.split("-w")[1]) != screened[family]:
                    continue       # not the family's best count: the screen's entry says so
            if over_budget(config, name, family):
                continue
            row = fresh(config, epochs_baseline if family in BASELINES else args.epochs)
            if source is not None and family in BASELINES:
                row["workers_from"] = source
            if screened and family in BASELINES:
                row["workers_screen"] = ",".join(map(str, counts))
            rows.append(row)
            _print_row(row)
            write(partial=True)
        if model == args.worker_sweep_model:
            sweep_best = {model: best_workers(rows, model)}
    best = write(partial=False)
    print_table(rows, best, skipped, on_gpu=cuda)
    print(f"wrote {args.out}")
    failed = [r["config"] for r in rows if "error" in r]
    if failed:
        print(f"FAILED rows: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
