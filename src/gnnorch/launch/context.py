"""The state of the rank this process is: who it is, which cores it owns, its knobs, its timings.

Exactly one `RankContext` is active in a process while the user's function runs under the
runtime (`activate`: a second, nested run is refused). The seams do not look it up: the session
(`gnnorch.intercept.session`) hands it to each seam it builds. A rank's knobs (plan, cores) are
fixed for the run: the tuner changes them by launching again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import Callable, Iterator

import torch

from ..run_options import RunOptions
from .plan import CorePlan, RankCores


@dataclasses.dataclass(frozen=True)
class RankProcess:
    """Who this process is in its torch.distributed world and what it owns, as whoever started
    it knows: our own supervisor (`gnnorch.launch.worker`), the caller's process itself (one
    rank), or a launcher such as torchrun. The process group is initialised when
    `world_size > 1`; `comm_device` is the device its collectives use (None: CPU / gloo)."""

    rank: int
    world_size: int
    plan: CorePlan
    cores: RankCores | None
    backend: str | None = None
    comm_device: torch.device | None = None


@dataclasses.dataclass
class EpochRecord:
    """One pass over a training loader in this rank: batches, seeds and wall seconds."""

    loader: int
    epoch: int
    batches: int
    seeds: int
    seconds: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class RankContext:
    """One rank's run state while the user's function runs: its facts (rank, world size, core
    plan, `cores` — None when binding is off —, seed, options), its records (epochs, stats)
    and the callbacks the seams and hooks register. It holds no seam: the session hands it
    to the seams it builds (`gnnorch.intercept.session`). Not `RankProcess` (who the process
    is, known before any run) nor `RankJob` (what every rank of a run executes)."""

    rank: int
    world_size: int
    plan: CorePlan
    cores: RankCores | None
    seed: int
    backend: str | None = None
    seed_given: bool = False       # `seed` is the user's ``Runtime(seed=)``
    options: RunOptions = dataclasses.field(default_factory=RunOptions)
    epochs: list[EpochRecord] = dataclasses.field(default_factory=list)
    # per-feature statistics for the report, JSON-serialisable (feature name -> dict)
    stats: dict[str, dict] = dataclasses.field(default_factory=dict)
    # called after each training batch has been consumed (the step that used it is done); a
    # callback may raise to end the user's function early (e.g. a tuning probe's budget)
    batch_callbacks: list[Callable[["EpochTimer"], None]] = dataclasses.field(
        default_factory=list)
    # seconds spent so far on one-off measurements, one meter per seam that measures (the layer
    # seam: trimming checks, rewrite probes); each is monotone
    one_off_meters: list[Callable[[], float]] = dataclasses.field(default_factory=list)
    _loaders_built: int = 0
    _data_seed: int | None = None
    # training batches this rank has drawn, and their seeds (each batch's own, a padding
    # batch's none: `EpochTimer.add`); the gradient synchroniser weighs a step by the seeds
    # drawn since the rank's last step
    batches_trained: int = 0
    seeds_trained: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def sampler_cpus(self) -> list[int] | None:
        return list(self.cores.sampler_cpus) if self.cores is not None else None

    def one_off_seconds(self) -> float:
        """Seconds this rank has spent on one-off measurements inside training steps (the
        layer seam's trimming checks, rewrite probes and calibration). A step's wall time less
        its share of this is what the step costs in steady state."""
        return sum(meter() for meter in self.one_off_meters)

    def summary(self) -> dict:
        """What this rank reports back to the caller: epoch records and feature statistics."""
        return {"epochs": [e.to_dict() for e in self.epochs], "stats": self.stats}

    @property
    def data_seed(self) -> int:
        """The seed of the run's data order and sampling streams, fixed where the first
        loader is built (`intercept.data_seed`); the run's `seed` until then."""
        return self.seed if self._data_seed is None else self._data_seed

    @property
    def data_seed_fixed(self) -> bool:
        return self._data_seed is not None

    def fix_data_seed(self, seed: int) -> None:
        """Fix `data_seed` (once: a second value is a bug of the caller's)."""
        if self._data_seed is not None and self._data_seed != seed:
            raise RuntimeError(f"the run's data seed is fixed already ({self._data_seed})")
        self._data_seed = int(seed)

    @property
    def loaders_built(self) -> int:
        """Training loaders built so far in this run."""
        return self._loaders_built

    def next_loader_index(self) -> int:
        """Index of a newly built training loader; equal on all ranks (same code path)."""
        self._loaders_built += 1
        return self._loaders_built - 1


def bind_current_process(cores: RankCores | None, threads: int) -> None:
    """Pin this process to its trainer CPUs and set torch's intra-op thread count."""
    if cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores.trainer_cpus)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def bound_for_call(cores: RankCores | None, threads: int) -> Iterator[None]:
    """`bind_current_process` for the block only: the caller's affinity and torch thread
    count are restored afterwards (a rank run in the caller's own process)."""
    saved_affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    saved_threads = torch.get_num_threads()
    try:
        bind_current_process(cores, threads)
        yield
    finally:
        if saved_affinity is not None and cores is not None:
            os.sched_setaffinity(0, saved_affinity)
        if torch.get_num_threads() != saved_threads:
            torch.set_num_threads(saved_threads)


