"""The cache of one training loader: its lifecycle, and what its batches carry.

`LoaderCache` is the object the loader seam holds (`LoaderState.cache`; it calls `annotate` on
each batch and `epoch_start` before each training epoch's iterator) and the `CacheManager`
dispatches to. Its status is pending -> active | off (`CacheStatus`):

* pending: the first forward of a model on one of its training batches runs exactly and is
  recorded (`Admission`); at its end the cache is admitted or turned off (`CacheWarning`);
* active: the parts made at activation work per step: the hot set and its store (`HotSet`),
  the bottom-layer swap (`BottomSwap`) and, with `overlap="thread"`, the background refresher
  (`BackgroundRefresh`);
* off: training is exact (batches are still counted for the report).
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from . import stats as stats_report
from .admission import Admission, LoaderSpec, Served
from .background import BackgroundRefresh, choose_overlap
from .hotset import HotSet
from .refresh import BatchDegrees, LayerCall
from .stats import CacheStats
from .status import CacheStatus, CacheWarning
from .store import EmbeddingStore
from .swap import BottomSwap

if TYPE_CHECKING:
    from .manager import CacheManager


@dataclasses.dataclass
class BatchInfo:
    """The cache's view of one training batch (`BatchGraph.cache`)."""

    loader: "LoaderCache"
    x: Any                 # the batch's raw features (batch.x)
    pruned: bool           # sampled with the hot set excluded at hop L-1
    _hot: tuple[Any, Tensor, Tensor, int] | None = None
    _degrees: BatchDegrees | None = None

    def degrees(self, graph: Any) -> BatchDegrees:
        """The batch's in-degrees (GCN bottom layers: for refreshes made in this batch)."""
        if self._degrees is None:
            self._degrees = BatchDegrees.of_batch(graph.n_id, graph.edge_index,
                                                  graph.num_nodes, graph.extra_degree)
        return self._degrees

    def hot(self, graph: Any, store: EmbeddingStore) -> tuple[Tensor, Tensor, int]:
        """(batch rows of `store`'s hot vertices at hop L-1, their store slots, number of hop
        L-1 rows)."""
        if self._hot is None or self._hot[0] is not store:
            layout = graph.layout
            hops = layout.num_hops
            lo, hi = layout.rows_within(hops - 2), layout.rows_within(hops - 1)
            slots = store.slots_of(graph.n_id[lo:hi].cpu())
            hit = slots >= 0
            self._hot = (store, hit.nonzero().view(-1) + lo, slots[hit], hi - lo)
        return self._hot[1], self._hot[2], self._hot[3]


