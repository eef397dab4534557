"""Integration of the historical-embedding cache with the run: loaders, the layer seam, steps.

One `CacheManager` per rank and run (installed by `intercept.session` when `Features.cache` is
on). It is

* told of every training NeighborLoader (`attach`) and of every batch it yields (`annotate`,
  which puts a `BatchInfo` on the seam's `BatchGraph`), and of each training epoch's start;
* the layer seam's hook (`on_layer`, `on_forward_end`): on a training batch of a loader whose
  cache is active, the bottom layer's output rows of hot vertices at the last expanded hop are
  replaced by stored rows (no gradient flows into them), after the rows the forward uses have
  been checked against the staleness bound and refreshed where needed;
* an optimizer step post-hook: versions count optimizer steps (of the optimizer(s) holding the
  bottom layer's parameters); with `overlap="thread"`, each step launches the refresh of the rows
  due next in a background thread.

Per loader (`LoaderCache`), the lifecycle is pending -> active | off. The first forward of a
model on one of the loader's training batches runs exactly and is inspected: its bottom layer
(the first MessagePassing call on the batch's edge_index) must read the raw features, be of a
known type and take no edge-aligned extras; the model must make one layer call per sampled hop
(K = L >= 2), every layer must be pruning-safe, and a one-off check on that batch must find the
refresh computation equal to the layer's own output for vertices whose in-edges all come from
the last hop. Then the hot set is chosen, the store is filled, and the loader's sampler stops
expanding hot vertices at hop L-1 (`FastNeighborSampler.set_exclusion`). Otherwise the cache
stays off with a `CacheWarning` saying why, and training is exact. With p > 1 ranks the
decision is agreed (all ranks activate or none).

Evaluation loaders are never attached: their batches run the exact model.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import time
import warnings
import weakref
from typing import Any, Iterator

import torch
from torch import Tensor

from .auto import RatioSearch, ratio_grid
from .config import CacheConfig
from .hotness import count_hotness, estimate_hotness, in_degree, top_fraction
from .refresh import (BatchDegrees, CachedLinearRows, InterleaveRows, Neighbourhoods,
                      Refresher, call_layer, linear_parts)
from .store import EmbeddingStore, StalenessError

VERIFY_RTOL = 1e-4
VERIFY_ATOL = 1e-5
VERIFY_VERTICES = 64


class CacheWarning(UserWarning):
    """The historical-embedding cache is off for a loader or model; training runs exactly."""


def _cacheable_types() -> tuple[type, ...]:
    """Bottom layers whose output for v depends only on v's and its in-neighbours' raw features
    (what a refresh graph reproduces)."""
    from torch_geometric import nn as pyg_nn

    names = ("SAGEConv", "GCNConv", "GATConv", "GATv2Conv", "GINConv", "GraphConv")
    return tuple(getattr(pyg_nn, n) for n in names if isinstance(getattr(pyg_nn, n, None), type))


def _cold_types() -> tuple[type, ...]:
    """Bottom layers computed on their cold destination rows only (bipartite (x_src, x_dst)
    layers; the hot rows are not transformed at all)."""
    from torch_geometric import nn as pyg_nn

    names = ("SAGEConv", "GATConv", "GATv2Conv", "GINConv", "GraphConv")
    return tuple(getattr(pyg_nn, n) for n in names if isinstance(getattr(pyg_nn, n, None), type))


def _looping_types() -> tuple[type, ...]:
    """Layers that add self-loops pairing x_src[i] with x_dst[i]."""
    from torch_geometric import nn as pyg_nn

    return tuple(getattr(pyg_nn, n) for n in ("GATConv", "GATv2Conv")
                 if isinstance(getattr(pyg_nn, n, None), type))


def _pruning_safe_types() -> tuple[type, ...]:
    """Layers whose output rows for the vertices above the last hop do not change when hot
    vertices of hop L-1 lose their in-edges (GCNConv: with the degree correction)."""
    return _cacheable_types()


@dataclasses.dataclass
class _Call:
    """What the one-off inspection keeps of one layer call of the first forward."""

    index: int
    layer: Any
    extras: list[str]
    raw_input: bool


@dataclasses.dataclass
class BatchInfo:
    """The cache's view of one training batch (`BatchGraph.cache`)."""

    loader: "LoaderCache"
    x: Any                 # the batch's raw features (batch.x)
    pruned: bool           # sampled with the hot set excluded at hop L-1
    _hot: tuple[Any, Tensor, Tensor, int] | None = None
    _degrees: BatchDegrees | None = None

    def degrees(self, graph: Any) -> BatchDegrees | None:
        """GCN bottom layers: the batch's in-degrees, for refreshes made in this batch."""
        if not self.loader.degree_fix:
            return None
        if self._degrees is None:
            self._degrees = BatchDegrees.of_batch(graph.n_id, graph.edge_index,
                                                  graph.num_nodes, graph.extra_degree)
        return self._degrees

    def hot(self, graph: Any) -> tuple[Tensor, Tensor, int]:
        """(batch rows of hot vertices at hop L-1, their store slots, number of hop L-1 rows)."""
        store = self.loader.store
        if self._hot is None or self._hot[0] is not store:
            layout = graph.layout
            hops = layout.num_hops
            lo, hi = layout.rows_within(hops - 2), layout.rows_within(hops - 1)
            slots = store.slots_of(graph.n_id[lo:hi].cpu())
            hit = slots >= 0
            self._hot = (store, hit.nonzero().view(-1) + lo, slots[hit], hi - lo)
        return self._hot[1], self._hot[2], self._hot[3]


