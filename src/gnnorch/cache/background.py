"""The background refresher (`overlap="thread"`): after each optimizer step, the rows due next are
recomputed in a worker thread with a snapshot of the new weights while the trainer samples and
computes the next step; the next forward installs them.

One job at a time: it owns the background refresher's weight snapshot. Which rows a job
recomputes (after optimizer step t, with the weights of version t):

* **batches drawn ahead** (the device path's pipeline shows them: `lookahead_slots`): the rows
  that batch j will read and would find over the bound S there, for j <= 2. Batch 1 is the
  next forward, taken with t steps done, so batch j reads a row of version v at staleness
  t + j - 1 - v: over the bound when v < t + j - 1 - S. A row recomputed now (version t) is
  within the bound for every j <= S + 1. The job runs while batch 1 trains and serves batch
  2; batch 1's rows were the previous job's batch 2. These are the rows an on-demand refresh
  would recompute, recomputed one step earlier and off the trainer's path; a row no batch
  drawn ahead reads is not recomputed. When the pipeline's producer falls
  behind (nothing drawn ahead at that step), the job is empty and the next forward refreshes
  on demand: the fewest rows, in time the trainer would spend waiting for its batch anyway.
* **otherwise** (no batch is drawn ahead of the trainer): the rows that would be over the bound
  at the forward after the next one (v < t + 1 - S; the job runs while the next one trains)
  and that a forward used since they were last written. A row nobody read
  since is not recomputed again (most of the hot set at any time; a forward that needs it
  later refreshes it on demand, in the trainer thread).

A row that batches write back (`writeback`) does not fall due either way. A new store's rows
all carry the version of the fill, so for its first S+1 steps a job is every due row and at
least the oldest 1/(S+1) of the store: that spreads the versions, and later jobs stay even.
With ``debug=True`` a job is every due row, read or not (the complete schedule: a forward that
finds a row over the bound then shows a fault of the schedule, not a row it skipped). On CUDA
the job runs on a side stream and its install waits on the job's event; where the loader
samples on the GPU, the job draws its neighbourhoods there too (`job_structure`).
"""
from __future__ import annotations

import concurrent.futures
import math
import time
from typing import Any, Callable

import torch
from torch import Tensor

from ..device.transfer import to_device
from .admission import LoaderSpec, ServedModel
from .config import CacheConfig
from .hotset import HotSet
from .refresh import BatchDegrees, LayerCall, Neighbourhoods, Refresher
from .stats import CacheStats
from .store import EmbeddingStore


def choose_overlap(config: CacheConfig, trainer_cores: int, info: dict[str, Any]) -> str:
    """"thread" or "off" for `config.overlap` on a rank with `trainer_cores` (why: in `info`)."""
    overlap = config.overlap
    if overlap == "auto":
        overlap = "thread" if trainer_cores >= config.overlap_min_cores else "off"
        info["overlap_reason"] = (f"{trainer_cores} trainer core(s) "
                                  f"{'>=' if overlap == 'thread' else '<'} "
                                  f"overlap_min_cores={config.overlap_min_cores}")
    if overlap == "thread" and config.staleness == 0:
        overlap = "off"
        info["overlap_reason"] = "staleness 0: every row is refreshed right before use"
    info["overlap"] = overlap
    return overlap


def job_structure(spec: LoaderSpec, served: ServedModel,
                  device: torch.device) -> tuple[Tensor, Tensor, str]:
    """(colptr, row, where) of the CSC a job draws its refresh neighbourhoods on. The sampler's
    own copy on the refresher's `device` when the loader samples there (the GPU data path with
    the graph on the GPU): the job's draws, its refresh graph and (features on the GPU) its
    gather then stay on the device, in the job's stream, instead of taking the host's cores
    (measured: at products scale the host's draw and refresh graph were most of a job on the
    lent H200, `scripts/bench_refresh_job.py`). Otherwise, and for layers normalised by the
    batch's degrees (GCN: `BatchDegrees` are looked up on the host), the host CSC. The law of
    a refresh neighbourhood is the same either way; the draws differ (another generator)."""
    sampler = spec.sampler
    colptr, row = sampler.colptr, sampler.row
    if colptr.device == spec.colptr.device:
        return spec.colptr, spec.row, "host"
    if served.degree_fix or served.aggregate:
        return spec.colptr, spec.row, "host: GCN rows look up the batch's degrees on the host"
    if colptr.device != device:
        return spec.colptr, spec.row, (f"host: the loader samples on {colptr.device}, the "
                                       f"layer runs on {device}")
    return colptr, row, f"device ({colptr.device})"


#: how many batches drawn ahead a job looks at (the module docstring: j = 1 and j = 2)
LOOKAHEAD = 2


def lookahead_slots(version: Tensor, step: int, bound: int, upcoming: list[Tensor]) -> Tensor:
    """Store slots (distinct) to recompute after optimizer step `step` so that the batches
    drawn ahead read rows within the bound: ``upcoming[j - 1]`` holds the distinct slots batch
    j will read (j = 1: the next forward, taken with `step` steps done), which reads them at
    staleness ``step + j - 1 - version``; a slot there with
    ``version < step + j - 1 - bound`` is taken, for ``j <= min(bound + 1, LOOKAHEAD)`` (a
    row recomputed now, version ``step``, is over the bound at any later j). `version`: the
    store's per-slot versions. Usually only j = 2 has any (the previous job took batch 1's as
    its batch 2), so the union is rarely needed."""
    picked = [slots[version[slots] < step + j - 1 - bound]
              for j, slots in enumerate(upcoming[:min(bound + 1, LOOKAHEAD)], start=1)]
    picked = [slots for slots in picked if slots.numel()]
    if not picked:
        return torch.empty(0, dtype=torch.long)
    return picked[0] if len(picked) == 1 else torch.unique(torch.cat(picked))


