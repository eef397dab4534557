"""The partitioned feature store at the NeighborLoader seam (``RunOptions.partition_features``).

One `PartitionManager` per rank and run, installed by `intercept.session` and called by the
loader seam (`intercept.loader`) at two points:

* `adopt` (a NeighborLoader is built): when the loader qualifies (more than one rank, a
  homogeneous `Data` with a feature tensor ``x``, no `transform`, no historical-embedding
  cache, the user's code not managing distribution itself), the loader is built on a shallow
  copy of the user's data *without* ``x`` (same tensors otherwise: structure, labels, masks),
  so neither the sampler nor loader workers ever touch features. The rank's `FeatureStore`
  for that data object (one per data object, shared by its loaders) is built on first use:
  `gnnorch.partition.partition_graph` over the world's ranks (identical on every rank:
  checked; the last partition of the process is reused for the same graph), the rank's rows
  plus its hot rows within ``hot_budget_mb`` copied out of ``data.x``.
* `feed` (an epoch of such a loader starts): every batch gets ``batch.x = x[batch.n_id]``
  from the store in the rank's main process before the user sees it, remote rows fetched from
  their owners (`intercept.exchange`). With ``prefetch`` and loader workers, batch k+1 is taken
  from the loader and its rows fetched by the exchange thread while the user's step on batch
  k runs; without workers, rows are fetched when the batch is asked for (sampling happens in
  the trainer and shares the torch RNG with the user's step, so sampling early would change
  the batches). At the end of the epoch (or when the user leaves the loop) the rank drains:
  it takes part in rounds, done, until every rank is done.

Exact: batches are those of the unpartitioned run (the sampler sees the same graph and RNG),
rows are copies of the user's rows. Statistics (`stats`): per store, partition sizes, edge
cut, hot rows, held bytes; per epoch of a partitioned loader (``store_epoch``: its number
among all epochs over that data), rows local / replicated / remote, bytes fetched and
served, rounds and drain rounds, fetch seconds (the exchange thread's rounds) and wait
seconds (the main thread blocked on them: less than fetch seconds where prefetch overlaps).

Memory: the loader's copy holds no ``x``; the store holds the rank's rows; the user's own
``data.x`` stays as the user made it (all rows, unless memory-mapped:
`gnnorch.partition.open_features`).
"""
from __future__ import annotations

import concurrent.futures
import copy
import inspect
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from ..launch.context import RankContext
from ..partition.config import PartitionConfig
from ..partition.hot import choose_hot, hot_scores
from ..partition.partitioner import edge_cut, partition_graph
from ..partition.store import FeatureStore
from .exchange import GroupExchange, SerialWorker
from .procgroup import UserDistribution

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

_FIELDS = ("batches", "rows_local", "rows_hot", "rows_remote", "bytes_fetched", "rows_served",
           "bytes_served", "rounds", "drain_rounds", "fetch_seconds", "wait_seconds")


class _DataStore:
    """One data object's store and what was decided about it."""

    def __init__(self, index: int, data: Any, view: Any, store: FeatureStore,
                 info: dict) -> None:
        self.index, self.data, self.view, self.store, self.info = index, data, view, store, info
        self.epochs = 0

    def next_tag(self) -> int:
        self.epochs += 1
        return (self.index << 32) | self.epochs


class Feed:
    """A partitioned loader: its data's store and its stats identity."""

    def __init__(self, entry: _DataStore, role: str, index: int) -> None:
        self.entry, self.role, self.index = entry, role, index