_ACTIVE: RankContext | None = None


def current() -> RankContext | None:
    """The active rank context, or None outside the runtime."""
    return _ACTIVE


@contextlib.contextmanager
def activate(ctx: RankContext) -> Iterator[RankContext]:
    """Make `ctx` the active context for the duration of the block (not re-entrant)."""
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("a gnnorch Runtime is already running in this process; "
                           "Runtime calls cannot be nested")
    _ACTIVE = ctx
    try:
        yield ctx
    finally:
        _ACTIVE = None


class EpochTimer:
    """Times one pass over a training loader and records it in the context when it ends.

    `batch_ends[i]` is the perf_counter time at which batch i was consumed (the next batch was
    requested or the pass ended), so `batch_ends[i] - batch_ends[i-1]` is one full step:
    sampling batch i plus the user's work on it. `batch_seeds[i]` is its number of seeds.
    `total` is the number of batches of the epoch when the loader can tell (the length of its
    iterator), else None.

    `whole_in_every_rank`: every one of the p ranks runs this epoch's batches whole (a
    graph-level epoch kept whole, `epoch_role.kept_whole`). A rank then counts its share of
    each batch's b seeds, b // p plus one for the first b % p ranks, so that seeds summed over
    ranks (the tuner's probes, the report) are the b the run trained, never p * b.
    A sharded epoch's padding batches (`padded`) count no seeds.
    """

    def __init__(self, ctx: RankContext, loader: int, epoch: int,
                 total: int | None = None, whole_in_every_rank: bool = False) -> None:
        self.ctx, self.loader, self.epoch = ctx, loader, epoch
        self.total = total
        self.copies = ctx.world_size if whole_in_every_rank else 1
        # which of the epoch's batches are a sharded epoch's padding (`ShardSampler.padding`)
        self.padded: Callable[[int], bool] | None = None
        self.batches = 0
        self.seeds = 0
        self.start = time.perf_counter()
        self.batch_ends: list[float] = []
        self.batch_seeds: list[int] = []

    def add(self, seeds: int) -> None:
        if self.padded is not None and self.padded(self.batches):
            seeds = 0   # a padding batch of a sharded epoch: no seed of its own
        self.ctx.batches_trained += 1
        self.ctx.seeds_trained += seeds   # the batch's own seeds (`RankContext`)
        if self.copies > 1:   # this rank's share of a batch every rank runs whole
            seeds = seeds // self.copies + (1 if self.ctx.rank < seeds % self.copies else 0)
        self.batches += 1
        self.seeds += seeds
        self.batch_seeds.append(seeds)

    def consumed(self) -> None:
        """The latest batch's step is done: stamp it and run the context's batch callbacks."""
        self.batch_ends.append(time.perf_counter())
        for callback in self.ctx.batch_callbacks:
            callback(self)

    def close(self) -> None:
        self.ctx.epochs.append(EpochRecord(self.loader, self.epoch, self.batches, self.seeds,
                                           time.perf_counter() - self.start))
