"""One rank's session, whoever started this process: the rank context, every seam, the
caller's hooks around the user's function.

Every backend ends here: the one-rank path calls `RankJob` in the caller's process, our rank
processes call it from `gnnorch.launch.worker` (it travels to them by value), and every rank
of an existing torch.distributed world calls it (`execute.world_run`). The seams themselves are
built and wired by `intercept.session.session(ctx)`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch

from ..device.twin import concrete_device
from ..run_options import RunOptions
from ..intercept.session import session
from ..launch import fork_guard
from ..launch.context import RankContext, RankProcess
from ..rewrite.decisions import load_decisions
from .caller_state import CallerState
from .hooks import Hook, finish_all, prepare_all


@dataclasses.dataclass
class RankJob:
    """What each rank of one run does, besides the facts of its process: picklable, called as
    ``job(process, fn, args, kwargs) -> (value, summary)`` (`RankContext.summary()`)."""

    options: RunOptions
    seed: int
    hooks: tuple[Hook, ...] = ()
    decisions: str | None = None   # rewrite decisions the caller's process measured (a file)
    # the caller's torch CPU generator state: every rank process starts from it, so work that
    # is not sharded (a full-batch step, a link loader) draws what one process would draw
    rng_state: torch.Tensor | None = None
    device: str = "cpu"            # the run's training device (`Request.device`)
    seed_given: bool = False       # `seed` is the user's ``Runtime(seed=)`` (`Request`)
    # the caller's argv, Python / numpy generators and torch settings, which our rank
    # processes take over (`execute.caller_state`); None: this process is the caller's own,
    # or a process of someone else's world, which runs the user's script itself
    caller: CallerState | None = None

    def context(self, process: RankProcess) -> RankContext:
        return RankContext(rank=process.rank, world_size=process.world_size, plan=process.plan,
                           cores=process.cores, seed=self.seed, seed_given=self.seed_given,
                           backend=process.backend,
                           options=self.options)

    def __call__(self, process: RankProcess, fn: Callable, args: tuple,
                 kwargs: dict) -> tuple[Any, dict]:
        if self.decisions is not None:
            load_decisions(self.decisions)
        if self.caller is not None:
            self.caller.apply()
        if self.rng_state is not None:
            torch.set_rng_state(self.rng_state)
        ctx = self.context(process)
        # collectives' threads beside the user's forks: see `launch.fork_guard`
        with fork_guard.guarding(enabled=process.world_size > 1) as guarded:
            forks_before = fork_guard.stats()
            value = run_session(ctx, fn, args, kwargs, self.hooks, process.comm_device,
                                self.training_device(process))
            if guarded:
                ctx.stats["fork_guard"] = fork_guard.stats().since(forks_before).to_dict()
        return value, ctx.summary()

    def training_device(self, process: RankProcess) -> torch.device | None:
        """The device this rank trains on (None: the CPU), which `session` hands to the GPU
        data path: its collectives' device when it has one (nccl); else the run's device, a
        bare ``"cuda"`` being this process's current CUDA device, which the launcher made the
        rank's own (cuda:LOCAL_RANK in a torchrun world, `execute.world.join`; cuda:0 under a
        per-rank CUDA_VISIBLE_DEVICES in our rank processes), so a CUDA run whose group is
        gloo trains, and is served, on the rank's GPU. Every backend passes `device`."""
        if process.comm_device is not None:
            return process.comm_device
        if self.device == "cpu":
            return None
        return concrete_device(self.device)


def run_session(ctx: RankContext, fn: Callable, args: tuple, kwargs: dict,
                hooks: Sequence[Hook] = (), comm_device: torch.device | None = None,
                device: torch.device | None = None) -> Any:
    """`fn(*args, **kwargs)` under the runtime's seams in this rank, with `hooks` around it
    (`gnnorch.execute.hooks`); `device`: the device it trains on (None: the CPU). Returns
    fn's value, or None when a hook says the exception that ended it was its normal end."""
    prepare_all(hooks, ctx)
    try:
        with session(ctx, comm_device, device, arguments=(args, kwargs)):
            value = fn(*args, **kwargs)
    except BaseException as exc:
        if finish_all(hooks, ctx, exc):
            return None
        raise
    finish_all(hooks, ctx, None)
    return value
