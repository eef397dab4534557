"""The hot set of one served loader: which vertices are hot, their stored rows, and the pruning
mask the loader's sampler applies.

At activation the hotness of every vertex is computed (`hotness`), the hot set chosen (a fixed
`hot_ratio`, or the first point of the `"auto"` search), the refresh neighbourhood and weight
gradient of cached rows decided, and `install` makes a store for the set, fills it in the
trainer thread and tells the sampler to stop expanding hot vertices at hop L-1
(`FastNeighborSampler.set_exclusion(mask, {L-1})`). With `hot_ratio="auto"` the search is fed
the measured step times (`observe`) and a new ratio is installed the same way (`switch_ratio`):
rows of vertices hot before and after are kept.
"""
from __future__ import annotations

import time
from typing import Protocol

import torch
from torch import Tensor

from .admission import LoaderSpec, ServedModel
from .auto import RatioSearch, ratio_grid
from .config import CacheConfig
from .hotness import count_hotness, estimate_hotness, in_degree, top_fraction
from .refresh import BatchDegrees, linear_parts
from .stats import CacheStats
from .store import EmbeddingStore


class StepTimes(Protocol):
    """The timer of a training epoch, as the cache reads it (`launch.context.EpochTimer`):
    `batch_ends[i]` is when batch i's step ended (perf_counter), `start` when the epoch began,
    `loader` the training loader's index."""

    loader: int
    start: float
    batch_ends: list[float]


