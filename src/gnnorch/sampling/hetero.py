"""Vectorised uniform k-hop neighbour sampling on a heterogeneous graph (CPU or CUDA).

The graph is one CSC per edge type ``(src, rel, dst)``, as PyG's
:class:`~torch_geometric.sampler.NeighborSampler` holds a ``HeteroData``: the in-edges of
``dst`` node ``v`` along that edge type are the positions ``colptr[v] .. colptr[v+1]-1`` of
``row``, and ``row[p]`` is the ``src`` node of the edge at position ``p``.

Semantics (PyG's heterogeneous directional sampling, as pyg-lib and torch_sparse run it, one
thread): every node type keeps its own list of sampled nodes and local ids. Hop 0's frontier of
a type is its seeds. At hop ``h`` every edge type, in the given order, expands the frontier of
its ``dst`` type (the nodes of that type first reached at hop ``h - 1``) with its own fanout
``num_neighbors[edge_type][h]``, by the homogeneous law of `gnnorch.sampling.uniform` (all
in-edges for ``k < 0``, a uniform ``k``-subset without replacement, ``k`` i.i.d. draws with
replacement); the sources it reaches that its ``src`` type has not seen yet join that type's
list in order of first appearance, edge type after edge type. Nodes that join at hop ``h`` are
expanded at hop ``h + 1`` only, whichever edge type reached them: within a hop, the edge types
read frontiers fixed at its start, so drawing every edge type first and relabelling each node
type once (the sources of all its edge types concatenated in edge-type order) gives the same
lists as the sequential loop.

Layout of the result (pyg-lib's): per node type, its seeds first (input order, duplicates
kept), then each hop's new nodes; per edge type, its edges hop by hop, grouped by destination
in frontier order; ``row`` holds local ``src`` ids, ``col`` local ``dst`` ids, ``edge`` CSC
positions. ``num_sampled_nodes[t]`` has one count per hop plus the seeds' (0 for a type
without seeds), ``num_sampled_edges[e]`` one per hop; node and edge types that nothing
reaches are present with empty tensors and zero counts.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from ..compat.jit import compiled_function
from .uniform import UNSEEN, WIDE_FACTOR, new_workspace, relabel, sample_offsets

__all__ = ["SampledHeteroSubgraph", "compiled_hetero_sampler", "new_hetero_workspace",
           "sample_hetero_neighbors"]

NodeType = str
EdgeType = tuple[str, str, str]


@dataclasses.dataclass
class SampledHeteroSubgraph:
    """A sampled heterogeneous subgraph in local indices, per type (module docstring).

    For every edge type ``(s, r, d)`` and edge ``e``: ``node[s][row[e]] -> node[d][col[e]]`` is
    the edge at CSC position ``edge[e]`` of that type's CSC.
    """

    node: dict[NodeType, Tensor]
    row: dict[EdgeType, Tensor]
    col: dict[EdgeType, Tensor]
    edge: dict[EdgeType, Tensor]
    num_sampled_nodes: dict[NodeType, list[int]]
    num_sampled_edges: dict[EdgeType, list[int]]


def new_hetero_workspace(num_nodes: Mapping[NodeType, int],
                         device: torch.device | str | None = None) -> dict[NodeType, Tensor]:
    """One global-to-local id map per node type (`gnnorch.sampling.uniform.new_workspace`):
    :func:`sample_hetero_neighbors` leaves every map all :data:`UNSEEN` again on return."""
    return {node_type: new_workspace(int(n), device) for node_type, n in num_nodes.items()}


def sample_hetero_neighbors(
    colptr: Mapping[EdgeType, Tensor],
    row: Mapping[EdgeType, Tensor],
    seeds: Mapping[NodeType, Tensor],
    num_neighbors: Mapping[EdgeType, Sequence[int]],
    num_nodes: Mapping[NodeType, int],
    *,
    replace: bool = False,
    generator: torch.Generator | None = None,
    workspace: dict[NodeType, Tensor] | None = None,
    method: str = "auto",
    compiled: bool = True,
) -> SampledHeteroSubgraph:
    """Samples ``len(num_neighbors[e])`` hops (the same for every edge type) around `seeds`.

    Args:
        colptr, row: the CSC of every edge type ``(src, rel, dst)`` (int64, one device); their
            order is the order edge types are expanded in.
        seeds: global ids of the seed nodes per node type (duplicates kept, as PyG does).
        num_neighbors: fanout per hop of every edge type; -1 takes every in-edge.
        num_nodes: the number of nodes of every node type.
        replace: sample with replacement.
        generator: random source (default: torch's global RNG of the device).
        workspace: maps from :func:`new_hetero_workspace` to reuse; fresh ones otherwise.
        method: how ``k``-subsets are drawn (`gnnorch.sampling.uniform.METHODS`).
        compiled: run the body compiled by TorchScript (`compiled_hetero_sampler`; the
            default): the same result for the same generator state, without Python's cost per
            operation and with the GIL released; eager where compiling is unavailable, or with
            False.
    """
    edge_types = list(colptr)
    if set(row) != set(edge_types) or set(num_neighbors) != set(edge_types):
        raise ValueError("colptr, row and num_neighbors must name the same edge types")
    hops = {len(num_neighbors[e]) for e in edge_types}
    if len(hops) > 1:
        raise ValueError(f"every edge type needs the same number of hops, got {sorted(hops)}")
    for e in edge_types:
        if colptr[e].dtype != torch.long or row[e].dtype != torch.long:
            raise TypeError(f"colptr and row of {e} must be int64, got {colptr[e].dtype} "
                            f"and {row[e].dtype}")
    node_types = list(num_nodes)
    unknown = [t for t in seeds if t not in num_nodes] + [
        t for e in edge_types for t in (e[0], e[2]) if t not in num_nodes]
    if unknown:
        raise ValueError(f"node types without a node count: {sorted(set(unknown))}")
    device = next(iter(colptr.values())).device if edge_types else torch.device("cpu")
    if method == "auto":
        method = "wide" if device.type == "cuda" else "floyd"
    g2l = new_hetero_workspace(num_nodes, device) if workspace is None else workspace
    body = compiled_hetero_sampler() if compiled else None
    try:
        node, rows, cols, edges, sampled_nodes, sampled_edges = (body or _sample)(
            [colptr[e] for e in edge_types], [row[e] for e in edge_types],
            [e[0] for e in edge_types], [e[2] for e in edge_types],
            {t: s.to(device=device, dtype=torch.long) for t, s in seeds.items()},
            [[int(k) for k in num_neighbors[e]] for e in edge_types], node_types,
            hops.pop() if hops else 0, bool(replace), generator, g2l, method, WIDE_FACTOR,
            device)
    except BaseException:
        for table in g2l.values():
            table.fill_(UNSEEN)
        raise
    for node_type, nodes in node.items():   # every map back to all-UNSEEN
        g2l[node_type].index_fill_(0, nodes, UNSEEN)
    return SampledHeteroSubgraph(
        node=node, row=dict(zip(edge_types, rows)), col=dict(zip(edge_types, cols)),
        edge=dict(zip(edge_types, edges)), num_sampled_nodes=sampled_nodes,
        num_sampled_edges=dict(zip(edge_types, sampled_edges)))


def compiled_hetero_sampler() -> Callable[..., tuple] | None:
    """`_sample` compiled by TorchScript (`gnnorch.compat.jit.compiled_function`), or None
    where it cannot be (the caller then runs it eagerly): the same operations in the same
    order, so the same result bit for bit (tested), without holding the GIL while it runs
    (as `gnnorch.sampling.uniform.compiled_sampler` for the homogeneous body)."""
    return compiled_function(_sample)


def _sample(colptr: List[Tensor], row: List[Tensor], src: List[str], dst: List[str],
            seeds: Dict[str, Tensor], fanouts: List[List[int]], node_types: List[str],
            num_hops: int, replace: bool, generator: Optional[torch.Generator],
            g2l: Dict[str, Tensor], method: str, wide_factor: int, device: torch.device
            ) -> Tuple[Dict[str, Tensor], List[Tensor], List[Tensor], List[Tensor],
                       Dict[str, List[int]], List[List[int]]]:
    """Body of :func:`sample_hetero_neighbors`, edge type ``i`` being ``(src[i], ..,
    dst[i])`` with CSC ``colptr[i]`` / ``row[i]``. Returns ``(node per node type, row, col,
    edge per edge type, hop counts per node type, hop counts per edge type)``. Written in the
    subset of Python that TorchScript compiles (`compiled_hetero_sampler`): keep it so, a test
    compiles it.

    Invariant at the top of hop ``h``, per node type ``t``: ``frontier[t]`` holds the nodes of
    ``t`` expanded at hop ``h``, whose local ids are ``first_local[t] ..
    first_local[t] + len(frontier[t]) - 1``; ``count[t]`` nodes of ``t`` have local ids.
    """
    num_edge_types = len(colptr)
    empty = torch.empty(0, dtype=torch.long, device=device)
    frontier: Dict[str, Tensor] = {}
    nodes: Dict[str, List[Tensor]] = {}
    count: Dict[str, int] = {}
    first_local: Dict[str, int] = {}
    sampled_nodes: Dict[str, List[int]] = {}
    for t in node_types:
        front = seeds[t] if t in seeds else empty
        n = front.numel()
        if n > 0:
            g2l[t].scatter_reduce_(0, front, torch.arange(n, dtype=g2l[t].dtype, device=device),
                                   "amin")
        frontier[t] = front
        nodes[t] = [front]
        count[t] = n
        first_local[t] = 0
        sampled_nodes[t] = [n]
    rows: List[List[Tensor]] = []
    cols: List[List[Tensor]] = []
    edges: List[List[Tensor]] = []
    sampled_edges: List[List[int]] = []
    for _ in range(num_edge_types):
        hop_counts: List[int] = []
        rows.append([])
        cols.append([])
        edges.append([])
        sampled_edges.append(hop_counts)
    for hop in range(num_hops):
        # the edge types that expand, grouped by fanout in order of first appearance
        group_k: List[int] = []
        groups: List[List[int]] = []
        for i in range(num_edge_types):
            k = fanouts[i][hop]
            if frontier[dst[i]].numel() == 0 or k == 0:
                sampled_edges[i].append(0)
            elif k in group_k:
                groups[group_k.index(k)].append(i)
            else:
                group_k.append(k)
                groups.append([i])
        owners: Dict[int, Tensor] = {}
        positions: Dict[int, Tensor] = {}
        for g in range(len(groups)):
            _draw(colptr, dst, frontier, groups[g], group_k[g], replace, generator, method,
                  wide_factor, owners, positions)
        reached_by: Dict[str, List[int]] = {}
        reached: Dict[str, List[Tensor]] = {}
        for i in range(num_edge_types):   # in edge-type order: new nodes are numbered so
            if i not in owners:
                continue
            pos = positions[i]
            cols[i].append(owners[i].add_(first_local[dst[i]]))
            edges[i].append(pos)
            sampled_edges[i].append(pos.numel())
            if src[i] not in reached:
                by: List[int] = []
                reached_by[src[i]] = by
                reached[src[i]] = []
            reached_by[src[i]].append(i)
            reached[src[i]].append(row[i].index_select(0, pos))
        for t in node_types:
            new = empty
            if t in reached:
                parts = reached[t]
                new, local = relabel(g2l[t], torch.cat(parts), count[t])
                pieces = local.split([p.numel() for p in parts])
                for j in range(len(parts)):
                    rows[reached_by[t][j]].append(pieces[j])
            nodes[t].append(new)
            sampled_nodes[t].append(new.numel())
            frontier[t] = new
            first_local[t] = count[t]
            count[t] = count[t] + new.numel()
    node: Dict[str, Tensor] = {}
    for t in node_types:
        node[t] = torch.cat(nodes[t])
    return (node, [_joined(r, empty) for r in rows], [_joined(c, empty) for c in cols],
            [_joined(e, empty) for e in edges], sampled_nodes, sampled_edges)


def _joined(parts: List[Tensor], empty: Tensor) -> Tensor:
    """The parts end to end, int64 (local ids come from the maps in their dtype)."""
    return torch.cat(parts).long() if len(parts) > 0 else empty.clone()


def _draw(colptr: List[Tensor], dst: List[str], frontier: Dict[str, Tensor], group: List[int],
          k: int, replace: bool, generator: Optional[torch.Generator], method: str,
          wide_factor: int, owners: Dict[int, Tensor], positions: Dict[int, Tensor]) -> None:
    """One hop's in-edges of every edge type in `group` (all with fanout `k`), drawn in one
    call, into ``owners[i]`` (the frontier index of each edge's destination, non-decreasing)
    and ``positions[i]`` (its CSC position in edge type ``i``'s CSC).

    The frontiers of the group are laid end to end, so the ``k``-subsets of all of them are
    drawn by one `sample_offsets` call (Floyd's ``k`` steps once per hop and fanout instead of
    once per edge type: a few hundred fewer operations per hop on a graph of many edge types).
    Each node still gets its own independent draw from the law of `gnnorch.sampling.uniform`;
    only the order in which the random numbers are consumed changes.
    """
    starts: List[Tensor] = []
    degrees: List[Tensor] = []
    bases: List[int] = [0]
    for i in group:
        front = frontier[dst[i]]
        start = colptr[i].index_select(0, front)
        starts.append(start)
        degrees.append(colptr[i].index_select(0, front + 1) - start)
        bases.append(bases[-1] + front.numel())
    if len(group) == 1:
        start, deg = starts[0], degrees[0]
    else:
        start, deg = torch.cat(starts), torch.cat(degrees)
    owner, offset = sample_offsets(deg, k, replace, generator, method, wide_factor)
    pos = start.index_select(0, owner).add_(offset)
    if len(group) == 1:
        owners[group[0]] = owner
        positions[group[0]] = pos
        return
    cuts: List[int] = torch.searchsorted(
        owner, torch.tensor(bases, dtype=torch.long, device=owner.device)).tolist()
    for j in range(len(group)):
        lo, hi = cuts[j], cuts[j + 1]
        owners[group[j]] = owner[lo:hi] - bases[j]
        positions[group[j]] = pos[lo:hi]
