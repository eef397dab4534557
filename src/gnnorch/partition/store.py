"""`FeatureStore`: one rank's feature rows (its partition plus replicated hot rows) and the
exact gather of a batch's rows.

A gather is three steps, so that the communication in the middle can be anything:

1. `plan(n_id)`: which of the batch's rows the store holds (local or hot) and which it must
   ask for, grouped by owner rank (`GatherPlan.send_ids`, `send_counts`);
2. an *exchange* sends every rank its requests and answers the requests it receives with
   `serve(ids)` (the owner's rows, as bytes); `gnnorch.intercept.exchange` does it with
   torch.distributed all-to-all collectives, `local_exchange` between store objects in one
   process (tests);
3. `assemble(plan, fetched)`: the ``[len(n_id), ...]`` feature tensor.

Invariants:
* ``gather(n_id, exchange)`` equals ``x[n_id]`` bit for bit (rows are copies of the user's
  rows, moved as raw bytes), whichever rows are local, replicated or fetched;
* the store holds exactly the rows of its partition (``owner == rank``) plus the hot rows it
  was given (never its own), and an index of 4 bytes per vertex of the graph (``slot``) plus
  the owner map (4 bytes per vertex);
* `serve` answers only for rows the rank owns (a request for another rank's row is a bug in
  the owner maps and raises `RuntimeError`), so replicated rows never need to agree between
  ranks.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import torch
from torch import Tensor

# (send_counts per rank, ids asked for grouped by owner, this rank's serve, row bytes)
# -> uint8 [sum(send_counts), row_bytes]: the rows, in the order of the ids
Exchange = Callable[[list, Tensor, Callable[[Tensor], Tensor], int], Tensor]


@dataclasses.dataclass
class GatherPlan:
    """What one gather needs: held rows, and the remote ones grouped by owner."""

    size: int
    held_pos: Tensor      # positions in n_id whose rows the store holds
    held_slots: Tensor    # their rows in FeatureStore.rows
    remote_pos: Tensor    # positions in n_id fetched, in the order of send_ids
    send_ids: Tensor      # ids asked of their owners, grouped by owner (rank order)
    send_counts: list     # ids asked of each rank
    local: int            # rows of the rank's own partition
    hot: int              # replicated rows


class FeatureStore:
    """One rank's rows (see the module docstring)."""

    def __init__(self, owner: Tensor, rank: int, parts: int, ids: Tensor, rows: Tensor,
                 local_count: int) -> None:
        self.owner = owner.to(torch.int32)
        self.rank, self.parts = rank, parts
        self.rows = rows
        self.local_count = local_count
        self.hot_count = ids.numel() - local_count
        self.slot = torch.full((owner.numel(),), -1, dtype=torch.int32)
        self.slot[ids] = torch.arange(ids.numel(), dtype=torch.int32)
        self.row_shape = tuple(rows.shape[1:])
        self.dtype = rows.dtype
        self.row_bytes = int(torch.Size(self.row_shape).numel()) * rows.element_size()

    @classmethod
    def build(cls, x: Tensor, owner: Tensor, rank: int, parts: int,
              hot_ids: Tensor | None = None) -> "FeatureStore":
        """Copy the rows of `rank`'s partition and `hot_ids` (never its own) out of `x`
        (any tensor indexable by row: in memory or memory-mapped, where only these rows are
        read)."""
        local_ids = (owner == rank).nonzero().view(-1)
        hot_ids = torch.empty(0, dtype=torch.long) if hot_ids is None else hot_ids.long()
        if bool((owner[hot_ids] == rank).any()):
            raise ValueError("hot_ids must not hold rows of the rank's own partition")
        ids = torch.cat([local_ids, hot_ids])
        with torch.no_grad():
            rows = x.index_select(0, ids).detach().contiguous()
        return cls(owner, rank, parts, ids, rows, local_ids.numel())

    @property
    def held_bytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()

    def plan(self, n_id: Tensor) -> GatherPlan:
        n_id = n_id.long()
        slots = self.slot[n_id].long()
        held = slots >= 0
        held_pos = held.nonzero().view(-1)
        remote_pos = (~held).nonzero().view(-1)
        remote_ids = n_id[remote_pos]
        owners = self.owner[remote_ids].long()
        order = torch.sort(owners, stable=True).indices
        held_slots = slots[held_pos]
        local = int((held_slots < self.local_count).sum())
        return GatherPlan(size=n_id.numel(), held_pos=held_pos, held_slots=held_slots,
                          remote_pos=remote_pos[order], send_ids=remote_ids[order],
                          send_counts=torch.bincount(owners, minlength=self.parts).tolist(),
                          local=local, hot=held_pos.numel() - local)

    def serve(self, ids: Tensor) -> Tensor:
        """The rows of `ids` (all owned by this rank) as bytes, ``uint8 [len(ids), row_bytes]``."""
        slots = self.slot[ids.long()].long()
        if ids.numel() and bool(((slots < 0) | (slots >= self.local_count)).any()):
            bad = ids[(slots < 0) | (slots >= self.local_count)][:5].tolist()
            raise RuntimeError(f"rank {self.rank} was asked for rows it does not own "
                               f"(e.g. {bad}): the ranks' partitions disagree")
        return self._bytes(self.rows.index_select(0, slots))

    def _bytes(self, rows: Tensor) -> Tensor:
        return rows.contiguous().view(torch.uint8).view(rows.shape[0], self.row_bytes)

    def assemble(self, plan: GatherPlan, fetched: Tensor) -> Tensor:
        """The batch's ``[size, *row_shape]`` features from held rows and `fetched` (bytes of
        the rows of `plan.send_ids`, in that order)."""
        held = self.rows.index_select(0, plan.held_slots)   # (index_select: ~7x faster
        if plan.remote_pos.numel() == 0:                     # than advanced indexing here)
            return held
        out = torch.empty((plan.size, *self.row_shape), dtype=self.dtype)
        out.index_copy_(0, plan.held_pos, held)
        out.index_copy_(0, plan.remote_pos, fetched.view(self.dtype).view(-1, *self.row_shape))
        return out

    def gather(self, n_id: Tensor, exchange: Exchange) -> tuple[Tensor, GatherPlan]:
        """(``x[n_id]``, the plan it used), remote rows through `exchange`."""
        plan = self.plan(n_id)
        fetched = exchange(plan.send_counts, plan.send_ids, self.serve, self.row_bytes)
        return self.assemble(plan, fetched), plan


def local_exchange(stores: Sequence[FeatureStore]) -> Exchange:
    """An exchange between store objects of one process (rank r's rows come from
    ``stores[r].serve``): the same requests and answers as the collective one, no processes."""
    def exchange(counts: list, ids: Tensor, serve: Callable, row_bytes: int) -> Tensor:
        chunks = torch.split(ids, counts)
        parts = [stores[r].serve(chunk) for r, chunk in enumerate(chunks)]
        return torch.cat(parts) if parts else torch.empty(0, row_bytes, dtype=torch.uint8)

    return exchange