class _Job:
    """A background refresh in flight: rows for `slots` of `store`, computed with the weights
    after `version` optimizer steps."""

    def __init__(self, future: concurrent.futures.Future, slots: Tensor, version: int,
                 store: EmbeddingStore) -> None:
        self.future, self.slots, self.version, self.store = future, slots, version, store


class BackgroundRefresh:
    """Refreshes rows of the hot set's store in a worker thread (see the module docstring)."""

    def __init__(self, spec: LoaderSpec, config: CacheConfig, served: ServedModel, hot: HotSet,
                 stats: CacheStats, seed: int, unpatched: LayerCall,
                 pool: Callable[[], concurrent.futures.Executor]) -> None:
        assert hot.store is not None
        sampler = spec.sampler
        colptr, row, where = job_structure(spec, served, hot.trainer_refresher.device)
        stats.info["refresh_structure"] = where
        hood = Neighbourhoods(colptr, row, spec.fanouts[-1],
                              bool(sampler.replace), hot.trainer_refresher.hood.full, seed + 2)
        self.refresher = Refresher(served.layer, spec.features, hood, config.chunk_rows,
                                   served.aggregate, unpatched=unpatched)
        self.refresher.snapshot()
        self.refresher.linear = hot.trainer_refresher.linear
        self.refresher.compute(hot.store.hot_ids[:1])  # first call in the trainer thread
        device = self.refresher.device
        self.stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None
        self.bound = config.staleness
        self.debug = config.debug
        self.hot = hot
        self.stats = stats
        self.pool = pool
        self._job: _Job | None = None
        self._spreading: tuple[EmbeddingStore, int] | None = None  # (store, last step)

    @property
    def busy(self) -> bool:
        """Whether a job is in flight."""
        return self._job is not None

    def after_step(self, step: int, degrees: BatchDegrees | None,
                   upcoming: list[Tensor] | None = None) -> None:
        """Optimizer step done (weights now at version `step`): launch the job of the rows that
        expire next (GCN: normalised with the latest batch's `degrees`). `upcoming`: the store
        slots each batch drawn ahead will read, next first (None: none is drawn ahead; the
        module docstring says which rows a job takes either way)."""
        # one job at a time (it owns the background snapshot): the previous one must be in
        # before the next snapshot, or the schedule would skip a step and rows would expire
        self.install(wait=True)
        bound = self.bound
        store = self.hot.store
        assert store is not None
        if self._spreading is None or self._spreading[0] is not store:
            self._spreading = (store, step + bound)   # a new store: spread its versions
        due = store.version < step + 1 - bound
        if step <= self._spreading[1]:
            count = max(int(due.sum()), math.ceil(len(store) / (bound + 1)))
            slots = store.oldest(count)
            slots = slots[store.version[slots] < step]
        elif upcoming is not None and not self.debug:
            slots = lookahead_slots(store.version, step, bound, upcoming)
            self.stats.counters["lookahead_jobs"] += 1
        else:
            if not self.debug:
                due &= ~store.unread()
            slots = due.nonzero().view(-1)
        if slots.numel() == 0:
            return
        self.refresher.snapshot()
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.refresher.device))
        ids = store.hot_ids[slots]
        future = self.pool().submit(self._background, ids, degrees)
        self._job = _Job(future, slots, step, store)

    def _background(self, ids: Tensor,
                    degrees: BatchDegrees | None
                    ) -> tuple[tuple[Tensor, Tensor | None], float, torch.cuda.Event | None]:
        """The job itself, in the worker thread: ((rows, aux), seconds, CUDA event or None)."""
        start = time.perf_counter()
        event = None
        with torch.no_grad():
            if self.stream is not None:
                # the device first: a new thread's current device is cuda:0, and leaving a
                # stream context of another device would make a context there
                with torch.cuda.device(self.stream.device), torch.cuda.stream(self.stream):
                    values = self.refresher.compute(ids, degrees)
                    event = torch.cuda.Event()
                    event.record(self.stream)
            else:
                values = self.refresher.compute(ids, degrees)
        return values, time.perf_counter() - start, event

    def install(self, wait: bool) -> None:
        """Write the finished job's rows (those still older than it) into the store; without
        `wait`, only if it is done."""
        job = self._job
        if job is None:
            return
        if not wait and not job.future.done():
            return
        start = time.perf_counter()
        (values, aux), seconds, event = job.future.result()
        if wait:
            self.stats.seconds["wait"] += time.perf_counter() - start
        self._job = None
        self.stats.seconds["background"] += seconds
        if event is not None:
            torch.cuda.current_stream(self.refresher.device).wait_event(event)
        store = job.store
        if store is not self.hot.store:   # the hot set changed meanwhile
            return
        # the rows still older than the job (host versions): selected by host positions,
        # copied without a pageable copy, so installing does not wait for the device
        keep = (store.version[job.slots] < job.version).nonzero().view(-1)
        store.write(job.slots[keep], values.index_select(0, to_device(keep, values.device)),
                    job.version,
                    aux.index_select(0, to_device(keep, aux.device)) if aux is not None
                    else None)
        self.stats.counters["background_refreshes"] += 1
        self.stats.counters["background_rows"] += keep.numel()

    def drop(self) -> None:
        """Wait for the job in flight and discard it."""
        if self._job is not None:
            try:
                self._job.future.result()
            finally:
                self._job = None

    def close(self) -> None:
        self.drop()