class LoaderCache:
    """The cache of one training loader (see the module docstring for its lifecycle)."""

    def __init__(self, manager: "CacheManager", loader: Any, state: Any, reason: str | None):
        self.manager = manager
        self.config: CacheConfig = manager.config
        self.index = state.index
        self.status = "pending"
        self.reason: str | None = None
        self.sampler = getattr(loader, "node_sampler", None)
        self.persistent = bool(getattr(loader, "persistent_workers", False))
        self.workers = 0
        self.exclusion_on = False
        self.epoch_pruned = False
        self.data = getattr(loader, "data", None)
        self.store: EmbeddingStore | None = None
        self.model: Any = None               # weakref to the bound model
        self.layer: Any = None               # its bottom layer
        self.layers = None
        self.degree_fix = False
        self.aggregate = False               # store="aggregate" (GCN)
        self.extra_size: Tensor | None = None
        self.sync: Refresher | None = None   # trainer-thread refresher
        self.bg: Refresher | None = None     # background refresher (overlap="thread")
        self._job: tuple | None = None
        self._last_degrees: BatchDegrees | None = None  # GCN: the latest batch's degrees
        self._candidate: Any = None
        self._calls: list[_Call] = []
        self._first: tuple[Tensor, Tensor] | None = None
        self.search: RatioSearch | None = None
        self._pending_ratio: float | None = None
        self.counters = dict(forwards=0, lookups=0, hits=0, batches=0, sampled_nodes=0,
                             sampled_edges=0, pruned_batches=0, pruned_vertices=0,
                             pruned_edges=0, refreshes=0, refresh_rows=0,
                             background_refreshes=0, background_rows=0, cold_rows=0,
                             skipped_rows=0)
        self.seconds = dict(setup=0.0, hotness=0.0, refresh=0.0, background=0.0, wait=0.0)
        self.max_staleness = 0
        self.info: dict[str, Any] = {}
        if reason is None:
            self.fanouts = list(self.sampler.num_neighbors.get_mapped_values())
            self.hops = len(self.fanouts)
            self.seeds = loader.input_data.node
            if self.seeds is None:
                self.seeds = torch.arange(self.data.num_nodes)
            self.batch_size = int(loader.batch_size or 1)
        else:
            self.turn_off(reason)

    # -- lifecycle ------------------------------------------------------------------------
    def turn_off(self, reason: str) -> None:
        was_active = self.status == "active"
        self.status, self.reason = "off", reason
        self._candidate, self._calls, self._first = None, [], None
        if was_active or self.exclusion_on:
            self.sampler.set_exclusion(None)
            self.exclusion_on = False
        warnings.warn(f"gnnorch cache: {reason}; training runs exactly (no cache)",
                      CacheWarning, stacklevel=2)

    def epoch_start(self, loader: Any) -> None:
        """A training epoch's iterator is about to be created (the interceptor calls this)."""
        if self._pending_ratio is not None:
            self._switch_ratio(self._pending_ratio)
            self._pending_ratio = None
        self.workers = int(getattr(loader, "num_workers", 0) or 0)
        self.epoch_pruned = self.exclusion_on

    def pruned_now(self) -> bool:
        """Whether the batch just drawn was sampled with the hot set excluded: in-process
        sampling sees the sampler's current exclusion; workers got a copy at the epoch start."""
        return self.epoch_pruned if self.workers > 0 else self.exclusion_on

    def annotate(self, graph: Any, batch: Any) -> None:
        info = BatchInfo(self, getattr(batch, "x", None), self.pruned_now())
        graph.cache = info
        layout = graph.layout
        if layout is None:
            return
        c = self.counters
        c["batches"] += 1
        c["sampled_nodes"] += layout.num_nodes
        c["sampled_edges"] += layout.num_edges
        if self.status != "active" or not info.pruned or graph.n_id is None:
            return
        rows, slots, _ = info.hot(graph)
        size = self.extra_size[slots]
        c["pruned_batches"] += 1
        c["pruned_vertices"] += rows.numel()
        c["pruned_edges"] += int(size.sum())
        if self.degree_fix:
            extra = torch.zeros(graph.num_nodes)
            extra[rows] = size.to(extra.dtype)
            graph.extra_degree = extra

    # -- the first forward: inspection ----------------------------------------------------
    def record(self, call: Any) -> None:
        if self._candidate is None:
            self._candidate = call.model
        if call.model is not self._candidate:
            return
        extras = [f"argument {i + 2}" for i, v in enumerate(call.args[2:]) if v is not None]
        extras += [k for k, v in call.kwargs.items() if k not in ("x", "edge_index")
                   and v is not None and v is not False]
        raw = False
        info = call.batch.cache
        if call.index == 0 and isinstance(call.x, Tensor) and isinstance(info.x, Tensor):
            raw = call.x is info.x or (call.x.shape == info.x.shape and torch.equal(
                call.x.to(info.x.device), info.x))
            self._first = (call.x, call.edge_index)
        self._calls.append(_Call(call.index, call.layer, extras, raw))

    def validate(self, model: Any, calls: int, graph: Any) -> None:
        """Decide, after the model's first forward on a training batch, whether the cache can
        serve it; activate or turn off (agreed over ranks)."""
        reason = self._structural_reason(calls, graph)
        detail = None
        if reason is None:
            reason, detail = self._verify(graph)
        reason = self.manager.agree(reason)
        if reason is not None:
            self.turn_off(reason)
            return
        self.info["verify_max_abs_diff"] = detail
        self.model = weakref.ref(model)
        self.layers = calls
        self._last_degrees = graph.cache.degrees(graph)
        self._activate()

    def _structural_reason(self, calls: int, graph: Any) -> str | None:
        recorded = sorted(self._calls, key=lambda c: c.index)
        if graph is None or graph.layout is None or graph.n_id is None:
            return "the batch has no hop layout or node ids"
        if calls != self.hops:
            return (f"the model makes {calls} MessagePassing calls on a batch but the loader "
                    f"samples {self.hops} hops; the cache needs one layer per hop")
        if calls < 2:
            return "a one-layer model's bottom layer is its output layer"
        if not recorded or recorded[0].index != 0:
            return "the bottom layer call was not seen"
        first = recorded[0]
        self.layer = first.layer
        name = type(first.layer).__name__
        if not isinstance(first.layer, _cacheable_types()):
            return (f"bottom layer {name} is not one the cache knows how to recompute "
                    f"(SAGEConv, GCNConv, GATConv, GATv2Conv, GINConv, GraphConv)")
        if getattr(first.layer, "flow", "source_to_target") != "source_to_target":
            return f"bottom layer {name} uses flow='target_to_source'"
        if first.extras:
            return (f"bottom layer {name} is called with {', '.join(first.extras)}; the cache "
                    f"recomputes it from (x, edge_index) only")
        from torch_geometric.nn import GCNConv

        if isinstance(first.layer, GCNConv) and first.layer.cached:
            return "bottom layer GCNConv(cached=True) caches one graph's normalisation"
        if not first.raw_input:
            return (f"bottom layer {name} does not read the batch's raw features (batch.x); "
                    f"the cache recomputes it from data.x")
        unsafe = [type(c.layer).__name__ for c in recorded
                  if not isinstance(c.layer, _pruning_safe_types())]
        if unsafe:
            return (f"layer(s) {', '.join(unsafe)} may depend on the in-degree of pruned "
                    f"vertices; pruned sampling would change them")
        self.degree_fix = any(isinstance(c.layer, GCNConv) and c.layer.normalize
                              for c in recorded)
        gcn_bottom = isinstance(first.layer, GCNConv) and first.layer.normalize
        store = self.config.store
        if store == "auto":
            store = "aggregate" if gcn_bottom else "output"
        if store == "aggregate" and not gcn_bottom:
            return (f"store='aggregate' needs a GCNConv(normalize=True) bottom layer, not "
                    f"{name}")
        self.aggregate = store == "aggregate"
        self.info["store"] = store
        if self.data is None or not isinstance(getattr(self.data, "x", None), Tensor):
            return "the loader's data has no raw feature matrix data.x"
        return None

    def _verify(self, graph: Any) -> tuple[str | None, float | None]:
        """The refresh computation vs the layer's own output on the first (unpruned) batch, for
        hop L-1 vertices, on their in-edges in that batch (in eval mode, no gradient)."""
        x, edge_index = self._first
        layout = graph.layout
        lo, hi = layout.rows_within(self.hops - 2), layout.rows_within(self.hops - 1)
        src, dst = edge_index[0].cpu(), edge_index[1].cpu()
        into = (dst >= lo) & (dst < hi)
        has = torch.zeros(graph.num_nodes, dtype=torch.bool)
        has[dst[into]] = True
        test = has.nonzero().view(-1)[:VERIFY_VERTICES]
        hood = Neighbourhoods(self.sampler.colptr, self.sampler.row, self.fanouts[-1],
                              bool(self.sampler.replace), False, self.manager.seed(self.index))
        self.sync = Refresher(self.layer, self.data.x, hood, self.config.chunk_rows,
                              self.aggregate)
        self.sync.snapshot()
        if test.numel() == 0:
            return None, None
        n_id = graph.n_id.cpu()
        keep = torch.isin(dst, test) & into
        local = torch.full((graph.num_nodes,), -1, dtype=torch.long)
        local[test] = torch.arange(test.numel())
        degrees = graph.cache.degrees(graph) if self.degree_fix else None
        mine = self.sync.compute_on(n_id[test], n_id[src[keep]], local[dst[keep]], degrees)
        with torch.no_grad():
            ref = call_layer(self.sync.shadow, x, edge_index)[test.to(x.device)]
        if not (isinstance(ref, Tensor) and ref.shape == mine.shape):
            return "the bottom layer's output is not one row per vertex", None
        diff = float((ref - mine.to(ref.dtype)).abs().max()) if ref.numel() else 0.0
        if not torch.allclose(ref, mine.to(ref.dtype), rtol=VERIFY_RTOL, atol=VERIFY_ATOL):
            return (f"recomputing bottom layer {type(self.layer).__name__} from in-neighbours "
                    f"does not reproduce its output on a batch (max abs diff {diff:.3g})"), diff
        return None, diff

    def _activate(self) -> None:
        start = time.perf_counter()
        cfg = self.config
        colptr, row = self.sampler.colptr, self.sampler.row
        t0 = time.perf_counter()
        if cfg.hotness == "count":
            gen = torch.Generator().manual_seed(self.manager.seed(self.index) + 1)
            self.scores = count_hotness(colptr, row, self.seeds, self.fanouts, self.batch_size,
                                        cfg.count_fraction, bool(self.sampler.replace), gen)
        else:
            self.scores = estimate_hotness(colptr, row, self.seeds, self.fanouts,
                                           self.batch_size, bool(self.sampler.replace))
        self.seconds["hotness"] = time.perf_counter() - t0
        if cfg.hot_ratio == "auto":
            self.search = RatioSearch(ratio_grid(cfg.max_hot_ratio))
            ratio = self.search.ratio
        else:
            ratio = float(cfg.hot_ratio)
        hot = top_fraction(self.scores, ratio)
        deg = in_degree(colptr)[hot]
        k = self.fanouts[-1]
        sampled = deg.clamp_max(k) if k >= 0 else deg
        full = cfg.refresh == "full" or k < 0 or (
            cfg.refresh == "auto" and float(deg.sum()) <= cfg.full_factor * float(sampled.sum()))
        self.sync.hood.full = full
        parts = linear_parts(self.layer) if not self.aggregate else None
        if cfg.gradient != "none" and parts is not None:
            self.sync.linear = parts[2]
        self.info["gradient"] = ("exact (aggregate rows)" if self.aggregate else
                                 "linear" if self.sync.linear is not None else "none")
        self.info["refresh_neighbourhood"] = "full" if full else f"sample {k}"
        overlap = cfg.overlap
        if overlap == "auto":
            cores = self.manager.trainer_cores()
            overlap = "thread" if cores >= cfg.overlap_min_cores else "off"
            self.info["overlap_reason"] = (f"{cores} trainer core(s) "
                                           f"{'>=' if overlap == 'thread' else '<'} "
                                           f"overlap_min_cores={cfg.overlap_min_cores}")
        if overlap == "thread" and cfg.staleness == 0:
            overlap = "off"
            self.info["overlap_reason"] = "staleness 0: every row is refreshed right before use"
        self.info["overlap"] = overlap
        self._install_store(hot)
        if overlap == "thread":
            hood = Neighbourhoods(colptr, row, k, bool(self.sampler.replace), full,
                                  self.manager.seed(self.index) + 2)
            self.bg = Refresher(self.layer, self.data.x, hood, cfg.chunk_rows, self.aggregate)
            self.bg.snapshot()
            self.bg.linear = self.sync.linear
            self.bg.compute(self.store.hot_ids[:1])  # first call in the trainer thread
            self.stream = (torch.cuda.Stream(device=self.bg.device)
                           if self.bg.device.type == "cuda" else None)
        self.status = "active"
        self.seconds["setup"] = time.perf_counter() - start

    def _install_store(self, hot: Tensor) -> None:
        """Make `hot` the hot set: a new store (rows kept for vertices hot before), filled now,
        and the sampler's exclusion mask."""
        old = self.store
        store = EmbeddingStore(self.sampler.colptr.numel() - 1, hot)
        if old is not None and old.rows is not None:
            both = old.mask & store.mask
            ids = both.nonzero().view(-1)
            if ids.numel():
                store.write(store.slots_of(ids), old.read(old.slots_of(ids)),
                            old.version[old.slots_of(ids)],
                            old.read_aux(old.slots_of(ids)) if old.aux is not None else None)
        self._drop_job()
        self.store = store
        self.extra_size = self.sync.hood.size(store.hot_ids)
        missing = (store.version < 0).nonzero().view(-1)
        if missing.numel():
            self._refresh_now(missing, self.manager.steps, self._last_degrees)
        # an empty hot set (hot_ratio="auto" at 0): the exact fast path, nothing pruned
        self.exclusion_on = len(store) > 0
        self.sampler.set_exclusion(store.mask if self.exclusion_on else None, {self.hops - 1})
        self.info["hot_ratio"] = len(store) / store.num_nodes

    def _switch_ratio(self, ratio: float) -> None:
        self._install_store(top_fraction(self.scores, ratio))

    # -- per step -------------------------------------------------------------------------
    def bottom(self, call: Any, info: BatchInfo) -> Any:
        """The bottom layer's call on a training batch: cold rows computed, hot rows of the last
        expanded hop from the store (no gradient flows into them)."""
        rows, slots, last = info.hot(call.batch)
        c = self.counters
        c["forwards"] += 1
        c["lookups"] += last
        c["hits"] += rows.numel()
        degrees = info.degrees(call.batch)
        self._last_degrees = degrees
        self._ensure_fresh(slots, degrees)
        if self.aggregate:  # GCN rows finished with the current weights: exact, with gradient
            out = call.run()
            if rows.numel():
                agg = self.store.read(slots).to(device=out.device, dtype=out.dtype)
                out = out.index_add(0, rows.to(out.device), call.layer.lin(agg))
            return out
        if rows.numel() and call.mode == "trim" and isinstance(call.layer, _cold_types()):
            bounds = call.batch.layout.bounds(0, call.state.layers)
            if bounds is not None:
                return self._cold_call(call, rows, slots, bounds, info.pruned)
        out = call.run()
        if rows.numel():
            values = self._hot_values(call, rows, slots, out.dtype, out.device)
            out = out.index_put((rows.to(out.device),), values)
        return out

    def _hot_values(self, call: Any, rows: Tensor, slots: Tensor, dtype: torch.dtype,
                    device: torch.device) -> Tensor:
        """The stored rows; with gradient="linear" they carry the weights' exact gradient."""
        values = self.store.read(slots).to(device=device, dtype=dtype)
        if self.sync.linear is None or not torch.is_grad_enabled():
            return values
        lin_a, lin_r, _ = linear_parts(call.layer)
        agg = self.store.read_aux(slots).to(device=device, dtype=dtype)
        root = call.x[rows.to(call.x.device)].to(dtype) if lin_r is not None else None
        return CachedLinearRows.apply(values, agg, root, lin_a.weight, lin_a.bias,
                                      lin_r.weight if lin_r is not None else None)

    def _cold_call(self, call: Any, rows: Tensor, slots: Tensor, bounds: Any,
                   pruned: bool) -> Tensor:
        """The trimmed bottom layer on its *cold* destination rows only, hot rows from the
        store: what the seam's trimmed call computes, without transforming the hot rows.

        Destinations are x[cold] (x_src stays x[:num_src]); layers that pair x_dst[i] with
        x_src[i] through self-loops (GAT) get explicit self-loop edges instead."""
        layer, x, batch = call.layer, call.x, call.batch
        device = x.device
        num_dst = bounds.num_dst
        rows = rows.to(device)
        cold_mask = torch.ones(num_dst, dtype=torch.bool, device=device)
        cold_mask[rows] = False
        cold = cold_mask.nonzero().view(-1)
        position = torch.full((num_dst,), -1, dtype=torch.long, device=device)
        position[cold] = torch.arange(cold.numel(), device=device)
        src, dst = call.edge_index[0], call.edge_index[1]
        if num_dst < batch.num_nodes - batch.layout.nodes[-1]:  # not the bottom of K = L hops
            keep = dst < num_dst
            src, dst = src[keep], dst[keep]
        if not pruned:  # a pruned batch has no edges into hot rows of the last expanded hop
            keep = cold_mask[dst]
            src, dst = src[keep], dst[keep]
        dst = position[dst]
        loops = getattr(layer, "add_self_loops", False) and isinstance(layer, _looping_types())
        if loops:
            real = src != cold[dst]
            src = torch.cat([src[real], cold])
            dst = torch.cat([dst[real], torch.arange(cold.numel(), device=device)])
            layer.add_self_loops = False
        try:
            computed = layer((x[:bounds.num_src], x[cold]), torch.stack([src, dst]))
        finally:
            if loops:
                layer.add_self_loops = True
        values = self._hot_values(call, rows, slots, computed.dtype, device)
        out = InterleaveRows.apply(computed, values, cold, rows)
        self.counters["cold_rows"] += cold.numel()
        self.counters["skipped_rows"] += rows.numel()
        if call.state.compact:
            return out
        pad = [0, 0] * (out.dim() - 1) + [0, batch.num_nodes - num_dst]
        return torch.nn.functional.pad(out, pad)

    def _ensure_fresh(self, slots: Tensor, degrees: BatchDegrees | None) -> None:
        step, bound = self.manager.steps, self.config.staleness
        self._install_job(wait=False)
        if slots.numel() == 0:
            return
        stale = self.store.stale(slots, step, bound)
        if stale.numel() and self._job is not None:
            self._install_job(wait=True)
            stale = self.store.stale(slots, step, bound)
        if stale.numel():
            if self.config.debug:
                age = int(self.store.staleness(stale, step).max())
                raise StalenessError(
                    f"a forward at optimizer step {step} would use {stale.numel()} cached "
                    f"row(s) up to {age} steps old (bound {bound})")
            self._refresh_now(stale, step, degrees)
        age = int(self.store.staleness(slots, step).max())
        self.max_staleness = max(self.max_staleness, age)
        if age > bound:  # cannot happen: refreshed above
            raise StalenessError(f"staleness {age} > bound {bound} after refresh")

    def _refresh_now(self, slots: Tensor, step: int, degrees: BatchDegrees | None) -> None:
        start = time.perf_counter()
        self.sync.snapshot()
        values, aux = self.sync.compute(self.store.hot_ids[slots], degrees)
        self.store.write(slots, values, step, aux)
        self.counters["refreshes"] += 1
        self.counters["refresh_rows"] += slots.numel()
        self.seconds["refresh"] += time.perf_counter() - start

    def after_step(self, step: int) -> None:
        """Optimizer step done (weights now at version `step`): launch the background refresh
        of the rows that expire next (the oldest 1/(S+1) of the store, at least every row that
        would be over the bound at the next forward)."""
        if self.status != "active" or self.bg is None:
            return
        # one job at a time (it owns the background snapshot): the previous one must be in
        # before the next snapshot, or the schedule would skip a step and rows would expire
        self._install_job(wait=True)
        bound = self.config.staleness
        store = self.store
        expiring = int((store.version < step + 1 - bound).sum())
        count = max(expiring, math.ceil(len(store) / (bound + 1)))
        slots = store.oldest(count)
        slots = slots[store.version[slots] < step]
        if slots.numel() == 0:
            return
        self.bg.snapshot()
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.bg.device))
        ids = store.hot_ids[slots]
        future = self.manager.pool().submit(self._background, ids, self._last_degrees)
        self._job = (future, slots, step, store)

    def _background(self, ids: Tensor,
                    degrees: BatchDegrees | None) -> tuple[Tensor, float, Any]:
        start = time.perf_counter()
        event = None
        with torch.no_grad():
            if self.stream is not None:
                with torch.cuda.stream(self.stream):
                    values = self.bg.compute(ids, degrees)
                    event = torch.cuda.Event()
                    event.record(self.stream)
            else:
                values = self.bg.compute(ids, degrees)
        return values, time.perf_counter() - start, event  # values: (rows, aux)

    def _install_job(self, wait: bool) -> None:
        if self._job is None:
            return
        future, slots, version, store = self._job
        if not wait and not future.done():
            return
        start = time.perf_counter()
        (values, aux), seconds, event = future.result()
        if wait:
            self.seconds["wait"] += time.perf_counter() - start
        self._job = None
        self.seconds["background"] += seconds
        if event is not None:
            torch.cuda.current_stream(self.bg.device).wait_event(event)
        if store is not self.store:
            return
        newer = store.version[slots] < version
        store.write(slots[newer], values[newer.to(values.device)], version,
                    aux[newer] if aux is not None else None)
        self.counters["background_refreshes"] += 1
        self.counters["background_rows"] += int(newer.sum())

    def _drop_job(self) -> None:
        if self._job is not None:
            try:
                self._job[0].result()
            finally:
                self._job = None

    def on_batch_end(self, timer: Any) -> None:
        """After a training step of this loader: feed the hot-ratio search."""
        if self.search is None or self.search.done or self.status != "active":
            return
        ends = timer.batch_ends
        seconds = ends[-1] - (ends[-2] if len(ends) > 1 else timer.start)
        ratio = self.search.observe(seconds)
        if ratio is None:
            return
        if self.workers > 0:
            self._pending_ratio = ratio   # workers sample the rest of this epoch as they are
        else:
            self._switch_ratio(ratio)

    def close(self) -> None:
        self._drop_job()

    # -- report ---------------------------------------------------------------------------
    def stats(self) -> dict:
        c = dict(self.counters)
        out: dict[str, Any] = {"loader": self.index, "status": self.status,
                               "reason": self.reason}
        if self.status == "off" and self.store is None:
            return out
        store = self.store
        out.update({
            "layer": type(self.layer).__name__ if self.layer is not None else None,
            "layers": self.layers,
            "hops": getattr(self, "hops", None),
            "fanouts": getattr(self, "fanouts", None),
            "staleness_bound": self.config.staleness,
            # aggregate rows do not depend on the weights: only their neighbour sample ages
            "max_staleness_seen": 0 if self.aggregate else self.max_staleness,
            "max_sample_age_seen": self.max_staleness,
            "hot_vertices": len(store) if store is not None else 0,
            "hit_rate": c["hits"] / c["lookups"] if c["lookups"] else 0.0,
            "hits": c["hits"], "lookups": c["lookups"], "forwards": c["forwards"],
            "batches": c["batches"],
            "sampled_vertices": c["sampled_nodes"], "sampled_edges": c["sampled_edges"],
            "gathered_vertices": c["sampled_nodes"],
            "pruned_batches": c["pruned_batches"],
            "pruned_vertices": c["pruned_vertices"],
            "edges_not_sampled": c["pruned_edges"],
            "sampled_edges_without_pruning": c["sampled_edges"] + c["pruned_edges"],
            "sampled_vertices_without_pruning_at_most": c["sampled_nodes"] + c["pruned_edges"],
            "refreshes": c["refreshes"], "refresh_rows": c["refresh_rows"],
            "refresh_seconds": self.seconds["refresh"],
            "background_refreshes": c["background_refreshes"],
            "background_rows": c["background_rows"],
            "background_seconds": self.seconds["background"],
            "background_wait_seconds": self.seconds["wait"],
            "refresh_gathered_vertices": sum(r.gathered for r in (self.sync, self.bg) if r),
            "refresh_edges": sum(r.edges for r in (self.sync, self.bg) if r),
            "setup_seconds": self.seconds["setup"],
            "hotness": self.config.hotness, "hotness_seconds": self.seconds["hotness"],
            "degree_correction": self.degree_fix,
            "bottom_rows_computed": c["cold_rows"],
            "bottom_rows_not_computed": c["skipped_rows"],
        })
        out.update(self.info)
        if self.search is not None:
            out["hot_ratio_search"] = {"done": self.search.done, "chosen": self.search.ratio,
                                       "trace": self.search.trace}
        return out


