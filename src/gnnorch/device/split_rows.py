"""Gathering rows of node-level tensors split between the device and the host.

A split placement (`gnnorch.device.placement`, features ``"split"``) keeps the hottest rows
``hot`` (sorted vertex ids, `gnnorch.device.hot_rows`) of each split tensor in a device copy
and the whole tensor on the host. For a batch's sampled vertices ``index`` (n of them),
`SplitRows.lookup` finds once which are hot: their positions in the batch and their slots in
the device copies (``slot[v]``: v's row in the copy, -1 when v is not hot; an int32 table of
all vertices, `TABLE_BYTES` a vertex), and the positions and ids of the others. The lookup
runs where the batch's ids are: on the device when the batch was sampled there (the table
has a device copy; only the cold positions come back to the host, whose ids the host
gathers), on the host otherwise (a random read of the table per id: about 10 ms of a core
for a products-scale batch here, `scripts/bench_split_gather.py`). Each tensor's rows are then

    out[hot positions]  = device_copy[slots]          (indexed on the device)
    out[cold positions] = tensor[cold ids]            (gathered on the host, copied over)

so ``out`` equals ``tensor[index]`` row for row, in the batch's order. On a CUDA device the
host rows go through pinned memory and the positions and slots travel in one pinned buffer,
all copied asynchronously on the current stream (the caching host allocator reuses a pinned
block only once the copies that read it are done). With the CPU standing in for the device the
same code runs without copies.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

__all__ = ["SplitCounts", "SplitLookup", "SplitRows", "TABLE_BYTES", "slot_tables"]

#: bytes per vertex of the slot table (int32), on the device where batches are sampled there
TABLE_BYTES = 4


@dataclasses.dataclass
class SplitCounts:
    """Rows a split loader's batches took from the device copy, and gathered on the host (per
    batch, once for all split tensors; monotone)."""

    device: int = 0
    host: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SplitLookup:
    """Where one batch's rows come from (`SplitRows.lookup`): hot positions and their slots
    on the device, cold positions on the device and cold vertex ids on the host."""

    size: int
    hot_positions: Tensor
    slots: Tensor
    cold_positions: Tensor
    cold_ids: Tensor


def slot_tables(hot: Tensor, num_nodes: int) -> dict[torch.device, Tensor]:
    """The slot table of the hot rows `hot` (``slot[hot[i]] = i``, -1 elsewhere; int32) on
    the host, in a dict that `SplitRows` fills with its device copies."""
    slot = torch.full((num_nodes,), -1, dtype=torch.int32)
    slot[hot] = torch.arange(hot.numel(), dtype=torch.int32)
    return {slot.device: slot}


class SplitRows:
    """The slot map of the hot rows ``hot`` among ``num_nodes`` vertices (module docstring),
    for batches built on `device`; `counts` hears every lookup."""

    def __init__(self, hot: Tensor, num_nodes: int, device: torch.device, pin: bool,
                 counts: SplitCounts, tables: dict[torch.device, Tensor] | None = None) -> None:
        """`tables`: the slot table by device, shared by the loaders that split over the same
        `hot` rows (`slot_tables`; `gnnorch.device.gather.ResidentTensors.slot_tables`), so
        they hold one table on the device, as the placement's budget counts; by default this
        object's own."""
        self.device, self.pin, self.counts = device, pin, counts
        self._tables = tables if tables is not None else slot_tables(hot, num_nodes)

    def _table(self, device: torch.device) -> Tensor:
        """The slot table on `device` (copied there once)."""
        table = self._tables.get(device)
        if table is None:
            table = self._tables[device] = self.slot.to(device)
        return table

    def lookup(self, index_host: Tensor, index: Tensor | None = None) -> SplitLookup:
        """Where the rows of a batch's vertices come from: `index_host` on the host and, when
        the batch was sampled on the device, `index` there (the lookup then runs there)."""
        where = index if index is not None and index.device == self.device else index_host
        slots = self._table(where.device).index_select(0, where)
        hot = slots >= 0
        hot_positions = hot.nonzero().view(-1)
        cold_positions = (~hot).nonzero().view(-1)
        cold_ids = index_host.index_select(0, cold_positions.cpu())
        slots = slots.index_select(0, hot_positions).long()
        self.counts.device += hot_positions.numel()
        self.counts.host += cold_positions.numel()
        h = hot_positions.numel()
        if where.device != self.device:   # looked up on the host: positions and slots over
            packed = torch.cat([hot_positions, slots, cold_positions])
            if self.pin:
                packed = packed.pin_memory()
            packed = packed.to(self.device, non_blocking=self.pin)
            hot_positions, slots, cold_positions = packed[:h], packed[h:2 * h], packed[2 * h:]
        return SplitLookup(index_host.numel(), hot_positions, slots, cold_positions, cold_ids)

    def gather(self, source: Tensor, device_rows: Tensor, found: SplitLookup) -> Tensor:
        """``source[index]`` for the batch of `found`, rows along dimension 0: the hot ones
        from `device_rows` (``source[hot]`` on the device), the others gathered on the host."""
        rest = list(source.shape[1:])
        cold = torch.empty([found.cold_ids.numel()] + rest, dtype=source.dtype,
                           pin_memory=self.pin)
        torch.index_select(source, 0, found.cold_ids, out=cold)
        if self.device.type != "cpu":
            cold = cold.to(self.device, non_blocking=self.pin)
        out = torch.empty([found.size] + rest, dtype=source.dtype, device=self.device)
        out.index_copy_(0, found.cold_positions, cold)
        out.index_copy_(0, found.hot_positions, device_rows.index_select(0, found.slots))
        return out