class PartitionManager:
    """The partitioned feature store of one rank's run (see the module docstring)."""

    def __init__(self, ctx: RankContext, config: PartitionConfig,
                 distribution: UserDistribution | None = None, *,
                 cache_on: bool = False) -> None:
        self.ctx, self.config = ctx, config
        self.distribution = distribution or UserDistribution()
        self.cache_on = cache_on   # the historical-embedding cache reads loaders' features
        self.entries: list[_DataStore] = []
        self.loaders: list[dict] = []
        self.epochs: list[dict] = []
        self.exchange: GroupExchange | None = None
        self.worker: SerialWorker | None = None
        self.active = True

    # -- loader construction ------------------------------------------------------------
    def adopt(self, init: Callable, args: tuple, kwargs: dict, role: str,
              index: int) -> tuple[tuple, dict, Feed | None]:
        """(args, kwargs, feed) for a NeighborLoader being built: its data replaced by the
        store's copy without ``x`` when it qualifies (feed None: left as it is)."""
        bound = inspect.signature(init).bind(None, *args, **kwargs).arguments
        data = bound.get("data")
        reason = self._refusal(data, bound)
        record = {"role": role, "index": index, "partitioned": reason is None,
                  "reason": reason}
        self.loaders.append(record)
        if reason is not None:
            return args, kwargs, None
        entry = self._entry(data, bound)
        record["store"] = entry.index
        if args:
            args = (entry.view,) + tuple(args[1:])
        else:
            kwargs = {**kwargs, "data": entry.view}
        return args, kwargs, Feed(entry, role, index)

    def _refusal(self, data: Any, bound: dict) -> str | None:
        """Why this loader's features stay as they are (None: they are partitioned)."""
        from torch_geometric.data import Data

        ctx = self.ctx
        extra = bound.get("kwargs", {})
        x = getattr(data, "x", None) if isinstance(data, Data) else None
        if not ctx.distributed:
            return "one rank: nothing to partition"
        if self.distribution.active:
            return "your code manages distribution (init_process_group)"
        if self.cache_on:
            return "the historical-embedding cache reads the loader's features"
        if not isinstance(data, Data):
            return f"{type(data).__name__} input (homogeneous Data only)"
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return "the data has no feature tensor x"
        if x.requires_grad:
            return "data.x requires grad (learned features)"
        if x.size(0) != data.num_nodes:
            return f"data.x has {x.size(0)} rows for {data.num_nodes} nodes"
        if getattr(data, "edge_index", None) is None:
            return "the data has no edge_index"
        if bound.get("transform") is not None or extra.get("transform") is not None \
                or bound.get("transform_sampler_output") is not None:
            return "the loader has a transform (it may read batch.x before gnnorch sets it)"
        return None

    def _entry(self, data: Any, bound: dict) -> _DataStore:
        for entry in self.entries:
            if entry.data is data:
                return entry
        if self.exchange is None:      # collective: every rank builds the same loaders
            self.exchange = GroupExchange.create(self.ctx.rank, self.ctx.world_size)
            self.worker = SerialWorker()
        exchange, worker = self.exchange, self.worker

        def agree(check: tuple) -> list:
            return _wait(worker.submit(exchange.agree, check))

        entry = _new_entry(len(self.entries), data, bound, self.ctx, self.config, agree)
        self.entries.append(entry)
        return entry

    # -- epochs ---------------------------------------------------------------------------
    def feed(self, iterator: Iterator[Any], loader: NeighborLoader, feed: Feed,
             training: bool) -> Iterator[Any]:
        """The loader's batches with ``batch.x`` set from the store (module docstring)."""
        prefetch = self.config.prefetch and int(getattr(loader, "num_workers", 0) or 0) > 0
        return self._batches(iterator, feed, training, prefetch)

    def _batches(self, iterator: Iterator[Any], feed: Feed, training: bool,
                 prefetch: bool) -> Iterator[Any]:
        entry = feed.entry
        tag = entry.next_tag()
        record = {"store": entry.index, "role": feed.role, "loader": feed.index,
                  "store_epoch": entry.epochs, "training": training, "prefetch": prefetch,
                  **{name: 0 for name in _FIELDS}}
        it = iter(iterator)
        drain = False
        try:
            if prefetch:
                pending = self._submit(it, entry, tag, record)
                while pending is not None:
                    batch, future = pending
                    pending = self._submit(it, entry, tag, record)   # batch k+1, in flight
                    self._attach(batch, future, record)
                    yield batch
            else:
                while True:
                    got = self._submit(it, entry, tag, record)
                    if got is None:
                        break
                    self._attach(*got, record)
                    yield got[0]
            drain = True
        except GeneratorExit:
            # the user left the loop while the run goes on: drain (a round already submitted
            # for a prefetched batch runs first: the exchange thread keeps submission order).
            # After the run (an exception unwinding), or after a failed round: no collective.
            drain = self.active
            raise
        finally:
            if drain:
                self._drain(entry, tag, record)
            record["fetch_seconds"] = round(record["fetch_seconds"], 6)
            record["wait_seconds"] = round(record["wait_seconds"], 6)
            self.epochs.append(record)

    def _submit(self, it: Iterator[Any], entry: _DataStore, tag: int,
                record: dict) -> tuple[Any, Any] | None:
        """The loader's next batch and the future of its rows (None at the end)."""
        try:
            batch = next(it)
        except StopIteration:
            return None
        n_id = getattr(batch, "n_id", None)
        if not isinstance(n_id, torch.Tensor):
            raise RuntimeError("partition_features: a NeighborLoader batch without n_id")
        return batch, self.worker.submit(self._gather, entry, tag, n_id, record)

    def _gather(self, entry: _DataStore, tag: int, n_id: torch.Tensor,
                record: dict) -> torch.Tensor:
        """In the exchange thread: one round for one batch; ``x[n_id]``."""
        start = time.perf_counter()
        store = entry.store
        plan = store.plan(n_id)
        fetched, _, served = self.exchange.round(tag, False, plan.send_counts, plan.send_ids,
                                                 store.serve, store.row_bytes)
        x = store.assemble(plan, fetched)
        remote = plan.send_ids.numel()
        record["rows_local"] += plan.local
        record["rows_hot"] += plan.hot
        record["rows_remote"] += remote
        record["bytes_fetched"] += remote * store.row_bytes
        record["rows_served"] += served
        record["bytes_served"] += served * store.row_bytes
        record["rounds"] += 1
        record["fetch_seconds"] += time.perf_counter() - start
        return x

    @staticmethod
    def _attach(batch: Any, future: Any, record: dict) -> None:
        start = time.perf_counter()
        batch.x = _wait(future)
        record["wait_seconds"] += time.perf_counter() - start
        record["batches"] += 1

    def _drain(self, entry: _DataStore, tag: int, record: dict) -> None:
        """Rounds marked done, serving the others, until every rank is done."""
        store = entry.store
        empty = torch.empty(0, dtype=torch.long)
        counts = [0] * self.ctx.world_size

        def done_round() -> tuple[bool, int]:
            start = time.perf_counter()
            _, finished, served = self.exchange.round(tag, True, counts, empty, store.serve,
                                                      store.row_bytes)
            record["fetch_seconds"] += time.perf_counter() - start
            return finished, served

        while True:
            finished, served = _wait(self.worker.submit(done_round))
            record["drain_rounds"] += 1
            record["rows_served"] += served
            record["bytes_served"] += served * store.row_bytes
            if finished:
                return

    # -- the end of the run ---------------------------------------------------------------
    def close(self) -> None:
        """Stop the exchange thread and free the group (left alone when a round is stuck)."""
        self.active = False
        if self.worker is not None and self.worker.close(1.0) and self.exchange is not None:
            self.exchange.destroy()

    def stats(self) -> dict:
        reason = None
        if not self.ctx.distributed:
            reason = ("one rank: partition_features has no effect (it needs a world of > 1 "
                      "rank: torchrun, or processes=p > 1)")
        elif not self.entries:
            reason = "no NeighborLoader qualified (see loaders)"
        return {"enabled": bool(self.entries), "reason": reason,
                "config": self.config.to_dict(), "stores": [e.info for e in self.entries],
                "loaders": self.loaders, "epochs": self.epochs}


