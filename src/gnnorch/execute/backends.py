"""Where the ranks of one run live: `run(plan, request, hooks) -> (value, RunInfo)`.

Three backends, one interface (``backend.run(plan, request, hooks)``), chosen in one place
(`backend_for`):

* `InProcess`: one rank, the caller's own process. Nothing is started or pickled, so a small
  job pays only for installing the seams; binding (affinity, torch threads) is applied for the
  call and restored afterwards. Hooks are the caller's own objects.
* `RankProcesses`: p fresh rank processes we start and watch (`gnnorch.launch.supervisor`);
  each rank runs a copy of the `RankJob` (hooks included) from `gnnorch.launch.worker`.
* `ExistingWorld`: this process is one rank of a torch.distributed world someone else started
  (torchrun, or the user's own ``init_process_group``): rank and world size come from the
  group or the environment (`world`), there is no supervisor and nothing to send; every
  process of the world calls `run` itself and gets its own rank's value (`world_run`).
  Inside a world it is always this one: `processes` must equal the world's size.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import time
import warnings
from typing import Any, Sequence

import torch

from ..errors import GnnorchWarning
from ..launch.context import RankProcess, bound_for_call
from ..launch.plan import CorePlan
from ..launch.supervisor import LaunchSpec, RankGroup
from . import world
from .caller_state import CallerState
from .hooks import Hook, muted
from .info import RunInfo
from .output import OutputCapture
from .rank import RankJob
from .request import Request
from .watched import WatchedJob, failure_key
from .world_run import run_in_world


class Backend:
    """Runs every rank of one run of `request` under `plan`."""

    #: True when the user's function runs in the caller's process: hooks are the caller's own
    #: objects (not copies), so they can share state with it while the function runs
    in_caller: bool = False

    def run(self, plan: CorePlan, request: Request,
            hooks: Sequence[Hook] = ()) -> tuple[Any, RunInfo]:
        raise NotImplementedError


class InProcess(Backend):
    """One rank, in the caller's process (p = 1)."""

    in_caller = True

    def run(self, plan: CorePlan, request: Request,
            hooks: Sequence[Hook] = ()) -> tuple[Any, RunInfo]:
        if plan.processes != 1:
            raise ValueError(f"InProcess runs one rank, the plan has {plan.processes}")
        cores = request.cores(plan)
        process = RankProcess(rank=0, world_size=1, plan=plan,
                              cores=cores[0] if cores else None)
        job = RankJob(request.options, request.seed, tuple(hooks), device=request.device,
                      seed_given=request.seed_given)
        start = time.perf_counter()
        with bound_for_call(process.cores, plan.threads):
            with OutputCapture() if muted(hooks) else contextlib.nullcontext():
                value, summary = job(process, request.fn, request.args, request.kwargs)
            wall = time.perf_counter() - start
        return value, RunInfo.from_summaries(plan, cores, request.device, None, wall,
                                             request.options, {0: summary})


class RankProcesses(Backend):
    """p rank processes started, fed and watched from the caller's process."""

    def run(self, plan: CorePlan, request: Request,
            hooks: Sequence[Hook] = ()) -> tuple[Any, RunInfo]:
        cores = request.cores(plan)
        log_dir = request.logs()
        log_dir.mkdir(parents=True, exist_ok=True)
        job = RankJob(request.options, request.seed, tuple(hooks),
                      decisions=_export_decisions(request, log_dir),
                      rng_state=torch.get_rng_state(), device=request.device,
                      seed_given=request.seed_given, caller=CallerState.capture())
        token = secrets.token_hex(8)
        spec = LaunchSpec(plan=plan, cores=cores, log_dir=log_dir,
                          backend="nccl" if request.device == "cuda" else "gloo",
                          gpus=_gpus(plan, request.device),
                          start_timeout=request.start_timeout,
                          collective_timeout=request.collective_timeout,
                          rank0_log=muted(hooks), failure_key=failure_key(token),
                          rank_start=request.launch.rank_start)
        watched = WatchedJob(job, token, request.collective_timeout)
        result = RankGroup(spec).run(watched, request.fn, request.args, request.kwargs)
        info = RunInfo.from_summaries(plan, cores, request.device, log_dir, result.wall_seconds,
                                      request.options, result.summaries)
        for rank_stats in info.stats.values():
            rank_stats["launch"] = {"rank_start": result.rank_start}
        _warn_if_arguments_changed(info, plan.processes)
        return result.value, info


