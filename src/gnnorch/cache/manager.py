"""Integration of the historical-embedding cache with the run: loaders, the layer seam, steps.

One `CacheManager` per rank and run (installed by `intercept.session` when `RunOptions.cache` is
on); it is the object the rest of gnnorch talks to. It is

* told of every training NeighborLoader (`attach`, which returns the loader's `LoaderCache`;
  the loader seam then calls its `annotate` for every batch, putting a `BatchInfo` on the
  seam's `BatchGraph`, and its `epoch_start` before each training epoch);
* the layer seam's hook (`on_layer`, `on_forward_end`): a pending loader's first forward is
  recorded and then admitted or refused (`admission`); on a training batch of an active
  loader, the bottom layer's output rows of hot vertices at the last expanded hop come from the
  store (`swap`), after the rows the forward uses have been checked against the staleness bound
  and refreshed where needed;
* an optimizer step post-hook: versions count optimizer steps (of the optimizer(s) holding the
  bottom layer's parameters); with `overlap="thread"`, each step launches the refresh of the
  rows due next in a background thread (`background`);
* a batch callback feeding the `hot_ratio="auto"` search (`hotset`).

Its collaborators are passed in: the rank's facts (seed, rank, whether ranks agree, trainer
cores) at construction, the run's batch-callback list at installation. It knows nothing of the
seams that call it (`intercept.session` wires it to the loader seam and the layer seam).

Refreshes call the layer past the seam with the seam's own unpatched call, which the manager
takes from the layer calls it is handed (`HookedCall.unpatched`) and passes down.

Evaluation loaders are never attached: their batches run the exact model.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import torch
from torch import Tensor

from ..trim.batch import BatchGraph
from ..trim.state import ModelState
from .config import CacheConfig
from .hotset import StepTimes
from .batches import BatchInfo
from .loader import LayerCallView, LoaderCache
from .refresh import FeatureSource, LayerCall
from .status import CacheStatus, CacheWarning

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

__all__ = ["BatchInfo", "CacheManager", "CacheStatus", "CacheWarning", "LoaderCache",
           "LoaderFacts"]


class LoaderFacts(Protocol):
    """What the cache reads of the loader seam's record of a training loader
    (`intercept.feeds.LoaderState`)."""

    index: int
    backend: str
    backend_reason: str | None
    directional: bool
    transform: str | None


class CacheManager:
    """The cache of one rank's run (see the module docstring): `seed` (the run's data seed,
    read as a loader's cache is built: `intercept.data_seed` fixes it at the first loader) and
    `rank` make its random choices reproducible per rank, `distributed` makes activation
    agreed over ranks, `trainer_cores` decides the refresh overlap."""

    def __init__(self, config: CacheConfig, *, seed: Callable[[], int], rank: int = 0,
                 distributed: bool = False, trainer_cores: int = 1) -> None:
        self.config = config
        self.run_seed, self.rank = seed, rank   # (the run's data seed, read when used)
        self.distributed = distributed
        self.cores = trainer_cores
        self.steps = 0
        self.loaders: list[LoaderCache] = []
        self.unpatched: LayerCall | None = None  # the seam's call past itself (for refreshes)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @contextlib.contextmanager
    def installed(self, batch_callbacks: list[Callable[[StepTimes], None]]
                  ) -> Iterator["CacheManager"]:
        """Hooks optimizer steps and adds `on_batch_end` to the run's `batch_callbacks`."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(self._on_step)
        batch_callbacks.append(self.on_batch_end)
        try:
            yield self
        finally:
            handle.remove()
            with contextlib.suppress(ValueError):
                batch_callbacks.remove(self.on_batch_end)
            for lc in self.loaders:
                with contextlib.suppress(Exception):
                    lc.close()
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    # -- environment ----------------------------------------------------------------------
    def seed(self, index: int) -> int:
        return (self.run_seed() * 1_000_003 + 7_777 + index * 101 + self.rank * 13) % 2 ** 62

    def trainer_cores(self) -> int:
        return self.cores

    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="gnnorch-cache-refresh")
        return self._pool

    def agree(self, reason: str | None) -> str | None:
        """With p > 1 ranks: the cache activates only if it can on every rank."""
        if not self.distributed:
            return reason
        import torch.distributed as dist

        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        flag = torch.tensor([0 if reason is None else 1], device=device)
        dist.all_reduce(flag)
        if reason is None and int(flag.item()) > 0:
            return "another rank could not use the cache"
        return reason

    # -- loaders --------------------------------------------------------------------------
    def attach(self, loader: NeighborLoader, state: LoaderFacts, aside: str | None = None,
               features: FeatureSource | None = None) -> LoaderCache:
        """A training loader starts its first training epoch (`state`: the loader seam's
        record of it; `aside`: why the loader seam already knows the cache cannot serve it;
        `features`: where its batches gather ``x`` when that is not ``loader.data.x``, the GPU
        data path's resident copy: refreshes read it there)."""
        reason = aside if aside is not None else _unservable(loader, state)
        lc = LoaderCache(self, loader, state.index, reason, features)
        self.loaders.append(lc)
        return lc

    # -- layer seam hooks -----------------------------------------------------------------
    def on_layer(self, call: LayerCallView) -> Any:
        """A layer call of a traced model on the batch's edge_index (`HookedCall`): its output."""
        if self.unpatched is None:  # the same for every call of the run
            self.unpatched = call.unpatched
        info = getattr(call.batch, "cache", None)
        if not isinstance(info, BatchInfo) or not call.batch.training:
            return call.run()
        lc = info.loader
        if lc.serves(call):
            return lc.bottom(call, info)
        if lc.status is CacheStatus.PENDING:
            lc.record(call)
        elif lc.foreign(call):
            lc.other_model(call, info)
        return call.run()

    def on_forward_end(self, model: torch.nn.Module, state: ModelState, calls: int,
                       graph: BatchGraph | None) -> None:
        """A forward of `model` on `graph` made `calls` layer calls on its edge_index."""
        info = getattr(graph, "cache", None) if graph is not None else None
        if not isinstance(info, BatchInfo) or not graph.training:
            return
        lc = info.loader
        if lc.inspects(model):
            assert self.unpatched is not None  # the forward's layer calls came first
            lc.validate(model, calls, graph, self.unpatched)

    # -- optimizer steps ------------------------------------------------------------------
    def _on_step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        layers = [lc.served.layer for lc in self.loaders
                  if lc.status is CacheStatus.ACTIVE and lc.served is not None]
        if layers:
            mine = {id(p) for layer in layers for p in layer.parameters()}
            if not any(id(p) in mine for g in optimizer.param_groups for p in g["params"]):
                return
        self.steps += 1
        for lc in self.loaders:
            lc.after_step(self.steps)

    def on_batch_end(self, timer: StepTimes) -> None:
        """After a training step: the loader's cache feeds its hot-ratio search."""
        for lc in self.loaders:
            if lc.index == timer.loader:
                lc.on_batch_end(timer)

    # -- report ---------------------------------------------------------------------------
    def stats(self) -> dict:
        loaders = [lc.report() for lc in self.loaders]
        main = next((s for s in loaders if s["status"] == "active"), None) or (
            loaders[0] if loaders else {})
        out = {"enabled": True, "config": self.config.to_dict(), "optimizer_steps": self.steps,
               "loaders": loaders}
        out.update({k: v for k, v in main.items() if k not in out})
        return out


