"""Whether one epoch of an intercepted loader trains, decided when the epoch starts, and what
follows from it: sharding over ranks (`set_sharded`) and the promotion of a loader built with
``shuffle=False`` to a training loader (`promote`).

The rule (`training_now`): an epoch trains when gradients are enabled and a model the layer
seam has seen is in training mode. Before any model was seen (the first epoch of a training
loop starts before the model's first forward), a loader built with ``shuffle=True`` trains when
an optimizer has been built in the run (with several ranks, where sharding is at stake; the
gradient synchroniser counts them), or always in a run of one process; a loader built with
``shuffle=False`` does not. So a pass over a loader before the model and its optimizer exist
(PyG's ``PNAConv.get_degree_histogram(loader)`` in ``benchmark/multi_gpu/training``) keeps
every seed in every rank. Ranks run the same code, so they decide alike.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from .feeds import LoaderState

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from ..launch.context import RankContext
    from .layers import LayerSeam

__all__ = ["OptimizerCount", "cache_aside", "decided_after_first_batch", "epoch_trains",
           "kept_whole", "promote", "set_sharded", "training_now"]


class OptimizerCount(Protocol):
    """What the loader seam asks of the gradient synchroniser (`gradsync`)."""

    @property
    def optimizers_built(self) -> int:
        """Optimizers built in this rank's run so far."""

    @property
    def roots(self) -> list[torch.nn.Module]:
        """The root modules whose first forward has run (their parameters kept in step)."""


def training_now(seam: LayerSeam | None, strict: bool = False,
                 optimizers: OptimizerCount | None = None) -> bool:
    """Whether an epoch starting now trains: gradients are on and a model the layer seam has
    seen is in training mode (with no layer seam running -- trim, rewrite and cache off -- or
    none seen by it, a root module the gradient synchroniser has seen, when `optimizers` is
    given). Before any model was seen: never when `strict`; else when an optimizer was built
    (`optimizers` given) or always (none given)."""
    if not torch.is_grad_enabled():
        return False
    models = list(seam.models.keys()) if seam is not None else []
    if not models and optimizers is not None:
        models = list(optimizers.roots)
    if not models:
        if strict:
            return False
        return optimizers is None or optimizers.optimizers_built > 0
    return any(m.training for m in models)


def epoch_trains(state: LoaderState, seam: LayerSeam | None, ctx: RankContext,
                 optimizers: OptimizerCount | None = None) -> bool:
    """Whether the epoch of the loader `state` describes, starting now, trains; a loader built
    with ``shuffle=False`` whose epoch trains is promoted first (`promote`)."""
    if state.role == "train":
        return training_now(seam, optimizers=optimizers)
    training = training_now(seam, strict=True, optimizers=optimizers)
    if training:
        promote(state, ctx)
    return training


def promote(state: LoaderState, ctx: RankContext) -> None:
    """A loader built with ``shuffle=False`` starts an epoch that trains: from now on it is a
    training loader (an index, timed epochs the tuner measures, sharded over p ranks in order,
    the cache), as PyG's ``benchmark/multi_gpu/training`` builds its own."""
    state.role, state.index = "train", ctx.next_loader_index()
    state.promoted_at = state.eval_epochs
    if state.device is not None:
        state.device.role = "train"
    if state.record is not None:
        state.record.update(role="train", index=state.index,
                            promoted=(f"built with shuffle=False; trains from its epoch "
                                      f"{state.promoted_at + 1} (the first run while a model "
                                      f"seen by the runtime was training)"))


def cache_aside(state: LoaderState) -> str | None:
    """Why the historical-embedding cache cannot serve a training loader the device path
    serves without it (one built with ``shuffle=False``: `promote`), or None."""
    device = state.device
    if state.promoted_at is None or device is None or not device.served:
        return None
    return ("the device path serves it without the cache: it was built with shuffle=False, "
            "and the device path gives the cache only to loaders built with shuffle=True")


def kept_whole(state: LoaderState, optimizers: OptimizerCount | None) -> str | None:
    """Why a training epoch of a graph-level DataLoader starting now runs every graph in every
    rank instead of being sharded, or None (it is sharded). Sharding deals each batch of b
    graphs out over the p ranks (`ShardSampler`) and averages their gradients weighted by
    their graphs: one process's gradient on the batch when (`graph_outputs` has the maths)
    * b >= p (otherwise some ranks would hold no graph of any batch and only follow);
    * the model computes each graph on its own: no BatchNorm, whose batch statistics are each
      shard's own (`trim.mixing.batch_statistics_modules`);
    * the model returns one row per graph (a loss over nodes weighs each shard's nodes by the
      shard's node count), seen on an epoch's first batch (`decided_after_first_batch`).
    Whole, every rank draws the same batches (one common permutation), so the run equals one
    process's, as before sharding existed."""
    from ..trim.mixing import batch_statistics_modules

    if state.kind != "graph":
        return None
    size, ranks = state.global_batch_size, state.shard.world_size if state.shard else 1
    if size is not None and int(size) < ranks:
        return (f"its batch size {size} is smaller than the {ranks} ranks: some ranks would "
                f"hold no graph of any batch, so every rank runs every graph")
    roots = list(optimizers.roots) if optimizers is not None else []
    if not roots:
        return ("no model has run a forward yet: an epoch before the first forward runs every "
                "graph in every rank")
    found = [name for root in roots for name in batch_statistics_modules(root)]
    if found:
        return (f"the model normalises with batch statistics ({', '.join(found[:3])}): "
                f"sharded epochs would not equal one process's, so every rank runs every graph")
    outputs = state.graph_outputs
    if outputs is None:
        return ("what the model returns for a batch of its graphs was not seen: every rank "
                "runs every graph")
    if not outputs.per_graph:
        return (f"{outputs.detail}, not one row per graph: averaged over shards, a loss over "
                f"those rows would not equal one process's, so every rank runs every graph")
    return None


def decided_after_first_batch(state: LoaderState, optimizers: OptimizerCount | None) -> bool:
    """Whether a training epoch of a graph-level DataLoader starting now is split after its
    first batch (`ShardSampler.head`): what the model returns for the loader's batches has not
    been seen yet (`LoaderState.graph_outputs`; before the model's first forward, not even the
    model has), so whether sharding is exact (`kept_whole`) is unknown until the step on that
    batch shows it. The first batch, b graphs of the epoch's permutation, then runs whole in every
    rank (p equal gradients, averaged: one process's), watched (`graph_outputs.OutputWatch`);
    the rest of the permutation is sharded or whole as `kept_whole` decides when the user asks
    for the second batch. The two passes draw the positions one unsplit epoch draws, so the
    run still equals one process's. The device path draws the rest ahead only once that is
    decided (`LoaderState.head_pending`). A batch size smaller than p is never sharded:
    no split."""
    if (state.kind != "graph" or state.shard is None or optimizers is None
            or state.global_batch_size is None or state.graph_outputs is not None):
        return False
    return int(state.global_batch_size) >= state.shard.world_size


def set_sharded(loader: NeighborLoader, state: LoaderState, training: bool) -> None:
    """Shard this epoch (training) or run every seed with the user's batch size (an epoch
    split after its head sets the head after this)."""
    shard = state.shard
    assert shard is not None
    shard.head = None   # a split epoch's iterator never started leaves no head behind
    shard.sharded = training
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is not None and state.global_batch_size is not None:
        size = int(state.global_batch_size)
        batch_sampler.batch_size = shard.rank_batch_size() if training else size
