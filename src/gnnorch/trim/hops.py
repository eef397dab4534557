"""Hop layout of a directionally sampled batch and the rows / edges each layer needs.

A NeighborLoader batch with hop counts n_0 (seeds), n_1, ..., n_L orders its vertices by hop
(hop h occupies rows [c_{h-1}, c_h) with c_h = n_0 + ... + n_h) and its edges by the hop of
their destination: the e_h edges sampled when hop h was expanded have destinations in hop h and
sources in hops <= h + 1. Only vertices of hops < L have in-edges.

Layer l (0-based) of a K-layer stack needs outputs for vertices within D = K - 1 - l hops of the
seeds. When D < L it suffices to compute rows [0, c_D) from the c_{D+1} input rows and the edges
whose destination lies in those rows: every in-edge of such a vertex is in the batch and its
source is within D + 1 hops, whose layer l - 1 outputs are exact by induction. The seeds' rows of
the last layer (D = 0) are therefore exactly those of the untrimmed computation. When D >= L the
layer runs untrimmed.

This holds only for *directional* sampling; bidirectional or induced subgraphs connect vertices
across arbitrary hops and are never trimmed.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
from torch import Tensor


@dataclasses.dataclass(frozen=True)
class LayerBounds:
    """What layer l computes under trimming: `num_dst` output rows from `num_src` input rows.

    `num_edges`: how many edges end in rows [0, num_dst) (None: unknown). In a batch whose
    edges are grouped by the hop of their destination, in hop order (the sampler's layout),
    they are exactly its first `num_edges` edges."""

    num_src: int
    num_dst: int
    num_edges: int | None = None


@dataclasses.dataclass(frozen=True)
class HopLayout:
    """Vertices and edges per hop of one batch (len(nodes) = len(edges) + 1 = L + 1)."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.nodes) != len(self.edges) + 1:
            raise ValueError(f"need one more node count than edge counts, got {len(self.nodes)} "
                             f"node and {len(self.edges)} edge counts")

    @classmethod
    def from_counts(cls, nodes: Sequence[int], edges: Sequence[int]) -> "HopLayout":
        return cls(tuple(int(n) for n in nodes), tuple(int(e) for e in edges))

    @property
    def num_hops(self) -> int:
        return len(self.edges)

    @property
    def num_nodes(self) -> int:
        return sum(self.nodes)

    @property
    def num_edges(self) -> int:
        return sum(self.edges)

    def rows_within(self, hops: int) -> int:
        """c_hops: the number of vertices within `hops` hops of the seeds."""
        return sum(self.nodes[:hops + 1])

    def admits(self, edge_index: Tensor, num_nodes: int) -> bool:
        """Whether a batch of `num_nodes` vertices with edges `edge_index` keeps the invariant
        trimming relies on: the vertex count is the layout's and no edge reaches more than one
        hop deeper than its destination, hop(src) <= hop(dst) + 1, with hop(v) read from v's
        row. A batch transform may add edges or vertices after sampling (``T.AddSelfLoops``
        and ``T.ToUndirected`` keep the invariant; ``T.VirtualNode`` does not)."""
        if num_nodes != self.num_nodes:
            return False
        if edge_index.numel() == 0:
            return True
        ends = torch.tensor(self.nodes, device=edge_index.device).cumsum(0)
        hop = torch.bucketize(edge_index, ends, right=True)
        return not bool((hop[0] > hop[1] + 1).any())

    def bounds(self, layer: int, num_layers: int) -> LayerBounds | None:
        """Rows layer `layer` of `num_layers` reads and writes, or None when it runs untrimmed."""
        if not 0 <= layer < num_layers:
            raise ValueError(f"layer must be in [0, {num_layers}), got {layer}")
        depth = num_layers - 1 - layer
        if depth >= self.num_hops:
            return None
        return LayerBounds(num_src=self.rows_within(depth + 1), num_dst=self.rows_within(depth),
                           num_edges=sum(self.edges[:depth + 1]))


def hops_from_edges(edge_index: Tensor, num_nodes: int, num_seeds: int,
                    num_hops: int) -> HopLayout | None:
    """Recover the hop layout of a directionally sampled batch from its edges alone.

    hop(v) = shortest distance from v to a seed along edge direction (source -> destination),
    computed by `num_hops` rounds of hop[src] <- min(hop[src], hop[dst] + 1). Returns None when
    the batch is not laid out by hop (rows not sorted by hop, a vertex farther than `num_hops`,
    or an edge whose destination lies in the last hop), i.e. when trimming would not be exact.
    """
    if num_nodes == 0 or num_seeds > num_nodes:
        return None
    src, dst = edge_index[0], edge_index[1]
    far = num_hops + 1
    hop = torch.full((num_nodes,), far, dtype=torch.long, device=edge_index.device)
    hop[:num_seeds] = 0
    for _ in range(num_hops):
        candidate = hop[dst] + 1
        new = hop.scatter_reduce(0, src, candidate, reduce="amin", include_self=True)
        if torch.equal(new, hop):
            break
        hop = new
    if int(hop.max()) > num_hops or bool((hop[1:] < hop[:-1]).any()):
        return None
    nodes = torch.bincount(hop, minlength=num_hops + 1)[:num_hops + 1]
    if dst.numel() and int(hop[dst].max()) >= num_hops:
        return None
    edges = torch.bincount(hop[dst], minlength=num_hops)[:num_hops] if dst.numel() else \
        torch.zeros(num_hops, dtype=torch.long)
    if dst.numel() and bool((hop[dst][1:] < hop[dst][:-1]).any()):
        return None  # edges not grouped by the hop of their destination
    return HopLayout.from_counts(nodes.tolist(), edges.tolist())