def _warn_if_arguments_changed(info: RunInfo, processes: int) -> None:
    """Warn when a rank changed in place a tensor of the arguments that every rank shares
    (`launch.serialize`): each of the `processes` ranks made that change in the same memory."""
    changed = next((s["arguments_changed_in_place"] for s in info.stats.values()
                    if s.get("arguments_changed_in_place")), None)
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5
                                          else "")
        warnings.warn(GnnorchWarning(
            f"the function changed {len(changed)} tensor(s) of its arguments in place "
            f"({shown}). The {processes} ranks share their arguments' memory, so each rank made "
            f"that change in it: an in-place update such as `data.x /= 2` happened "
            f"{processes} times, and the run may differ from one process's. Change a copy "
            f"(`data.x = data.x / 2`), or use processes=1."), stacklevel=2)


class ExistingWorld(Backend):
    """This process is one rank of a torch.distributed world started by someone else.

    The world's size and this process's rank come from its initialised default group or from
    torchrun's environment (`world.detect`); the group is initialised here unless it already is
    (`world.join`); this rank binds itself to its local rank's share of the node's cores
    (LOCAL_RANK of LOCAL_WORLD_SIZE) and then runs ``RankJob(...)(RankProcess(...), fn, args,
    kwargs)`` exactly as our own rank processes do, from rank 0's shuffle seed and RNG state.
    There is no supervisor and no payload: every process of the world runs the user's script
    and calls `run` itself; the value returned is this rank's, the `RunInfo` (every rank's
    cores, epochs and statistics) the same in all ranks. Affinity and torch threads are
    restored afterwards, as `InProcess` does. A rank that fails fails the world: the others
    raise naming it (`watchdog`), none waits past the collective timeout.
    """

    in_caller = True

    def run(self, plan: CorePlan, request: Request,
            hooks: Sequence[Hook] = ()) -> tuple[Any, RunInfo]:
        return run_in_world(plan, request, hooks)


def backend_for(plan: CorePlan, request: Request) -> Backend:
    """The backend that runs `plan`: inside a torch.distributed world (torchrun's environment,
    or an initialised default group) this process's rank of it; else the caller's process for
    one rank, rank processes for several."""
    if world.present():
        return ExistingWorld()
    if plan.processes == 1:
        return InProcess()
    return RankProcesses()


def run(plan: CorePlan, request: Request,
        hooks: Sequence[Hook] = ()) -> tuple[Any, RunInfo]:
    """Run `request` under `plan` with `hooks`; returns (rank 0's value -- this rank's own in an
    existing world --, what the run did)."""
    return backend_for(plan, request).run(plan, request, hooks)


def _gpus(plan: CorePlan, device: str) -> list[int] | None:
    """One visible GPU per rank (rank r sees only its own, as cuda:0)."""
    if device != "cuda":
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [int(x) for x in visible.split(",") if x.strip()] if visible else None
    return [ids[r] if ids else r for r in range(plan.processes)]


def _export_decisions(request: Request, log_dir) -> str | None:  # noqa: ANN001 - Path
    """The rewrite decisions measured in this process, written for the ranks (so a layer shape
    measured by an earlier run is not probed again in every rank)."""
    if request.options.rewrite is False:
        return None
    from ..rewrite.decisions import export_decisions

    path = log_dir / f"rewrite-decisions-{os.getpid()}.json"
    try:
        export_decisions(path)
    except OSError:
        return None
    return str(path)
