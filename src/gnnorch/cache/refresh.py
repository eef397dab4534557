"""Recomputing hot vertices' bottom-layer rows with recent weights.

The rows of hot vertices are computed by the bottom layer itself (a weight snapshot of it, in
eval mode, without gradients) on a *refresh graph*: the hot vertices as destinations, each with
the in-neighbourhood the cache uses (``sample``: the loader's bottom fanout drawn as the loader's
sampler draws it; ``full``: every in-neighbour), its sources as rows of their own after the
destinations (PyG's bipartite convention: destinations are the first rows of the sources, so
layers that add self-loops pair x_dst[i] with x_src[i]). A source appears once per refresh graph
even when it is also a destination: its raw features are all the bottom layer reads, and as a
source row it has no in-edges, exactly like a vertex of the batch's last hop, which is what
GCN's degree normalisation of the batch sees.

Semantics: a cached row of v equals the bottom layer applied to v's refresh neighbourhood with
the snapshot's weights. With ``refresh="full"`` and staleness 0 that is the layer on v's full
neighbourhood with the current weights (the exactness test's reference).
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from ..sampling.uniform import new_workspace, sample_neighbors
from .hotness import in_degree


def pair_layer_types() -> tuple[type, ...]:
    """Layers called as layer((x_src, x_dst), edge_index) on a refresh graph."""
    from torch_geometric import nn as pyg_nn

    names = ("SAGEConv", "GATConv", "GATv2Conv", "GINConv", "GraphConv")
    return tuple(getattr(pyg_nn, n) for n in names if isinstance(getattr(pyg_nn, n, None), type))


class Neighbourhoods:
    """In-neighbourhoods of hot vertices for refreshes (one instance per thread: it owns a
    sampling workspace and a random generator)."""

    def __init__(self, colptr: Tensor, row: Tensor, fanout: int, replace: bool, full: bool,
                 seed: int) -> None:
        self.colptr, self.row = colptr, row
        self.fanout, self.replace = fanout, replace
        self.full = full or fanout < 0
        self.generator = torch.Generator(device=colptr.device).manual_seed(seed)
        self._workspace: Tensor | None = None

    def size(self, ids: Tensor) -> Tensor:
        """In-edges of each vertex in its refresh neighbourhood (its degree in a batch that
        had expanded it)."""
        deg = in_degree(self.colptr)[ids]
        if self.full:
            return deg
        if self.replace:
            return (deg > 0).long() * self.fanout
        return deg.clamp_max(self.fanout)

    def edges(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """(global source, destination index into `ids`) of every refresh in-edge of `ids`
        (ids distinct)."""
        if self.full:
            start = self.colptr[ids]
            deg = self.colptr[ids + 1] - start
            owner = torch.repeat_interleave(torch.arange(ids.numel()), deg)
            first = torch.cumsum(deg, 0) - deg
            pos = start[owner] + torch.arange(owner.numel()) - first[owner]
            return self.row[pos], owner
        if self._workspace is None:
            self._workspace = new_workspace(self.colptr.numel() - 1, self.colptr.device)
        out = sample_neighbors(self.colptr, self.row, ids, [self.fanout], replace=self.replace,
                               generator=self.generator, workspace=self._workspace)
        return out.node[out.row], out.col


def refresh_graph(ids: Tensor, src: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """(global ids of the rows: `ids` then the distinct sources, edge_index source -> dst)."""
    sources, inverse = torch.unique(src, return_inverse=True)
    nodes = torch.cat([ids, sources])
    edge_index = torch.stack([inverse + ids.numel(), dst])
    return nodes, edge_index


def layer_rows(layer: Any, x: Tensor, ids: Tensor, src: Tensor, dst: Tensor, pair: bool,
               device: torch.device) -> tuple[Tensor, int]:
    """(the layer's output for `ids` on the refresh graph given by (src, dst), computed without
    gradient; the number of raw feature rows gathered)."""
    nodes, edge_index = refresh_graph(ids, src, dst)
    xs = x[nodes].to(device, non_blocking=True)
    edge_index = edge_index.to(device, non_blocking=True)
    with torch.no_grad():
        if pair:
            return layer((xs, xs[:ids.numel()]), edge_index), nodes.numel()
        return layer(xs, edge_index)[:ids.numel()], nodes.numel()


class Refresher:
    """Computes rows for hot vertices with a weight snapshot of the live bottom layer.

    The snapshot is a private copy of the layer (eval mode: no dropout inside it; no gradient):
    `snapshot()` copies the live weights into it, in the trainer thread, between steps. A
    refresher is used by one thread at a time; the cache keeps one for the trainer (on-demand
    refreshes) and one for the background thread.
    """

    def __init__(self, live: torch.nn.Module, x: Tensor, hood: Neighbourhoods,
                 chunk_rows: int) -> None:
        self.live = live
        self.shadow = copy.deepcopy(live).eval()
        for p in self.shadow.parameters():
            p.requires_grad_(False)
        self.x, self.hood, self.chunk_rows = x, hood, chunk_rows
        self.pair = isinstance(live, pair_layer_types())
        self.device = next((p.device for p in live.parameters()), torch.device("cpu"))
        self.gathered = 0          # raw feature rows gathered by refreshes
        self.edges = 0             # refresh in-edges aggregated

    def snapshot(self) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.shadow.parameters(), self.live.parameters()):
                mine.copy_(theirs)
            for mine, theirs in zip(self.shadow.buffers(), self.live.buffers()):
                mine.copy_(theirs)

    def compute(self, ids: Tensor) -> Tensor:
        """Rows for the global vertex ids `ids` (distinct) with the snapshot's weights."""
        parts = []
        for start in range(0, ids.numel(), self.chunk_rows):
            chunk = ids[start:start + self.chunk_rows]
            src, dst = self.hood.edges(chunk)
            rows, gathered = layer_rows(self.shadow, self.x, chunk, src, dst, self.pair,
                                        self.device)
            self.gathered += gathered
            self.edges += src.numel()
            parts.append(rows)
        if not parts:
            return torch.empty(0)
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def compute_on(self, ids: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """Rows for `ids` on given in-edges (the one-off check against a batch)."""
        return layer_rows(self.shadow, self.x, ids, src, dst, self.pair, self.device)[0]
