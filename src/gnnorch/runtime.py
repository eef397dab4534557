"""The public entry point: ``Runtime(train, *, processes=..., ...)(*args, **kwargs)``.

`Runtime` validates its arguments (nothing communicates or starts before a call), turns them
into a core plan (p ranks, s sampler cores and t trainer threads per rank) on the measured
topology, and runs `train(*args, **kwargs)` through `gnnorch.execute` (in this process when
p = 1, no start-up cost; else in p core-bound rank processes that train one model together) --
or, with autotune on, through the tuner (`gnnorch.tune.driver.Autotune`), which runs it the
same way. It returns what `train` returned (on rank 0), keeps what the call did in `last_run`
(and `report`), and says so in one summary (`summary()`, on stderr when `verbose`).

Configuration follows one rule: each default is written once, in the dataclass field that
holds it (`RunOptions` for the computation features, `LaunchConfig`, `CacheConfig`,
`TuneConfig`, `PartitionConfig`, `DataPathConfig`); the signature below shows those values.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, ParamSpec

import torch

from . import execute
from .cache.config import CacheConfig
from .device.config import DataPathConfig
from .execute import Request, RunInfo, world
from .execute.summary import render_summary
from .launch import context as launch_context
from .launch.config import PLAN_FIELDS, LaunchConfig
from .launch.plan import CorePlan, default_plan
from .launch.topology import Topology, current_topology
from .options import check_bool, check_choice, check_int, check_keys
from .partition.config import PartitionConfig
from .run_options import RunOptions
from .tune.config import TuneConfig
from .tune.report import TuningReport

__all__ = ["Runtime", "RunInfo", "VALID_OPTIONS"]

_DEVICES = ("auto", "cpu", "cuda")

# keywords of the earlier flat signature -> (the argument that holds them now, its class)
MOVED = {"staleness": ("cache", "CacheConfig"), "hot_ratio": ("cache", "CacheConfig"),
         "report_dir": ("tune", "TuneConfig"),
         **{name: ("launch", "LaunchConfig") for name in
            ("sampler_cores", "threads", "bind", "log_dir", "start_timeout",
             "collective_timeout", "allocator")}}

_P = ParamSpec("_P")


def moved_message(given: dict[str, Any]) -> str | None:
    """Where the keywords of `given` that moved into a config now go (None: none moved), e.g.
    ``staleness moved: pass cache=gnnorch.CacheConfig(staleness=2) or cache={'staleness': 2}``."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for name, value in given.items():
        if name in MOVED:
            groups.setdefault(MOVED[name], {})[name] = value
    parts = []
    for (argument, cls), values in groups.items():
        fields = ", ".join(f"{k}={v!r}" for k, v in values.items())
        parts.append(f"{' and '.join(values)} moved: pass {argument}=gnnorch.{cls}({fields}) "
                     f"or {argument}={values!r}")
    return "; ".join(parts) or None


def _explain_moved(init: Callable[_P, None]) -> Callable[_P, None]:
    """`init` with two friendlier `TypeError`s before Python's own: a keyword that moved into a
    config says where to, an unknown one lists the valid keywords (`VALID_OPTIONS`).
    `inspect.signature` and type checkers still see `init`'s own signature."""

    @functools.wraps(init)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> None:
        message = moved_message(kwargs)
        if message is not None:
            raise TypeError(f"Runtime(): {message}")
        check_keys("Runtime()", kwargs, VALID_OPTIONS, what="keyword argument")
        init(*args, **kwargs)

    return checked


