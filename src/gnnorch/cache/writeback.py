"""Rows a training batch computes anyway: the bottom-layer rows of hot vertices that the batch
reached at a shallower hop than L-1 go back into the store (``CacheConfig.write_back``).

A hot vertex v at hop h <= L-2 of a batch is a destination of the bottom layer with all of its
sampled in-edges in the batch (the loader's fanout at hop h), so the forward computes its row
with the current weights whatever the cache does: the upper layers need it. That row is a
cached row of the same law as a refresh's, the bottom layer on a uniform sample of v's
in-neighbourhood, drawn by the loader's sampler with the fanout of v's hop instead of the last
one (for a mean aggregation both are unbiased estimates of the full-neighbourhood mean; with
the usual decreasing fanouts, [15, 10, 5], the batch's has the larger sample). Writing it back
with version `step` (the forward runs with the weights after `step` optimizer steps) keeps
the staleness invariant trivially: its age is 0 when written, and later uses are checked like
any other row's. What it saves: the refreshes of rows that batches keep computing, which are
the gathers of their refresh neighbourhoods (with the features on the host, rows over PCIe).

It applies only where the batch's row and a refresh's are the same function of a sample:

* ``store="output"``: an ``"aggregate"`` row (GCN) is finished with the current weights in
  every step already; only its neighbour sample ages, and the batch's normalised aggregate is
  not computed separately.
* a *sampled* refresh neighbourhood: with ``refresh="full"`` (or ``"auto"`` resolved to full) a
  cached row is the full-neighbourhood value (the exactness test's reference); a batch's
  sample would replace it.
* a bottom layer without dropout in training mode (GAT's attention dropout, a GIN MLP's
  Dropout): refreshes run the layer in eval mode; a batch row would carry one dropout draw.

With ``gradient="linear"`` the row's raw aggregate (the store's `aux`) is aggregated from the
batch's own in-edges of v, so the stored pair (value, aggregate) stays consistent.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..device.transfer import to_device
from .config import CacheConfig
from .refresh import raw_aggregate
from .stats import CacheStats

if TYPE_CHECKING:
    from .admission import ServedModel
    from .loader import BatchInfo, LayerCallView
    from .store import EmbeddingStore

DROPOUT_MODULES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                   torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)


def dropout_inside(layer: torch.nn.Module) -> str | None:
    """The first dropout of `layer` or its submodules that draws in training mode (a module,
    or a layer's float ``dropout`` attribute > 0, as GATConv's), named; None if there is none."""
    for name, module in layer.named_modules():
        where = f"{type(layer).__name__}{'.' + name if name else ''}"
        if isinstance(module, DROPOUT_MODULES) and module.p > 0:
            return f"{where} ({type(module).__name__}, p={module.p})"
        rate = getattr(module, "dropout", None)
        if isinstance(rate, float) and rate > 0:
            return f"{where}.dropout={rate}"
    return None


def write_back_reason(config: CacheConfig, served: ServedModel, full: bool) -> str | None:
    """Why rows computed by batches cannot be written back (see the module docstring), or None
    when they are. `full`: the refresh neighbourhood is every in-edge."""
    if not config.write_back:
        return "write_back=False"
    if served.aggregate:
        return "store='aggregate': rows are finished with the current weights in every step"
    if full:
        return "the refresh neighbourhood is full: a batch's sample would replace it"
    dropout = dropout_inside(served.layer)
    if dropout is not None:
        return f"the bottom layer draws dropout in training mode: {dropout}"
    return None


class BatchWriteBack:
    """Writes the rows of hot vertices a training batch computed at hops 0..L-2 into the store
    (with their raw aggregates when cached rows carry the linear gradient)."""

    def __init__(self, linear: str | None, stats: CacheStats) -> None:
        self.linear = linear   # gradient="linear": the aggregation kept beside the rows
        self.stats = stats

    def write(self, call: LayerCallView, info: BatchInfo, store: EmbeddingStore, out: Tensor,
              step: int) -> None:
        """`out`: the bottom layer's output on the batch (the forward at optimizer step
        `step`); its rows of hot vertices at hops 0..L-2 become their stored rows."""
        rows, slots = info.shallow_hot(call.batch, store)
        if rows.numel() == 0:
            return
        device = out.device
        rows_dev = to_device(rows, device)
        aux = None
        if self.linear is not None:
            aux = self._aggregates(call.x, call.edge_index, rows_dev)
        store.write(slots, out.detach().index_select(0, rows_dev), step, aux)
        self.stats.counters["written_back_rows"] += rows.numel()

    def _aggregates(self, x: Tensor, edge_index: Tensor, rows: Tensor) -> Tensor:
        """The layer's aggregation of the raw features `x` over the batch's in-edges of `rows`
        (a sorted, distinct set of batch rows)."""
        src, dst = edge_index[0], edge_index[1]
        position = torch.full((x.size(0),), -1, dtype=torch.long, device=x.device)
        position[rows] = torch.arange(rows.numel(), device=x.device)
        local = position[dst]
        keep = local >= 0
        assert self.linear is not None
        return raw_aggregate(x.detach(), rows.numel(), src[keep], local[keep], self.linear)
