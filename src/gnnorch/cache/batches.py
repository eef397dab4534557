"""What the cache reads of a training batch: its `BatchInfo` (the hot rows it holds at hop L-1
and at shallower hops, its degrees), which pruning mask it was sampled with (`pruned_with`), and
the hot rows the batches drawn ahead of the trainer will read (`hot_rows_ahead`).

The hot rows of a batch at hop L-1 are the rows the cache serves from its store: with hop
counts n_0 (seeds), ..., n_L, hop L-1 occupies the rows [c_{L-2}, c_{L-1}) with
c_h = n_0 + ... + n_h (`gnnorch.trim.hops`), and a row there is hot when its global id
(``n_id``) has a slot in the store. Looking the slots up is one gather of a [num_nodes] table
per batch (about 1.4 ms for a products batch's 90K hop L-1 rows on this machine's cores), so it
is done once per batch: the lookup of a batch drawn ahead (`HopSlots`) is kept by the loader's
cache (`AheadLookups`, nothing is set on the batch), and the batch's `BatchInfo` reuses it when
the batch arrives, if the batch still holds the same ``n_id`` (or its device copy) and the
store is the same.
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..device.gather import sampled_exclusion
from ..device.twin import device_twin
from ..trim.batch import BatchGraph
from .hotset import HotSet
from .refresh import BatchDegrees
from .store import EmbeddingStore

if TYPE_CHECKING:
    from .loader import LoaderCache

__all__ = ["AheadLookups", "BatchInfo", "HopSlots", "hot_rows_ahead", "pruned_with"]


@dataclasses.dataclass(frozen=True)
class HopSlots:
    """The store slot of each hop L-1 row ``lo .. hi-1`` of a batch (-1: not hot), looked up
    in `store` from the host ``n_id`` the batch held."""

    store: EmbeddingStore
    n_id: Tensor
    lo: int
    hi: int
    slots: Tensor

    def of(self, n_id: Any, store: EmbeddingStore, lo: int, hi: int) -> Tensor | None:
        """The slots, if they were looked up for this `n_id` (the same host tensor, or its
        device copy), store and rows; else None."""
        same_ids = n_id is self.n_id or (n_id is not None and n_id is device_twin(self.n_id))
        if same_ids and store is self.store and (lo, hi) == (self.lo, self.hi):
            return self.slots
        return None


class AheadLookups:
    """The `HopSlots` of batches drawn ahead, kept until each batch arrives (`take`): keyed by
    the batch object's identity and holding it weakly, so a batch dropped before it arrives
    (the user left the epoch) leaves nothing behind once at most `limit` are kept."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._kept: dict[int, tuple[weakref.ref, HopSlots]] = {}

    def get(self, batch: Any) -> HopSlots | None:
        entry = self._kept.get(id(batch))
        return entry[1] if entry is not None and entry[0]() is batch else None

    def put(self, batch: Any, lookup: HopSlots) -> None:
        if len(self._kept) >= self.limit:
            self._kept = {key: e for key, e in self._kept.items() if e[0]() is not None}
        try:
            self._kept[id(batch)] = (weakref.ref(batch), lookup)
        except TypeError:   # a batch type without weak references: looked up again on arrival
            pass

    def take(self, batch: Any) -> HopSlots | None:
        """The lookup kept for `batch` (arriving now), forgotten here."""
        entry = self._kept.pop(id(batch), None)
        return entry[1] if entry is not None and entry[0]() is batch else None


