"""Which remote rows a rank replicates: the hottest rows other ranks own, within a byte budget.

Invariants:
* `hot_scores` is an estimate of how often a vertex's row is needed per epoch; the ranking
  need not be identical on every rank (a rank's replicated rows are its own business: a row it
  does not hold is always asked of its owner, who holds every row of its partition).
* `choose_hot` never picks a row the rank owns, never picks a vertex with score 0, and picks
  at most ``budget_bytes // row_bytes`` rows; ties are broken by the lower id.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..cache.hotness import expected_events


def csc(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """(colptr, row): the in-neighbours of every vertex, as the neighbour sampler reads them
    (edge ``src -> dst`` makes ``src`` an in-neighbour of ``dst``)."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    perm = torch.sort(dst, stable=True).indices
    colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    colptr[1:] = torch.bincount(dst, minlength=num_nodes).cumsum(0)
    return colptr, src[perm]


def hot_scores(kind: str, edge_index: Tensor, num_nodes: int, seeds: Tensor | None = None,
               fanouts: Any = None) -> tuple[Tensor, str]:
    """(score per vertex, the estimate used). ``"sampling"``: expected sampling events per
    epoch of `seeds` with `fanouts` (a list of ints), summed over hops 0..L (the leaves
    included); ``"degree"`` (and
    ``"sampling"`` without a list of fanouts): in-degree."""
    colptr, row = csc(edge_index, num_nodes)
    plain = isinstance(fanouts, (list, tuple)) and all(isinstance(k, int) for k in fanouts)
    if kind == "sampling" and plain and len(fanouts) > 0:
        pool = seeds if seeds is not None else torch.arange(num_nodes)
        # hops 0..L: a vertex first reached at the last hop L (a leaf) needs its row too
        events = expected_events(colptr, row, pool.long(), list(fanouts) + [0])
        return events.sum(0), "sampling"
    return (colptr[1:] - colptr[:-1]).to(torch.float64), "degree"


def choose_hot(scores: Tensor, owner: Tensor, rank: int, budget_bytes: int,
               row_bytes: int) -> Tensor:
    """Sorted ids of the remote rows to replicate (see the module docstring)."""
    rows = budget_bytes // max(1, row_bytes)
    if rows <= 0:
        return torch.empty(0, dtype=torch.long)
    eligible = (owner != rank) & (scores > 0)
    ids = eligible.nonzero().view(-1)
    if ids.numel() > rows:
        order = torch.sort(scores[ids], descending=True, stable=True).indices
        ids = ids[order[:rows]]
    return ids.sort().values
