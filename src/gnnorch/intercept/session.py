"""One run of the user's function under the runtime: the rank context plus every seam, wired.

`session(ctx)` is the one place where the seams are built and given their collaborators
(constructor arguments; no seam looks another up):

    UserDistribution                       the user's own init_process_group (> 1 rank)
    PartitionManager(ctx, distribution)    partitioned features (``partition_features``)
    RewriteEngine                          exact layer rewrites (``rewrite``)
    CacheManager(config, rank facts)       the historical-embedding cache (``cache``)
    LayerSeam(trim, rewrites, hooks=[cache])
    DevicePathHook                         the GPU data path (issue 21; `_device_path`)
    GradientSynchronizer(world_size, comm_device, distribution)   (> 1 rank)
    DataSeed(ctx, comm_device, distribution)   the run's data seed, fixed at its first loader
    LoaderInterceptor(ctx, layer_seam, cache, partition, distribution, device_path,
                      optimizers=the synchroniser, data_seed,
                      order=EpochOrder(the synchroniser, distribution))   PyG's shard order

Everything is installed for the block and undone on exit, also when the user's function
raises; each seam's statistics land in `ctx.stats`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from .. import compat
from ..launch import context
from ..launch.context import RankContext
from ..rewrite.decisions import (load_disk_decisions, save_disk_decisions, shared_cost_models,
                                 shared_decisions)
from .data_seed import DataSeed
from .epoch_order import EpochOrder
from .feeds import DevicePathHook
from .gradsync import GradientSynchronizer
from .layers import LayerSeam
from .loader import LoaderInterceptor
from .procgroup import UserDistribution

if TYPE_CHECKING:
    from ..cache.manager import CacheManager
    from .features_fetch import PartitionManager

__all__ = ["DevicePathFactory", "Seams", "active", "session"]

# builds the run's device path from its rank context (None: no device path for this run)
DevicePathFactory = Callable[[RankContext], "DevicePathHook | None"]


@dataclasses.dataclass
class Seams:
    """The seams one session built. For tests and debugging only (`active()`): no seam reads
    this; each holds its own collaborators."""

    loader: LoaderInterceptor
    distribution: UserDistribution
    layer_seam: LayerSeam | None = None
    cache: CacheManager | None = None
    partition: PartitionManager | None = None
    device_path: DevicePathHook | None = None


_ACTIVE: Seams | None = None


def active() -> Seams | None:
    """The running session's seams (None outside a run). For tests and debugging: gnnorch's
    own code never reads it."""
    return _ACTIVE


@contextlib.contextmanager
def session(ctx: RankContext, comm_device: torch.device | None = None,
            device: torch.device | None = None,
            device_path: DevicePathFactory | None = None,
            arguments: tuple[tuple, dict] = ((), {})) -> Iterator[RankContext]:
    """Activate `ctx` and install the run's seams (the module docstring): NeighborLoader always
    (with the partitioned feature store and the device path when they are on), MessagePassing
    when a layer feature is on (trim, rewrite, cache), gradient synchronisation with > 1 rank.
    `comm_device`: the device collectives use (None: CPU / gloo); `device`: the device the
    rank trains on (None: the CPU); `device_path` builds the GPU data path instead of
    `_device_path`; `arguments`: the function's (args, kwargs), whose parameters the ranks
    pair first (`param_order.ParameterOrder.note_arguments`)."""
    global _ACTIVE
    from ..launch.allocator import heap_usage, tune_allocator

    ctx.stats["allocator"] = {"tuned": ctx.options.allocator == "tuned" and tune_allocator()}
    with contextlib.ExitStack() as stack:
        stack.enter_context(context.activate(ctx))
        stack.enter_context(_compiled_module_hook_warning_silenced())
        stack.callback(lambda: ctx.stats["allocator"].update(heap_usage() or {}))
        # (the names this run asked for: resolving the rest would build PyG layers)
        stack.callback(lambda: ctx.stats.__setitem__("compat",
                                                     compat.unavailable(resolve=False)))
        distribution = UserDistribution()
        if ctx.distributed:  # the user's own init_process_group joins the runtime's group
            stack.enter_context(distribution.installed())
            stack.callback(lambda: ctx.stats.__setitem__("distributed", distribution.stats()))
        cache = _cache(ctx)
        partition = None
        if ctx.options.partition_config is not None:   # the partitioned feature store
            from .features_fetch import PartitionManager

            partition = PartitionManager(ctx, ctx.options.partition_config, distribution,
                                         cache_on=cache is not None)
            stack.callback(lambda: ctx.stats.__setitem__("partition", partition.stats()))
            stack.callback(partition.close)              # (callbacks run last-in first)
        layer_seam = _layer_seam(ctx, stack, cache)
        path = (device_path(ctx) if device_path is not None
                else _device_path(ctx, device or comm_device))
        if path is not None:   # (after the seams are removed) loaders given back as built
            stack.callback(path.close)
        sync = (GradientSynchronizer(ctx.world_size, comm_device, distribution)
                if ctx.distributed else None)
        if sync is not None:   # a model passed in: numbered before the function builds more
            sync.optimizers.order.note_arguments(*arguments)
        loaders = LoaderInterceptor(ctx, layer_seam=layer_seam, cache=cache,
                                    partition=partition, distribution=distribution,
                                    device_path=path, optimizers=sync,
                                    data_seed=DataSeed(ctx, comm_device, distribution),
                                    order=EpochOrder(sync, distribution, ctx.rank))
        stack.enter_context(loaders.installed())
        if layer_seam is not None:
            stack.enter_context(layer_seam.installed())
            ctx.one_off_meters.append(layer_seam.one_off_seconds)
            stack.callback(ctx.one_off_meters.remove, layer_seam.one_off_seconds)
            stack.callback(lambda: ctx.stats.__setitem__("trim", layer_seam.stats()))
        if cache is not None:
            # registered first, so it runs after the cache's own exit (LIFO): the statistics
            # are read once the background refresher's last job is drained, not while that
            # job may still be counting its rows in the worker thread
            stack.callback(lambda: ctx.stats.__setitem__("cache", cache.stats()))
            stack.enter_context(cache.installed(ctx.batch_callbacks))
        if sync is not None:
            stack.enter_context(sync.installed())
        _ACTIVE = Seams(loaders, distribution, layer_seam, cache, partition, path)
        try:
            yield ctx
        finally:
            _ACTIVE = None


def _cache(ctx: RankContext) -> CacheManager | None:
    """The historical-embedding cache of the run (``cache``), or None."""
    config = ctx.options.cache_config
    if config is None:
        return None
    from ..cache.manager import CacheManager

    cores = (len(ctx.cores.trainer_cpus) if ctx.cores is not None else int(ctx.plan.threads))
    return CacheManager(config, seed=lambda: ctx.data_seed, rank=ctx.rank,
                        distributed=ctx.distributed, trainer_cores=cores)


def _layer_seam(ctx: RankContext, stack: contextlib.ExitStack,
                cache: CacheManager | None) -> LayerSeam | None:
    """The MessagePassing seam when a layer feature is on (trim, rewrite, cache), with the
    rewrite engine below trimming and the cache as the chain's outer hook."""
    rewrites = None
    if ctx.options.rewrite is not False:
        from ..rewrite.engine import RewriteEngine

        threads = torch.get_num_threads()
        adopted = load_disk_decisions(threads)
        orders, placements = shared_decisions()
        rewrites = RewriteEngine(ctx.options.rewrite, cost_models=shared_cost_models(),
                                 planner=orders, placements=placements, model_decides=False)
        if ctx.rank == 0:  # measured decisions outlive the process (one writer)
            stack.callback(save_disk_decisions, threads)
        stack.callback(lambda: ctx.stats.__setitem__(
            "rewrite", {**rewrites.report(), "adopted_from_disk": adopted,
                        "overhead_s": rewrites.overhead_s}))
    if not (ctx.options.trim or cache is not None or rewrites is not None):
        return None
    return LayerSeam(trim=ctx.options.trim, rewrites=rewrites,
                     hooks=[cache] if cache is not None else ())


def _device_path(ctx: RankContext, device: torch.device | None) -> DevicePathHook:
    """The GPU data path of the run (issue 21), as `ctx.options.data_path` asks: THE place
    where it is built. It decides per loader (``mode="host"``, or no CUDA device with
    ``mode="auto"``: no loader is served, each says why in its stats)."""
    from .device_path import DevicePath

    return DevicePath(ctx, ctx.options.data_path, device)


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
