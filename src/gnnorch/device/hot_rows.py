"""Which feature rows a split placement keeps on the device: the rows batches gather most often.

When a loader's node features do not fit the device's budget, the hottest rows can: a batch
then takes those rows from their device copy and gathers only the others on the host (PaGraph
and GNNLab cache features this way; `gnnorch.device.placement` decides, `GatherPlan` gathers).

The maths (the sampling law, no sampling). An epoch's seeds are spread over B batches. Let
S_h(v) be the expected sampling events of v per epoch at hops 0..h, treated as a Poisson count
spread over the batches, so v is within hop h of a batch with probability 1 - exp(-S_h / B).
A vertex is expanded once per batch, at the hop where it first appears: in

    x_h(v) = B (exp(-S_{h-1}(v) / B) - exp(-S_h(v) / B))

batches an epoch at hop h. Expanding u (in-degree d, fanout k) draws each in-neighbour with
probability q(u) = min(1, k / d) (without replacement; 1 - (1 - 1/d)^k with it; 1 for k < 0),
so the events at hop h + 1 are e_{h+1}(v) = sum over edges v -> u of x_h(u) q(u), one sparse
pass over the edges per hop (counting expansions rather than events is what keeps hubs, drawn
many times per batch but expanded once, from inflating their neighbours). A batch gathers v's
row once when v appears at any hop 0..L, so v's row is gathered in

    g(v) = B (1 - exp(-S_L(v) / B))

batches an epoch. Keeping the k rows of largest g on the device serves the expected share
sum_{top k} g / sum_v g of all the rows the epoch's batches gather. Vertices that no batch
can reach (g = 0) are never kept. Checked against counted batches in
`tests/test_device_split.py` (on a power-law graph: totals within a few per cent, shares
within 0.03).

Cost: per hop one gather and one scatter-add (a weighted `bincount`, which scatters into a
large vector faster than `index_add_` on the host) over the edges of the vertices expanded at
that hop (all of them after the first hop; at the first, only the seeds'). It runs where the
CSC given lives (`working_bytes` says what a device needs to hold for it). The per-vertex
quantities are float64, the per-edge flows float32 (half the working set; the rankings they
give match float64's: the same hottest rows at 10, 25 and 50 % of a products-scale graph's
bytes, shares within 1e-9). On that graph (2.45M vertices, 123.7M edges) the host ranks in
about 12 s on one thread, against about 20 s with `index_add_` over every edge at every hop
(`scripts/bench_split_gather.py`; the same 12 s with float64 flows).
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from ..sampling.law import edge_draw_probability

__all__ = ["RowRanking", "expected_gathers", "rank_rows", "working_bytes"]


@dataclasses.dataclass(frozen=True)
class RowRanking:
    """Vertices by expected row gathers per epoch, most gathered first (ties: the lower id)."""

    order: Tensor        # int64 vertex ids with g > 0, most gathered first
    cumulative: Tensor   # float64: cumulative[i] = sum of g over order[: i + 1]

    @property
    def total(self) -> float:
        """Expected rows the epoch's batches gather, in all."""
        return float(self.cumulative[-1]) if self.cumulative.numel() else 0.0

    def share(self, k: int) -> float:
        """Expected share of gathered rows that the `k` hottest rows serve, in [0, 1]."""
        k = min(int(k), self.order.numel())
        if k <= 0 or self.total <= 0:
            return 0.0
        return float(self.cumulative[k - 1]) / self.total

    def hottest(self, k: int) -> Tensor:
        """The ids of the `k` hottest rows (fewer when fewer are ever gathered), sorted."""
        return self.order[:max(0, int(k))].sort().values


def expected_gathers(colptr: Tensor, row: Tensor, seeds: Tensor, fanouts: list[int],
                     batch_size: int, replace: bool = False,
                     flow_dtype: torch.dtype = torch.float32) -> Tensor:
    """g(v) for every vertex (float64, module docstring): the batches per epoch that gather
    v's row, for a loader with these seeds, fanouts and batch size on the CSC (``colptr``,
    ``row``), computed on the CSC's device, the per-edge flows in ``flow_dtype``."""
    if not flow_dtype.is_floating_point:
        raise ValueError(f"flow_dtype must be a floating-point dtype (torch.float32 or "
                         f"torch.float64), got {flow_dtype}")
    device = colptr.device
    num_nodes = colptr.numel() - 1
    counts = colptr[1:] - colptr[:-1]
    deg = counts.to(torch.float64)
    owner: Tensor | None = None   # every edge's column, made when a hop first needs it
    batches = max(1, math.ceil(seeds.numel() / max(1, batch_size)))
    seeds = seeds.to(device=device, dtype=torch.long)
    events = torch.zeros(num_nodes, dtype=torch.float64, device=device).index_add_(
        0, seeds, torch.ones(seeds.numel(), dtype=torch.float64, device=device))
    before, within = torch.zeros_like(events), events
    for k in fanouts:
        expanded = batches * (torch.exp(-before / batches) - torch.exp(-within / batches))
        q = edge_draw_probability(deg, k, replace)
        out_flow = (expanded * q).to(flow_dtype)
        active = out_flow.nonzero().view(-1)
        lengths = counts.index_select(0, active)
        if 4 * int(lengths.sum()) < row.numel():   # few edges flow (the seeds' hop): those
            edges = _edges_of(colptr, active, lengths)
            sources = row.index_select(0, edges)
            flow = out_flow.index_select(0, active).repeat_interleave(lengths)
            del edges
        else:
            if owner is None:
                owner = torch.repeat_interleave(
                    torch.arange(num_nodes, dtype=torch.int32, device=device), counts)
            sources, flow = row, out_flow.index_select(0, owner)
        events = torch.bincount(sources, weights=flow, minlength=num_nodes).to(torch.float64)
        del flow, sources
        before, within = within, within + events
    return batches * -torch.expm1(-within / batches)


def _edges_of(colptr: Tensor, columns: Tensor, lengths: Tensor) -> Tensor:
    """The positions in ``row`` of the in-edges of `columns` (`lengths`: their in-degrees),
    column by column."""
    starts = colptr.index_select(0, columns)
    shift = starts - (lengths.cumsum(0) - lengths)   # a column's edge i is at shift + i
    return torch.arange(int(lengths.sum()), device=colptr.device) \
        + shift.repeat_interleave(lengths)


def working_bytes(num_nodes: int, num_edges: int) -> int:
    """Bytes `expected_gathers` holds at its peak beside its CSC: an int32 owner and a float32
    flow per edge (a hop over a quarter of the edges at most: 20 bytes each), and at most ten
    float64 vectors over the vertices (ranking included)."""
    return 8 * num_edges + 80 * (num_nodes + 1)


def rank_rows(colptr: Tensor, row: Tensor, seeds: Tensor, fanouts: list[int],
              batch_size: int, replace: bool = False,
              flow_dtype: torch.dtype = torch.float32) -> RowRanking:
    """Every vertex's feature row ranked by `expected_gathers`, computed on the CSC's device;
    the ranking is returned on the host."""
    gathers = expected_gathers(colptr, row, seeds, fanouts, batch_size, replace, flow_dtype)
    order = torch.sort(gathers, descending=True, stable=True).indices
    order = order[:int((gathers > 0).sum())]
    return RowRanking(order.cpu(), gathers.index_select(0, order).cumsum(0).cpu())
