"""A training epoch's batches as the tuner and `runtime.last_run` see them: each batch's seeds
(`seeds_in`) and the epoch's batches, seeds and seconds (`timed`, into the rank's
`EpochTimer`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import torch

from ..launch.context import EpochTimer
from .announce import stored_batch_size

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

__all__ = ["batches_in", "seeds_in", "timed"]


def seeds_in(batch: Any) -> int:
    """The batch's seeds: its seed nodes, or the supervision edges of a link batch (of a
    HeteroData's edge type too), or the graphs of a graph-level batch."""
    from torch_geometric.data import Batch

    size = stored_batch_size(batch)
    if size is not None:
        return size
    if isinstance(batch, Batch):
        return int(batch.num_graphs)
    input_id = getattr(batch, "input_id", None)   # link batches: one per supervision edge
    if isinstance(input_id, torch.Tensor):
        return int(input_id.numel())
    input_type = getattr(batch, "input_type", None)  # HeteroData batches
    if input_type is None:
        return 0
    store = batch[input_type]   # a node type's (batch_size) or a link batch's edge type's
    if isinstance(store.get("batch_size"), int):
        return store["batch_size"]
    input_id = store.get("input_id")
    return int(input_id.numel()) if isinstance(input_id, torch.Tensor) else 0


def batches_in(loader: NeighborLoader) -> int | None:
    """Batches in one epoch of `loader` (None when it cannot tell: an iterable dataset raises
    TypeError, a batch sampler without a length, such as PyG's `DynamicBatchSampler` without
    ``num_steps``, ValueError or NotImplementedError)."""
    try:
        return len(loader)
    except (TypeError, ValueError, NotImplementedError):
        return None


def timed(iterator: Iterator[Any], timer: EpochTimer) -> Iterator[Any]:
    """Yield the loader's batches, recording the epoch's batches, seeds and seconds; after each
    batch's step (when the user asks for the next batch or leaves the loop), the timer stamps it
    and runs the context's batch callbacks."""
    try:
        for batch in iterator:
            timer.add(seeds_in(batch))
            yield batch
            timer.consumed()
    finally:
        timer.close()