class HotSet:
    """The hot set, its store and its trainer-thread refresh (see the module docstring).
    Constructing it computes the hotness and decides how rows are refreshed; `install` makes
    a set live."""

    def __init__(self, spec: LoaderSpec, config: CacheConfig, served: ServedModel,
                 stats: CacheStats, seed: int) -> None:
        self.spec = spec
        self.config = config
        # computes rows in the trainer thread (on-demand refreshes and installs)
        self.trainer_refresher = served.trainer_refresher
        self.stats = stats
        self.store: EmbeddingStore | None = None   # the live hot set's rows (after `install`)
        self.extra_size: Tensor | None = None  # per store slot: in-edges of its neighbourhood
        self.exclusion_on = False              # the sampler prunes the hot set now
        # the sampler's `exclusion_version` of the live mask, and every version whose mask
        # pruned a hot set (a batch carries the version it was sampled with)
        self.mask_version: int | None = None
        self.pruning_versions: set[int] = set()
        self.pending_ratio: float | None = None  # chosen by the search, for the next epoch
        self.paused = False                    # pruning off for an evaluation epoch
        sampler = spec.sampler
        colptr, row = spec.colptr, spec.row   # the host's CSC
        t0 = time.perf_counter()
        if config.hotness == "count":
            gen = torch.Generator().manual_seed(seed + 1)
            self.scores = count_hotness(colptr, row, spec.seeds, spec.fanouts, spec.batch_size,
                                        config.count_fraction, bool(sampler.replace), gen)
        else:
            self.scores = estimate_hotness(colptr, row, spec.seeds, spec.fanouts,
                                           spec.batch_size, bool(sampler.replace))
        stats.seconds["hotness"] = time.perf_counter() - t0
        self.search: RatioSearch | None = None
        if config.hot_ratio == "auto":
            self.search = RatioSearch(ratio_grid(config.max_hot_ratio))
            ratio = self.search.ratio
        else:
            ratio = float(config.hot_ratio)
        self.initial = top_fraction(self.scores, ratio)   # the first hot set
        self._decide_refresh(served)

    def _decide_refresh(self, served: ServedModel) -> None:
        """The refresh neighbourhood (sample or full) and whether cached rows carry the
        weights' exact gradient (`gradient="linear"`), from the first hot set."""
        cfg = self.config
        deg = in_degree(self.spec.colptr)[self.initial]
        k = self.spec.fanouts[-1]
        sampled = deg.clamp_max(k) if k >= 0 else deg
        full = cfg.refresh == "full" or k < 0 or (
            cfg.refresh == "auto" and float(deg.sum()) <= cfg.full_factor * float(sampled.sum()))
        self.trainer_refresher.hood.full = full
        parts = linear_parts(served.layer) if not served.aggregate else None
        if cfg.gradient != "none" and parts is not None:
            self.trainer_refresher.linear = parts[2]
        info = self.stats.info
        info["gradient"] = ("exact (aggregate rows)" if served.aggregate else
                            "linear" if self.trainer_refresher.linear is not None else "none")
        info["refresh_neighbourhood"] = "full" if full else f"sample {k}"

    def install(self, hot: Tensor, step: int, degrees: BatchDegrees | None) -> None:
        """Make `hot` the hot set: a new store (rows kept for vertices hot before), filled now
        (at optimizer step `step`, GCN: with the latest batch's `degrees`), and the sampler's
        exclusion mask. A background job must not be in flight (it writes the old store)."""
        old = self.store
        store = EmbeddingStore(self.spec.sampler.colptr.numel() - 1, hot)
        if old is not None and old.rows is not None:
            both = old.mask & store.mask
            ids = both.nonzero().view(-1)
            if ids.numel():
                store.write(store.slots_of(ids), old.read(old.slots_of(ids)),
                            old.version[old.slots_of(ids)],
                            old.read_aux(old.slots_of(ids)) if old.aux is not None else None)
        self.store = store
        self.extra_size = self.trainer_refresher.hood.size(store.hot_ids)
        missing = (store.version < 0).nonzero().view(-1)
        if missing.numel():
            self.refresh_now(missing, step, degrees)
        # an empty hot set (hot_ratio="auto" at 0): the exact fast path, nothing pruned
        self._prune(len(store) > 0)
        self.stats.info["hot_ratio"] = len(store) / store.num_nodes

    def _prune(self, on: bool) -> None:
        """Set the sampler's exclusion to the live hot set (`on`) or to nothing; a version
        that prunes is remembered (batches carry the version they were sampled with)."""
        assert self.store is not None
        sampler = self.spec.sampler
        sampler.set_exclusion(self.store.mask if on else None, {self.spec.hops - 1})
        self.exclusion_on, self.paused = on, False
        self.mask_version = sampler.exclusion_version
        if on:
            self.pruning_versions.add(self.mask_version)

    def stop_pruning(self) -> None:
        """The sampler expands every vertex again (the cache turns off)."""
        self._prune(False)

    def pause_pruning(self) -> None:
        """An epoch that does not train starts: its batches reach models without the cached
        rows, so the sampler expands every vertex until `resume_pruning`."""
        if self.exclusion_on:
            self._prune(False)
            self.paused = True

    def resume_pruning(self) -> None:
        """A training epoch starts after `pause_pruning`: the live hot set is pruned again."""
        if self.paused:
            self._prune(True)

    def switch_ratio(self, ratio: float, step: int, degrees: BatchDegrees | None) -> None:
        self.install(top_fraction(self.scores, ratio), step, degrees)

    def refresh_now(self, slots: Tensor, step: int, degrees: BatchDegrees | None) -> None:
        """Recompute the rows of `slots` in the trainer thread with the current weights."""
        assert self.store is not None
        start = time.perf_counter()
        self.trainer_refresher.snapshot()
        values, aux = self.trainer_refresher.compute(self.store.hot_ids[slots], degrees)
        self.store.write(slots, values, step, aux)
        self.stats.counters["refreshes"] += 1
        self.stats.counters["refresh_rows"] += slots.numel()
        self.stats.seconds["refresh"] += time.perf_counter() - start

    def observe(self, timer: StepTimes) -> float | None:
        """After a training step (`timer`: the epoch's timer): feed the hot-ratio search the
        step's seconds; the ratio to switch to, or None."""
        if self.search is None or self.search.done:
            return None
        ends = timer.batch_ends
        seconds = ends[-1] - (ends[-2] if len(ends) > 1 else timer.start)
        return self.search.observe(seconds)
