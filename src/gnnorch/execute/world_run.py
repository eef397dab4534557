"""One run in one rank of an existing world (`ExistingWorld`): what `RankProcesses` ranks do
in `gnnorch.launch.worker`, done in the user's own process.

Invariants:
* the rank runs ``RankJob(options, seed, hooks, rng_state)(RankProcess(rank, world_size,
  ...), fn, args, kwargs)`` with rank 0's seed and RNG state, so seeds are sharded over the
  whole world and gradients averaged over it exactly as in gnnorch's own p-rank runs;
* it is bound to its local rank's share of the node's usable cores (and cuda:LOCAL_RANK on
  CUDA) for the call only: affinity and torch threads are restored afterwards;
* with several ranks, a `Watchdog` watches the run: a failing rank re-raises its own exception
  with a note naming it, every other rank raises `RankFailedError` (`RankDiedError` for a
  rank that died) naming the rank that failed first, and none waits on a dead world;
* every rank returns its own value and the same `RunInfo` (every rank's cores and summary).
"""
from __future__ import annotations

import contextlib
import re
import secrets
import time
from typing import Any, Sequence

import torch
import torch.distributed as dist

from ..errors import RankDiedError, RankFailedError
from ..intercept import join
from ..launch.context import RankProcess, bound_for_call
from ..launch.plan import CorePlan, RankCores, assign_cores
from ..launch.topology import current_topology
from . import world
from .hooks import Hook, muted
from .info import RunInfo
from .output import OutputCapture
from .rank import RankJob
from .request import Request
from .watchdog import GRACE, SILENT, Watchdog, own_client

# a live rank's heartbeat is never silent this long; a silent rank is reported after it
DEAD_AFTER_SECONDS = 60.0


def run_in_world(plan: CorePlan, request: Request,
                 hooks: Sequence[Hook] = ()) -> tuple[Any, RunInfo]:
    """Run `request` as this process's rank of its world; (this rank's value, RunInfo)."""
    process = rank_process(plan, request)
    seed, rng_state, token = request.seed, None, None
    if process.world_size > 1:   # every rank starts as rank 0 (RankProcesses: as the caller)
        seed, rng_state, token = world.agree(
            [request.seed, torch.get_rng_state(), secrets.token_hex(8)], process.comm_device)
    job = RankJob(request.options, seed, tuple(hooks), rng_state=rng_state,
                  device=request.device, seed_given=request.seed_given)
    start = time.perf_counter()
    with bound_for_call(process.cores, plan.threads):
        value, ranks = _watched(job, process, request, hooks, token)
        wall = time.perf_counter() - start
    cores = (None if any(c is None for _, c in ranks)
             else [RankCores(**c) for _, c in ranks])
    return value, RunInfo.from_summaries(plan, cores, request.device, None, wall,
                                         request.options,
                                         {r: s for r, (s, _) in enumerate(ranks)})


def rank_process(plan: CorePlan, request: Request) -> RankProcess:
    """This process as a rank of its world, the group joined, its cores chosen (not bound)."""
    found = world.detect()
    if found is None:
        raise RuntimeError("not inside a torch.distributed world: no default process group "
                           "and no RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT in the environment")
    if plan.processes != found.size:
        raise ValueError(f"processes={plan.processes} but this process is rank {found.rank} of "
                         f"{found.size} in {found.source}; pass processes={found.size} or "
                         f"leave it out")
    found = world.with_layout(found, request.device, request.collective_timeout)
    backend = world.join(found, request.device, request.collective_timeout)
    return RankProcess(rank=found.rank, world_size=found.size, plan=plan,
                       cores=local_cores(plan, found.rank, found.local_rank, found.local_size,
                                         request),
                       backend=backend,
                       comm_device=torch.device("cuda", found.local_rank)
                       if backend == "nccl" else None)


def _watched(job: RankJob, process: RankProcess, request: Request, hooks: Sequence[Hook],
             token: str | None) -> tuple[Any, list]:
    """The job under the watchdog (several ranks); (value, every rank's (summary, cores))."""
    limit = request.collective_timeout
    dog = (Watchdog(own_client(world.default_store()), token or "", process.rank,
                    process.world_size, dead_after=min(DEAD_AFTER_SECONDS, limit),
                    grace=min(GRACE, limit))
           if process.world_size > 1 else None)
    with dog if dog is not None else contextlib.nullcontext(), \
            join.watching(dog) if dog is not None else contextlib.nullcontext():
        try:
            with OutputCapture() if muted(hooks) else contextlib.nullcontext():
                value, summary = job(process, request.fn, request.args, request.kwargs)
            mine = (summary, process.cores.to_dict() if process.cores is not None else None)
            return value, world.gather(mine) if dog is not None else [mine]
        except BaseException as exc:
            if dog is None:
                raise
            dog.handling = True   # first: no stop from the watchdog from here on
            error = _world_failure(dog, exc)
            if error is exc:
                raise
            raise error from exc


def local_cores(plan: CorePlan, rank: int, local_rank: int, local_size: int,
                request: Request) -> RankCores | None:
    """This rank's cores: its local rank's share of the node's usable cores (None: no
    binding). Every rank of the node computes the same split, so shares are disjoint."""
    if not request.bind:
        return None
    local = CorePlan(local_size, plan.sampler_cores, plan.threads)
    mine = assign_cores(local, request.topology or current_topology())[local_rank]
    return RankCores(rank=rank, trainer_cpus=mine.trainer_cpus, sampler_cpus=mine.sampler_cpus)


_POSTED = re.compile(r"rank (\d+): (.*)", re.DOTALL)


def _communication_error(exc: BaseException) -> bool:
    """Whether `exc` says a collective failed (a peer's doing) rather than this rank's code."""
    if isinstance(exc, dist.DistError):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, RuntimeError) and any(
        word in text for word in ("gloo", "nccl", "connection closed", "connection reset",
                                  "broken pipe", "timed out"))


def _world_failure(dog: Watchdog, exc: BaseException) -> BaseException:
    """The exception this rank raises after its run raised `exc` (module docstring): `exc`
    itself, noted, when this rank failed first; else `RankFailedError` / `RankDiedError`
    naming the rank that did."""
    own = f"rank {dog.rank}: {type(exc).__qualname__}: {exc}"[:4000]
    if dog.reported:    # this rank found the failure (a collective past its bound) and says it
        if hasattr(exc, "add_note"):
            exc.add_note(f"[gnnorch] raised in rank {dog.rank} of {dog.size} (torch.distributed "
                         f"world); the other ranks were stopped")
        return exc
    if dog.stopping is not None:
        cause = dog.stopping
    else:
        cause = dog.cause(own, communication=_communication_error(exc))
    match = _POSTED.match(cause)
    if match is None:     # not another rank's failure: the world itself is gone
        return RankFailedError(f"rank {dog.rank} of {dog.size} stopped: {cause}")
    failed, what = int(match.group(1)), match.group(2)
    if failed == dog.rank:
        if hasattr(exc, "add_note"):
            exc.add_note(f"[gnnorch] raised in rank {dog.rank} of {dog.size} (torch.distributed "
                         f"world); the other ranks were stopped")
        return exc
    kind = RankDiedError if what.startswith(SILENT) else RankFailedError
    return kind(f"rank {failed} of {dog.size} failed: {what}; rank {dog.rank} stopped")
