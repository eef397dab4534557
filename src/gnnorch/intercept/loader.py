"""Interception of `torch_geometric.loader.NeighborLoader`, `LinkNeighborLoader` and PyG's
graph-level `DataLoader` under the runtime.

The seam is each class itself (its `__init__` and `__iter__`), so a loader is intercepted however
the user imported the name, and user subclasses are intercepted through `super().__init__`. A
LinkNeighborLoader is served as a NeighborLoader is (its seeds are supervision edges: a
training loader's edges are sharded, gnnorch's sampler draws the subgraph, the device path
builds the batch), except that the historical-embedding cache and the partitioned features
leave it to PyG; its batches are trimmed to their first hop's nodes (`announce.link_seeds`),
where the supervision edges' endpoints are. A graph-level `DataLoader` (mini-batches of whole
graphs, collated by PyG) gets the loader-level part only: its training epochs are sharded by
graph where that is exact (`epoch_role.kept_whole`; until a step has shown what the model
returns for its batches, from an epoch's second batch on: `epoch_role.decided_after_first_batch`,
`graph_outputs`) and timed for the tuner
(without ``num_workers`` it keeps PyG's none: `loader_pass`); its batches are neither
sampled nor trimmed (they have no hops) and, on a device, are copied over as any batch PyG
builds is (`device_feed.PyGBatchesCopied`).

* Training epochs are sharded over p > 1 ranks. A loader built with `shuffle=True` gets a
  `ShardSampler` instead of its random sampler. Whether one *epoch* of it (one `iter(loader)`) is
  a training epoch is decided when it starts, by what the user's code is doing: gradients are
  enabled and a model the layer seam has seen is in training mode (or, no model seen yet, an
  optimizer was built: `intercept.epoch_role` has the rule).
  A training epoch is sharded: all ranks draw the same permutation (PyG's own, from the
  function's generator, compared over the ranks: `intercept.epoch_order`), and each
  global batch of b consecutive seeds of it is dealt out over the ranks (`ShardSampler`), so
  the k-th per-rank batches together are exactly the k-th batch of b seeds that one process
  would draw from that permutation; where p does not divide b the ranks' batches differ by
  one seed and their gradients are weighted by their seeds (`join.Decision.scale`). Any other
  epoch (an evaluation
  under `torch.no_grad()` or after `model.eval()`, e.g. PyG's `ogbn_train.py`, whose val/test
  loaders shuffle) runs every seed of the permutation in every rank with the user's batch size:
  metrics mean what they meant. A loader built with `shuffle=False` gets a `ShardSampler` of
  the identity order, unsharded (PyG's sequential order) until one of its epochs starts while a
  model the layer seam has seen is in training mode (strictly: having seen no model is not
  enough, so a pass before the model exists, as PyG's `PNAConv.get_degree_histogram` makes,
  stays whole); it is then promoted to a training loader (`epoch_role.promote`): sharded in
  order, timed, tuned, cached. A loader built with its own ``sampler=`` (PyG's
  ``ImbalancedSampler``) is promoted the same way; its sharded epochs stride one draw of that
  sampler, the same on every rank (`ShardSampler`'s ``source``).
* Each rank's sharded training epochs sample from a stream of their own
  (`intercept.rank_streams`): forked ranks share one RNG state, and would otherwise draw the
  same neighbour positions in every rank.
* When the user's own code manages distribution (it called `torch.distributed.
  init_process_group` inside the runtime's ranks, `intercept.procgroup`), sharding steps aside.
* Sampling backend (`RunOptions.sampler`): gnnorch's `FastNeighborSampler` is passed as the
  loader's `neighbor_sampler` where the option and the loader allow (`intercept.sampler_backend`
  decides, and with pyg-lib installed times both once the loader is placed).
* Every batch of an intercepted loader is announced to the layer seam (`intercept.layers`) with
  its hop layout (`intercept.announce`), so the user's layers can be trimmed while they work on
  it.
* Workers: the user's loader configuration is theirs. A loader built with an explicit
  `num_workers` (0 included) keeps it, with `persistent_workers`, `prefetch_factor` and the
  user's own `enable_cpu_affinity` / `enable_multithreading` calls. Only where the user left
  `num_workers` out does the rank's sampler plan apply: s workers, each pinned to one of the
  rank's sampler CPUs through PyG's `AffinityMixin.enable_cpu_affinity` (s = 0 samples in the
  trainer), re-read at each epoch so that it can change between epochs.
* Partitioned features (`RunOptions.partition_features`, `intercept.features_fetch`): a loader
  that qualifies is built on the data without ``x``; each batch's ``x`` is gathered from the
  rank's store (remote rows from their owners) in the main process before the user sees it.
* The GPU data path (`intercept.feeds.DevicePathHook`, when the session passes one) sees every
  loader at the end of its ``__init__`` and wraps each epoch's batches after the partition feed;
  a loader it samples on the device runs without loader workers.
* Per-loader state (`intercept.feeds.LoaderState`) lives in the interceptor's own weak mapping,
  never on the user's loader.
"""
from __future__ import annotations

