"""One pass over an intercepted loader: one call of PyG's own ``__iter__`` with the workers and
the RNG stream the pass runs with. An epoch is one pass, or two when its sharding is decided
after its first batch (`head_then_rest`, `epoch_role.decided_after_first_batch`).

* Workers (`plan_workers`): a loader that samples on the device runs without workers; one whose
  user left ``num_workers`` out (and asked for no persistent workers) gets the rank plan's
  sampler cores, each pinned to one of the rank's sampler CPUs while its iterator starts them
  (`pinned_workers`: PyG's ``enable_cpu_affinity`` where the loader has it, as PyG's node and
  link loaders do; else, for PyG's graph-level ``DataLoader``, a ``worker_init_fn`` of the
  same effect around the user's own); any other keeps the user's.
* The stream (`rank_streams`): in the trainer's process every draw of the pass runs in the
  stream's state (`independent_draws`); with workers the stream is the DataLoader's
  ``generator`` while the workers' base seed is drawn, and the user's generator is put back.
"""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .feeds import LoaderState
from .rank_streams import independent_draws

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from ..launch.context import RankContext

__all__ = ["PinnedWorkerInit", "head_then_rest", "pinned_workers", "plan_workers",
           "start_pass"]


def plan_workers(loader: NeighborLoader, state: LoaderState, ctx: RankContext) -> bool:
    """Set the loader's workers for the epoch starting now; True when they are the plan's."""
    planned = (state.user_num_workers is None and not loader.persistent_workers
               and not state.samples_on_device)
    if state.samples_on_device:
        loader.num_workers = 0
    elif planned:
        loader.num_workers = ctx.plan.sampler_cores
        if loader.num_workers > 0 and loader.prefetch_factor is None:
            loader.prefetch_factor = 2
    return planned


def start_pass(loader: NeighborLoader, ctx: RankContext,
               pyg_iter: Callable[[NeighborLoader], Iterator[Any]],
               stream: torch.Generator | None, planned: bool) -> Iterator[Any]:
    """PyG's iterator over `loader` (`pyg_iter`), its workers pinned where they are the plan's
    (`planned`), its draws from `stream` where one is given."""
    in_process = int(loader.num_workers or 0) == 0
    users_generator = loader.generator
    if stream is not None and not in_process:   # the workers' base seed: the rank's
        loader.generator = stream
    cpus = ctx.sampler_cpus
    try:
        if planned and loader.num_workers > 0 and cpus and len(cpus) == loader.num_workers:
            with pinned_workers(loader, list(cpus)):
                iterator = pyg_iter(loader)
        else:
            iterator = pyg_iter(loader)
    finally:
        loader.generator = users_generator
    if stream is not None and in_process:
        iterator = independent_draws(iter(iterator), stream)
    return iterator


class PinnedWorkerInit:
    """A DataLoader ``worker_init_fn``: worker ``w`` runs on CPU ``cpus[w]`` only, then the
    user's own ``worker_init_fn`` (if any) runs. A plain class, so that it pickles where
    workers are spawned."""

    def __init__(self, cpus: list[int], users: Callable[[int], None] | None) -> None:
        self.cpus, self.users = cpus, users

    def __call__(self, worker_id: int) -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {self.cpus[worker_id]})
        if self.users is not None:
            self.users(worker_id)


@contextlib.contextmanager
def pinned_workers(loader: NeighborLoader, cpus: list[int]) -> Iterator[None]:
    """While the block starts `loader`'s workers, worker w is pinned to ``cpus[w]``."""
    if hasattr(loader, "enable_cpu_affinity"):   # PyG's AffinityMixin (node, link loaders)
        with loader.enable_cpu_affinity(loader_cores=cpus):
            yield
        return
    users = loader.worker_init_fn
    loader.worker_init_fn = PinnedWorkerInit(cpus, users)
    try:
        yield
    finally:
        loader.worker_init_fn = users


def head_then_rest(start: Callable[[], Iterator[Any]], decide: Callable[[], None],
                   abandon: Callable[[], None]) -> Iterator[Any]:
    """An epoch's batches as two passes: the first (``start()``, the epoch's head), then
    ``decide()`` -- called when the user asks for the batch after the head, so after the head's
    step ran -- then the second (``start()`` again, set up by what ``decide`` chose).
    ``abandon()`` runs instead of the second pass when it never started (the user left the
    loop during the head, or the head raised)."""
    rest_started = False
    try:
        yield from start()
        decide()
        rest_started = True
        yield from start()
    finally:
        if not rest_started:
            abandon()