@dataclasses.dataclass
class BatchInfo:
    """The cache's view of one training batch (`BatchGraph.cache`). `ahead`: the hop L-1
    lookup the batch got while it was drawn ahead, if any."""

    loader: "LoaderCache"
    x: Any                 # the batch's raw features (batch.x)
    pruned: bool           # sampled with the hot set excluded at hop L-1
    ahead: HopSlots | None = None
    _hot: tuple[Any, Tensor, Tensor, int] | None = None
    _shallow: tuple[Any, Tensor, Tensor] | None = None
    _degrees: BatchDegrees | None = None

    def degrees(self, graph: BatchGraph) -> BatchDegrees:
        """The batch's in-degrees (GCN bottom layers: for refreshes made in this batch)."""
        if self._degrees is None:
            self._degrees = BatchDegrees.of_batch(graph.n_id, graph.edge_index,
                                                  graph.num_nodes, graph.extra_degree)
        return self._degrees

    def hot(self, graph: BatchGraph, store: EmbeddingStore) -> tuple[Tensor, Tensor, int]:
        """(batch rows of `store`'s hot vertices at hop L-1, their store slots, number of hop
        L-1 rows)."""
        if self._hot is None or self._hot[0] is not store:
            layout = graph.layout
            hops = layout.num_hops
            lo, hi = layout.rows_within(hops - 2), layout.rows_within(hops - 1)
            slots = self.ahead.of(graph.n_id, store, lo, hi) if self.ahead else None
            if slots is None:
                slots = store.slots_of(graph.n_id[lo:hi].cpu())
            hit = slots >= 0
            self._hot = (store, hit.nonzero().view(-1) + lo, slots[hit], hi - lo)
        return self._hot[1], self._hot[2], self._hot[3]

    def shallow_hot(self, graph: BatchGraph, store: EmbeddingStore) -> tuple[Tensor, Tensor]:
        """(batch rows of `store`'s hot vertices at hops 0..L-2, sorted; their store slots):
        the hot vertices whose bottom-layer rows the batch computes from its own in-edges."""
        if self._shallow is None or self._shallow[0] is not store:
            lo = graph.layout.rows_within(graph.layout.num_hops - 2)
            slots = store.slots_of(graph.n_id[:lo].cpu())
            hit = slots >= 0
            self._shallow = (store, hit.nonzero().view(-1), slots[hit])
        return self._shallow[1], self._shallow[2]


def pruned_with(batch: Any, hot: HotSet | None) -> bool | None:
    """Whether `batch` was sampled with `hot`'s live mask excluded, by the mask version it
    carries (`gnnorch.device.gather.sampled_exclusion`); None when it carries none. A batch
    pruned with an earlier hot set cannot be served: an error, never a silent mislabel."""
    version = sampled_exclusion(batch)
    if version is None:
        return None
    if hot is None or version not in hot.pruning_versions:
        return False
    if version != hot.mask_version:
        raise RuntimeError(
            f"gnnorch cache: a batch pruned with an earlier hot set (mask version "
            f"{version}, live {hot.mask_version}) reached the cache")
    return True


def hot_rows_ahead(batches: list[Any], hot: HotSet, kept: AheadLookups) -> list[Tensor]:
    """The store slots of the hot rows each of `batches` (drawn ahead of the trainer, next
    first) will read at hop L-1, as `BatchInfo.hot` will find them there; each batch's lookup
    is made once and kept in `kept`. A batch that will read none gets an empty tensor: one not
    labelled as pruned with the live mask (an earlier mask's batch raises when it arrives, in
    `pruned_with`), or without hop counts."""
    out = []
    store = hot.store
    for batch in batches:
        counts = getattr(batch, "num_sampled_nodes", None)
        n_id = getattr(batch, "n_id", None)
        version = sampled_exclusion(batch)
        if (store is None or version is None or version != hot.mask_version
                or version not in hot.pruning_versions or not isinstance(counts, list)
                or len(counts) < 3 or not isinstance(n_id, Tensor)):
            out.append(torch.empty(0, dtype=torch.long))
            continue
        hops = len(counts) - 1
        lo, hi = sum(counts[:hops - 1]), sum(counts[:hops])
        lookup = kept.get(batch)
        slots = lookup.of(n_id, store, lo, hi) if lookup is not None else None
        if slots is None:
            slots = store.slots_of(n_id[lo:hi].cpu())
            kept.put(batch, HopSlots(store, n_id, lo, hi, slots))
        out.append(slots[slots >= 0])
    return out
