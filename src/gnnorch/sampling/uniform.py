"""Vectorised uniform k-hop neighbour sampling in plain torch (CPU or CUDA).

The graph is given in CSC form, as PyG's :class:`~torch_geometric.sampler.NeighborSampler`
holds it: the in-edges of node ``v`` are the positions ``colptr[v] .. colptr[v+1]-1`` of
``row``, and ``row[p]`` is the source of the edge at position ``p``.

Semantics (PyG's homogeneous, directional sampling): the seeds form hop 0's frontier; every
node is expanded exactly once, at the hop where it first appears, so hop ``h+1``'s frontier is
the set of nodes first reached at hop ``h``. A frontier node with in-degree ``d`` and fanout
``k`` contributes

* all ``d`` in-edges when ``k < 0``, or when sampling without replacement and ``d <= k``;
* a uniformly random ``k``-subset of its in-edges without replacement and ``d > k``;
* ``k`` independent uniform draws from its in-edges with replacement (``d > 0``).

Layout of the result (the same as torch_sparse's ``neighbor_sample``): seeds first, in input
order and with duplicates kept, then each hop's new nodes in order of first appearance; edges
hop by hop, grouped by destination in frontier order.

Two exact ways to draw the ``k``-subsets (``method``), the same law, different costs:

* ``"floyd"`` (the default on CPU): Robert Floyd's algorithm vectorised over nodes, ``O(k^2)``
  per node whatever ``d``, but ``k`` dependent steps of a few small ops each: about 500 torch
  ops for a [15, 10, 5] batch. Fastest where an op costs its arithmetic (CPU).
* ``"wide"`` (the default on CUDA, where each op costs a kernel launch of several
  microseconds): a fixed number of ops per hop (about 140 for [15, 10, 5]), on a
  ``[frontier, 4k]`` matrix of candidates (`_wide_subsets`).

Implementation notes: gathers use ``index_select`` and scatters ``scatter_`` /
``scatter_reduce_(..., include_self=True)``, several times faster on CPU than advanced
indexing, ``index_put_`` and ``include_self=False``; global ids are relabelled through a
reusable ``[num_nodes]`` map, so no call sorts or hashes.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..compat.jit import compiled_function

__all__ = ["METHODS", "SampledSubgraph", "UNSEEN", "WIDE_FACTOR", "compiled_sampler",
           "new_workspace", "relabel", "sample_neighbors", "sample_offsets"]

#: Workspace value of a node without a local id (larger than any local id, for ``amin``). The
#: largest int32: a map holds local ids, which stay far below it (a batch of 2^31 nodes would
#: not fit in memory), in 4 bytes a node (an int64 map, the user's, works alike).
UNSEEN = torch.iinfo(torch.int32).max

#: ways to draw uniform ``k``-subsets (module docstring); "auto": "wide" on CUDA, else "floyd"
METHODS = ("auto", "floyd", "wide")

#: candidates per frontier node of the "wide" draw, in multiples of the fanout ``k``
WIDE_FACTOR = 4


@dataclasses.dataclass
class SampledSubgraph:
    """A sampled subgraph in local indices.

    ``node[row[e]] -> node[col[e]]`` is the graph edge at CSC position ``edge[e]``
    (``row[edge[e]] == node[row[e]]`` and ``colptr[node[col[e]]] <= edge[e] < colptr[...+1]``).
    ``sum(num_sampled_nodes) == len(node)``; for directional sampling
    ``sum(num_sampled_edges) == len(edge)`` and the first ``num_sampled_edges[0]`` edges end
    in seeds, the next ``num_sampled_edges[1]`` in hop 1's new nodes, and so on. For induced
    subgraphs (``directed=False``) edges are not hop-ordered and ``num_sampled_edges`` is None.
    """

    node: Tensor
    row: Tensor
    col: Tensor
    edge: Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int] | None


def new_workspace(num_nodes: int, device: torch.device | str | None = None) -> Tensor:
    """A global-to-local id map for :func:`sample_neighbors`: int32 ``[num_nodes]`` (4 bytes a
    node: 0.5 GB for a 111M-node graph, per sampling thread or worker), all :data:`UNSEEN`.

    :func:`sample_neighbors` leaves it all :data:`UNSEEN` again on return, so one buffer
    serves any number of calls (one call at a time). It is never an inference tensor, even
    when made under ``torch.inference_mode()`` (a user's evaluation loop): it outlives the call
    and is reset in place by calls outside that mode.
    """
    with torch.inference_mode(False):
        return torch.full((num_nodes,), UNSEEN, dtype=torch.int32, device=device)


def sample_neighbors(
    colptr: Tensor,
    row: Tensor,
    seeds: Tensor,
    num_neighbors: Sequence[int],
    *,
    replace: bool = False,
    directed: bool = True,
    exclude: Tensor | None = None,
    exclude_hops: Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    workspace: Tensor | None = None,
    method: str = "auto",
    compiled: bool = True,
) -> SampledSubgraph:
    """Samples ``len(num_neighbors)`` hops of in-neighbours around ``seeds``.

    Args:
        colptr, row: the graph in CSC form (int64, same device; ``TypeError`` otherwise).
        seeds: global ids of the seed nodes (duplicates are kept, as PyG does).
        num_neighbors: fanout per hop; -1 takes every in-edge.
        replace: sample with replacement.
        directed: False returns every edge among the sampled nodes (PyG's
            ``subgraph_type='induced'``) instead of the sampled edges.
        exclude: bool ``[num_nodes]``; a node in it that is in the frontier of a hop listed in
            ``exclude_hops`` is kept but not expanded (no in-edges, no neighbours added).
        exclude_hops: hop indices (0 = the seeds' hop) at which ``exclude`` applies.
        generator: random source (default: torch's global RNG of the device).
        workspace: a buffer from :func:`new_workspace` to reuse; a fresh one otherwise.
        method: how ``k``-subsets are drawn without replacement (:data:`METHODS`; the module
            docstring): the same law, a different number of ops.
        compiled: run the body compiled (`compiled_sampler`; the default): the same result
            for the same generator state, at a lower host cost and with the GIL released;
            eager where compiling is unavailable, or with False.
    """
    if colptr.dtype != torch.long or row.dtype != torch.long:
        raise TypeError(f"colptr and row must be int64, got {colptr.dtype} and {row.dtype}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        method = "wide" if colptr.is_cuda else "floyd"
    num_nodes = colptr.numel() - 1
    seeds = seeds.to(device=colptr.device, dtype=torch.long)
    g2l = new_workspace(num_nodes, colptr.device) if workspace is None else workspace
    hops = sorted(set(exclude_hops or ())) if exclude is not None else []
    body = compiled_sampler() if compiled else None
    try:
        node, rows, cols, edges, num_nodes_hop, num_edges_hop = (body or _sample)(
            colptr, row, seeds, [int(k) for k in num_neighbors], bool(replace),
            bool(directed), exclude, hops, generator, g2l, method, WIDE_FACTOR, UNSEEN)
    except BaseException:
        g2l.fill_(UNSEEN)
        raise
    g2l.index_fill_(0, node, UNSEEN)
    return SampledSubgraph(node, rows, cols, edges, num_nodes_hop,
                           num_edges_hop if directed else None)


def compiled_sampler() -> Callable[..., tuple] | None:
    """`_sample` compiled by TorchScript (`gnnorch.compat.jit.compiled_function`), or None
    where it cannot be (the caller then runs the same function eagerly).

    The same source, the same operations in the same order on the same generator: the
    compiled body returns what the eager one returns, bit for bit (tested). What changes is
    the host's cost: the body runs in TorchScript's interpreter, without Python's per-operation
    overhead and **without holding the GIL** (a call releases it until the body returns), so a
    thread that samples (the device data path's producer) no longer takes turns with the
    trainer thread at every operation.
    """
    return compiled_function(_sample)


def _sample(colptr: Tensor, row: Tensor, seeds: Tensor, num_neighbors: List[int],
            replace: bool, directed: bool, exclude: Optional[Tensor], exclude_hops: List[int],
            generator: Optional[torch.Generator], g2l: Tensor, method: str, wide_factor: int,
            unseen: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, List[int], List[int]]:
    """Body of :func:`sample_neighbors`; leaves ``g2l[v]`` = local id of every sampled ``v``.

    Returns ``(node, row, col, edge, num_sampled_nodes, num_sampled_edges)`` (the last empty
    for induced subgraphs). Written in the subset of Python that TorchScript compiles
    (`compiled_sampler`; constants come in as arguments): keep it so, a test compiles it.

    Invariant at the top of hop ``h``: ``frontier`` holds hop ``h``'s expanding nodes, whose
    local ids are ``first_local .. first_local + len(frontier) - 1``, and ``num_nodes`` nodes
    have local ids so far.
    """
    g2l.scatter_reduce_(0, seeds, _local_ids(0, seeds.numel(), g2l), "amin")
    nodes: List[Tensor] = [seeds]
    rows: List[Tensor] = []
    cols: List[Tensor] = []
    edges: List[Tensor] = []
    num_sampled_nodes: List[int] = [seeds.numel()]
    num_sampled_edges: List[int] = []
    frontier, first_local, num_nodes = seeds, 0, seeds.numel()
    for hop, k in enumerate(num_neighbors):
        start = colptr.index_select(0, frontier)
        deg = colptr.index_select(0, frontier + 1) - start
        if exclude is not None and hop in exclude_hops:
            deg.masked_fill_(exclude.index_select(0, frontier), 0)
        owner, offset = sample_offsets(deg, k, replace, generator, method, wide_factor)
        pos = start.index_select(0, owner).add_(offset)
        new, src = relabel(g2l, row.index_select(0, pos), num_nodes)
        nodes.append(new)
        num_sampled_nodes.append(new.numel())
        if directed:
            rows.append(src)
            cols.append(owner.add_(first_local))
            edges.append(pos)
            num_sampled_edges.append(pos.numel())
        frontier, first_local, num_nodes = new, num_nodes, num_nodes + new.numel()
    node = torch.cat(nodes)
    if not directed:
        src, dst, pos = _induced_edges(colptr, row, node, g2l, unseen)
        return node, src.long(), dst, pos, num_sampled_nodes, num_sampled_edges
    if len(rows) == 0:   # no hop (``num_neighbors=[]``): the seeds alone
        empty = seeds.new_empty(0)
        return node, empty, empty.clone(), empty.clone(), num_sampled_nodes, num_sampled_edges
    return (node, torch.cat(rows).long(), torch.cat(cols), torch.cat(edges), num_sampled_nodes,
            num_sampled_edges)


def _arange(start: int, end: int, like: Tensor) -> Tensor:
    return torch.arange(start, end, dtype=torch.long, device=like.device)


def _local_ids(start: int, end: int, g2l: Tensor) -> Tensor:
    """Local ids ``start .. end - 1`` in the map's own dtype (int32, or a user's int64)."""
    return torch.arange(start, end, dtype=g2l.dtype, device=g2l.device)


def sample_offsets(deg: Tensor, k: int, replace: bool, generator: Optional[torch.Generator],
                    method: str = "floyd", wide_factor: int = 4) -> Tuple[Tensor, Tensor]:
    """Chooses in-edges of one frontier: returns ``(owner, offset)`` per sampled edge.

    ``owner`` is the frontier index of the edge's destination (non-decreasing: edges are
    grouped by destination) and ``offset`` in ``[0, deg[owner])`` its place in that node's CSC
    segment. Per node: ``deg`` edges (all) if ``k < 0`` or (no replacement and ``deg <= k``);
    a uniform ``k``-subset if no replacement and ``deg > k``; ``k`` i.i.d. uniform offsets with
    replacement and ``deg > 0``. ``method``: "floyd" or "wide" (module docstring);
    ``wide_factor``: the "wide" draw's candidates per node in multiples of ``k``.
    """
    if k > 0 and not replace and method == "wide":
        return _wide_subsets(deg, k, generator, wide_factor * k)
    if k < 0:
        count = deg
    elif replace:
        count = (deg > 0).long().mul_(k)
    else:
        count = deg.clamp_max(k)
    owner, offset, first_slot = _segments(count)
    if k <= 0:
        return owner, offset
    if replace:
        return owner, _uniform_below(deg.index_select(0, owner), generator)
    big = (deg > k).nonzero().squeeze(1)
    if big.numel() > 0:
        slots = first_slot.index_select(0, big) + _arange(0, k, deg).unsqueeze(1)
        subsets = _floyd_subsets(deg.index_select(0, big), k, generator)
        offset.scatter_(0, slots.flatten(), subsets.flatten())
    return owner, offset


def _segments(count: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Lays out ``count[i]`` slots per segment ``i``, segment after segment.

    Returns ``(owner, rank, first_slot)``: slot ``s`` belongs to segment ``owner[s]`` and is
    its ``rank[s]``-th slot; segment ``i`` starts at slot ``first_slot[i] = sum(count[:i])``.
    ``owner[s]`` is the number of segments ending at or before ``s`` (a cumulative sum of
    end markers), which is cheaper than ``repeat_interleave`` on CPU.
    """
    end = torch.cumsum(count, 0)
    total = int(end[-1]) if end.numel() else 0
    first_slot = end - count
    marks = torch.zeros(total + 1, dtype=torch.long, device=count.device)
    marks.index_add_(0, end, torch.ones_like(end))
    owner = marks[:total].cumsum_(0)
    rank = _arange(0, total, count).sub_(first_slot.index_select(0, owner))
    return owner, rank, first_slot


def _uniform_below(bound: Tensor, generator: torch.Generator | None) -> Tensor:
    """One independent uniform integer in ``[0, bound[i])`` per entry (``bound >= 1``).

    ``floor(U * b)`` with ``U`` uniform float64 on ``[0, 1)`` (53 random bits): each value
    has probability ``1/b`` up to a relative error of ``b * 2**-53``; the clamp only guards
    the round-up of ``U * b`` to ``b`` for ``U`` within ``2**-53`` of 1.
    """
    u = torch.rand(bound.shape, dtype=torch.float64, device=bound.device, generator=generator)
    return u.mul_(bound).long().clamp_max_(bound - 1)


def _floyd_subsets(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """``[k, m]``: column ``i`` is a uniformly random ``k``-subset of ``[0, deg[i])``, ``deg > k``.

    Robert Floyd's algorithm, one row per step, all columns at once. Step ``j`` works on
    ``J = deg - k + j``: draw ``t`` uniform in ``[0, J]``; take ``t`` unless already taken,
    else ``J`` (never taken before step ``j``). Invariant: after step ``j`` the first ``j + 1``
    rows hold a uniform ``(j + 1)``-subset of ``[0, J]``. Induction: a target set ``T``
    arises from ``j + 1`` equally likely (previous subset, ``t``) pairs whether or not
    ``J`` is in ``T``, so ``P(T) = (j + 1) / (C(J, j) (J + 1)) = 1 / C(J + 1, j + 1)``.
    Cost ``O(m k^2)`` whatever the degrees.
    """
    out = torch.empty((k, deg.numel()), dtype=torch.long, device=deg.device)
    top = deg - k
    for j in range(k):
        t = _uniform_below(top + 1, generator)
        if j > 0:
            t = torch.where((out[:j] == t).any(0), top, t)
        out[j] = t
        top += 1
    return out


def _wide_subsets(deg: Tensor, k: int, generator: Optional[torch.Generator],
                  width: int) -> Tuple[Tensor, Tensor]:
    """``(owner, offset)`` as `sample_offsets` without replacement, ``k >= 1``, in a number of
    ops independent of ``k`` and of the degrees.

    Each frontier node ``i`` gets ``W = max(width, k)`` candidate offsets (`sample_offsets`
    passes ``WIDE_FACTOR * k``), a row of a ``[m, W]`` matrix, and keeps the ``k`` valid
    candidates of smallest key (one ``topk``):

    * ``d <= W``: the candidates are ``0 .. W-1``, valid below ``d``, keyed by i.i.d. uniform
      reals (by their column when ``d <= k``: all are kept, in CSC order as PyG keeps them).
      The ``k`` smallest of ``d`` i.i.d. continuous keys are a uniform ``k``-subset.
    * ``d > W``: the candidates are ``W`` i.i.d. uniform draws from ``[0, d)``, valid at their
      first occurrence (a stable sort per row finds it), keyed by their column: the first ``k``
      distinct values of an i.i.d. uniform sequence. That set is a uniform ``k``-subset: the
      law of the sequence is invariant under any permutation of ``[0, d)``, which permutes the
      subsets. A row with fewer than ``k`` distinct draws (``W`` draws from ``d > W`` values
      give about ``0.63 W = 2.5 k``; for ``k = 2`` all eight draws must coincide) is drawn
      again with Floyd's algorithm; the event of that redraw is permutation invariant too, so
      the row's law stays uniform.

    Ties between two float64 keys (probability about ``W^2 2^-54`` per row) are the only
    departure from the exact law, as in `_uniform_below`. Owners come out non-decreasing
    (row-major compaction), as the layout requires.
    """
    m = deg.numel()
    width = max(width, k)
    if m == 0:
        empty = deg.new_empty(0)
        return empty, empty.clone()
    column = _arange(0, width, deg)
    u = torch.rand((m, width), dtype=torch.float64, device=deg.device, generator=generator)
    d = deg.unsqueeze(1)
    big = d > width                                              # [m, 1]
    draws = u.mul(d).long().clamp_max_((d - 1).clamp_min_(0))   # i.i.d. uniform in [0, d)
    cand = torch.where(big, draws, column)
    ordered, order = torch.sort(cand, dim=1, stable=True)      # equal draws: first one first
    first_sorted = torch.ones_like(ordered, dtype=torch.bool)
    first_sorted[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = torch.empty_like(first_sorted).scatter_(1, order, first_sorted)
    valid = first.logical_and_(cand < d)
    key = torch.where(big | (d <= k), column.to(u.dtype), u).masked_fill_(~valid, float("inf"))
    keys, pick = torch.topk(key, k, dim=1, largest=False, sorted=True)
    chosen = keys != float("inf")                               # [m, k]
    offset = cand.gather(1, pick)
    failed = big.squeeze(1).logical_and_(chosen.sum(1) < k)
    if bool(failed.any()):
        again = failed.nonzero().squeeze(1)
        offset[again] = _floyd_subsets(deg.index_select(0, again), k, generator).t()
        chosen[again] = True
    slot = chosen.nonzero()
    return slot[:, 0].contiguous(), offset[slot[:, 0], slot[:, 1]]


def relabel(g2l: Tensor, ids: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Gives local ids ``num_nodes, num_nodes + 1, ...`` to the distinct unseen ``ids``.

    New ids follow first appearance in ``ids``. Returns ``(new, local)``: the newly mapped
    global ids in local-id order, and the local id of every entry of ``ids``. Step 1 scatters
    ``num_nodes + position`` with ``amin``: a mapped node keeps its id (``< num_nodes``), an
    unseen one gets its first position; the entries that read back their own value are the
    first occurrences of unseen nodes. Step 2 compacts those to consecutive ids. ``local`` is in
    the map's dtype (int32 from :func:`new_workspace`); tags reach ``num_nodes + len(ids)``,
    which an int32 map holds below :data:`UNSEEN` (else a clear error, not an overflow).
    """
    if g2l.dtype == torch.int32 and num_nodes + ids.numel() >= 2147483647:
        raise RuntimeError("one hop drew 2^31 or more candidates: more than an int32 "
                           "workspace numbers; pass an int64 workspace (torch.full((num_nodes,"
                           "), UNSEEN, dtype=torch.long))")
    tag = _local_ids(num_nodes, num_nodes + ids.numel(), g2l)
    g2l.scatter_reduce_(0, ids, tag, "amin")
    new = ids.masked_select(g2l.index_select(0, ids) == tag)
    g2l.scatter_(0, new, _local_ids(num_nodes, num_nodes + new.numel(), g2l))
    return new, g2l.index_select(0, ids)


def _induced_edges(colptr: Tensor, row: Tensor, node: Tensor, g2l: Tensor,
                   unseen: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Every in-edge of every sampled node whose source is sampled too, as ``(src, dst, pos)``.

    ``dst`` runs over local ids in order and, within one destination, edges keep CSC order;
    ``src = g2l[row[pos]]`` (a duplicated seed maps to its first copy).
    """
    start = colptr.index_select(0, node)
    owner, rank, _ = _segments(colptr.index_select(0, node + 1) - start)
    pos = start.index_select(0, owner).add_(rank)
    src = g2l.index_select(0, row.index_select(0, pos))
    keep = src != unseen
    return src.masked_select(keep), owner.masked_select(keep), pos.masked_select(keep)
