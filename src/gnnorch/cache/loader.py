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

Which batches were pruned: a batch built by the device path carries the sampler's mask version
it was sampled with (`gnnorch.device.gather.sampled_exclusion`, set at sampling time), so one
drawn ahead of the trainer is labelled by the mask that pruned it; other batches are labelled
by the mask their sampler had when they were drawn (on demand: the current one; loader
workers: the one copied at the epoch start). Invariant: a pruned batch is served by the hot set
it was pruned with. So the mask changes only where no batch sampled with the old one is still
to come: a new hot ratio waits for the next epoch start when the epoch's batches come from
workers or are drawn ahead (`may_draw_ahead`), and nothing is drawn ahead while admission is
pending (its activation sets the first mask at the first forward).
"""
from __future__ import annotations

import time
import warnings
import concurrent.futures
from typing import TYPE_CHECKING, Any, Callable, Protocol

import torch
from torch import Tensor

from ..errors import CacheSharingError
from ..trim.batch import BatchGraph
from ..trim.state import Mode, ModelState
from .admission import Admission, LoaderSpec, ServedModel
from .background import BackgroundRefresh, choose_overlap
from .batches import AheadLookups, BatchInfo, hot_rows_ahead, pruned_with
from .config import CacheConfig
from .hotset import HotSet, StepTimes
from .refresh import BatchDegrees, FeatureSource, LayerCall
from .report import loader_report
from .stats import CacheStats
from .status import CacheStatus, CacheWarning
from .store import EmbeddingStore
from .swap import BottomSwap

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader


class LayerCallView(Protocol):
    """A layer call of a model on a batch's own edge_index, as the cache sees it (the layer
    seam's `intercept.chain.HookedCall`): `run()` computes it as the seam would without the
    cache; `unpatched(layer, *args, **kwargs)` runs a layer past the seam."""

    model: torch.nn.Module
    state: ModelState
    mode: Mode
    index: int
    layer: Any
    x: Any
    edge_index: Tensor
    args: tuple
    kwargs: dict
    batch: BatchGraph
    run: Callable[[], Any]
    unpatched: LayerCall


class CacheRank(Protocol):
    """What a loader's cache needs of the rank's cache (`cache.manager.CacheManager`): the
    config, optimizer steps so far, per-loader seeds, agreement over ranks, the trainer's
    cores and the refresh thread pool."""

    config: CacheConfig
    steps: int

    def seed(self, index: int) -> int: ...

    def agree(self, reason: str | None) -> str | None: ...

    def trainer_cores(self) -> int: ...

    def pool(self) -> concurrent.futures.ThreadPoolExecutor: ...


class LoaderCache:
    """The cache of one training loader (see the module docstring). `reason`: why it cannot
    serve this loader at all (it starts off), or None."""

    def __init__(self, manager: CacheRank, loader: NeighborLoader, index: int,
                 reason: str | None, features: FeatureSource | None = None) -> None:
        self.manager = manager
        self.config = manager.config
        self.index = index
        self.status = CacheStatus.PENDING
        self.reason: str | None = None
        self.stats = CacheStats()
        self.spec = LoaderSpec.of(loader, features) if reason is None else None
        self.admission = (Admission(self.spec, self.config, self.stats, manager.seed(self.index))
                          if self.spec is not None else None)
        self.workers = 0                  # the current epoch's loader workers
        self.epoch_pruned = False         # the pruning mask the workers copied at its start
        self.ahead = False                # this epoch's batches are drawn ahead of the trainer
        # the batches drawn ahead and not yet handed to the trainer, next first (`watch_ahead`)
        self.drawn_ahead: Callable[[], list[Any]] | None = None
        self.looked_up = AheadLookups()   # their hop L-1 lookups, until they arrive
        # made at activation
        self.served: ServedModel | None = None
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

    def inspects(self, model: torch.nn.Module) -> bool:
        """Whether `model`'s forward is the one admission is recording."""
        return (self.status is CacheStatus.PENDING and self.admission is not None
                and self.admission.candidate is model)

    def record(self, call: LayerCallView) -> None:
        """A layer call (`HookedCall`) of a forward on a training batch while pending."""
        if self.admission is not None:
            self.admission.record(call)

    def validate(self, model: torch.nn.Module, calls: int, graph: BatchGraph,
                 unpatched: LayerCall) -> None:
        """After the model's first forward on a training batch: admit and activate the cache,
        or turn it off (agreed over ranks)."""
        assert self.admission is not None
        outcome = self.admission.decide(model, calls, graph, unpatched, self.manager.agree)
        if isinstance(outcome, str):
            self.turn_off(outcome)
            return
        degrees = graph.cache.degrees(graph) if outcome.degree_fix else None
        self._activate(outcome, degrees, unpatched)

    def _activate(self, served: ServedModel, degrees: BatchDegrees | None,
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

    def _retire(self, reason: str) -> None:
        """Turn an active cache off where no pruned batch is in play: the sampler expands
        every vertex again."""
        if self.background is not None:
            self.background.drop()
        if self.hot is not None:
            self.hot.stop_pruning()
        self.turn_off(reason)

    def _switch_ratio(self, ratio: float) -> None:
        assert self.hot is not None and self.swap is not None
        if self.background is not None:
            self.background.drop()   # it would write the old store
        self.hot.switch_ratio(ratio, self.manager.steps, self.swap.last_degrees)

    # -- the loader seam ------------------------------------------------------------------
    def epoch_start(self, loader: NeighborLoader, training: bool = True) -> None:
        """An epoch's iterator is about to be created (the interceptor calls this). An epoch
        that does not train (an evaluation over this loader under ``no_grad`` / ``eval()``)
        samples unpruned: its batches reach the model without the cached rows, which stand in
        for the hot vertices' unsampled in-edges only in training forwards."""
        served = self.served.model() if self.served is not None else None
        if training and self.status is CacheStatus.ACTIVE and not getattr(served, "training",
                                                                            False):
            # a training epoch while the served model is evaluated (or gone): another model
            # trains on this loader (a sweep); its batches must not be pruned
            name = type(served).__name__ if served is not None else "the model it served"
            self._retire(f"{name} is not training as a training epoch of its loader starts: "
                         f"another model trains on this loader (one model per loader)")
        hot = self.hot if self.status is CacheStatus.ACTIVE else None
        if hot is not None and not training:
            hot.pause_pruning()
        elif hot is not None and hot.pending_ratio is not None:
            self._switch_ratio(hot.pending_ratio)
            hot.pending_ratio = None
        elif hot is not None:
            hot.resume_pruning()
        self.workers = int(getattr(loader, "num_workers", 0) or 0)
        self.epoch_pruned = self.hot is not None and self.hot.exclusion_on
        self.ahead = False

    def may_draw_ahead(self) -> bool:
        """Asked before a batch of the current training epoch is drawn ahead of the trainer
        (the device path's pipeline). False while admission is pending: its activation sets
        the sampler's mask at the first forward, so batches are drawn on demand until then
        (the same batches whatever the prefetch depth). Otherwise True, and until the next
        `epoch_start` a new hot ratio waits for it (a batch drawn ahead must be served by the
        hot set it was pruned with)."""
        if self.status is CacheStatus.PENDING:
            return False
        self.ahead = True
        return True

    def watch_ahead(self, drawn: Callable[[], list[Any]] | None) -> None:
        """The pipeline that draws this loader's batches ahead of the trainer shows them
        (`drawn()`: batches not yet handed over, next first), or stopped (None): the
        background refresher recomputes the rows they will read (`batches.hot_rows_ahead`)."""
        self.drawn_ahead = drawn

    def pruned_now(self) -> bool:
        """Whether the batch just drawn was sampled with the hot set excluded: in-process
        sampling sees the sampler's current exclusion; workers got a copy at the epoch start."""
        if self.workers > 0:
            return self.epoch_pruned
        return self.hot is not None and self.hot.exclusion_on

    def pruned(self, batch: Any) -> bool:
        """Whether `batch` was sampled with the live hot set excluded (the module docstring):
        by the mask version it carries (`batches.pruned_with`), else by `pruned_now`."""
        labelled = pruned_with(batch, self.hot)
        return self.pruned_now() if labelled is None else labelled

    def annotate(self, graph: BatchGraph, batch: Any) -> None:
        """A batch was drawn (`graph`: its `BatchGraph`): put a `BatchInfo` on it, count it
        and, on a pruned batch, give GCN layers the pruned vertices' degrees."""
        info = BatchInfo(self, getattr(batch, "x", None), self.pruned(batch),
                         self.looked_up.take(batch))
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
    def serves(self, call: LayerCallView) -> bool:
        """Whether `call` (`HookedCall`) is the served model's bottom layer call."""
        served = self.served
        return (self.status is CacheStatus.ACTIVE and served is not None and call.index == 0
                and call.model is served.model() and call.layer is served.layer)

    def foreign(self, call: LayerCallView) -> bool:
        """Whether `call` is a layer of a model other than the served one (active cache)."""
        served = self.served
        return (self.status is CacheStatus.ACTIVE and served is not None
                and call.model is not served.model())

    def other_model(self, call: LayerCallView, info: BatchInfo) -> None:
        """A model other than the served one runs on one of this loader's training batches (an
        ensemble, or a second model trained after the first). The cache serves one model: its
        pruned batches lack in-edges only the served model's cached rows stand for. If no
        pruned batch is in play (this batch is unpruned, none is drawn ahead with the live
        mask and the epoch's workers got no mask: the ensemble's first batch, or a model
        trained after the served one was evaluated, whose first epoch was then not a training
        epoch and sampled unpruned), the cache turns off and training is exact from here on;
        otherwise the other model's forward cannot be exact: an error."""
        name = type(call.model).__name__
        served = self.served.model() if self.served is not None else None
        mine = type(served).__name__ if served is not None else "another model"
        ahead = self.ahead and self.hot is not None and self.hot.exclusion_on
        if not info.pruned and not ahead and not (self.workers > 0 and self.epoch_pruned):
            self._retire(f"{name} also trains on this loader's batches, which it serves for "
                         f"{mine} (one model per loader)")
            return
        raise CacheSharingError(
            f"cache=True: {name} ran on a batch of training loader {self.index} whose hot "
            f"vertices were not expanded: the cache serves {mine} on that loader, and prunes "
            f"its batches for it. Give each model its own NeighborLoader, or pass cache=False")

    def bottom(self, call: LayerCallView, info: BatchInfo) -> Any:
        """The served bottom layer's call on a training batch."""
        assert self.swap is not None
        return self.swap.bottom(call, info, self.manager.steps)

    def after_step(self, step: int) -> None:
        """Optimizer step `step` done: launch the background refresh of the rows due next."""
        if self.status is CacheStatus.ACTIVE and self.background is not None:
            assert self.swap is not None
            drawn = self.drawn_ahead
            upcoming = (hot_rows_ahead(drawn(), self.hot, self.looked_up)
                        if drawn is not None else None)
            self.background.after_step(step, self.swap.last_degrees, upcoming)

    def on_batch_end(self, timer: StepTimes) -> None:
        """After a training step of this loader: feed the hot-ratio search."""
        if self.status is not CacheStatus.ACTIVE or self.hot is None:
            return
        ratio = self.hot.observe(timer)
        if ratio is None:
            return
        if self.workers > 0 or self.ahead:
            # workers, or batches drawn ahead, sample the rest of this epoch with this mask
            self.hot.pending_ratio = ratio
        else:
            self._switch_ratio(ratio)

    def close(self) -> None:
        if self.background is not None:
            self.background.drop()

    def report(self) -> dict:
        return loader_report(self)
