"""The public entry point: `Runtime(train, **options)(*args, **kwargs)`.

`Runtime` validates its options, turns them into a core plan (p ranks, s sampler cores and t
trainer threads per rank) on the measured topology, and runs `train(*args, **kwargs)`:
in this process when p = 1 (no start-up cost), else in p core-bound rank processes that train
one model together. It returns what `train` returned (on rank 0).
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from .features import FEATURE_OPTIONS, Features
from .launch.inprocess import run_in_process
from .launch.plan import CorePlan, RankCores, assign_cores, default_plan
from .launch.supervisor import LaunchSpec, RankGroup
from .launch.topology import Topology, current_topology
from .tune.config import TuneConfig
from .tune.report import TuningReport

_DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass
class RunInfo:
    """What the last call did: plan, per-rank cores, where logs went, timings, and each
    feature's statistics (`stats[rank][feature]`, e.g. the sampler backend and trimming)."""

    plan: CorePlan
    cores: list[RankCores] | None
    device: str
    log_dir: Path | None
    wall_seconds: float
    epochs: dict[int, list[dict]]
    features: Features = dataclasses.field(default_factory=Features)
    stats: dict[int, dict] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_summaries(cls, plan: CorePlan, cores: list[RankCores] | None, device: str,
                       log_dir: Path | None, wall: float, features: Features,
                       summaries: dict[int, dict]) -> "RunInfo":
        return cls(plan, cores, device, log_dir, wall,
                   {r: s["epochs"] for r, s in summaries.items()}, features,
                   {r: s["stats"] for r, s in summaries.items()})

    def epoch_seconds(self, rank: int = 0) -> list[float]:
        """Wall seconds of each training epoch measured inside `rank`."""
        return [e["seconds"] for e in self.epochs.get(rank, [])]


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
    autotune: bool | None = None
    tune: Any = None
    report_dir: str | os.PathLike | None = None
    verbose: bool = True


VALID_OPTIONS = tuple(f.name for f in dataclasses.fields(_Options))


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    bound = f"{low}..{high}" if high is not None else f">= {low}"
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        raise ValueError(f"{name} must be an integer in {bound}, got {value!r}")