def _unservable(loader: NeighborLoader, state: LoaderFacts) -> str | None:
    """Why the cache cannot serve `loader`'s training epochs, or None."""
    from ..sampling.neighbor import FastNeighborSampler

    sampler = getattr(loader, "node_sampler", None)
    if getattr(sampler, "is_hetero", False):
        return (f"training loader {state.index} is over a HeteroData: the cache keeps the "
                f"embeddings of one homogeneous graph's layers")
    if not isinstance(sampler, FastNeighborSampler):
        return (f"training loader {state.index} samples with {state.backend} "
                f"({state.backend_reason}); pruned sampling needs gnnorch's sampler "
                f"(sampler='auto' or 'gnnorch')")
    if sampler.fallback_reason is not None:
        return f"gnnorch's sampler cannot prune {sampler.fallback_reason}"
    if not state.directional:
        return "the loader's batches are not directional neighbour samples"
    if state.transform is not None:
        return (f"the loader transforms its batches ({state.transform}): refreshes compute "
                f"rows on data's own graph, not on transformed batches")
    if getattr(loader, "persistent_workers", False):
        return ("persistent_workers=True: the pruning mask cannot reach workers that "
                "outlive an epoch")
    if not isinstance(getattr(getattr(loader, "data", None), "x", None), Tensor):
        return "the loader's data has no raw feature matrix data.x"
    return None