class LoaderCache:
    """The cache of one training loader (see the module docstring). `reason`: why it cannot
    serve this loader at all (it starts off), or None."""

    def __init__(self, manager: "CacheManager", loader: Any, state: Any,
                 reason: str | None) -> None:
        self.manager = manager
        self.config = manager.config
        self.index: int = state.index
        self.status = CacheStatus.PENDING
        self.reason: str | None = None
        self.stats = CacheStats()
        self.spec = LoaderSpec.of(loader) if reason is None else None
        self.admission = (Admission(self.spec, self.config, self.stats, manager.seed(self.index))
                          if self.spec is not None else None)
        self.workers = 0                  # the current epoch's loader workers
        self.epoch_pruned = False         # the pruning mask the workers copied at its start
        # made at activation
        self.served: Served | None = None
        self.hot: HotSet | None = None
        self.background: BackgroundRefresh | None = None
        self.swap: BottomSwap | None = None
        if reason is not None:
            self.turn_off(reason)

    @property
    def store(self) -> EmbeddingStore | None:
        """The live hot set's rows (None before activation)."""
        return self.hot.store if self.hot is not None else None

    # -- lifecycle ------------------------------------------------------------------------
    def turn_off(self, reason: str) -> None:
        self.status, self.reason = CacheStatus.OFF, reason
        if self.admission is not None:
            self.admission.reset()
        warnings.warn(f"gnnorch cache: {reason}; training runs exactly (no cache)",
                      CacheWarning, stacklevel=2)

    def inspects(self, model: Any) -> bool:
        """Whether `model`'s forward is the one admission is recording."""
        return (self.status is CacheStatus.PENDING and self.admission is not None
                and self.admission.candidate is model)

    def record(self, call: Any) -> None:
        """A layer call (`HookedCall`) of a forward on a training batch while pending."""
        if self.admission is not None:
            self.admission.record(call)

    def validate(self, model: Any, calls: int, graph: Any, unpatched: LayerCall) -> None:
        """After the model's first forward on a training batch: admit and activate the cache,
        or turn it off (agreed over ranks)."""
        assert self.admission is not None
        outcome = self.admission.decide(model, calls, graph, unpatched, self.manager.agree)
        if isinstance(outcome, str):
            self.turn_off(outcome)
            return
        degrees = graph.cache.degrees(graph) if outcome.degree_fix else None
        self._activate(outcome, degrees, unpatched)

    def _activate(self, served: Served, degrees: BatchDegrees | None,
                  unpatched: LayerCall) -> None:
        """Choose the hot set, fill its store, start pruning (and the background refresher)."""
        assert self.spec is not None
        start = time.perf_counter()
        seed = self.manager.seed(self.index)
        self.served = served
        hot = HotSet(self.spec, self.config, served, self.stats, seed)
        overlap = choose_overlap(self.config, self.manager.trainer_cores(), self.stats.info)
        hot.install(hot.initial, self.manager.steps, degrees)
        self.hot = hot
        if overlap == "thread":
            self.background = BackgroundRefresh(self.spec, self.config, served, hot,
                                                self.stats, seed, unpatched,
                                                self.manager.pool)
        self.swap = BottomSwap(self.config, served, hot, self.background, self.stats, degrees)
        self.status = CacheStatus.ACTIVE
        self.stats.seconds["setup"] = time.perf_counter() - start

    def _switch_ratio(self, ratio: float) -> None:
        assert self.hot is not None and self.swap is not None
        if self.background is not None:
            self.background.drop()   # it would write the old store
        self.hot.switch_ratio(ratio, self.manager.steps, self.swap.last_degrees)

    # -- the loader seam ------------------------------------------------------------------
    def epoch_start(self, loader: Any) -> None:
        """A training epoch's iterator is about to be created (the interceptor calls this)."""
        if self.hot is not None and self.hot.pending_ratio is not None:
            self._switch_ratio(self.hot.pending_ratio)
            self.hot.pending_ratio = None
        self.workers = int(getattr(loader, "num_workers", 0) or 0)
        self.epoch_pruned = self.hot is not None and self.hot.exclusion_on

    def pruned_now(self) -> bool:
        """Whether the batch just drawn was sampled with the hot set excluded: in-process
        sampling sees the sampler's current exclusion; workers got a copy at the epoch start."""
        if self.workers > 0:
            return self.epoch_pruned
        return self.hot is not None and self.hot.exclusion_on

    def annotate(self, graph: Any, batch: Any) -> None:
        """A batch was drawn (`graph`: its `BatchGraph`): put a `BatchInfo` on it, count it
        and, on a pruned batch, give GCN layers the pruned vertices' degrees."""
        info = BatchInfo(self, getattr(batch, "x", None), self.pruned_now())
        graph.cache = info
        layout = graph.layout
        if layout is None:
            return
        c = self.stats.counters
        c["batches"] += 1
        c["sampled_nodes"] += layout.num_nodes
        c["sampled_edges"] += layout.num_edges
        if self.status is not CacheStatus.ACTIVE or not info.pruned or graph.n_id is None:
            return
        assert self.hot is not None and self.served is not None
        rows, slots, _ = info.hot(graph, self.hot.store)
        size = self.hot.extra_size[slots]
        c["pruned_batches"] += 1
        c["pruned_vertices"] += rows.numel()
        c["pruned_edges"] += int(size.sum())
        if self.served.degree_fix:
            extra = torch.zeros(graph.num_nodes)
            extra[rows] = size.to(extra.dtype)
            graph.extra_degree = extra

    # -- per step -------------------------------------------------------------------------
    def serves(self, call: Any) -> bool:
        """Whether `call` (`HookedCall`) is the served model's bottom layer call."""
        served = self.served
        return (self.status is CacheStatus.ACTIVE and served is not None and call.index == 0
                and call.model is served.model() and call.layer is served.layer)

    def bottom(self, call: Any, info: BatchInfo) -> Any:
        """The served bottom layer's call on a training batch."""
        assert self.swap is not None
        return self.swap.bottom(call, info, self.manager.steps)

    def after_step(self, step: int) -> None:
        """Optimizer step `step` done: launch the background refresh of the rows due next."""
        if self.status is CacheStatus.ACTIVE and self.background is not None:
            assert self.swap is not None
            self.background.after_step(step, self.swap.last_degrees)

    def on_batch_end(self, timer: Any) -> None:
        """After a training step of this loader: feed the hot-ratio search."""
        if self.status is not CacheStatus.ACTIVE or self.hot is None:
            return
        ratio = self.hot.observe(timer)
        if ratio is None:
            return
        if self.workers > 0:
            self.hot.pending_ratio = ratio  # workers sample the rest of this epoch as they are
        else:
            self._switch_ratio(ratio)

    def close(self) -> None:
        if self.background is not None:
            self.background.drop()

    def report(self) -> dict:
        return stats_report.report(self)