class CacheManager:
    """The cache of one rank's run (see the module docstring)."""

    def __init__(self, ctx: Any, config: CacheConfig) -> None:
        self.ctx = ctx
        self.config = config
        self.steps = 0
        self.loaders: list[LoaderCache] = []
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator["CacheManager"]:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(self._on_step)
        self.ctx.batch_callbacks.append(self._on_batch_end)
        try:
            yield self
        finally:
            handle.remove()
            with contextlib.suppress(ValueError):
                self.ctx.batch_callbacks.remove(self._on_batch_end)
            for lc in self.loaders:
                with contextlib.suppress(Exception):
                    lc.close()
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    # -- environment ----------------------------------------------------------------------
    def seed(self, index: int) -> int:
        return (self.ctx.seed * 1_000_003 + 7_777 + index * 101 + self.ctx.rank * 13) % 2 ** 62

    def trainer_cores(self) -> int:
        cores = getattr(self.ctx, "cores", None)
        if cores is not None:
            return len(cores.trainer_cpus)
        return int(self.ctx.plan.threads)

    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="gnnorch-cache-refresh")
        return self._pool

    def agree(self, reason: str | None) -> str | None:
        """With p > 1 ranks: the cache activates only if it can on every rank."""
        if not self.ctx.distributed:
            return reason
        import torch.distributed as dist

        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        flag = torch.tensor([0 if reason is None else 1], device=device)
        dist.all_reduce(flag)
        if reason is None and int(flag.item()) > 0:
            return "another rank could not use the cache"
        return reason

    # -- loaders --------------------------------------------------------------------------
    def attach(self, loader: Any, state: Any) -> LoaderCache:
        """A training loader was built (`state`: its `intercept.loader.LoaderState`)."""
        from ..sampling.neighbor import FastNeighborSampler

        sampler = getattr(loader, "node_sampler", None)
        reason = None
        if not isinstance(sampler, FastNeighborSampler):
            reason = (f"training loader {state.index} samples with {state.backend} "
                      f"({state.backend_reason}); pruned sampling needs gnnorch's sampler "
                      f"(sampler='auto' or 'gnnorch')")
        elif sampler.fallback_reason is not None:
            reason = f"gnnorch's sampler cannot prune {sampler.fallback_reason}"
        elif not state.directional:
            reason = "the loader's batches are not directional neighbour samples"
        elif getattr(loader, "persistent_workers", False):
            reason = ("persistent_workers=True: the pruning mask cannot reach workers that "
                      "outlive an epoch")
        elif not isinstance(getattr(getattr(loader, "data", None), "x", None), Tensor):
            reason = "the loader's data has no raw feature matrix data.x"
        lc = LoaderCache(self, loader, state, reason)
        self.loaders.append(lc)
        return lc

    # -- layer seam hooks -----------------------------------------------------------------
    def on_layer(self, call: Any) -> Any:
        info = getattr(call.batch, "cache", None)
        if not isinstance(info, BatchInfo) or not call.batch.training:
            return call.run()
        lc = info.loader
        if lc.status == "active":
            model = lc.model() if lc.model is not None else None
            if call.index == 0 and call.model is model and call.layer is lc.layer:
                return lc.bottom(call, info)
        elif lc.status == "pending":
            lc.record(call)
        return call.run()

    def on_forward_end(self, model: Any, state: Any, calls: int, graph: Any) -> None:
        info = getattr(graph, "cache", None) if graph is not None else None
        if not isinstance(info, BatchInfo) or not graph.training:
            return
        lc = info.loader
        if lc.status == "pending" and lc._candidate is model:
            lc.validate(model, calls, graph)

    # -- optimizer steps ------------------------------------------------------------------
    def _on_step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        layers = [lc.layer for lc in self.loaders if lc.status == "active"]
        if layers:
            mine = {id(p) for layer in layers for p in layer.parameters()}
            if not any(id(p) in mine for g in optimizer.param_groups for p in g["params"]):
                return
        self.steps += 1
        for lc in self.loaders:
            lc.after_step(self.steps)

    def _on_batch_end(self, timer: Any) -> None:
        for lc in self.loaders:
            if lc.index == timer.loader:
                lc.on_batch_end(timer)

    # -- report ---------------------------------------------------------------------------
    def stats(self) -> dict:
        loaders = [lc.stats() for lc in self.loaders]
        main = next((s for s in loaders if s["status"] == "active"), None) or (
            loaders[0] if loaders else {})
        out = {"enabled": True, "config": self.config.to_dict(), "optimizer_steps": self.steps,
               "loaders": loaders}
        out.update({k: v for k, v in main.items() if k not in out})
        return out
