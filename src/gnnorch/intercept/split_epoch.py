"""A graph-level training epoch split after its first batch (`epoch_role.
decided_after_first_batch`): the head, b graphs of the epoch's permutation, runs whole in every
rank while its step is watched (`graph_outputs.OutputWatch`); when the user asks for the next
batch, what the step showed decides whether the rest of the permutation is sharded or run
whole (`epoch_role.kept_whole`). The two passes draw the positions one unsplit epoch draws.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .epoch_order import EpochOrder
from .epoch_role import OptimizerCount, kept_whole, set_sharded
from .feeds import LoaderState
from .graph_outputs import OutputWatch
from .loader_pass import head_then_rest, start_pass
from .rank_streams import rank_stream
from .timed_epochs import batches_in

if TYPE_CHECKING:
    from torch_geometric.loader import DataLoader

    from ..launch.context import EpochTimer, RankContext

__all__ = ["head_and_rest", "noted_kept_whole"]


def noted_kept_whole(state: LoaderState, optimizers: OptimizerCount | None) -> str | None:
    """`epoch_role.kept_whole` for a training epoch, noted in a graph-level loader's record."""
    whole = kept_whole(state, optimizers)
    if state.record is not None and state.kind == "graph":
        state.record["kept_whole"] = whole
    return whole


def head_and_rest(loader: DataLoader, state: LoaderState, ctx: RankContext,
                  optimizers: OptimizerCount | None,
                  pyg_iter: Callable[[DataLoader], Iterator[Any]], planned: bool,
                  timer: EpochTimer, order: EpochOrder) -> Iterator[Any]:
    """The epoch's batches: its head whole in every rank, watched, then the rest sharded or
    whole as the head's step showed. `state.head_pending` is True until that is decided (the
    device path draws batches ahead only after it). The epoch's permutation is drawn as PyG
    draws it (`order`) now, as the epoch starts; the rest's pass draws nothing from the
    function's generator."""
    shard, epoch = state.shard, timer.epoch
    assert shard is not None
    watches: list[OutputWatch] = []

    def judge() -> None:   # what the head's steps showed, if they ran a root model
        state.head_pending = False
        roots = optimizers.roots if optimizers is not None else []
        seen = [v for v in (w.verdict(roots) for w in watches) if v is not None]
        if seen:   # every head batch's outputs must be per graph
            state.graph_outputs = next((v for v in seen if not v.per_graph), seen[0])
            if state.record is not None:
                state.record["outputs"] = state.graph_outputs.detail

    def decide() -> None:
        judge()
        whole = noted_kept_whole(state, optimizers)
        set_sharded(loader, state, whole is None)
        if whole is None:   # the rest's padding batches, after the head's one batch
            rest = shard.padding()
            timer.padded = lambda k: k >= 1 and rest(k - 1)
        timer.copies = ctx.world_size if whole is not None else 1
        timer.total = 1 + (batches_in(loader) or 0)

    def start(base: torch.Generator | None) -> Iterator[Any]:
        stream = rank_stream(ctx, state, True, epoch=epoch)
        return start_pass(loader, ctx, pyg_iter, stream, planned, base)

    first = order.begin(loader, state, True, True)   # as the epoch starts, as PyG draws

    def head() -> Iterator[Any]:   # each head batch's step watched
        for batch in start(first):
            with OutputWatch(batch) as watch:
                watches.append(watch)
                yield batch

    def abandon() -> None:   # the user left the loop during the head
        judge()
        shard.close_epoch()

    state.head_pending = True
    return head_then_rest(head, decide, lambda: start(order.begin(loader, state, False, True)),
                          abandon)
