"""Our own rank processes under the same watchdog as a torchrun world's ranks.

`RankProcesses` sends each rank a `WatchedJob` instead of the bare `RankJob`: in the rank it
runs a `Watchdog` (heartbeats and where the rank's gradient seam is, in the launch's store, the
supervisor's) around the job, so that a collective that waits past the run's bound names the
ranks that did not arrive and where each was (`intercept.join`). It does not stop ranks
(``stops=False``): the rank whose wait expired raises `CollectiveError`, and the supervisor
stops every rank when it reports it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..intercept import join
from ..launch.context import RankProcess
from . import world
from .rank import RankJob
from .watchdog import Watchdog, failure_key, own_client

__all__ = ["WatchedJob", "failure_key", "DEAD_AFTER_SECONDS"]

# a live rank's heartbeat is never silent this long; a silent rank is posted after it
DEAD_AFTER_SECONDS = 60.0


@dataclasses.dataclass
class WatchedJob:
    """A `RankJob` run under a non-stopping `Watchdog` in a rank of `RankProcesses`; called as
    the job is: ``watched(process, fn, args, kwargs) -> (value, summary)``."""

    job: RankJob
    token: str
    bound: float

    def __call__(self, process: RankProcess, fn: Callable, args: tuple,
                 kwargs: dict) -> tuple[Any, dict]:
        if process.world_size == 1:
            return self.job(process, fn, args, kwargs)
        dog = Watchdog(own_client(world.default_store()), self.token, process.rank,
                       process.world_size, dead_after=min(DEAD_AFTER_SECONDS, self.bound),
                       stops=False)
        with dog, join.watching(dog):
            return self.job(process, fn, args, kwargs)
