"""Interception of `torch_geometric.loader.NeighborLoader` under the runtime.

The seam is the class itself (its `__init__` and `__iter__`), so a loader is intercepted however
the user imported the name, and user subclasses are intercepted through `super().__init__`.

* Training loaders (`shuffle=True`) with p > 1 ranks: the DataLoader's random sampler is replaced
  by a `ShardSampler` and the batch size by ceil(b / p). Every epoch all ranks draw the same
  permutation (common seed), and rank r takes its positions r, r+p, r+2p, ... Consequently the
  k-th per-rank batches together are exactly the k-th batch of b seeds that one process would
  draw from that permutation (when p divides b), and all ranks run the same number of batches.
* Evaluation loaders (`shuffle=False`) keep all their seeds in every rank: metrics mean what
  they meant.
* Sampling backend (`Features.sampler`): for homogeneous `Data`, "gnnorch" (and "auto" when
  pyg-lib is absent) passes gnnorch's vectorised `FastNeighborSampler` as the loader's
  `neighbor_sampler` (PyG's own argument), built from the loader's own sampling arguments; it
  returns hop counts. "pyg" leaves PyG's choice. HeteroData and link loaders run as PyG runs them.
* Every batch of an intercepted loader is announced to the layer seam (`intercept.layers`) with
  its hop layout, so the user's layers can be trimmed while they work on it.
* All intercepted loaders use the rank's sampler plan: s workers, each pinned to one of the rank's
  sampler CPUs through PyG's `AffinityMixin.enable_cpu_affinity`; s = 0 samples in the trainer.
  The worker count is re-read at each epoch, so it can change between epochs (not for loaders
  the user made with `persistent_workers=True`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from typing import Any, Iterator

import torch
from torch.utils.data import Sampler

from ..launch import context
from ..launch.context import EpochTimer, RankContext
from ..trim.hops import HopLayout, hops_from_edges
from .layers import BatchGraph, LayerSeam

_WORKER_ONLY_KWARGS = ("persistent_workers", "prefetch_factor", "multiprocessing_context")


class ShardSampler(Sampler[int]):
    """Epoch-wise common permutation of range(n), padded by wrap-around to a multiple of p,
    strided over ranks: rank r yields positions r, r+p, ...; every rank yields ceil(n / p)."""

    def __init__(self, rank: int, world_size: int, seed: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.num_items = 0
        self.epoch = 0

    def __len__(self) -> int:
        return -(-self.num_items // self.world_size)

    def permutation(self, epoch: int) -> torch.Tensor:
        """The padded global permutation of `epoch` (identical on every rank)."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        perm = torch.randperm(self.num_items, generator=gen)
        total = len(self) * self.world_size
        if total > self.num_items > 0:
            repeats = -(-total // self.num_items)
            perm = perm.repeat(repeats)[:total]
        return perm

    def __iter__(self) -> Iterator[int]:
        perm = self.permutation(self.epoch)
        self.epoch += 1
        return iter(perm[self.rank::self.world_size].tolist())


@dataclasses.dataclass
class LoaderState:
    """What the runtime knows about one intercepted loader."""

    role: str                      # "train" (shuffle=True) or "eval"
    index: int                     # training loaders: order of construction (same on all ranks)
    global_batch_size: int | None
    user_num_workers: int
    epochs: int = 0
    backend: str = "pyg"           # which sampler draws its batches
    backend_reason: str | None = None
    directional: bool = True       # hop layout meaningful (trimming possible)
    num_hops: int | None = None
    cache: Any = None              # training loaders: their gnnorch.cache.manager.LoaderCache

    def to_dict(self) -> dict:
        return {"role": self.role, "index": self.index, "backend": self.backend,
                "reason": self.backend_reason, "directional": self.directional,
                "num_hops": self.num_hops}


def _loader_seed(ctx: RankContext, index: int) -> int:
    return (ctx.seed * 1_000_003 + index * 7919) % (2 ** 62)


def _seeds_in(batch: Any) -> int:
    size = getattr(batch, "batch_size", None)
    if isinstance(size, int):
        return size
    input_type = getattr(batch, "input_type", None)  # HeteroData batches
    if input_type is not None:
        return int(getattr(batch[input_type], "batch_size", 0))
    return 0


class NeighborLoaderInterceptor:
    """Installs and removes the NeighborLoader patches; idempotent per install."""

    def __init__(self) -> None:
        from torch_geometric.loader import NeighborLoader

        self.cls = NeighborLoader
        self._orig_init = NeighborLoader.__init__
        self._had_iter = "__iter__" in NeighborLoader.__dict__
        self._orig_iter = NeighborLoader.__iter__

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        interceptor = self

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            interceptor._init(loader, args, kwargs)

        def __iter__(loader: Any) -> Iterator[Any]:
            return interceptor._iter(loader)

        self.cls.__init__ = __init__
        self.cls.__iter__ = __iter__
        try:
            yield
        finally:
            self.cls.__init__ = self._orig_init
            if self._had_iter:
                self.cls.__iter__ = self._orig_iter
            else:
                del self.cls.__iter__

    # -- patched methods ------------------------------------------------------------------
    def _init(self, loader: Any, args: tuple, kwargs: dict) -> None:
        ctx = context.current()
        if ctx is None:
            self._orig_init(loader, *args, **kwargs)
            return
        train = bool(kwargs.get("shuffle", False))
        batch_size = kwargs.get("batch_size", 1)
        state = LoaderState(role="train" if train else "eval",
                            index=ctx.next_loader_index() if train else -1,
                            global_batch_size=batch_size,
                            user_num_workers=int(kwargs.get("num_workers", 0) or 0))
        if not kwargs.get("persistent_workers", False):
            kwargs["num_workers"] = ctx.plan.sampler_cores
            if ctx.plan.sampler_cores == 0:
                for key in _WORKER_ONLY_KWARGS:
                    kwargs.pop(key, None)
        self._choose_sampler(ctx, state, args, kwargs)
        sampler = None
        shard = (train and ctx.distributed and kwargs.get("sampler") is None
                 and kwargs.get("batch_sampler") is None)
        if shard:
            sampler = ShardSampler(ctx.rank, ctx.world_size, _loader_seed(ctx, state.index))
            kwargs["shuffle"] = False
            kwargs["sampler"] = sampler
            if batch_size is not None:
                kwargs["batch_size"] = -(-int(batch_size) // ctx.world_size)
        self._orig_init(loader, *args, **kwargs)
        if sampler is not None:
            sampler.num_items = len(loader.dataset)
        state.directional, state.num_hops = _layout_kind(loader)
        if train and ctx.cache is not None:  # the historical-embedding cache (gnnorch.cache)
            state.cache = ctx.cache.attach(loader, state)
        loader._gnnorch_state = state
        ctx.stats.setdefault("sampler", {"loaders": []})["loaders"].append(state.to_dict())

    def _choose_sampler(self, ctx: RankContext, state: LoaderState, args: tuple,
                        kwargs: dict) -> None:
        """Pass gnnorch's sampler as `neighbor_sampler` when the features ask for it."""
        from torch_geometric.data import Data
        import torch_geometric.typing as pyg_typing

        choice = ctx.features.sampler
        bound = inspect.signature(self._orig_init).bind(None, *args, **kwargs).arguments
        data = bound.get("data")
        if choice == "pyg":
            state.backend_reason = "sampler='pyg'"
        elif bound.get("neighbor_sampler") is not None:
            state.backend_reason = "the loader was given its own neighbor_sampler"
        elif not isinstance(data, Data):
            state.backend_reason = f"{type(data).__name__} input is sampled by PyG"
        elif choice == "auto" and pyg_typing.WITH_PYG_LIB and not (
                state.role == "train" and ctx.cache is not None):  # the cache prunes with ours
            state.backend, state.backend_reason = "pyg-lib", "pyg-lib is installed (sampler='auto')"
        else:
            from ..sampling.neighbor import FastNeighborSampler

            extra = bound.get("kwargs", {})
            options = {name: bound[name] for name in _SAMPLER_ARGS if name in bound}
            kwargs["neighbor_sampler"] = FastNeighborSampler(
                data, num_neighbors=bound["num_neighbors"],
                share_memory=int(extra.get("num_workers", 0) or 0) > 0, **options)
            state.backend = "gnnorch"
            state.backend_reason = kwargs["neighbor_sampler"].fallback_reason
        if state.backend == "pyg" and pyg_typing.WITH_PYG_LIB:
            state.backend = "pyg-lib"
        elif state.backend == "pyg" and pyg_typing.WITH_TORCH_SPARSE:
            state.backend = "torch_sparse"

    def _iter(self, loader: Any) -> Iterator[Any]:
        ctx = context.current()
        state: LoaderState | None = getattr(loader, "_gnnorch_state", None)
        if ctx is None or state is None:
            return self._orig_iter(loader)
        if state.role == "train":
            ctx.apply_pending()
        if not loader.persistent_workers:
            loader.num_workers = ctx.plan.sampler_cores
            if loader.num_workers > 0 and loader.prefetch_factor is None:
                loader.prefetch_factor = 2
        if state.cache is not None:  # before workers start: they copy the pruning mask
            state.cache.epoch_start(loader)
        cpus = ctx.sampler_cpus
        if loader.num_workers > 0 and cpus and len(cpus) == loader.num_workers:
            with loader.enable_cpu_affinity(loader_cores=cpus):
                iterator = self._orig_iter(loader)
        else:
            iterator = self._orig_iter(loader)
        seam = ctx.layer_seam
        if seam is not None:
            iterator = _announced(iterator, seam, state)
        if state.role != "train":
            return iterator
        epoch = state.epochs
        state.epochs += 1
        return _timed(iterator, EpochTimer(ctx, state.index, epoch))


_SAMPLER_ARGS = ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
                 "weight_attr", "is_sorted", "directed")


def _layout_kind(loader: Any) -> tuple[bool, int | None]:
    """(whether the loader's batches are directional hop-ordered samples, number of hops)."""
    from torch_geometric.sampler import NeighborSampler
    from torch_geometric.sampler.base import SubgraphType

    sampler = getattr(loader, "node_sampler", None)
    if not isinstance(sampler, NeighborSampler) or sampler.is_hetero:
        return False, None
    directional = (sampler.subgraph_type == SubgraphType.directional and not sampler.disjoint
                   and getattr(loader, "transform_sampler_output", None) is None)
    return directional, len(sampler.num_neighbors.get_mapped_values())


def batch_graph(batch: Any, state: LoaderState) -> BatchGraph | None:
    """What the layer seam needs to know of a batch, with its hop layout when trimmable."""
    from torch_geometric.data import Data

    edge_index = getattr(batch, "edge_index", None) if isinstance(batch, Data) else None
    size = getattr(batch, "batch_size", None)
    if not isinstance(edge_index, torch.Tensor) or not isinstance(size, int):
        return None
    graph = BatchGraph(edge_index=edge_index, num_nodes=int(batch.num_nodes), batch_size=size,
                       layout=None, n_id=getattr(batch, "n_id", None),
                       training=state.role == "train")
    if not state.directional or state.num_hops is None:
        graph.reason = "the loader's batches are not directional neighbour samples"
        return graph
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if nodes is not None and edges is not None and len(nodes) == len(edges) + 1:
        graph.layout = HopLayout.from_counts(list(map(int, nodes)), list(map(int, edges)))
        return graph
    graph.layout = hops_from_edges(edge_index, graph.num_nodes, size, state.num_hops)
    if graph.layout is None:
        graph.reason = "the batch's vertices are not laid out by hop"
    return graph


def _defers_features(ctx: RankContext) -> bool:
    """Batch features may wait on the host for the rewrite engine's host transform
    (`gnnorch.rewrite.host`): rewrites are on and a CUDA device is visible."""
    return ctx.features.rewrite is not False and torch.cuda.is_available()


def _mark_features(batch: Any) -> None:
    """Mark a batch's `x` so that moving it to a CUDA device defers the copy."""
    from torch_geometric.data import Data

    from ..rewrite.host import mark_host_features

    if isinstance(batch, Data) and isinstance(getattr(batch, "x", None), torch.Tensor):
        batch.x = mark_host_features(batch.x)


def _announced(iterator: Iterator[Any], seam: LayerSeam, state: LoaderState) -> Iterator[Any]:
    """Announce each batch to the layer seam while the user works on it (and, on a CUDA
    machine with rewrites on, mark its features for the host transform)."""
    ctx = context.current()
    defer = ctx is not None and _defers_features(ctx)
    try:
        for batch in iterator:
            if defer:
                _mark_features(batch)
            graph = batch_graph(batch, state)
            if graph is not None and state.cache is not None:
                state.cache.annotate(graph, batch)
            seam.set_batch(graph)
            yield batch
    finally:
        seam.set_batch(None)


def _timed(iterator: Iterator[Any], timer: EpochTimer) -> Iterator[Any]:
    """Yield the loader's batches, recording the epoch's batches, seeds and seconds; after each
    batch's step (when the user asks for the next batch or leaves the loop), the timer stamps it
    and runs the context's batch callbacks."""
    try:
        for batch in iterator:
            timer.add(_seeds_in(batch))
            yield batch
            timer.consumed()
    finally:
        timer.close()