import contextlib
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Iterator

from ..compat import processes as compat_processes
from ..compat import pyg as compat_pyg
from ..errors import GnnorchWarning
from ..launch.context import EpochTimer, RankContext
from .announce import announced, batch_graph, batch_transform, defers_features, layout_kind
from .data_seed import DataSeed
from .epoch_order import EpochOrder
from .epoch_role import (OptimizerCount, cache_aside, decided_after_first_batch, epoch_trains,
                         set_sharded)
from .feeds import DevicePathHook, LoaderState
from .layers import LayerSeam
from .loader_pass import plan_workers, start_pass
from .procgroup import UserDistribution
from .rank_streams import rank_steps, rank_stream
from .sampler_backend import choose_backend
from .shard import ShardSampler, sharded_by_user, why_whole_in_every_rank
from .split_epoch import head_and_rest, noted_kept_whole
from .timed_epochs import batches_in, timed

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from ..cache.manager import CacheManager
    from .features_fetch import PartitionManager

__all__ = ["LoaderState", "LoaderInterceptor", "ShardSampler", "batch_graph"]

_WORKER_ONLY_KWARGS = ("persistent_workers", "prefetch_factor", "multiprocessing_context")


def _loader_seed(ctx: RankContext, index: int, base: int | None = None) -> int:
    """The permutation seed of the loader of construction `index`, from `base` (default: the
    run's data seed; the agreed shard seed once compared, `DataSeed.shard_seed`)."""
    base = ctx.data_seed if base is None else base
    return (base * 1_000_003 + index * 7919) % (2 ** 62)


