"""One pass over an intercepted loader: one call of PyG's own ``__iter__`` with the workers and
the RNG stream the pass runs with. An epoch is one pass, or two when its sharding is decided
after its first batch (`head_then_rest`, `epoch_role.decided_after_first_batch`).

* Workers (`plan_workers`): a loader that samples on the device runs without workers; a
  NeighborLoader or LinkNeighborLoader whose user left ``num_workers`` out (and asked for no
  persistent workers) gets the rank plan's sampler cores, each pinned to one of the rank's
  sampler CPUs through PyG's ``enable_cpu_affinity`` while its iterator starts them; any other
  keeps the user's, and a graph-level ``DataLoader`` left without ``num_workers`` keeps PyG's
  default, none: it has no ``enable_cpu_affinity``, and workers it starts again for every
  pass (programs evaluate on their training loader too) cost more than collating small
  graphs saves; a tuner probe cannot see that cost.
* The stream (`rank_streams`): in the trainer's process every draw of the pass runs in the
  stream's state (`independent_draws`); with workers the stream is the DataLoader's
  ``generator`` while the workers' base seed is drawn, and the user's generator is put back.
* The base seed otherwise: a sharded loader's pass (`epoch_order`) has made PyG's draws from
  the function's generator already, and hands the generator its iterator draws the base seed
  from instead (a copy taken before them).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .feeds import LoaderState
from .rank_streams import independent_draws

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from ..launch.context import RankContext

__all__ = ["head_then_rest", "plan_workers", "start_pass"]


def plan_workers(loader: NeighborLoader, state: LoaderState, ctx: RankContext) -> bool:
    """Set the loader's workers for the epoch starting now; True when they are the plan's."""
    planned = (state.kind != "graph" and state.user_num_workers is None
               and not loader.persistent_workers and not state.samples_on_device)
    if state.samples_on_device:
        loader.num_workers = 0
    elif planned:
        loader.num_workers = ctx.plan.sampler_cores
        if loader.num_workers > 0 and loader.prefetch_factor is None:
            loader.prefetch_factor = 2
    return planned


def start_pass(loader: NeighborLoader, ctx: RankContext,
               pyg_iter: Callable[[NeighborLoader], Iterator[Any]],
               stream: torch.Generator | None, planned: bool,
               base: torch.Generator | None = None) -> Iterator[Any]:
    """PyG's iterator over `loader` (`pyg_iter`), its workers pinned where they are the plan's
    (`planned`), its draws from `stream` where one is given, its base seed otherwise from
    `base` where one is given (`epoch_order.EpochOrder.begin`)."""
    in_process = int(loader.num_workers or 0) == 0
    users_generator = loader.generator
    if stream is not None and not in_process:   # the workers' base seed: the rank's
        loader.generator = stream
    elif base is not None:
        loader.generator = base
    cpus = ctx.sampler_cpus
    try:
        if planned and loader.num_workers > 0 and cpus and len(cpus) == loader.num_workers:
            with loader.enable_cpu_affinity(loader_cores=cpus):
                iterator = pyg_iter(loader)
        else:
            iterator = pyg_iter(loader)
    finally:
        loader.generator = users_generator
    if stream is not None and in_process:
        iterator = independent_draws(iter(iterator), stream)
    return iterator


def head_then_rest(head: Callable[[], Iterator[Any]], decide: Callable[[], None],
                   rest: Callable[[], Iterator[Any]], abandon: Callable[[], None]
                   ) -> Iterator[Any]:
    """An epoch's batches as two passes: the first (``head()``, the epoch's head), then
    ``decide()`` -- called when the user asks for the batch after the head, so after the head's
    step ran -- then the second (``rest()``, set up by what ``decide`` chose). ``abandon()``
    runs instead of the second pass when it never started (the user left the loop during the
    head, or the head raised)."""
    rest_started = False
    try:
        yield from head()
        decide()
        rest_started = True
        yield from rest()
    finally:
        if not rest_started:
            abandon()