def _new_entry(index: int, data: Any, bound: dict, ctx: RankContext, cfg: PartitionConfig,
               agree: Callable[[tuple], list]) -> _DataStore:
    """Partition `data`'s graph over the world's ranks, build this rank's store (its rows
    plus its hot rows) and check with `agree` that every rank built the same partition."""
    start = time.perf_counter()
    num_nodes, x = int(data.num_nodes), data.x
    owner, reused = _partition(data.edge_index, num_nodes, ctx.world_size, cfg)
    partition_s = time.perf_counter() - start
    row_bytes = int(x[0].numel()) * x.element_size() if num_nodes else 0
    hot = torch.empty(0, dtype=torch.long)
    hotness = None
    if cfg.hot_budget_bytes >= row_bytes > 0:
        from ..sampling.choice import seed_pool

        seeds = seed_pool(bound.get("input_nodes"), num_nodes)
        scores, hotness = hot_scores(cfg.hotness, data.edge_index, num_nodes, seeds,
                                     bound.get("num_neighbors"))
        hot = choose_hot(scores, owner, ctx.rank, cfg.hot_budget_bytes, row_bytes)
    store = FeatureStore.build(x, owner, ctx.rank, ctx.world_size, hot)
    check = (num_nodes, int(data.edge_index.size(1)), store.row_bytes, str(x.dtype),
             int((owner * (torch.arange(num_nodes) % 1009 + 1)).sum()))
    seen = agree(check)
    if any(other != check for other in seen):
        raise ValueError(f"partition_features: the ranks' data differ (nodes, edges, row "
                         f"bytes, dtype, partition checksum per rank: {seen}); every rank "
                         f"must build its loaders on the same graph")
    view = copy.copy(data)
    view.num_nodes = num_nodes
    del view.x
    info = {"store": index, "parts": ctx.world_size, "rank": ctx.rank,
            "num_nodes": num_nodes,
            "partition_sizes": torch.bincount(owner, minlength=ctx.world_size).tolist(),
            "edge_cut": edge_cut(data.edge_index, owner), "partition_seconds": partition_s,
            "partition_reused": reused,
            "local_rows": store.local_count, "hot_rows": store.hot_count, "hotness": hotness,
            "row_bytes": store.row_bytes, "held_bytes": store.held_bytes,
            "full_bytes": num_nodes * store.row_bytes,
            "build_seconds": time.perf_counter() - start}
    return _DataStore(index, data, view, store, info)


