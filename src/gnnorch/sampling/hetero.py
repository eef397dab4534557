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

import torch
from torch import Tensor

from .uniform import UNSEEN, WIDE_FACTOR, new_workspace, relabel, sample_offsets

__all__ = ["SampledHeteroSubgraph", "new_hetero_workspace", "sample_hetero_neighbors"]

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
    try:
        out = _sample(colptr, row, seeds, num_neighbors, node_types, edge_types,
                      hops.pop() if hops else 0, replace, generator, g2l, method, device)
    except BaseException:
        for table in g2l.values():
            table.fill_(UNSEEN)
        raise
    for node_type, node in out.node.items():   # every map back to all-UNSEEN
        g2l[node_type].index_fill_(0, node, UNSEEN)
    return out


def _sample(colptr: Mapping[EdgeType, Tensor], row: Mapping[EdgeType, Tensor],
            seeds: Mapping[NodeType, Tensor], num_neighbors: Mapping[EdgeType, Sequence[int]],
            node_types: list[NodeType], edge_types: list[EdgeType], num_hops: int,
            replace: bool, generator: torch.Generator | None, g2l: dict[NodeType, Tensor],
            method: str, device: torch.device) -> SampledHeteroSubgraph:
    """Body of :func:`sample_hetero_neighbors`.

    Invariant at the top of hop ``h``, per node type ``t``: ``frontier[t]`` holds the nodes of
    ``t`` expanded at hop ``h``, whose local ids are ``first_local[t] ..
    first_local[t] + len(frontier[t]) - 1``; ``count[t]`` nodes of ``t`` have local ids.
    """
    empty = torch.empty(0, dtype=torch.long, device=device)
    frontier: dict[NodeType, Tensor] = {}
    for t in node_types:
        s = seeds.get(t)
        frontier[t] = empty if s is None else s.to(device=device, dtype=torch.long)
        n = frontier[t].numel()
        if n:
            g2l[t].scatter_reduce_(0, frontier[t], torch.arange(n, device=device), "amin")
    nodes = {t: [frontier[t]] for t in node_types}
    count = {t: frontier[t].numel() for t in node_types}
    first_local = dict.fromkeys(node_types, 0)
    sampled_nodes = {t: [count[t]] for t in node_types}
    rows: dict[EdgeType, list[Tensor]] = {e: [] for e in edge_types}
    cols: dict[EdgeType, list[Tensor]] = {e: [] for e in edge_types}
    edges: dict[EdgeType, list[Tensor]] = {e: [] for e in edge_types}
    sampled_edges: dict[EdgeType, list[int]] = {e: [] for e in edge_types}
    for hop in range(num_hops):
        groups: dict[int, list[EdgeType]] = {}   # the edge types that expand, by fanout
        for e in edge_types:
            k = int(num_neighbors[e][hop])
            if frontier[e[2]].numel() == 0 or k == 0:
                sampled_edges[e].append(0)
            else:
                groups.setdefault(k, []).append(e)
        drawn: dict[EdgeType, tuple[Tensor, Tensor]] = {}
        for k, group in groups.items():
            drawn.update(_draw(colptr, frontier, group, k, replace, generator, method))
        reached: dict[NodeType, list[tuple[EdgeType, Tensor]]] = {}
        for e in edge_types:   # in edge-type order: the order new nodes are numbered in
            if e not in drawn:
                continue
            owner, pos = drawn[e]
            cols[e].append(owner.add_(first_local[e[2]]))
            edges[e].append(pos)
            sampled_edges[e].append(pos.numel())
            reached.setdefault(e[0], []).append((e, row[e].index_select(0, pos)))
        for t in node_types:
            parts = reached.get(t, [])
            if parts:
                new, local = relabel(g2l[t], torch.cat([p for _, p in parts]), count[t])
                for (e, _), piece in zip(parts, local.split([p.numel() for _, p in parts])):
                    rows[e].append(piece)
            else:
                new = empty
            nodes[t].append(new)
            sampled_nodes[t].append(new.numel())
            frontier[t], first_local[t] = new, count[t]
            count[t] += new.numel()
    return SampledHeteroSubgraph(
        node={t: torch.cat(nodes[t]) for t in node_types},
        row={e: torch.cat(rows[e]) if rows[e] else empty.clone() for e in edge_types},
        col={e: torch.cat(cols[e]) if cols[e] else empty.clone() for e in edge_types},
        edge={e: torch.cat(edges[e]) if edges[e] else empty.clone() for e in edge_types},
        num_sampled_nodes=sampled_nodes, num_sampled_edges=sampled_edges)


def _draw(colptr: Mapping[EdgeType, Tensor], frontier: dict[NodeType, Tensor],
          group: list[EdgeType], k: int, replace: bool, generator: torch.Generator | None,
          method: str) -> dict[EdgeType, tuple[Tensor, Tensor]]:
    """One hop's in-edges of every edge type in `group` (all with fanout `k`), drawn in one
    call: ``{edge type: (owner, pos)}``, ``owner`` the frontier index of each edge's
    destination (non-decreasing), ``pos`` its CSC position in that edge type's CSC.

    The frontiers of the group are laid end to end, so the ``k``-subsets of all of them are
    drawn by one `sample_offsets` call (Floyd's ``k`` steps once per hop and fanout instead of
    once per edge type: a few hundred fewer operations per hop on a graph of many edge types).
    Each node still gets its own independent draw from the law of `gnnorch.sampling.uniform`;
    only the order in which the random numbers are consumed changes.
    """
    starts, degrees, sizes = [], [], []
    for e in group:
        front = frontier[e[2]]
        start = colptr[e].index_select(0, front)
        starts.append(start)
        degrees.append(colptr[e].index_select(0, front + 1) - start)
        sizes.append(front.numel())
    if len(group) == 1:
        start, deg = starts[0], degrees[0]
    else:
        start, deg = torch.cat(starts), torch.cat(degrees)
    owner, offset = sample_offsets(deg, k, replace, generator, method, WIDE_FACTOR)
    pos = start.index_select(0, owner).add_(offset)
    if len(group) == 1:
        return {group[0]: (owner, pos)}
    bases = [0]
    for size in sizes:
        bases.append(bases[-1] + size)
    cuts = torch.searchsorted(owner, torch.tensor(bases, device=owner.device)).tolist()
    out = {}
    for i, e in enumerate(group):
        lo, hi = cuts[i], cuts[i + 1]
        out[e] = (owner[lo:hi] - bases[i], pos[lo:hi])
    return out

