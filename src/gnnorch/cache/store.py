"""The historical-embedding store: one row per hot vertex and the optimizer step it was
computed at.

Version semantics: the run counts optimizer steps s (steps of the optimizer(s) holding the
bottom layer's parameters). A row written with version v was computed with the weights after
v steps. A forward taken when s steps are done uses a row at staleness s - v; the bound
`staleness` S says s - v <= S for every row a forward uses (S = 0: computed with the current
weights). `stale(slots, s, S)` lists the rows that violate it; the cache refreshes them before
the forward uses them, or raises `gnnorch.errors.StalenessError` in debug mode.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..device.transfer import to_device


class EmbeddingStore:
    """Rows of the bottom layer's output for a fixed hot set, with per-row versions.

    `slot[v]` is the row of global vertex v (-1: v is not hot). Rows are allocated at the first
    `write` (their width and dtype are the layer's); versions start at -1 (never computed).
    """

    def __init__(self, num_nodes: int, hot_ids: Tensor) -> None:
        self.num_nodes = num_nodes
        self.hot_ids = hot_ids.long().sort().values
        self.slot = torch.full((num_nodes,), -1, dtype=torch.long)
        self.slot[self.hot_ids] = torch.arange(self.hot_ids.numel())
        self.version = torch.full((self.hot_ids.numel(),), -1, dtype=torch.long)
        # the optimizer step of the last forward that used each row (-1: never)
        self.read_at = torch.full((self.hot_ids.numel(),), -1, dtype=torch.long)
        self.rows: Tensor | None = None
        self.aux: Tensor | None = None   # gradient="linear": the raw aggregate of each row

    def __len__(self) -> int:
        return self.hot_ids.numel()

    @property
    def mask(self) -> Tensor:
        """bool [num_nodes]: the hot set."""
        return self.slot >= 0

    def slots_of(self, ids: Tensor) -> Tensor:
        """Row of each global id (-1 for vertices that are not hot)."""
        return self.slot[ids.to(self.slot.device)]

    def write(self, slots: Tensor, values: Tensor, version: int | Tensor,
              aux: Tensor | None = None) -> None:
        """Store `values` (detached; and `aux`, the rows' raw aggregates) for `slots`, computed
        at optimizer step `version`. Both live where the first `values` were computed (the
        bottom layer's device): a step reads them there without a copy."""
        values = values.detach()
        if self.rows is None:
            self.rows = values.new_zeros((len(self),) + tuple(values.shape[1:]))
        device = self.rows.device
        at = to_device(slots, device)
        self.rows[at] = to_device(values, device).to(self.rows.dtype)
        if aux is not None:
            if self.aux is None:
                self.aux = aux.new_zeros((len(self),) + tuple(aux.shape[1:]), device=device)
            self.aux[at] = to_device(aux.detach(), device).to(self.aux.dtype)
        self.version[slots] = version

    def read(self, slots: Tensor) -> Tensor:
        if self.rows is None:
            raise RuntimeError("the embedding store was read before it was filled")
        return self.rows[to_device(slots, self.rows.device)]

    def read_aux(self, slots: Tensor) -> Tensor:
        if self.aux is None:
            raise RuntimeError("the embedding store holds no aggregates")
        return self.aux[to_device(slots, self.aux.device)]

    def mark_read(self, slots: Tensor, step: int) -> None:
        """A forward at optimizer step `step` used the rows of `slots`."""
        self.read_at[slots] = step

    def unread(self) -> Tensor:
        """bool per slot: the row has not been used since it was written (a row written and
        used at the same step counts as used)."""
        return self.read_at < self.version

    def staleness(self, slots: Tensor, step: int) -> Tensor:
        """step - version of each slot (a never-computed row counts as infinitely stale)."""
        version = self.version[slots]
        age = step - version
        return age.masked_fill(version < 0, torch.iinfo(torch.long).max)

    def stale(self, slots: Tensor, step: int, bound: int) -> Tensor:
        """The distinct slots among `slots` whose rows are older than `bound` at `step`."""
        if slots.numel() == 0:
            return slots
        return torch.unique(slots[self.staleness(slots, step) > bound])

    def oldest(self, count: int) -> Tensor:
        """The `count` slots with the lowest versions (ties: lower slot first)."""
        count = min(count, len(self))
        order = torch.sort(self.version, stable=True).indices
        return order[:count]
