"""A sampled HeteroData batch as hop-aware trimming sees it: hop counts per node and edge type.

A heterogeneous NeighborLoader batch orders the vertices of each node type t by hop (hop h of t
occupies rows [c^t_{h-1}, c^t_h), c^t_h = n^t_0 + ... + n^t_h) and the edges of each edge type
(s, r, d) by the hop of their destination: the e^{srd}_h edges sampled when hop h was expanded
end in hop h of d and start in hops <= h + 1 of s. A vertex of type d in hop h < L is expanded
along every edge type into d, so every in-edge it has in the batch, of any type, is there.

So the homogeneous invariant (`gnnorch.trim.hops`) holds type by type: layer l (0-based) of a
K-layer stack needs outputs for the vertices within D = K - 1 - l hops of the seeds, and the
call of edge type (s, r, d) at layer l computes them exactly from input rows [0, c^s_{D+1}) of
s, input rows [0, c^d_D) of d and the first e^{srd}_0 + ... + e^{srd}_D edges (those ending in
rows [0, c^d_D)). Per-type outputs summed (or otherwise combined row by row) into d, as
`to_hetero` and `HeteroConv` do, keep the rows [0, c^d_D) exact. The seeds' rows of every
type at the last layer, [0, c^t_0), are therefore those of the untrimmed computation: the
input type's ``batch_size`` rows for a node loader, the first hop's rows of each end's type
for a link loader. When D >= L a call runs untrimmed.

A call's edge type is recognised by its ``edge_index`` tensor (the batch's own, or the device
copy the data path made of it, or an equal copy); its position among the calls of that edge
type in a forward is its layer.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Hashable, Mapping

import torch
from torch import Tensor

from ..device.twin import device_twin
from .batch import BatchGraph
from .hops import LayerBounds

__all__ = ["HeteroHopLayout", "HeteroBatchGraph", "SampledGraph", "hetero_layout",
           "typed_view"]

EdgeType = tuple[str, str, str]


@dataclasses.dataclass(frozen=True)
class HeteroHopLayout:
    """Vertices per hop of each node type (L + 1 counts) and edges per hop of each edge type
    (L counts)."""

    nodes: Mapping[str, tuple[int, ...]]
    edges: Mapping[EdgeType, tuple[int, ...]]

    def __post_init__(self) -> None:
        lengths = {len(c) for c in self.nodes.values()} | {
            len(c) + 1 for c in self.edges.values()}
        if len(lengths) > 1:
            raise ValueError(f"need L + 1 node counts per node type and L edge counts per edge "
                             f"type, got lengths {sorted(lengths)}")

    @property
    def num_hops(self) -> int:
        for counts in self.edges.values():
            return len(counts)
        for counts in self.nodes.values():
            return len(counts) - 1
        return 0

    def rows_within(self, node_type: str, hops: int) -> int:
        """c^t_hops: the vertices of `node_type` within `hops` hops of the seeds."""
        return sum(self.nodes.get(node_type, ())[:hops + 1])

    def bounds(self, edge_type: EdgeType, layer: int, num_layers: int) -> LayerBounds | None:
        """Rows the call of `edge_type` at layer `layer` of `num_layers` reads (of the source
        type) and writes (of the destination type), or None when it runs untrimmed."""
        if not 0 <= layer < num_layers:
            raise ValueError(f"layer must be in [0, {num_layers}), got {layer}")
        depth = num_layers - 1 - layer
        if depth >= self.num_hops:
            return None
        src, _, dst = edge_type
        return LayerBounds(num_src=self.rows_within(src, depth + 1),
                           num_dst=self.rows_within(dst, depth),
                           num_edges=sum(self.edges[edge_type][:depth + 1]))


def hetero_layout(node_counts: Mapping[str, Any], edge_counts: Mapping[EdgeType, Any],
                  num_nodes: Mapping[str, int],
                  num_edges: Mapping[EdgeType, int]) -> tuple[HeteroHopLayout | None, str | None]:
    """The layout from a batch's per-type hop counts (``batch[t].num_sampled_nodes``,
    ``batch[e].num_sampled_edges``), or (None, why) when they are missing or do not add up to
    the batch's vertices and edges of that type (a transform changed the batch after
    sampling)."""
    missing = [t for t, n in num_nodes.items() if t not in node_counts and n] + [
        e for e, n in num_edges.items() if e not in edge_counts and n]
    if missing or not node_counts:
        what = repr(missing[0]) if missing else "its node types"
        return None, f"the batch has no hop counts for {what} (its sampler gives none)"
    hops = len(next(iter(node_counts.values())))
    node_counts = {t: node_counts.get(t, (0,) * hops) for t in num_nodes}
    edge_counts = {e: edge_counts.get(e, (0,) * (hops - 1)) for e in num_edges}
    nodes = {t: tuple(int(c) for c in node_counts[t]) for t in num_nodes}
    edges = {e: tuple(int(c) for c in edge_counts[e]) for e in num_edges}
    try:
        layout = HeteroHopLayout(nodes, edges)
    except ValueError as exc:
        return None, f"the batch's hop counts are inconsistent ({exc})"
    wrong = [t for t, n in num_nodes.items() if sum(nodes[t]) != n] + [
        e for e, n in num_edges.items() if sum(edges[e]) != n]
    if wrong:
        return None, (f"the hop counts of {wrong[0]!r} do not add up to its batch size (a "
                      f"transform changed the batch after sampling)")
    return layout, None


@dataclasses.dataclass
class HeteroBatchGraph:
    """The sampled HeteroData batch the user is working on, as the layer seam needs it (the
    heterogeneous counterpart of `gnnorch.trim.batch.BatchGraph`, with the same interface)."""

    edge_index_dict: dict[EdgeType, Tensor]
    num_nodes_dict: dict[str, int]
    seeds: dict[str, int]           # c^t_0: the rows of each type exact after the last layer
    output_type: str | None         # the node type a one-tensor model output has rows of
    layout: HeteroHopLayout | None  # None: not trimmable (reason says why)
    reason: str | None = None
    training: bool = True
    edges_grouped: bool = True      # the sampler's layout: the edges into rows [0, c^d_D)
    #                                 of each edge type are a prefix of them
    extra_degree: None = None       # the cache does not serve HeteroData
    cache: None = None
    _aliases: dict[int, EdgeType] = dataclasses.field(default_factory=dict)
    _storages: set[int] = dataclasses.field(default_factory=set)

    @property
    def num_nodes(self) -> int:
        """Rows of a one-tensor model output (those of `output_type`)."""
        return self.num_nodes_dict.get(self.output_type, 0)

    @property
    def batch_size(self) -> int:
        """Exact rows of a one-tensor model output."""
        return self.seeds.get(self.output_type, 0)

    def output_rows(self, key: Hashable) -> tuple[int, int] | None:
        """(exact rows, rows) of the model output's part `key` (a node type of a dict output;
        None: a one-tensor output), or None when the part is not one row per vertex."""
        if key is None:
            key = self.output_type
        if key not in self.num_nodes_dict:
            return None
        return self.seeds.get(key, 0), self.num_nodes_dict[key]

    def edge_key(self, edge_index: Any, counts: Mapping[Hashable, int]) -> EdgeType | None:
        """The edge type whose edge_index this is (None: none of the batch's). An equal copy
        matching several edge types (empty ones, say) is taken for the one called least so far
        (`counts`) among those with the same end types; with different end types, None."""
        if not isinstance(edge_index, Tensor):
            return None
        key = self._aliases.get(id(edge_index))
        if key is not None and self.edge_index_dict[key].shape == edge_index.shape:
            return key
        for key, own in self.edge_index_dict.items():
            if own is edge_index or device_twin(own) is edge_index:
                return key
        same = [key for key, own in self.edge_index_dict.items()
                if own.shape == edge_index.shape and torch.equal(edge_index.to(own.device), own)]
        if not same or len({(s, d) for s, _, d in same}) > 1:
            return None
        key = min(same, key=lambda k: counts.get(k, 0))
        if len(same) == 1:
            self._aliases[id(edge_index)] = key
            self._storages.add(edge_index.untyped_storage().data_ptr())
        return key

    def is_narrowed(self, edge_index: Any) -> bool:
        """Whether `edge_index` is a column slice of one of the batch's edge_index tensors (what
        PyG's `trim_to_layer` hands a layer)."""
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2:
            return False
        ptr = edge_index.untyped_storage().data_ptr()
        return any(edge_index.size(1) < own.size(1) and (
            ptr == own.untyped_storage().data_ptr() or ptr in self._storages)
            for own in self.edge_index_dict.values())

    def call_rows(self, key: EdgeType) -> tuple[int, int]:
        """(source rows, destination rows) of an untrimmed call of edge type `key`."""
        src, _, dst = key
        return self.num_nodes_dict.get(src, 0), self.num_nodes_dict.get(dst, 0)

    def call_bounds(self, key: EdgeType, layer: int, num_layers: int) -> LayerBounds | None:
        return self.layout.bounds(key, layer, num_layers)

    @property
    def hetero(self) -> bool:
        return True


# What the layer seam works on: a Data batch's graph or a HeteroData batch's.
SampledGraph = BatchGraph | HeteroBatchGraph


def typed_view(batch: SampledGraph, node_type: str | None) -> SampledGraph:
    """`batch` with one-tensor outputs taken as rows of `node_type` (an encoder of one node
    type's rows on a HeteroData batch); `batch` itself for a Data batch or no type."""
    if node_type is None or not batch.hetero or node_type == batch.output_type:
        return batch
    return dataclasses.replace(batch, output_type=node_type)