class _Originals:
    """PyG's own ``__init__`` / ``__iter__`` of one loader class, put back by `restore`."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.init = cls.__init__
        self.had_iter = "__iter__" in cls.__dict__
        self.iter = cls.__iter__

    def restore(self) -> None:
        self.cls.__init__ = self.init
        if self.had_iter:
            self.cls.__iter__ = self.iter
        else:
            del self.cls.__iter__


class LoaderInterceptor:
    """Installs and removes the loader patches (NeighborLoader, LinkNeighborLoader, PyG's
    graph-level DataLoader) for one rank's run (`ctx`).

    Its collaborators are passed in by `intercept.session`: the layer seam (batches are
    announced to it; its models tell whether an epoch trains), the historical-embedding cache
    (training loaders attach to it), the partitioned feature store and the device path (feeds,
    `intercept.feeds`), the user's own distribution (sharding steps aside when active) and the
    run's data seed (fixed as the first loader is built, `intercept.data_seed`).
    Per-loader state lives in `states`, keyed weakly by the loader: nothing is left on the
    user's object. Loaders built outside the installation pass through untouched."""

    def __init__(self, ctx: RankContext, *, layer_seam: LayerSeam | None = None,
                 cache: CacheManager | None = None, partition: PartitionManager | None = None,
                 distribution: UserDistribution | None = None,
                 device_path: DevicePathHook | None = None,
                 optimizers: OptimizerCount | None = None,
                 data_seed: DataSeed | None = None, order: EpochOrder | None = None) -> None:
        from torch_geometric.loader import DataLoader, LinkNeighborLoader, NeighborLoader

        self.ctx = ctx
        self.layer_seam = layer_seam
        self.cache = cache
        self.partition = partition
        self.distribution = distribution or UserDistribution()
        self.device_path = device_path
        self.optimizers = optimizers   # several ranks: whether an optimizer exists yet
        self.data_seed = data_seed or DataSeed(ctx, distribution=self.distribution)
        self.order = order or EpochOrder(None, self.distribution, ctx.rank)
        self.states: "weakref.WeakKeyDictionary[NeighborLoader, LoaderState]" = \
            weakref.WeakKeyDictionary()
        self.classes = {NeighborLoader: "node", LinkNeighborLoader: "link", DataLoader: "graph"}
        self._before_run: "weakref.WeakSet[NeighborLoader]" = weakref.WeakSet()
        self._originals = {cls: _Originals(cls) for cls in self.classes}

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        try:
            with contextlib.ExitStack() as stack:
                for cls, kind in self.classes.items():
                    stack.enter_context(self._patched(cls, kind))
                yield
        finally:
            self._stop_workers()

    def _stop_workers(self) -> None:
        """When the run ends, the persistent workers of its loaders stop (a loader used again
        starts new ones). Left to garbage collection (a PyG loader's iterator keeps its bound
        `filter_fn`: a cycle), the next collection blocks about 10 s per loader."""
        stopped = 0
        for loader in list(self.states.keys()):
            try:
                stopped += compat_processes.stop_persistent_workers(loader)
            except Exception as error:  # noqa: BLE001 - never mask the run's own outcome
                compat_processes.WORKER_STOPPER.mark_missing(f"{type(error).__name__}: {error}")
        if stopped:
            self.ctx.stats.setdefault("sampler", {"loaders": []})["workers_stopped"] = stopped

    @contextlib.contextmanager
    def _patched(self, cls: type, kind: str) -> Iterator[None]:
        interceptor, orig = self, self._originals[cls]

        def __init__(loader: NeighborLoader, *args: Any, **kwargs: Any) -> None:
            interceptor._init(loader, kind, orig, args, kwargs)

        def __iter__(loader: NeighborLoader) -> Iterator[Any]:
            return interceptor._iter(loader, orig)

        cls.__init__ = __init__
        cls.__iter__ = __iter__
        try:
            yield
        finally:
            orig.restore()

    # -- patched methods ------------------------------------------------------------------
    def _init(self, loader: NeighborLoader, kind: str, orig: _Originals, args: tuple,
              kwargs: dict) -> None:
        ctx = self.ctx
        self.data_seed.fix()   # at the run's first loader (`intercept.data_seed`)
        if kind == "graph":   # batch_size / shuffle may come by position
            named = compat_pyg.graph_loader_keywords(orig.init, args, kwargs)
            if named is None:   # PyG's own __init__ reports the mistake, or runs as PyG's
                orig.init(loader, *args, **kwargs)
                self.states[loader] = LoaderState(
                    role="eval", index=-1, global_batch_size=None, kind=kind,
                    user_num_workers=int(getattr(loader, "num_workers", 0) or 0))
                return
            args, kwargs = named
        train = bool(kwargs.get("shuffle", False))
        batch_size = kwargs.get("batch_size", 1)
        workers = kwargs.get("num_workers")
        state = LoaderState(role="train" if train else "eval",
                            index=ctx.next_loader_index() if train else -1,
                            global_batch_size=batch_size,
                            user_num_workers=None if workers is None else int(workers),
                            kind=kind)
        if workers is None and kind != "graph":  # left open by the user: the plan decides
            kwargs["num_workers"] = ctx.plan.sampler_cores
            if ctx.plan.sampler_cores == 0:
                for key in _WORKER_ONLY_KWARGS:
                    kwargs.pop(key, None)
        if self.partition is not None and kind == "node":   # built without x (features_fetch)
            args, kwargs, state.partition = self.partition.adopt(
                orig.init, args, kwargs, state.role, state.index)
        measure = None
        if kind == "graph":   # nothing is sampled: PyG collates the dataset's graphs
            state.graph, state.backend = "graphs", "collate"
            state.backend_reason = "a graph-level DataLoader: PyG collates its graphs"
        else:
            measure = choose_backend(ctx.options.sampler, state, orig.init, args, kwargs,
                                     cached=self.cache is not None)
        own = kwargs.get("sampler")   # the user's sampler= (ImbalancedSampler, ...)
        if (ctx.distributed and not self.distribution.active
                and not sharded_by_user(own, kwargs.get("batch_sampler"))):
            state.unsharded = why_whole_in_every_rank(kind, args[0] if args else None, own,
                                                      kwargs.get("batch_sampler"))
            shard = state.unsharded is None
        else:   # one rank, or the function shards its data itself
            shard = False
        if shard:   # unshuffled or own sampler: unsharded until one of its epochs trains
            # an own sampler's draws: a seed per loader (construction order, as on every rank)
            index = state.index if own is None else -1 - len(self.states)
            state.shard_key = index
            state.shard = ShardSampler(ctx.rank, ctx.world_size,
                                       _loader_seed(ctx, index, self.data_seed.agreed),
                                       shuffle=train, source=own, batch_size=batch_size,
                                       drop_last=bool(kwargs.get("drop_last", False)),
                                       generator=kwargs.get("generator"))
            kwargs["shuffle"] = False
            kwargs["sampler"] = state.shard
            if batch_size is not None and train:
                kwargs["batch_size"] = state.shard.rank_batch_size()
        orig.init(loader, *args, **kwargs)
        if state.shard is not None:
            state.shard.num_items = len(loader.dataset)
        state.directional, state.num_hops = layout_kind(loader)
        state.transform = batch_transform(loader)
        if self.device_path is not None:
            self.device_path.adopt(loader, state)
            if state.samples_on_device:   # no loader workers for device tensors
                loader.num_workers = 0
        if measure is not None:   # sampler="auto": once placed (`sampler_backend`)
            measure(state.samples_on_device)
        self.states[loader] = state
        state.record = state.to_dict()
        uneven = state.shard.uneven_batch() if state.shard is not None else None
        if uneven is not None and state.kind != "graph":   # (graphs: `kept_whole` says)
            state.record["uneven_batch"] = uneven
        ctx.stats.setdefault("sampler", {"loaders": []})["loaders"].append(state.record)

    def _agree_shard_seed(self) -> None:
        """At the first training epoch of a loader that can be sharded: the ranks' common
        shard seed (`DataSeed.shard_seed`); where it is not this rank's data seed (the ranks'
        differed), every shard sampler built so far is re-seeded from it (none has drawn a
        sharded permutation yet: this is the first training epoch)."""
        base = self.data_seed.shard_seed()
        if base != self.ctx.data_seed:
            for state in self.states.values():
                if state.shard is not None:
                    state.shard.seed = _loader_seed(self.ctx, state.shard_key, base)

    def _built_before_run(self, loader: NeighborLoader) -> None:
        """A loader built before the call (passed in, or a global) runs as PyG runs it: none
        of gnnorch's loader features reach it (they are set up at construction). Counted in
        ``stats[rank]["sampler"]["built_before_run"]`` and, once per loader, a warning
        (`_warn_built_before_run`)."""
        if loader in self._before_run:
            return
        self._before_run.add(loader)
        section = self.ctx.stats.setdefault("sampler", {"loaders": []})
        section["built_before_run"] = section.get("built_before_run", 0) + 1
        _warn_built_before_run(self.ctx, type(loader).__name__, self._kind_of(loader))

    def _kind_of(self, loader: NeighborLoader) -> str:
        """The loader's kind ("node", "link", "graph") by the patched class it derives from."""
        for cls in type(loader).__mro__:
            if cls in self.classes:
                return self.classes[cls]
        return "node"

    def _iter(self, loader: NeighborLoader, orig: _Originals) -> Iterator[Any]:
        ctx = self.ctx
        state = self.states.get(loader)
        if state is None:   # built before the run: PyG's own epoch
            self._built_before_run(loader)
            return orig.iter(loader)
        training = epoch_trains(state, self.layer_seam, ctx, self.optimizers)
        if training and state.shard is not None and self.data_seed.agreed is None:
            self._agree_shard_seed()
        split = training and decided_after_first_batch(state, self.optimizers)
        whole = None
        state.head_pending = False   # (an earlier split epoch's iterator may never have run)
        if split:   # the head runs whole in every rank: the rest is decided after its step
            assert state.shard is not None
            set_sharded(loader, state, False)
            state.shard.head = state.global_batch_size
        elif state.shard is not None:
            whole = noted_kept_whole(state, self.optimizers) if training else None
            set_sharded(loader, state, training and whole is None)
        elif training and state.unsharded is not None:   # cannot be dealt out (`shard`)
            whole = state.record["kept_whole"] = state.unsharded
        if (training and state.cache is None and self.cache is not None
                and state.kind == "node"):  # first epoch (link batches are not cached)
            features = (self.device_path.feature_source(loader)
                        if self.device_path is not None else None)
            state.cache = self.cache.attach(loader, state, aside=cache_aside(state),
                                            features=features)
        if self.device_path is not None and state.device is not None:
            self.device_path.epoch_start(loader, state)
        planned = plan_workers(loader, state, ctx)
        if state.cache is not None:  # before workers start: they copy the mask
            state.cache.epoch_start(loader, training)
        timer = None
        if split:   # its passes start lazily, inside the timed epoch
            timer = EpochTimer(ctx, state.index, state.epochs, whole_in_every_rank=True)
            iterator = head_and_rest(loader, state, ctx, self.optimizers, orig.iter, planned,
                                     timer, self.order)
        else:
            base = (self.order.begin(loader, state, True, training)
                    if state.shard is not None else None)
            iterator = start_pass(loader, ctx, orig.iter, rank_stream(ctx, state, training),
                                  planned, base)
        if self.partition is not None and state.partition is not None:  # batch.x: the store
            iterator = self.partition.feed(iterator, loader, state.partition, training)
        if self.device_path is not None and state.device is not None:
            iterator = self.device_path.feed(iterator, loader, state, training)
        if self.layer_seam is not None and state.kind != "graph":   # (graphs: no hops)
            iterator = announced(iterator, self.layer_seam, state, training,
                                 defer=defers_features(ctx))
        if not training:
            state.eval_epochs += 1
            return iterator
        if timer is None:
            timer = EpochTimer(ctx, state.index, state.epochs, total=batches_in(loader),
                               whole_in_every_rank=whole is not None)
            if state.shard is not None and state.shard.sharded:
                timer.padded = state.shard.padding()
        epoch, state.epochs = state.epochs, state.epochs + 1
        return rank_steps(timed(iterator, timer), ctx, state, epoch)


def _warn_built_before_run(ctx: RankContext, name: str, kind: str) -> None:
    """Rank 0's warning for a loader of class `name` built before the call (a graph-level
    one's only with several ranks, where sharding is what it misses)."""
    if ctx.rank != 0:
        return
    if kind == "graph":
        if ctx.distributed:
            warnings.warn(
                f"gnnorch: a {name} built before the call runs as PyG runs it: every rank "
                f"iterates all of it (sharding over ranks and the tuner reach only loaders "
                f"built inside the function). Build it inside the function to shard it.",
                GnnorchWarning, stacklevel=5)
        return
    warnings.warn(
        f"gnnorch: a {name} built before the call runs as PyG runs it: gnnorch's sampler, "
        f"trimming of its batches, sharding over ranks (with processes > 1 every rank "
        f"iterates all of it), the cache and the tuner reach only loaders built inside the "
        f"function. Build it inside the function to use them.", GnnorchWarning, stacklevel=5)
