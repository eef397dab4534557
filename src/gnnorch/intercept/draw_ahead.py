"""Whether a loader's batches may be drawn ahead of the trainer, in the GPU data path's
pipeline thread, without changing what a fixed seed gives (`why_not_drawn_ahead`: the
invariant and its cases). Called by the device path for the loaders it serves
(`intercept.device_path`) and for the batches PyG builds that it only copies
(`intercept.device_feed.PyGBatchesCopied`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .device_decisions import pyg_filter_fn

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from .feeds import LoaderState

__all__ = ["why_not_drawn_ahead"]


def why_not_drawn_ahead(loader: NeighborLoader, state: "LoaderState", depth: int,
                        served: bool) -> str | None:
    """Why the batches of `loader` are not drawn ahead of the trainer in the pipeline's thread
    (``depth`` > 0), or None. `served`: the path builds its batches (else PyG does, and the
    path only copies them to the device).

    Invariant: drawing ahead changes nothing a fixed seed gives. A draw in the pipeline's
    thread (``next`` on PyG's iterator) runs only code whose random draws do not depend on
    when or how often it runs:

    * worker processes that start with each epoch sample from a state seeded by one draw made
      when the epoch's iterator is made, in the trainer's thread; persistent workers keep their
      random state from epoch to epoch, and a batch drawn ahead that the loop never takes (it
      leaves an epoch early, e.g. ``next(iter(loader))`` to initialise lazy layers) is still
      sampled by a worker, so every later epoch would differ: not drawn ahead;
    * in this process a served loader samples from a generator of the epoch's
      (`device_feed.own_generators`, which says when it cannot); PyG's sampler draws from
      torch's global RNG: not drawn ahead;
    * the DataLoader's index sampler makes its random draw at its first item, which the
      DataLoader takes when the epoch's iterator is made (torch's Random / Sequential /
      WeightedRandom / SubsetRandom samplers, PyG's ImbalancedSampler; gnnorch's shard
      sampler draws nothing there: its permutation was drawn as the epoch started,
      `epoch_order`); one that may draw as it goes is not drawn ahead;
    * code of the user's that finishes batches in this process (a ``transform``, a
      ``transform_sampler_output``, an overridden ``filter_fn``; a served loader's run in the
      drawing thread, PyG's with ``filter_per_worker=False``) may draw from torch's global
      RNG: not drawn ahead;
    * features fetched from other ranks at each batch (partition_features): those collectives
      stay in the trainer's thread;
    * a graph-level DataLoader collating in this process draws nothing when its graphs come
      from a list or PyG's ``InMemoryDataset.get`` without a ``transform`` (`_graph_draws`):
      drawn ahead; otherwise the dataset's reads may draw: not drawn ahead."""
    if depth <= 0:
        return "data_path prefetch is 0"
    if getattr(state, "partition", None) is not None:
        return ("its features are fetched from the other ranks at each batch "
                "(partition_features): those collectives stay in the trainer's thread")
    workers = int(getattr(loader, "num_workers", 0) or 0)
    if workers == 0 and getattr(state, "kind", None) == "graph":
        if (draws := _graph_draws(getattr(loader, "dataset", None))) is not None:
            return (f"PyG collates it in the trainer's process (num_workers=0) from {draws}, "
                    f"which may draw from torch's global RNG: drawn in the trainer's thread")
    elif workers == 0 and not served:
        return ("PyG samples it in the trainer's process (num_workers=0), drawing from torch's "
                "global RNG: drawing ahead in another thread would change what a fixed seed "
                "gives")
    if workers > 0 and getattr(loader, "persistent_workers", False):
        return ("its workers persist (persistent_workers=True): a batch drawn ahead that the "
                "loop does not take would still be sampled by a worker whose random state "
                "carries over to later epochs, so they would change")
    index_sampler = _lazy_index_sampler(loader)
    if index_sampler is not None:
        return (f"its {index_sampler} may draw from torch's global RNG as batches are drawn: "
                f"drawing ahead in another thread would change what a fixed seed gives")
    if served or not getattr(loader, "filter_per_worker", True):
        user_code = [name for name in ("transform", "transform_sampler_output")
                     if getattr(loader, name, None) is not None]
        if not served and (type(loader).filter_fn is not pyg_filter_fn(state)
                           or "filter_fn" in vars(loader)):
            user_code.append("filter_fn")
        if user_code:
            return (f"its batches are finished in the trainer's process by code of its own "
                    f"({', '.join(user_code)}), which may draw from torch's global RNG: "
                    f"drawn in the trainer's thread")
    return None


def _graph_draws(dataset: Any) -> str | None:
    """What in a graph-level DataLoader's `dataset` may draw random numbers as its graphs are
    read (a ``transform``, a ``get`` of the user's, a dataset class gnnorch does not know), or
    None: a list (its items come back as they are), or a PyG ``InMemoryDataset`` read by
    PyG's ``get`` without a transform (also through a torch ``Subset``): reads and PyG's
    collation draw nothing."""
    from torch.utils.data import Subset
    from torch_geometric.data import InMemoryDataset

    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    if isinstance(dataset, (list, tuple)):
        return None
    if not isinstance(dataset, InMemoryDataset):
        return f"a {type(dataset).__name__} (its own reads)"
    if type(dataset).get is not InMemoryDataset.get:
        return f"{type(dataset).__name__}.get (its own reads)"
    if getattr(dataset, "transform", None) is not None:
        return f"its dataset's transform ({dataset.transform!r})"
    return None


def _lazy_index_sampler(loader: Any) -> str | None:
    """`loader`'s ``sampler=`` / ``batch_sampler=`` when it is not one known to make its
    random draw at its first item (`why_not_drawn_ahead`), else None."""
    from torch.utils.data import (BatchSampler, RandomSampler, SequentialSampler,
                                  SubsetRandomSampler, WeightedRandomSampler)

    from .shard import ShardSampler

    eager = {cls.__iter__ for cls in (RandomSampler, SequentialSampler, SubsetRandomSampler,
                                      WeightedRandomSampler, ShardSampler)}
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is not None and type(batch_sampler).__iter__ is not BatchSampler.__iter__:
        return f"batch_sampler ({type(batch_sampler).__name__})"
    sampler = getattr(batch_sampler, "sampler", None) or getattr(loader, "sampler", None)
    if sampler is not None and type(sampler).__iter__ not in eager:
        return f"sampler ({type(sampler).__name__})"
    return None
