"""One run of the user's function under the runtime: the rank context plus every seam."""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch

from ..launch import context
from ..launch.context import RankContext
from ..rewrite.decisions import (load_disk_decisions, save_disk_decisions, shared_cost_models,
                                 shared_decisions)
from .gradsync import GradientSynchronizer
from .layers import LayerSeam
from .loader import NeighborLoaderInterceptor
from .procgroup import UserDistribution


@contextlib.contextmanager
def session(ctx: RankContext, comm_device: torch.device | None = None) -> Iterator[RankContext]:
    """Activate `ctx`, intercept NeighborLoader (with the partitioned feature store when
    `partition_features` is on) and the MessagePassing layers (when a layer feature is on)
    and, with > 1 rank, synchronise gradients.

    Everything is undone on exit, also when the user's function raises; each seam's statistics
    land in `ctx.stats`.
    """
    from ..launch.allocator import heap_usage, tune_allocator

    ctx.stats["allocator"] = {"tuned": ctx.options.allocator == "tuned" and tune_allocator()}
    with contextlib.ExitStack() as stack:
        stack.enter_context(context.activate(ctx))
        stack.enter_context(_compiled_module_hook_warning_silenced())
        stack.callback(lambda: ctx.stats["allocator"].update(heap_usage() or {}))
        distribution = UserDistribution()
        if ctx.distributed:  # the user's own init_process_group joins the runtime's group
            stack.enter_context(distribution.installed())
            stack.callback(lambda: ctx.stats.__setitem__("distributed", distribution.stats()))
        partition = None
        if ctx.options.partition_config is not None:   # the partitioned feature store
            from .features_fetch import PartitionManager

            partition = PartitionManager(ctx, ctx.options.partition_config, distribution)
            stack.callback(lambda: ctx.stats.__setitem__("partition", partition.stats()))
            stack.callback(partition.close)              # (callbacks run last-in first)
        stack.enter_context(NeighborLoaderInterceptor(distribution, partition).installed())
        cache = ctx.options.cache_config
        rewrites = None
        if ctx.options.rewrite is not False:
            from ..rewrite.engine import RewriteEngine

            threads = torch.get_num_threads()
            adopted = load_disk_decisions(threads)
            orders, placements = shared_decisions()
            rewrites = RewriteEngine(ctx.options.rewrite, cost_models=shared_cost_models(),
                                     planner=orders, placements=placements,
                                     model_decides=False)
            if ctx.rank == 0:  # measured decisions outlive the process (one writer)
                stack.callback(save_disk_decisions, threads)
        if ctx.options.trim or cache is not None or rewrites is not None:
            seam = LayerSeam(trim=ctx.options.trim, rewrites=rewrites)
            stack.enter_context(seam.installed())
            ctx.layer_seam = seam
            stack.callback(lambda: ctx.stats.__setitem__("trim", seam.stats()))
            if rewrites is not None:
                stack.callback(lambda: ctx.stats.__setitem__(
                    "rewrite", {**rewrites.report(), "adopted_from_disk": adopted,
                                "overhead_s": rewrites.overhead_s}))
        if cache is not None:  # the historical-embedding cache hooks into the layer seam
            from ..cache.manager import CacheManager

            manager = CacheManager(ctx, cache)
            stack.enter_context(manager.installed())
            seam.hooks.append(manager)
            ctx.cache = manager
            stack.callback(lambda: ctx.stats.__setitem__("cache", manager.stats()))
        if ctx.distributed:
            stack.enter_context(GradientSynchronizer(ctx.world_size, comm_device,
                                                     distribution).installed())
        yield ctx


@contextlib.contextmanager
def _compiled_module_hook_warning_silenced() -> Iterator[None]:
    """`torch.compile(model)` warns on every call while any global module hook exists, because
    the hooks then also fire for the `OptimizedModule` wrapper. The seams' global hooks are
    written for that (they step aside inside compiled regions and treat the wrapper as the
    model), so this one warning is filtered for the run; every other warning is untouched."""
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are "
                                              r"global hooks", category=UserWarning)
    entry = warnings.filters[0]
    try:
        yield
    finally:
        if entry in warnings.filters:
            warnings.filters.remove(entry)
            getattr(warnings, "_filters_mutated", lambda: None)()