_LAST_PARTITION: dict = {}   # the last partition computed in this process (one entry)


def _partition(edge_index: torch.Tensor, num_nodes: int, parts: int,
               cfg: PartitionConfig) -> tuple[torch.Tensor, bool]:
    """(owner, whether it was reused): the last partition of this process is reused when
    the same graph (same tensor and content: an O(E) checksum) is partitioned again with the
    same settings, e.g. by the next call of a Runtime."""
    key = (edge_index.data_ptr(), tuple(edge_index.shape), num_nodes, parts, cfg.imbalance,
           cfg.refine_rounds, int((edge_index[0].long() * 1_000_003 + edge_index[1]).sum()))
    if _LAST_PARTITION.get("key") == key:
        return _LAST_PARTITION["owner"], True
    owner = partition_graph(edge_index, num_nodes, parts, imbalance=cfg.imbalance,
                            rounds=cfg.refine_rounds)
    _LAST_PARTITION.update(key=key, owner=owner)
    return owner, False


def _wait(future: concurrent.futures.Future) -> Any:
    """`future.result()`, in short waits, so that the main thread stays interruptible (the
    world's watchdog stops a rank by raising in its main thread)."""
    while True:
        try:
            return future.result(timeout=0.25)
        except concurrent.futures.TimeoutError:
            continue