class Runtime:
    """Run an unchanged PyG training function under gnnorch.

    Args:
        train: the user's training function, called as ``train(*args, **kwargs)``.
        processes: data-parallel ranks p (default: 1 on CPU, one per visible GPU on CUDA;
            inside a torchrun world its size, and nothing else is allowed).
        device: "auto" (CUDA when visible), "cpu" or "cuda" (one rank per GPU, nccl).
        sampler: NeighborLoader backend: "auto" (with pyg-lib installed, whichever of it and
            gnnorch's vectorised sampler, exact in distribution, is measured faster; else
            gnnorch's), "gnnorch" or "pyg" (PyG's own choice).
        trim: hop-aware trimming of MessagePassing layers. Every value the function reads is
            exact: a trimmed forward returns a `PrefixExact` tensor whose seed rows are
            computed trimmed; reading only those stays fast, and reading any other row
            recomputes that forward untrimmed, once, and switches trimming off for the model
            (`gnnorch.TrimmingWarning`). See the README, "Hop-aware trimming".
        rewrite: exact re-ordering of linear transform and linear aggregation per layer
            (GCN aggregate-first, SAGE / GIN transform-first, one-head GAT aggregate-first)
            where a fitted cost model, checked by measuring both orders on the first calls of
            each shape bucket, says it is cheaper (`gnnorch.rewrite`). True, False, or
            "report" (decide and report in `last_run.stats[rank]["rewrite"]`, never swap).
        cache: the hotness-aware historical-embedding cache (`gnnorch.cache`,
            src/gnnorch/cache/README.md). Off by default (it changes numerics). True
            (`CacheConfig()`), False, a `gnnorch.CacheConfig` or a dict of its fields, e.g.
            ``{"staleness": 2, "hot_ratio": "auto"}``. On training loaders, the bottom
            MessagePassing layer's output rows of hot vertices reached at the last sampled hop
            come from a store refreshed with recent weights, and those vertices are not
            expanded by the sampler. Evaluation loaders run exactly.
        partition_features: the partitioned feature store (`gnnorch.partition`), for worlds
            of more than one rank: each rank keeps only its partition's rows of ``data.x``
            (plus replicated hot rows within ``hot_budget_mb``), batches get ``batch.x``
            gathered from their owners with all-to-all collectives; exact. False, True, a
            `gnnorch.PartitionConfig` or a dict of its fields. With one rank: a no-op, said so
            in ``last_run.stats[0]["partition"]``.
        data_path: how NeighborLoader batches reach the training device: None (defaults), a
            mode ("auto", "device", "host"), a `gnnorch.DataPathConfig` or a dict of its fields.
        autotune: search processes x sampler_cores x threads by Bayesian optimisation over
            short probes of `train` itself, then run `train` once with the best plan. Default
            (None): on when device is CPU and none of processes, ``launch.sampler_cores``,
            ``launch.threads`` is given; True with some of them given tunes the others (all
            three given: an error). Tuning runs only when it pays (`TuneConfig.max_overhead`):
            the default plan runs first as the real run and goes on untuned otherwise. Inside
            a torchrun world: off (True is an error).
        seed: the run's data seed: the common per-epoch shuffle of sharded training seeds,
            the ranks' and the device path's sampling streams, the cache's draws. Default: a
            digest of torch's generator where the function builds its first loader, so a
            ``torch.manual_seed`` before that, in the caller or in the function, makes runs
            repeat (`gnnorch.intercept.data_seed`).
        verbose: progress bars while tuning, and one summary of each call on stderr (the
            plan, samplers, trimming, rewrites, cache / partition / data path, epoch times;
            `summary()` returns it whatever `verbose` is). Nothing is printed per batch.
        launch: rank layout and start-up, a `gnnorch.LaunchConfig` or a dict of its fields:
            sampler_cores, threads, bind, log_dir, start_timeout, collective_timeout,
            allocator.
        tune: tuner settings, a `gnnorch.TuneConfig` or a dict of its fields (budget,
            max_overhead, epochs, report_dir, ...).

    A keyword of the earlier flat signature (staleness, hot_ratio, report_dir, sampler_cores,
    threads, bind, log_dir, start_timeout, collective_timeout, allocator) is a `TypeError`
    saying which config holds it now.
    """

    @_explain_moved
    def __init__(self, train: Callable[..., Any], *, processes: int | None = None,
                 device: str = "auto", sampler: str = RunOptions.sampler,
                 trim: bool = RunOptions.trim, rewrite: bool | str = RunOptions.rewrite,
                 cache: bool | CacheConfig | dict = RunOptions.cache,
                 partition_features: bool | PartitionConfig | dict = RunOptions.partition_features,
                 data_path: str | DataPathConfig | dict | None = None,
                 autotune: bool | None = None, seed: int | None = None, verbose: bool = True,
                 launch: LaunchConfig | dict | None = None,
                 tune: TuneConfig | dict | None = None) -> None:
        if not callable(train):
            raise ValueError(f"train must be a callable (your training function), "
                             f"got {type(train).__name__}")
        if launch_context.current() is not None:   # inside a run: its ranks' world would be
            #                                         taken for a torchrun world to join
            raise RuntimeError("a gnnorch Runtime is already running in this process (this "
                               "code runs inside another Runtime's training function); "
                               "Runtime calls cannot be nested: call the inner training "
                               "function directly")
        self.train = train
        self.launch = LaunchConfig.from_option(launch)
        self.tune_config = TuneConfig.from_option(tune)
        self.run_options = RunOptions(sampler=sampler, trim=trim, rewrite=rewrite, cache=cache,
                                      allocator=self.launch.allocator,
                                      partition_features=partition_features,
                                      data_path=data_path)
        check_int("seed", seed, 0, allow_none=True)
        check_bool("verbose", verbose)
        check_choice("autotune", autotune, (True, False, None),
                     allowed="True, False or None (automatic)")
        self.processes, self.seed, self.verbose = processes, seed, verbose
        self.autotune_option = autotune
        self.topology: Topology = current_topology()
        self.device = self._resolve_device(device)
        # this process's rank of a torch.distributed world (torchrun), or None
        self.world: world.World | None = self._resolve_world()
        # None only inside a world whose node layout is found at the first call
        self.plan: CorePlan | None = self._resolve_plan()
        self.autotune = self._resolve_autotune()
        self.last_run: RunInfo | None = None
        self.report: TuningReport | None = None  # the tuning report of an autotuned call
        self._summary: str | None = None

    # -- configuration (no communication) -------------------------------------------------
    @staticmethod
    def _resolve_device(device: str) -> str:
        check_choice("device", device, _DEVICES)
        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but no CUDA device is visible; use device='cpu'")
        return device

    def _resolve_world(self) -> world.World | None:
        """Inside a world: `processes` is its size and `autotune` is off. Found without
        communicating (`world.detect`); this node's ranks may stay unknown until a call."""
        found = world.detect()
        if found is None:
            return None
        where = f"this process is rank {found.rank} of {found.size} in {found.source}"
        if self.processes is not None:
            check_int("processes", self.processes, 1)
            if self.processes != found.size:
                raise ValueError(f"processes={self.processes} but {where} (torchrun "
                                 f"--nnodes x --nproc-per-node): leave processes out or pass "
                                 f"processes={found.size}")
        check_choice("autotune", self.autotune_option, (False, None),
                     allowed=f"False or None inside a torch.distributed world such as "
                             f"torchrun's ({where}): the launcher fixes the ranks, so there is "
                             f"nothing to tune; leave autotune out")
        return found

    def _resolve_plan(self) -> CorePlan | None:
        if self.world is not None:
            return self._world_plan(self.world) if self.world.local_size is not None else None
        launch = self.launch
        usable = self.topology.num_usable
        max_ranks = torch.cuda.device_count() if self.device == "cuda" else usable
        p = (max_ranks if self.device == "cuda" else 1) if self.processes is None \
            else self.processes
        check_int("processes", p, 1, max_ranks)
        if self.device == "cpu" and self.processes is None and not launch.plan_given():
            return default_plan(self.topology)
        s = launch.sampler_cores or 0
        t = launch.threads if launch.threads is not None else max(1, usable // p - s)
        plan = CorePlan(processes=p, sampler_cores=s, threads=t)
        plan.check(self.topology)
        return plan

    def _world_plan(self, found: world.World) -> CorePlan:
        """The world's size in ranks; sampler cores and threads per rank from this node's
        usable cores, shared by its `local_size` ranks."""
        local = found.local_size or 1
        if self.device == "cuda" and local > torch.cuda.device_count():
            raise ValueError(f"device='cuda' with {local} ranks on this node but "
                             f"{torch.cuda.device_count()} visible GPUs: one GPU per local "
                             f"rank (cuda:LOCAL_RANK)")
        s = self.launch.sampler_cores or 0
        t = self.launch.threads if self.launch.threads is not None else \
            max(1, self.topology.num_usable // local - s)
        try:
            CorePlan(local, s, t).check(self.topology)
        except ValueError as exc:
            raise ValueError(f"sampler_cores={s} + threads={t} per rank do not fit the "
                             f"{local} ranks of this node (LOCAL_WORLD_SIZE): {exc}") from None
        return CorePlan(processes=found.size, sampler_cores=s, threads=t)

    def _given_plan(self) -> dict[str, int]:
        """The core-plan dimensions the user fixed (not searched by the tuner)."""
        given = {"processes": self.processes} if self.processes is not None else {}
        return {**given, **self.launch.plan_given()}

    def _resolve_autotune(self) -> bool:
        if self.world is not None:  # checked in _resolve_world: None or False
            return False
        option, given = self.autotune_option, self._given_plan()
        if option is None:
            return self.device == "cpu" and not given
        if option and self.device != "cpu":
            raise ValueError("autotune=True is supported on device='cpu' only; pass "
                             "autotune=False (or leave it unset) on CUDA")
        if option and len(given) == 1 + len(PLAN_FIELDS):
            raise ValueError("autotune=True but processes, launch.sampler_cores and "
                             "launch.threads are all given: nothing is left to tune; leave out "
                             "the ones to tune, or pass autotune=False")
        return option

    # -- running --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._join_world()
        request = self._request(args, kwargs)
        tuning_line = None
        if self.autotune:
            from .tune.driver import Autotune

            tuning = Autotune(request, self.plan, self.tune_config, fixed=self._given_plan(),
                              report_dir=self.tune_config.report_dir,
                              log_dir=self.launch.log_dir, verbose=self.verbose)
            self.report = tuning.report
            value, self.last_run = tuning.run()
            tuning_line = (tuning.ledger.tuned_line().removeprefix("gnnorch: ")
                           if tuning.report.tuned else
                           f"not tuned: {tuning.report.data['decision']['reason']}")
        else:
            value, self.last_run = execute.run(self.plan, request)
        self._summary = render_summary(self.last_run, tuning=tuning_line)
        if self.verbose and (self.world is None or self.world.rank == 0):
            print(self._summary, file=sys.stderr, flush=True)
        return value

    def _join_world(self) -> None:
        """The world as it is at this call: found again when the user's init_process_group
        came after `Runtime()` (or the world went away); this node's ranks found through the
        group's store when the environment does not say (the only step that communicates)."""
        if world.present() != (self.world is not None):
            self.world = self._resolve_world()
            self.plan = self._resolve_plan()
            self.autotune = self._resolve_autotune()
        if self.world is not None and self.world.local_size is None:
            self.world = world.with_layout(self.world, self.device,
                                           self.launch.collective_timeout)
            self.plan = self._resolve_plan()

    def _request(self, args: tuple, kwargs: dict) -> Request:
        seed = self.seed if self.seed is not None else torch.initial_seed() % 2**31
        return Request(fn=self.train, args=args, kwargs=kwargs, options=self.run_options,
                       launch=self.launch, seed=seed, seed_given=self.seed is not None,
                       device=self.device,
                       topology=self.topology)

    def summary(self) -> str | None:
        """What the last call did, in a few lines (`gnnorch.execute.summary`); None before
        the first call."""
        return self._summary

    def __repr__(self) -> str:
        train = getattr(self, "train", None)     # (also while __init__ raises)
        name = getattr(train, "__qualname__", repr(train))
        plan = getattr(self, "plan", None) or "plan at the first call"
        return f"Runtime({name}, {plan}, device={getattr(self, 'device', None)!r})"


VALID_OPTIONS = tuple(name for name, p in inspect.signature(Runtime).parameters.items()
                      if p.kind is inspect.Parameter.KEYWORD_ONLY)
"""The keyword arguments `Runtime` takes, read from its signature."""
