"""Hotness: how often a vertex is a bottom-layer destination per epoch, and the hot set.

A K-layer model on a K-hop directional sample computes its bottom layer for the vertices of
hops 0..K-1 (hop-aware trimming); hop K-1 holds most of them. The *hotness* of v is the expected
number of times v appears at hops 0..K-1 in one epoch of the loader (its seeds, its fanouts).
Two ways to get it:

* `estimate_hotness`: propagate expected appearances over the graph. Every seed appears once per
  epoch; a frontier vertex u with in-degree d draws each in-neighbour with probability
  q = min(1, k/d) (without replacement; 1 - (1 - 1/d)^k with replacement), so
  e_{h+1}(v) = sum over edges v -> u of e_h(u) q_h(u): one sparse pass over the edges per hop,
  no sampling, O(K * E). It counts sampling events, not distinct appearances per batch (a vertex
  drawn by two frontier vertices of one batch appears once), but for a batch-level Poisson
  approximation appearances = B (1 - exp(-e / B)) is monotone in e: the ranking, hence the hot
  set, is the same.
* `count_hotness`: draw a fraction of an epoch's batches with the real sampler and count.

`scripts/bench_cache.py --hotness` compares the hit rates the two hot sets achieve on real
batches and their cost; the estimate is the default (see docs/cache.md for the numbers).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..sampling.uniform import new_workspace, sample_neighbors


def in_degree(colptr: Tensor) -> Tensor:
    return colptr[1:] - colptr[:-1]


def estimate_hotness(colptr: Tensor, row: Tensor, seeds: Tensor, fanouts: list[int],
                     replace: bool = False, per_hop: bool = False) -> Tensor:
    """Expected appearances per epoch of every vertex at hops 0..L-1 (L = len(fanouts)).

    `colptr`, `row`: the graph in CSC form (in-edges of v at row[colptr[v]:colptr[v+1]]).
    `per_hop=True` returns the [L, N] expected sampling events per hop instead of their sum.
    """
    num_nodes = colptr.numel() - 1
    deg = in_degree(colptr)
    degf = deg.to(torch.float64)
    # destination of every CSC position, once (int32 halves the memory on big graphs)
    owner = torch.repeat_interleave(torch.arange(num_nodes, dtype=torch.int32), deg)
    level = torch.zeros(num_nodes, dtype=torch.float64)
    level.index_add_(0, seeds.long(), torch.ones(seeds.numel(), dtype=torch.float64))
    hops = [level]
    for k in fanouts[:-1]:  # hops 1..L-1 come from expanding hops 0..L-2
        if k < 0:
            q = torch.ones_like(degf)
        elif replace:
            q = 1.0 - torch.pow(1.0 - 1.0 / degf.clamp_min(1.0), k)
        else:
            q = (k / degf.clamp_min(1.0)).clamp_max(1.0)
        flow = (level * q)[owner]
        level = torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, row, flow)
        hops.append(level)
    stacked = torch.stack(hops)
    return stacked if per_hop else stacked.sum(0)


def count_hotness(colptr: Tensor, row: Tensor, seeds: Tensor, fanouts: list[int],
                  batch_size: int, fraction: float = 0.25, replace: bool = False,
                  generator: torch.Generator | None = None, per_hop: bool = False) -> Tensor:
    """Appearances at hops 0..L-1 counted on `fraction` of an epoch's batches (drawn with
    gnnorch's sampler), scaled to a whole epoch. `per_hop=True`: [L, N] counts per hop."""
    num_nodes = colptr.numel() - 1
    levels = len(fanouts)
    counts = torch.zeros(levels, num_nodes, dtype=torch.float64)
    perm = seeds[torch.randperm(seeds.numel(), generator=generator)]
    num_batches = math.ceil(seeds.numel() / batch_size)
    take = max(1, math.ceil(fraction * num_batches))
    workspace = new_workspace(num_nodes)
    for b in range(take):
        batch = perm[b * batch_size:(b + 1) * batch_size]
        out = sample_neighbors(colptr, row, batch, fanouts, replace=replace,
                               generator=generator, workspace=workspace)
        start = 0
        for h, n in enumerate(out.num_sampled_nodes[:levels]):
            ids = out.node[start:start + n]
            counts[h].index_add_(0, ids, torch.ones(ids.numel(), dtype=torch.float64))
            start += n
    counts *= num_batches / take
    return counts if per_hop else counts.sum(0)


def top_fraction(scores: Tensor, ratio: float) -> Tensor:
    """Ids of the round(ratio * N) vertices with the highest score (at least 1), ties broken by
    the lower id; vertices that never appear (score 0) are never hot."""
    num = min(int((scores > 0).sum()), max(1, round(ratio * scores.numel())))
    if num == 0:
        return torch.empty(0, dtype=torch.long)
    # stable: sort by (-score, id)
    order = torch.sort(scores, descending=True, stable=True).indices
    return order[:num].sort().values


def hit_rate(hot_mask: Tensor, per_hop_counts: Tensor) -> float:
    """Share of hop L-1 appearances (last row of `per_hop_counts`) that fall on hot vertices."""
    last = per_hop_counts[-1]
    total = float(last.sum())
    return float(last[hot_mask].sum()) / total if total > 0 else 0.0
