"""The one-rank path: call the user's function in the caller's own process.

Nothing is started or pickled, so a small job pays only for installing the seams (well under a
millisecond). Binding (affinity, torch threads) is applied for the call and restored afterwards.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import torch

from ..intercept.session import session
from ..features import Features
from .context import RankContext, bind_current_process
from .plan import CorePlan, RankCores


def run_in_process(fn: Callable, args: tuple, kwargs: dict, plan: CorePlan,
                   cores: RankCores | None, seed: int,
                   features: Features | None = None,
                   prepare: Callable[[RankContext], None] | None = None) -> tuple[Any, dict, float]:
    """Return (fn's value, the rank's summary, wall seconds); the caller's binding is restored.

    `prepare(ctx)` runs on the fresh rank context before `fn` (the auto-tuner installs its
    probe meter and epoch feed there, and keeps `ctx` to read a probe's summary when the probe
    ends `fn` early with `gnnorch.tune.probe.ProbeEnd`)."""
    saved_affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    saved_threads = torch.get_num_threads()
    ctx = RankContext(rank=0, world_size=1, plan=plan, cores=cores, seed=seed,
                      features=features or Features())
    if prepare is not None:
        prepare(ctx)
    start = time.perf_counter()
    try:
        bind_current_process(cores, plan.threads)
        with session(ctx):
            value = fn(*args, **kwargs)
        return value, ctx.summary(), time.perf_counter() - start
    finally:
        if saved_affinity is not None and cores is not None:
            os.sched_setaffinity(0, saved_affinity)
        if torch.get_num_threads() != saved_threads:
            torch.set_num_threads(saved_threads)
