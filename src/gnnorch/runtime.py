"""The public entry point: `Runtime(train, **options)(*args, **kwargs)`.

`Runtime` validates its options, turns them into a core plan (p ranks, s sampler cores and t
trainer threads per rank) on the measured topology, and runs `train(*args, **kwargs)` through
`gnnorch.execute` (in this process when p = 1, no start-up cost; else in p core-bound rank
processes that train one model together) -- or, with autotune on, through the tuner
(`gnnorch.tune.driver.Autotune`), which runs it the same way. It returns what `train`
returned (on rank 0) and keeps what the call did in `last_run` (and `report`).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import torch

from . import execute
from .execute import Request, RunInfo, world
from .run_options import RUN_OPTION_NAMES, RunOptions
from .launch.plan import CorePlan, default_plan
from .launch.topology import Topology, current_topology
from .options import (check_bool, check_choice, check_int, check_keys, check_number,
                      check_path)
from .tune.config import TuneConfig
from .tune.report import TuningReport
from .tune.space import PLAN_DIMS

__all__ = ["Runtime", "RunInfo", "VALID_OPTIONS"]

_DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class _Options:
    processes: int | None = None
    sampler_cores: int | None = None
    threads: int | None = None
    device: str = "auto"
    bind: bool = True
    seed: int | None = None
    log_dir: str | os.PathLike | None = None
    start_timeout: float = 120.0
    collective_timeout: float = 1800.0
    sampler: str = "auto"
    trim: bool = True
    rewrite: bool | str = True
    cache: Any = False
    staleness: int | None = None
    hot_ratio: float | str | None = None
    allocator: str = "tuned"
    partition_features: Any = False
    data_path: Any = None
    autotune: bool | None = None
    tune: Any = None
    report_dir: str | os.PathLike | None = None
    verbose: bool = True


VALID_OPTIONS = tuple(f.name for f in dataclasses.fields(_Options))


class Runtime:
    """Run an unchanged PyG training function under gnnorch.

    Args:
        train: the user's training function, called as ``train(*args, **kwargs)``.
        processes: data-parallel ranks p (default: 1 on CPU, one per visible GPU on CUDA;
            inside a torchrun world its size, and nothing else is allowed).
        sampler_cores: cores per rank for NeighborLoader workers s (default 0: sample in the
            trainer process).
        threads: torch intra-op threads per rank t (default: the rank's share of usable cores;
            under torchrun, of this node's cores shared by its LOCAL_WORLD_SIZE ranks).
        device: "auto" (CUDA when visible), "cpu" or "cuda" (one rank per GPU, nccl).
        bind: pin ranks and loader workers to disjoint cores (default True).
        seed: seed of the common per-epoch shuffling of training seeds (default:
            ``torch.initial_seed()`` of the caller, so ``torch.manual_seed`` makes runs repeat).
        log_dir: where ranks > 0 write ``rank<r>.log`` (default: a fresh temporary folder).
        start_timeout: seconds for ranks to start and connect.
        collective_timeout: seconds a rank may wait in one collective before failing.
        sampler: NeighborLoader backend: "auto" (pyg-lib when installed, else gnnorch's
            vectorised sampler, exact in distribution), "gnnorch" or "pyg" (PyG's own choice).
        trim: hop-aware trimming of MessagePassing layers (exact for the seed rows; other rows
            of a layer's output hold NaN). Default True.
        rewrite: exact re-ordering of linear transform and linear aggregation per layer
            (GCN aggregate-first, SAGE / GIN transform-first, one-head GAT aggregate-first)
            where a fitted cost model, checked by measuring both orders on the first calls of
            each shape bucket, says it is cheaper (`gnnorch.rewrite`). True (default), False,
            or "report" (decide and report in `last_run.stats[rank]["rewrite"]`, never swap).
        cache: the hotness-aware historical-embedding cache (`gnnorch.cache`,
            src/gnnorch/cache/README.md). Off by default (it changes numerics). True
            (defaults), False, a `gnnorch.CacheConfig` or a dict of its fields. On training
            loaders, the bottom MessagePassing layer's output rows of hot vertices reached at
            the last sampled hop come from a store refreshed with recent weights (no gradient
            flows into them), and those vertices are not expanded by the sampler. Evaluation
            loaders run exactly.
        staleness: cache bound in optimizer steps: a cached row a forward uses was computed
            with weights at most this many steps old (default 4; 0: refreshed before each use).
        hot_ratio: share of the graph's vertices that are hot (float in (0, 1], default 0.1),
            or "auto" (searched on measured step time, at most `CacheConfig.max_hot_ratio`).
        allocator: "tuned" (default): glibc malloc keeps tensors up to 1 GiB in its heap
            instead of fresh mmap pages on every allocation (a training step re-allocates the
            same large tensors: 1.7x faster epochs measured here, scripts/bench_allocator.py);
            resident memory stays near its peak, and with one process the setting stays in
            force in your process after the run. "default": malloc untouched
            (`gnnorch.launch.allocator`).
        partition_features: the partitioned feature store (`gnnorch.partition`), for worlds
            of more than one rank (torchrun, or processes=p > 1): each rank keeps only its
            partition's rows of ``data.x`` (plus replicated hot rows within
            ``hot_budget_mb``), NeighborLoader batches get ``batch.x`` gathered from their
            owners with all-to-all collectives; exact (same batches, same rows). False
            (default), True, a dict of `gnnorch.partition.PartitionConfig` fields (e.g.
            ``{"hot_budget_mb": 64}``) or a `PartitionConfig`. With one rank: a no-op, said
            so in ``last_run.stats[0]["partition"]``.
        autotune: search processes x sampler_cores x threads by Bayesian optimisation over
            short probes of `train` itself, then run `train` once with the best plan
            (`gnnorch.tune.driver.Autotune`). Default (None): on when device is CPU and none
            of processes / sampler_cores / threads is given. True with some of them given tunes the
            others; True with all three given is an error. Tuning runs only when it pays: the
            default plan runs first as the real run, and goes on untuned when the projected
            tuning time exceeds `tune['max_overhead']` of the projected run (small jobs).
            Inside a torchrun world: off (True is an error).
        tune: tuner settings, a dict or `gnnorch.tune.TuneConfig` (budget, n_initial_points,
            estimator, acq_func, seed, min_gain, probe_batches, warmup_batches, max_overhead,
            epochs, ...; see `TuneConfig`).
        report_dir: folder where the tuning report is written (``report.json``, atomically,
            after every probe and every epoch). Default None: the report is kept in memory
            only (`runtime.report`).
        verbose: progress bars (tuning probes, then training epochs) and a one-line summary on
            stderr when tuning runs. Default True.
    """

    def __init__(self, train: Callable, **options: Any) -> None:
        if not callable(train):
            raise ValueError(f"train must be a callable (your training function), "
                             f"got {type(train).__name__}")
        check_keys("Runtime()", options, VALID_OPTIONS, what="keyword argument")
        self.train = train
        self.options = _Options(**options)
        self.topology: Topology = current_topology()
        self.device = self._resolve_device()
        # this process's rank of a torch.distributed world (torchrun), or None
        self.world: world.World | None = self._resolve_world()
        self.plan = self._resolve_plan()
        self.run_options = RunOptions(**{name: getattr(self.options, name)
                                       for name in RUN_OPTION_NAMES})
        self.last_run: RunInfo | None = None
        self.tune_config = TuneConfig.from_option(self.options.tune)
        self.autotune = self._resolve_autotune()
        self.report: TuningReport | None = None  # the tuning report of an autotuned call

    # -- configuration --------------------------------------------------------------------
    def _resolve_device(self) -> str:
        device = self.options.device
        check_choice("device", device, _DEVICES)
        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but no CUDA device is visible; use device='cpu'")
        return device

    def _resolve_world(self) -> world.World | None:
        """Inside a world: `processes` is its size and `autotune` is off (checked before any
        communication); this node's ranks are known (LOCAL_RANK / LOCAL_WORLD_SIZE, else
        found through the group's store, which initialises the group first)."""
        found = world.detect()
        if found is None:
            return None
        o = self.options
        where = f"this process is rank {found.rank} of {found.size} in {found.source}"
        if o.processes is not None:
            check_int("processes", o.processes, 1)
            if o.processes != found.size:
                raise ValueError(f"processes={o.processes} but {where} (torchrun "
                                 f"--nnodes x --nproc-per-node): leave processes out or pass "
                                 f"processes={found.size}")
        check_choice("autotune", o.autotune, (False, None),
                     allowed=f"False or None inside a torch.distributed world such as "
                             f"torchrun's ({where}): the launcher fixes the ranks, so there is "
                             f"nothing to tune; leave autotune out")
        for name in ("start_timeout", "collective_timeout"):
            check_number(f"{name} (seconds)", getattr(o, name), low=0, low_open=True)
        found = world.with_layout(found, self.device, o.collective_timeout)
        if self.device == "cuda" and found.local_size > torch.cuda.device_count():
            raise ValueError(f"device='cuda' with {found.local_size} ranks on this node but "
                             f"{torch.cuda.device_count()} visible GPUs: one GPU per local "
                             f"rank (cuda:LOCAL_RANK)")
        return found

    def _resolve_plan(self) -> CorePlan:
        if self.world is not None:
            return self._world_plan(self.world)
        o = self.options
        usable = self.topology.num_usable
        max_ranks = torch.cuda.device_count() if self.device == "cuda" else usable
        default_p = max_ranks if self.device == "cuda" else 1
        p = default_p if o.processes is None else o.processes
        check_int("processes", p, 1, max_ranks)
        s = 0 if o.sampler_cores is None else o.sampler_cores
        check_int("sampler_cores", s, 0)
        t = o.threads if o.threads is not None else max(1, usable // p - s)
        check_int("threads", t, 1)
        for name in ("start_timeout", "collective_timeout"):
            check_number(f"{name} (seconds)", getattr(o, name), low=0, low_open=True)
        check_bool("bind", o.bind)
        check_int("seed", o.seed, 0, allow_none=True)
        check_path("log_dir", o.log_dir)
        if self.device == "cpu" and (o.processes, o.sampler_cores, o.threads) == (None,) * 3:
            return default_plan(self.topology)
        plan = CorePlan(processes=p, sampler_cores=s, threads=t)
        plan.check(self.topology)
        return plan

    def _world_plan(self, found: world.World) -> CorePlan:
        """The world's size in ranks; sampler cores and threads per rank from this node's
        usable cores, shared by its `local_size` ranks."""
        o = self.options
        local = found.local_size or 1
        s = 0 if o.sampler_cores is None else o.sampler_cores
        check_int("sampler_cores", s, 0)
        t = o.threads if o.threads is not None else max(1, self.topology.num_usable // local - s)
        check_int("threads", t, 1)
        check_bool("bind", o.bind)
        check_int("seed", o.seed, 0, allow_none=True)
        check_path("log_dir", o.log_dir)
        try:
            CorePlan(local, s, t).check(self.topology)
        except ValueError as exc:
            raise ValueError(f"sampler_cores={s} + threads={t} per rank do not fit the "
                             f"{local} ranks of this node (LOCAL_WORLD_SIZE): {exc}") from None
        return CorePlan(processes=found.size, sampler_cores=s, threads=t)

    def _resolve_autotune(self) -> bool:
        o = self.options
        check_bool("verbose", o.verbose)
        check_path("report_dir", o.report_dir)
        if self.world is not None:  # checked in _resolve_world: None or False
            return False
        given = [n for n in PLAN_DIMS if getattr(o, n) is not None]
        check_choice("autotune", o.autotune, (True, False, None),
                     allowed="True, False or None (automatic)")
        if o.autotune is None:
            return self.device == "cpu" and not given
        if o.autotune and self.device != "cpu":
            raise ValueError("autotune=True is supported on device='cpu' only; pass "
                             "autotune=False (or leave it unset) on CUDA")
        if o.autotune and len(given) == 3:
            raise ValueError("autotune=True but processes, sampler_cores and threads are all "
                             "given: nothing is left to tune; leave out the ones to tune, or "
                             "pass autotune=False")
        return o.autotune

    # -- running --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if world.present() != (self.world is not None):
            # built before the user's init_process_group (or after the world went away)
            self.world = self._resolve_world()
            self.plan = self._resolve_plan()
            self.autotune = self._resolve_autotune()
        request = self._request(args, kwargs)
        if self.autotune:
            from .tune.driver import Autotune

            o = self.options
            tuning = Autotune(request, self.plan, self.tune_config,
                              fixed={n: getattr(o, n) for n in PLAN_DIMS
                                     if getattr(o, n) is not None},
                              report_dir=o.report_dir, log_dir=o.log_dir, verbose=o.verbose)
            self.report = tuning.report
            value, self.last_run = tuning.run()
            return value
        value, self.last_run = execute.run(self.plan, request)
        return value

    def _request(self, args: tuple, kwargs: dict) -> Request:
        o = self.options
        seed = o.seed if o.seed is not None else torch.initial_seed() % 2**31
        return Request(fn=self.train, args=args, kwargs=kwargs, options=self.run_options,
                       seed=seed, device=self.device, topology=self.topology, bind=o.bind,
                       log_dir=o.log_dir, start_timeout=o.start_timeout,
                       collective_timeout=o.collective_timeout)

    def __repr__(self) -> str:
        name = getattr(self.train, "__qualname__", repr(self.train))
        return f"Runtime({name}, {self.plan}, device={self.device!r})"
