"""PyG layer types grouped by the properties gnnorch relies on (ground floor: imports nothing
of gnnorch; torch_geometric is imported when a tuple is asked for, not at import).

Each function returns a tuple for `isinstance`, made of the listed `torch_geometric.nn`
classes that the installed PyG version has (a missing name is skipped, not an error). The
layer seam (trimming) and the historical-embedding cache both ask here, so a layer type is
classified once.
"""
from __future__ import annotations


def _pyg_types(names: tuple[str, ...]) -> tuple[type, ...]:
    from torch_geometric import nn as pyg_nn

    return tuple(getattr(pyg_nn, n) for n in names if isinstance(getattr(pyg_nn, n, None), type))


def pair_capable() -> tuple[type, ...]:
    """Layers whose forward accepts a bipartite ``(x_src, x_dst)`` pair and computes output
    rows for the ``x_dst`` rows only (a trimmed call gives them just the rows it needs)."""
    return _pyg_types(("SAGEConv", "GATConv", "GATv2Conv", "GINConv", "GINEConv", "GraphConv"))


def recomputable() -> tuple[type, ...]:
    """Layers whose output row for a vertex v, called as ``layer(x, edge_index)``, depends only
    on the raw features of v and of its in-neighbours (GCNConv: and on their degrees), so a
    refresh graph of v's in-neighbourhood reproduces it: the cache's admissible bottom layers."""
    return _pyg_types(("SAGEConv", "GCNConv", "GATConv", "GATv2Conv", "GINConv", "GraphConv"))


def pair_recomputable() -> tuple[type, ...]:
    """Layers that are both `recomputable` and `pair_capable`: a refresh calls them as
    ``layer((x_src, x_dst), edge_index)``, and a cached bottom layer of this kind is computed on
    its cold destination rows only (the hot rows are neither aggregated nor transformed)."""
    pair = pair_capable()
    return tuple(t for t in recomputable() if t in pair)


def self_looping() -> tuple[type, ...]:
    """Layers that (with ``add_self_loops=True``) add a self-loop pairing ``x_src[i]`` with
    ``x_dst[i]``: a bipartite call on a subset of the destinations must give them explicit
    self-loop edges instead."""
    return _pyg_types(("GATConv", "GATv2Conv"))


def pruning_safe() -> tuple[type, ...]:
    """Layers whose output rows for the vertices above the last sampled hop do not change when
    hot vertices of hop L-1 lose their in-edges (GCNConv: with the cache's degree correction).
    Today these are exactly the `recomputable` layers."""
    return recomputable()
