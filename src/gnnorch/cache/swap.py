"""The per-step bottom-layer swap: on a training batch of a served loader, the bottom layer's rows
of hot vertices at hop L-1 (the last expanded hop) come from the store, the others are computed.

Before the layer runs, every row the batch uses is checked against the staleness bound and
refreshed with the current weights where it is over it (`debug=True`: `StalenessError`). Then

* `store="aggregate"` (GCN): the layer runs on every row, and the hot rows get `lin` of their
  stored aggregates added with the current weights (exact, with gradient);
* a trimmed bipartite bottom layer (`pair_recomputable`) runs on its cold destination rows only
  and the stored rows are interleaved;
* otherwise the layer runs on every row and the hot ones are overwritten.

Stored rows carry no gradient, except with `gradient="linear"` where `CachedLinearRows` gives
the weights their exact gradient. After the layer, the rows the batch computed for hot vertices
at shallower hops are written back (`writeback`, where it applies).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..device.transfer import to_device
from ..errors import StalenessError
from ..trim.hops import LayerBounds
from ..trim.layer_types import pair_recomputable, self_looping
from ..trim.state import Mode
from .admission import ServedModel
from .background import BackgroundRefresh
from .config import CacheConfig
from .hotset import HotSet
from .refresh import BatchDegrees, CachedLinearRows, InterleaveRows, linear_parts
from .stats import CacheStats
from .writeback import BatchWriteBack, write_back_reason

if TYPE_CHECKING:
    from .batches import BatchInfo
    from .loader import LayerCallView


class BottomSwap:
    """The served bottom layer's call on each training batch (see the module docstring)."""

    def __init__(self, config: CacheConfig, served: ServedModel, hot: HotSet,
                 background: BackgroundRefresh | None, stats: CacheStats,
                 degrees: BatchDegrees | None) -> None:
        self.config = config
        self.aggregate = served.aggregate
        self.degree_fix = served.degree_fix
        self.hot = hot
        self.background = background
        self.stats = stats
        self.last_degrees = degrees   # GCN: the latest batch's degrees (for refreshes)
        reason = write_back_reason(config, served, hot.trainer_refresher.hood.full)
        self.write_back = (BatchWriteBack(hot.trainer_refresher.linear, stats)
                           if reason is None else None)
        stats.info["write_back"] = "on" if reason is None else f"off: {reason}"

    def bottom(self, call: LayerCallView, info: BatchInfo, step: int) -> Tensor:
        """The bottom layer's call (`HookedCall`) on a training batch (`info`: its `BatchInfo`)
        when `step` optimizer steps are done."""
        store = self.hot.store
        rows, slots, last = info.hot(call.batch, store)
        c = self.stats.counters
        c["forwards"] += 1
        c["lookups"] += last
        c["hits"] += rows.numel()
        degrees = info.degrees(call.batch) if self.degree_fix else None
        self.last_degrees = degrees
        self._ensure_fresh(slots, degrees, step)
        if self.aggregate:  # GCN rows finished with the current weights: exact, with gradient
            out = call.run()
            if rows.numel():
                agg = store.read(slots).to(device=out.device, dtype=out.dtype)
                out = out.index_add(0, to_device(rows, out.device), call.layer.lin(agg))
            return out
        out = None
        if rows.numel() and call.mode is Mode.TRIM and isinstance(call.layer,
                                                                  pair_recomputable()):
            bounds = call.batch.layout.bounds(0, call.state.layers)
            if bounds is not None:
                out = self._cold_call(call, rows, slots, bounds, info.pruned)
        if out is None:
            out = call.run()
            if rows.numel():
                rows = to_device(rows, out.device)   # once: the values' root rows use it too
                values = self._hot_values(call, rows, slots, out.dtype, out.device)
                out = out.index_put((rows,), values)
        if self.write_back is not None:
            self.write_back.write(call, info, store, out, step)
        return out

    def _hot_values(self, call: LayerCallView, rows: Tensor, slots: Tensor, dtype: torch.dtype,
                    device: torch.device) -> Tensor:
        """The stored rows; with gradient="linear" they carry the weights' exact gradient."""
        store = self.hot.store
        slots = to_device(slots, device)   # once, for the rows and their aggregates
        values = store.read(slots).to(device=device, dtype=dtype)
        if self.hot.trainer_refresher.linear is None or not torch.is_grad_enabled():
            return values
        lin_a, lin_r, _ = linear_parts(call.layer)
        agg = store.read_aux(slots).to(device=device, dtype=dtype)
        root = call.x[to_device(rows, call.x.device)].to(dtype) if lin_r is not None else None
        return CachedLinearRows.apply(values, agg, root, lin_a.weight, lin_a.bias,
                                      lin_r.weight if lin_r is not None else None)

    def _cold_call(self, call: LayerCallView, rows: Tensor, slots: Tensor,
                   bounds: LayerBounds,
                   pruned: bool) -> Tensor:
        """The trimmed bottom layer on its *cold* destination rows only, hot rows from the
        store: what the seam's trimmed call computes, without transforming the hot rows.

        Destinations are x[cold] (x_src stays x[:num_src]); layers that pair x_dst[i] with
        x_src[i] through self-loops (GAT) get explicit self-loop edges instead."""
        layer, x, batch = call.layer, call.x, call.batch
        device = x.device
        num_dst = bounds.num_dst
        # the cold rows from the hot ones (host ids): on the host, then copied without a
        # pageable copy, so that finding them does not wait for the device
        cold_mask = torch.ones(num_dst, dtype=torch.bool)
        cold_mask[rows.cpu()] = False
        cold = cold_mask.nonzero().view(-1)
        position = torch.full((num_dst,), -1, dtype=torch.long)
        position[cold] = torch.arange(cold.numel())
        rows, cold = to_device(rows, device), to_device(cold, device)
        cold_mask, position = to_device(cold_mask, device), to_device(position, device)
        src, dst = call.edge_index[0], call.edge_index[1]
        if num_dst < batch.num_nodes - batch.layout.nodes[-1]:  # not the bottom of K = L hops
            keep = dst < num_dst
            src, dst = src[keep], dst[keep]
        if not pruned:  # a pruned batch has no edges into hot rows of the last expanded hop
            keep = cold_mask[dst]
            src, dst = src[keep], dst[keep]
        dst = position[dst]
        loops = getattr(layer, "add_self_loops", False) and isinstance(layer, self_looping())
        if loops:
            real = src != cold[dst]
            src = torch.cat([src[real], cold])
            dst = torch.cat([dst[real], torch.arange(cold.numel(), device=device)])
            layer.add_self_loops = False
        try:
            computed = layer((x[:bounds.num_src], x[cold]), torch.stack([src, dst]))
        finally:
            if loops:
                layer.add_self_loops = True
        values = self._hot_values(call, rows, slots, computed.dtype, device)
        out = InterleaveRows.apply(computed, values, cold, rows)
        self.stats.counters["cold_rows"] += cold.numel()
        self.stats.counters["skipped_rows"] += rows.numel()
        if call.state.compact:
            return out
        pad = [0, 0] * (out.dim() - 1) + [0, batch.num_nodes - num_dst]
        return torch.nn.functional.pad(out, pad)

    def _ensure_fresh(self, slots: Tensor, degrees: BatchDegrees | None, step: int) -> None:
        """Every row of `slots` within the bound at `step`: a finished background job is
        installed, one in flight waited for if a row needs it, the rest refreshed now."""
        bound = self.config.staleness
        background = self.background
        if background is not None:
            background.install(wait=False)
        if slots.numel() == 0:
            return
        store = self.hot.store
        stale = store.stale(slots, step, bound)
        if stale.numel() and background is not None and background.busy:
            background.install(wait=True)
            stale = store.stale(slots, step, bound)
        if stale.numel():
            if self.config.debug:
                age = int(store.staleness(stale, step).max())
                raise StalenessError(
                    f"a forward at optimizer step {step} would use {stale.numel()} cached "
                    f"row(s) up to {age} steps old (bound {bound})")
            self.hot.refresh_now(stale, step, degrees)
        store.mark_read(slots, step)
        age = int(store.staleness(slots, step).max())
        self.stats.saw_age(age)
        if age > bound:  # cannot happen: refreshed above
            raise StalenessError(f"staleness {age} > bound {bound} after refresh")