class Runtime:
    """Run an unchanged PyG training function under gnnorch.

    Args:
        train: the user's training function, called as ``train(*args, **kwargs)``.
        processes: data-parallel ranks p (default: 1 on CPU, one per visible GPU on CUDA).
        sampler_cores: cores per rank for NeighborLoader workers s (default 0: sample in the
            trainer process).
        threads: torch intra-op threads per rank t (default: the rank's share of usable cores).
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
        cache: the hotness-aware historical-embedding cache (`gnnorch.cache`, src/gnnorch/cache/README.md).
            Off by default (it changes numerics). True (defaults), False, a
            `gnnorch.CacheConfig` or a dict of its fields. On training loaders, the bottom
            MessagePassing layer's output rows of hot vertices reached at the last sampled hop
            come from a store refreshed with recent weights (no gradient flows into them), and
            those vertices are not expanded by the sampler. Evaluation loaders run exactly.
        staleness: cache bound in optimizer steps: a cached row a forward uses was computed
            with weights at most this many steps old (default 4; 0: refreshed before each use).
        hot_ratio: share of the graph's vertices that are hot (float in (0, 1], default 0.1),
            or "auto" (searched on measured step time, at most `CacheConfig.max_hot_ratio`).
        allocator: "tuned" (default): glibc malloc keeps tensors up to 1 GiB in its heap
            instead of fresh mmap pages on every allocation (a training step re-allocates the
            same large tensors: 1.7x faster epochs measured here, scripts/bench_allocator.py);
            resident memory stays near its peak, and with one process the setting stays in force in your process
            after the run. "default": malloc untouched (`gnnorch.launch.allocator`).
        autotune: search processes x sampler_cores x threads by Bayesian optimisation over
            short probes of `train` itself, then run `train` once with the best plan
            (`gnnorch.tune.driver`). Default (None): on when device is CPU and none of
            processes / sampler_cores / threads is given. True with some of them given tunes the
            others; True with all three given is an error. Tuning runs only when it pays: the
            default plan runs first as the real run, and goes on untuned when the projected
            tuning time exceeds `tune['max_overhead']` of the projected run (small jobs).
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
        unknown = sorted(set(options) - set(VALID_OPTIONS))
        if unknown:
            raise TypeError(f"Runtime() got unexpected keyword argument(s) {unknown}; "
                            f"valid options are: {', '.join(VALID_OPTIONS)}")
        self.train = train
        self.options = _Options(**options)
        self.topology: Topology = current_topology()
        self.device = self._resolve_device()
        self.plan = self._resolve_plan()
        self.features = Features(**{name: getattr(self.options, name) for name in FEATURE_OPTIONS})
        self.last_run: RunInfo | None = None
        self.tune_config = TuneConfig.from_option(self.options.tune)
        self.autotune = self._resolve_autotune()
        self.report: TuningReport | None = None  # set by an autotuned call

    # -- configuration --------------------------------------------------------------------
    def _resolve_device(self) -> str:
        device = self.options.device
        if device not in _DEVICES:
            raise ValueError(f"device must be one of {_DEVICES}, got {device!r}")
        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but no CUDA device is visible; use device='cpu'")
        return device

    def _resolve_plan(self) -> CorePlan:
        o = self.options
        usable = self.topology.num_usable
        max_ranks = torch.cuda.device_count() if self.device == "cuda" else usable
        default_p = max_ranks if self.device == "cuda" else 1
        p = default_p if o.processes is None else o.processes
        _check_int("processes", p, 1, max_ranks)
        s = 0 if o.sampler_cores is None else o.sampler_cores
        _check_int("sampler_cores", s, 0)
        t = o.threads if o.threads is not None else max(1, usable // p - s)
        _check_int("threads", t, 1)
        for name in ("start_timeout", "collective_timeout"):
            value = getattr(o, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not isinstance(o.bind, bool):
            raise ValueError(f"bind must be True or False, got {o.bind!r}")
        if o.seed is not None:
            _check_int("seed", o.seed, 0)
        if self.device == "cpu" and (o.processes, o.sampler_cores, o.threads) == (None,) * 3:
            return default_plan(self.topology)
        plan = CorePlan(processes=p, sampler_cores=s, threads=t)
        plan.check(self.topology)
        return plan

    def _resolve_autotune(self) -> bool:
        o = self.options
        if not isinstance(o.verbose, bool):
            raise ValueError(f"verbose must be True or False, got {o.verbose!r}")
        if o.report_dir is not None and not isinstance(o.report_dir, (str, os.PathLike)):
            raise ValueError(f"report_dir must be a folder path or None, got {o.report_dir!r}")
        given = [n for n in ("processes", "sampler_cores", "threads") if getattr(o, n) is not None]
        if o.autotune is None:
            return self.device == "cpu" and not given
        if not isinstance(o.autotune, bool):
            raise ValueError(f"autotune must be True, False or None (automatic), "
                             f"got {o.autotune!r}")
        if o.autotune and self.device != "cpu":
            raise ValueError("autotune=True is supported on device='cpu' only; pass "
                             "autotune=False (or leave it unset) on CUDA")
        if o.autotune and len(given) == 3:
            raise ValueError("autotune=True but processes, sampler_cores and threads are all "
                             "given: nothing is left to tune; leave out the ones to tune, or "
                             "pass autotune=False")
        return o.autotune

    def _gpus(self) -> list[int] | None:
        if self.device != "cuda":
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [int(x) for x in visible.split(",") if x.strip()] if visible else None
        return [ids[r] if ids else r for r in range(self.plan.processes)]

    # -- running --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.autotune:
            from .tune.driver import run_autotuned

            return run_autotuned(self, args, kwargs)
        plan = self.plan
        cores = assign_cores(plan, self.topology) if self.options.bind else None
        seed = self.options.seed if self.options.seed is not None else torch.initial_seed() % 2**31
        if plan.processes == 1:
            value, summary, wall = run_in_process(self.train, args, kwargs, plan,
                                                  cores[0] if cores else None, seed, self.features)
            self.last_run = RunInfo.from_summaries(plan, cores, self.device, None, wall,
                                                   self.features, {0: summary})
            return value
        log_dir = Path(self.options.log_dir) if self.options.log_dir is not None else Path(
            tempfile.mkdtemp(prefix="gnnorch-"))
        spec = LaunchSpec(plan=plan, cores=cores, seed=seed, log_dir=log_dir,
                          backend="nccl" if self.device == "cuda" else "gloo",
                          gpus=self._gpus(), start_timeout=self.options.start_timeout,
                          collective_timeout=self.options.collective_timeout,
                          features=self.features)
        result = RankGroup(spec).run(self.train, args, kwargs)
        self.last_run = RunInfo.from_summaries(plan, cores, self.device, log_dir,
                                               result.wall_seconds, self.features,
                                               result.summaries)
        return result.value

    def __repr__(self) -> str:
        name = getattr(self.train, "__qualname__", repr(self.train))
        return f"Runtime({name}, {self.plan}, device={self.device!r})"
