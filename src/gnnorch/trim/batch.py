"""The sampled batch a user's model is working on, as hop-aware trimming sees it.

`BatchGraph` carries the batch's own `edge_index` (to recognise the layer calls that run on it),
its size and seeds, its hop layout (`HopLayout`; None when the batch is not a directional
neighbour sample, with the reason) and GCN normalisations computed once per batch on the
*untrimmed* graph: a trimmed GCN layer must normalise by degrees in the whole sampled graph,
not in the trimmed one. A batch sampled with vertices left unexpanded (the historical-embedding
cache's pruning) carries `extra_degree`: those vertices keep the degree they would have had
(`gcn_norm_extra`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Hashable, Mapping

import torch
from torch import Tensor

from ..device.twin import device_twin
from .hops import HopLayout, LayerBounds


@dataclasses.dataclass
class BatchGraph:
    """The sampled batch the user is working on, as the layer seam needs it."""

    edge_index: Tensor
    num_nodes: int
    batch_size: int
    layout: HopLayout | None       # None: not trimmable (reason says why)
    reason: str | None = None
    # the edges are grouped by the hop of their destination, in hop order (the sampler's own
    # layout, nothing added after it): the edges into rows [0, c_D) are the first
    # e_0 + ... + e_D, so trimming keeps a prefix (`LayerBounds.num_edges`), not a mask
    edges_grouped: bool = False
    n_id: Tensor | None = None     # global ids of the batch's vertices (batch.n_id)
    training: bool = True          # False for batches of evaluation loaders
    # in-edges pruned from the sample per vertex, counted by GCN normalisations (cache)
    extra_degree: Tensor | None = None
    # what a layer hook put on the batch for itself (the cache's `BatchInfo`); never read here
    cache: object | None = None
    _aliases: set[int] = dataclasses.field(default_factory=set)
    _storages: set[int] = dataclasses.field(default_factory=set)   # of the aliases
    _norms: dict[tuple, tuple[Tensor, Tensor]] = dataclasses.field(default_factory=dict)

    def is_own(self, edge_index: Any) -> bool:
        """Whether `edge_index` is this batch's edge_index (the same tensor, or an equal copy on
        another device, e.g. after `batch.to("cuda")`, checked once per batch). The device copy
        the data path made of it (`device.twin`: what ``batch.to(device)`` returns for the
        batches it copies) is known without comparing values: comparing would copy the whole
        edge_index back to the host and wait for the device."""
        if edge_index is self.edge_index:
            return True
        if not isinstance(edge_index, Tensor) or edge_index.shape != self.edge_index.shape:
            return False
        key = id(edge_index)
        if key in self._aliases:
            return True
        if device_twin(self.edge_index) is edge_index or (
                edge_index.device != self.edge_index.device and torch.equal(
                    edge_index.to(self.edge_index.device), self.edge_index)):
            self._aliases.add(key)
            self._storages.add(edge_index.untyped_storage().data_ptr())
            return True
        return False

    @property
    def hetero(self) -> bool:
        return False

    def edge_key(self, edge_index: Any, counts: Mapping[Hashable, int]) -> int | None:
        """0 when `edge_index` is the batch's own (`is_own`), else None: the key its layer calls
        are counted under (`gnnorch.trim.hetero.HeteroBatchGraph` keys them by edge type)."""
        return 0 if self.is_own(edge_index) else None

    def call_rows(self, key: int) -> tuple[int, int]:
        """(source rows, destination rows) of an untrimmed layer call: every vertex's."""
        return self.num_nodes, self.num_nodes

    def call_bounds(self, key: int, layer: int, num_layers: int) -> LayerBounds | None:
        """What layer `layer` of `num_layers` computes under trimming (`HopLayout.bounds`)."""
        return self.layout.bounds(layer, num_layers)

    def output_rows(self, key: Hashable) -> tuple[int, int] | None:
        """(exact rows, rows) of a trimmed model's one-tensor output (`key` None); a part of a
        dict output has none."""
        return (self.batch_size, self.num_nodes) if key is None else None

    def is_narrowed(self, edge_index: Any) -> bool:
        """Whether `edge_index` is a column slice of this batch's edge_index (or of a device copy
        of it) rather than the batch's own: what PyG's `trim_to_layer` hands a layer."""
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or \
                edge_index.size(1) >= self.edge_index.size(1):
            return False
        ptr = edge_index.untyped_storage().data_ptr()
        return ptr in self._storages or ptr == self.edge_index.untyped_storage().data_ptr()

    def gcn_norm(self, edge_index: Tensor, edge_weight: Tensor | None, improved: bool,
                 add_self_loops: bool, flow: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """GCN's normalised edges on the *untrimmed* batch graph, once per batch and setting."""
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        key = (improved, add_self_loops, flow, dtype, edge_index.device,
               None if edge_weight is None else id(edge_weight))
        if key not in self._norms and self.extra_degree is not None:
            self._norms[key] = gcn_norm_extra(edge_index, edge_weight, self.num_nodes,
                                              improved, add_self_loops, flow, dtype,
                                              self.extra_degree)
        if key not in self._norms:
            self._norms[key] = gcn_norm(edge_index, edge_weight, self.num_nodes, improved,
                                        add_self_loops, flow, dtype)
        return self._norms[key]


def gcn_norm_extra(edge_index: Tensor, edge_weight: Tensor | None, num_nodes: int,
                   improved: bool, add_self_loops: bool, flow: str, dtype: torch.dtype,
                   extra: Tensor) -> tuple[Tensor, Tensor]:
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
