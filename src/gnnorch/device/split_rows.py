"""Gathering rows of node-level tensors split between the device and the host.

A split placement (`gnnorch.device.placement`, features ``"split"``) keeps the hottest rows
``hot`` (sorted vertex ids, `gnnorch.device.hot_rows`) of each split tensor in a device copy
and the whole tensor on the host. For a batch's sampled vertices ``index`` (n of them),
`SplitRows.lookup` finds once, on the host, which are hot: their positions in the batch and
their slots in the device copies (``slot[v]``: v's row in the copy, -1 when v is not hot), and
the positions and ids of the others. Each tensor's rows are then

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

__all__ = ["SplitCounts", "SplitLookup", "SplitRows"]


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


class SplitRows:
    """The slot map of the hot rows ``hot`` among ``num_nodes`` vertices (module docstring),
    for batches built on `device`; `counts` hears every lookup."""

    def __init__(self, hot: Tensor, num_nodes: int, device: torch.device, pin: bool,
                 counts: SplitCounts) -> None:
        self.hot, self.device, self.pin, self.counts = hot, device, pin, counts
        dtype = torch.int32 if hot.numel() < 2 ** 31 else torch.int64
        self.slot = torch.full((num_nodes,), -1, dtype=dtype)
        self.slot[hot] = torch.arange(hot.numel(), dtype=dtype)

    def lookup(self, index_host: Tensor) -> SplitLookup:
        """Where the rows of the vertices `index_host` (a batch's, on the host) come from."""
        slots = self.slot.index_select(0, index_host)
        hot = slots >= 0
        hot_positions = hot.nonzero().view(-1)
        cold_positions = (~hot).nonzero().view(-1)
        cold_ids = index_host.index_select(0, cold_positions)
        slots = slots.index_select(0, hot_positions).long()
        self.counts.device += hot_positions.numel()
        self.counts.host += cold_positions.numel()
        h = hot_positions.numel()
        if self.device.type != "cpu":   # positions and slots: one (pinned) copy
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
