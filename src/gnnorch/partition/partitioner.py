"""A cheap locality partitioner: BFS-ordered contiguous blocks refined by balanced label
propagation. Plain torch, integer arithmetic only.

`partition_graph(edge_index, num_nodes, parts)` returns ``owner``: int64 ``[N]``, the part
(rank) of every vertex. Invariants:

* **Deterministic given the graph**: only integer counts, stable sorts and first-index ties
  are used, so every rank (whatever its thread count) computes the same ``owner`` from the
  same ``edge_index``.
* **Every vertex is owned exactly once**, by a part in ``0..parts-1``.
* **Balanced in rows**: every part holds at most `capacity` = max(ceil(N / parts),
  floor((1 + imbalance) * N / parts)) vertices (the BFS blocks differ by at most one;
  refinement moves respect the cap). Vertices are balanced, not edges: a part's rows are
  its memory.

Algorithm (O(E) per round, O(N * parts) integer counters):

1. *BFS blocks.* The vertices are ordered by breadth-first search over the undirected graph,
   from the highest-degree vertex, restarting from the highest-degree unvisited vertex while
   more than 1 % of the vertices (and at most 64 restarts) remain; the rest (small components)
   follow in id order. The order is cut into ``parts`` contiguous blocks of equal size, so
   each part starts as a connected-ish region.
2. *Balanced label propagation* (``rounds`` rounds). For every vertex, count its neighbours
   in every part; a vertex whose best part (most neighbours; first on ties) beats its own
   is a candidate with gain = best - own. Half of the vertices (alternating by an id hash)
   may move per round, so neighbours rarely swap past each other. For each ordered pair of
   parts (a, b), the min(n_ab, n_ba) candidates of highest gain move each way (swaps keep
   sizes), then further candidates move into b while b is under the cap. Moves never
   increase a part past the cap. The assignment with the fewest cut edges seen (the BFS
   blocks included) is returned, so refinement never cuts more than the blocks.

Edge cut (share of undirected edges whose ends have different owners) on the bundled Cora,
2 parts: see tests/test_partition.py, which checks it beats a random assignment on Cora and
on a power-law graph. METIS would cut less; it needs a compiled package not installed here.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def undirected_csr(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """(indptr, neighbours) of the undirected simple version of the graph (both directions,
    no self-loops, duplicates removed), neighbours sorted per vertex."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = torch.cat([src * num_nodes + dst, dst * num_nodes + src]).unique()
    a, b = keys // num_nodes, keys % num_nodes
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    indptr[1:] = torch.bincount(a, minlength=num_nodes).cumsum(0)
    return indptr, b


def _neighbours_of(indptr: Tensor, nbrs: Tensor, frontier: Tensor) -> Tensor:
    """The neighbours of `frontier`'s vertices, concatenated in frontier order."""
    starts, counts = indptr[frontier], indptr[frontier + 1] - indptr[frontier]
    total = int(counts.sum())
    if total == 0:
        return nbrs.new_empty(0)
    offsets = torch.repeat_interleave(starts - (counts.cumsum(0) - counts), counts)
    return nbrs[offsets + torch.arange(total)]


def _first_occurrences(values: Tensor) -> Tensor:
    """The distinct entries of `values`, in the order they first occur."""
    uniq, inverse = torch.unique(values, return_inverse=True)
    first = torch.full((uniq.numel(),), values.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(values.numel()), reduce="amin")
    return uniq[torch.sort(first, stable=True).indices]


def bfs_order(indptr: Tensor, nbrs: Tensor, max_restarts: int = 64,
              rest_share: float = 0.01) -> Tensor:
    """All vertices, in breadth-first order (see the module docstring, step 1)."""
    num_nodes = indptr.numel() - 1
    degree = indptr[1:] - indptr[:-1]
    visited = torch.zeros(num_nodes, dtype=torch.bool)
    order: list[Tensor] = []
    seen = 0
    for _ in range(max_restarts):
        if num_nodes - seen <= rest_share * num_nodes or seen == num_nodes:
            break
        start = int(torch.where(visited, -1, degree).argmax())
        frontier = torch.tensor([start])
        visited[start] = True
        while frontier.numel():
            order.append(frontier)
            seen += frontier.numel()
            reached = _neighbours_of(indptr, nbrs, frontier)
            reached = _first_occurrences(reached[~visited[reached]])
            visited[reached] = True
            frontier = reached
    order.append((~visited).nonzero().view(-1))
    return torch.cat(order)


