"""One run of the user's function under the runtime: the rank context plus every seam."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

import torch

from ..launch import context
from ..launch.context import RankContext
from .gradsync import GradientSynchronizer
from .layers import LayerSeam
from .loader import NeighborLoaderInterceptor


_COST_MODELS: dict = {}
_DECISIONS: dict = {}


def shared_cost_models() -> dict:
    """The rewrite cost models of this process (device and thread count -> fitted model):
    calibrated once per process and refined by every run in it."""
    return _COST_MODELS


def shared_decisions() -> tuple:
    """The rewrite engine's decision tables of this process (order per layer signature and
    shape bucket; host or device placement): measured once per process, reused by every run
    in it (the tuner's default run, its in-process probes, the real run)."""
    if not _DECISIONS:
        from ..rewrite.host import PlacementPlanner
        from ..rewrite.planner import Planner

        _DECISIONS["orders"], _DECISIONS["placements"] = Planner(), PlacementPlanner()
    return _DECISIONS["orders"], _DECISIONS["placements"]


def export_decisions(path: str | os.PathLike) -> None:
    """Write this process's measured decisions to `path` (JSON) for rank processes."""
    orders, placements = shared_decisions()
    Path(path).write_text(json.dumps({"orders": orders.export(),
                                      "placements": placements.export()}))


def load_decisions(path: str | os.PathLike) -> None:
    """Adopt decisions another process of this machine measured (`export_decisions`); a
    missing or unreadable file is ignored (the buckets are then probed here)."""
    try:
        rows = json.loads(Path(path).read_text())
        orders, placements = shared_decisions()
        orders.load(rows["orders"])
        placements.load(rows["placements"])
    except (OSError, ValueError, KeyError, TypeError):
        pass


@contextlib.contextmanager
def session(ctx: RankContext, comm_device: torch.device | None = None) -> Iterator[RankContext]:
    """Activate `ctx`, intercept NeighborLoader and the MessagePassing layers (when a layer
    feature is on) and, with > 1 rank, synchronise gradients.

    Everything is undone on exit, also when the user's function raises; each seam's statistics
    land in `ctx.stats`.
    """
    if ctx.features.allocator == "tuned":
        from ..launch.allocator import tune_allocator

        ctx.stats["allocator"] = {"tuned": tune_allocator()}
    with contextlib.ExitStack() as stack:
        stack.enter_context(context.activate(ctx))
        stack.enter_context(NeighborLoaderInterceptor().installed())
        cache = ctx.features.cache_config
        rewrites = None
        if ctx.features.rewrite is not False:
            from ..rewrite.engine import RewriteEngine

            orders, placements = shared_decisions()
            rewrites = RewriteEngine(ctx.features.rewrite, cost_models=shared_cost_models(),
                                     planner=orders, placements=placements)
        if ctx.features.trim or cache is not None or rewrites is not None:
            seam = LayerSeam(trim=ctx.features.trim, rewrites=rewrites)
            stack.enter_context(seam.installed())
            ctx.layer_seam = seam
            stack.callback(lambda: ctx.stats.__setitem__("trim", seam.stats()))
            if rewrites is not None:
                stack.callback(lambda: ctx.stats.__setitem__("rewrite", rewrites.report()))
        if cache is not None:  # the historical-embedding cache hooks into the layer seam
            from ..cache.manager import CacheManager

            manager = CacheManager(ctx, cache)
            stack.enter_context(manager.installed())
            seam.layer_hook = manager
            ctx.cache = manager
            stack.callback(lambda: ctx.stats.__setitem__("cache", manager.stats()))
        if ctx.distributed:
            stack.enter_context(GradientSynchronizer(ctx.world_size, comm_device).installed())
        yield ctx
