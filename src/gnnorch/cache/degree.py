"""GCN normalisation of a pruned batch: pruned vertices keep the degree they would have had.

A hot vertex v reached at the last expanded hop is not expanded, so the batch holds none of its
in-edges. GCNConv weighs an edge u -> w by 1 / sqrt(deg(u) deg(w)) with degrees counted in the
batch graph, so without a correction v, as a *source* of the edges into its shallower
neighbours, would count degree 1 (its self-loop) instead of 1 + the edges the sampler would have
drawn for it, and every GCN layer would over-weigh the hot vertices. `gcn_norm_extra` is PyG's
`gcn_norm` (edge_index tensor path, same operations in the same order) with `extra[v]` added to
each vertex's degree; `extra` is the size of v's neighbourhood in the cache's refresh (min(k, d)
when sampled, d when full), so pruned batch + cached rows equal the batch with those
neighbourhoods.
"""
from __future__ import annotations

import torch
from torch import Tensor


def gcn_norm_extra(edge_index: Tensor, edge_weight: Tensor | None, num_nodes: int,
                   improved: bool, add_self_loops: bool, flow: str, dtype: torch.dtype,
                   extra: Tensor) -> tuple[Tensor, Tensor]:
    from torch_geometric.utils import add_remaining_self_loops, scatter

    fill_value = 2.0 if improved else 1.0
    if add_self_loops:
        edge_index, edge_weight = add_remaining_self_loops(edge_index, edge_weight, fill_value,
                                                           num_nodes)
    if edge_weight is None:
        edge_weight = torch.ones((edge_index.size(1),), dtype=dtype, device=edge_index.device)
    row, col = edge_index[0], edge_index[1]
    idx = col if flow == "source_to_target" else row
    deg = scatter(edge_weight, idx, dim=0, dim_size=num_nodes, reduce="sum")
    deg = deg + extra.to(device=deg.device, dtype=deg.dtype)
    deg_inv_sqrt = deg.pow_(-0.5)
    deg_inv_sqrt.masked_fill_(deg_inv_sqrt == float("inf"), 0)
    return edge_index, deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]