def _hash_parity(num_nodes: int) -> Tensor:
    """A fixed pseudo-random 0/1 per vertex (Knuth's multiplicative hash)."""
    ids = torch.arange(num_nodes, dtype=torch.long)
    return ((ids * 2654435761) % (2 ** 32)) >> 31


def _rank_in_groups(group: Tensor, gain: Tensor) -> Tensor:
    """Rank of every element within its group, by gain (highest first; ties: lower index)."""
    order = torch.sort(-gain, stable=True).indices
    order = order[torch.sort(group[order], stable=True).indices]
    counts = torch.bincount(group)
    starts = counts.cumsum(0) - counts
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(order.numel()) - starts[group[order]]
    return ranks


def refine(owner: Tensor, indptr: Tensor, nbrs: Tensor, parts: int, cap: int,
           rounds: int) -> Tensor:
    """Balanced label propagation (see the module docstring, step 2); a new ``owner``."""
    owner = owner.clone()
    num_nodes = owner.numel()
    degree = indptr[1:] - indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(num_nodes), degree)
    parity = _hash_parity(num_nodes)
    best_owner, best_cut = owner.clone(), int((owner[dst] != owner[nbrs]).sum())
    for step in range(rounds):
        counts = torch.zeros(num_nodes * parts, dtype=torch.int32)
        counts.index_add_(0, dst * parts + owner[nbrs],
                          torch.ones(nbrs.numel(), dtype=torch.int32))
        counts = counts.view(num_nodes, parts)
        best_count, best = counts.max(dim=1)
        gain = (best_count - counts.gather(1, owner[:, None]).squeeze(1)).long()
        movable = (gain > 0) & (best != owner) & (parity == step % 2)
        cand = movable.nonzero().view(-1)
        if cand.numel() == 0:
            continue
        src, to, g = owner[cand], best[cand], gain[cand]
        pair = src * parts + to
        flow = torch.bincount(pair, minlength=parts * parts).view(parts, parts)
        swaps = torch.minimum(flow, flow.t()).reshape(-1)
        rank = _rank_in_groups(pair, g)
        moved = rank < swaps[pair]
        sizes = torch.bincount(owner, minlength=parts)   # swaps keep every size
        rest = (~moved).nonzero().view(-1)
        if rest.numel():
            slack = (cap - sizes).clamp_min(0)
            into = _rank_in_groups(to[rest], g[rest])
            moved[rest[into < slack[to[rest]]]] = True
        if not bool(moved.any()):
            continue
        owner[cand[moved]] = to[moved]
        cut = int((owner[dst] != owner[nbrs]).sum())
        if cut < best_cut:   # simultaneous moves can undo each other: keep the best round
            best_owner, best_cut = owner.clone(), cut
    return best_owner


def partition_graph(edge_index: Tensor, num_nodes: int, parts: int,
                    imbalance: float = 0.03, rounds: int = 8) -> Tensor:
    """``owner`` (int64 ``[num_nodes]``): the part of every vertex (module docstring)."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if parts == 1 or num_nodes == 0:
        return torch.zeros(num_nodes, dtype=torch.long)
    indptr, nbrs = undirected_csr(edge_index, num_nodes)
    order = bfs_order(indptr, nbrs)
    owner = torch.empty(num_nodes, dtype=torch.long)
    owner[order] = torch.arange(num_nodes) * parts // num_nodes
    cap = capacity(num_nodes, parts, imbalance)
    return refine(owner, indptr, nbrs, parts, cap, rounds) if rounds > 0 else owner


def capacity(num_nodes: int, parts: int, imbalance: float) -> int:
    """The most vertices one part may hold: max(ceil(N / parts), floor((1 + imbalance) N /
    parts)) (the BFS blocks always fit)."""
    return max(-(-num_nodes // parts), math.floor((1 + imbalance) * num_nodes / parts + 1e-9))


def edge_cut(edge_index: Tensor, owner: Tensor) -> float:
    """Share of the graph's edges (as given, self-loops excluded) whose ends have different
    owners."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    keep = src != dst
    if not bool(keep.any()):
        return 0.0
    return float((owner[src[keep]] != owner[dst[keep]]).double().mean())
