"""Recomputing hot vertices' bottom-layer rows with recent weights.

The rows of hot vertices are computed by the bottom layer itself (a weight snapshot of it, in
eval mode, without gradients) on a *refresh graph*: the hot vertices as destinations, each with
the in-neighbourhood the cache uses (``sample``: the loader's bottom fanout drawn as the loader's
sampler draws it; ``full``: every in-neighbour), its sources as rows of their own after the
destinations (PyG's bipartite convention: destinations are the first rows of the sources, so
layers that add self-loops pair x_dst[i] with x_src[i]). A source appears once per refresh graph
even when it is also a destination: its raw features are all the bottom layer reads.

GCNConv normalises by the degrees of the *batch* graph: a source u weighs 1/sqrt(deg(u) deg(v)).
A refresh therefore takes the degrees from a `BatchDegrees` context, the batch in which the row
is computed: a source that lies in that batch with in-edges counts its batch degree there, any
other source counts only its self-loop (like a vertex of the batch's last hop); v counts its
refresh neighbourhood plus its self-loop, as it would in a batch that had expanded it.

Semantics: a cached row of v equals the bottom layer applied to v's refresh neighbourhood with
the snapshot's weights (GCN: with the degrees of the batch it was computed in). With
``refresh="full"`` and staleness 0 that is the layer on v's full neighbourhood with the current
weights, in the current batch (the exactness test's reference).
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import Tensor

from ..device.transfer import to_device
from ..sampling.uniform import new_workspace, sample_neighbors
from ..trim.layer_types import pair_recomputable
from .hotness import in_degree


# where a refresh reads the raw features: the loader's data.x, or the device path's resident
# copy of it (`gnnorch.device.gather.ResidentTensors`), current at each call
FeatureSource = Callable[[], Tensor]

# how gnnorch calls a layer itself: unpatched(layer, *args, **kwargs) runs the layer's own call
# past the layer seam (a refresh has shapes unlike any batch's: no trimming, no cache hook, no
# rewrite probing; module hooks still run). The cache manager takes it from the seam's calls.
LayerCall = Callable[..., Any]


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
        (ids distinct), on the graph's device (`ids` may be on the host)."""
        ids = to_device(ids, self.colptr.device)
        if self.full:
            start = self.colptr[ids]
            deg = self.colptr[ids + 1] - start
            owner = torch.repeat_interleave(torch.arange(ids.numel(), device=ids.device), deg)
            first = torch.cumsum(deg, 0) - deg
            pos = start[owner] + torch.arange(owner.numel(), device=ids.device) - first[owner]
            return self.row[pos], owner
        if self._workspace is None:
            self._workspace = new_workspace(self.colptr.numel() - 1, self.colptr.device)
        out = sample_neighbors(self.colptr, self.row, ids, [self.fanout], replace=self.replace,
                               generator=self.generator, workspace=self._workspace)
        return out.node[out.row], out.col


def refresh_graph(ids: Tensor, src: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """(global ids of the rows: `ids` then the distinct sources, edge_index source -> dst), on
    the edges' device."""
    sources, inverse = torch.unique(src, return_inverse=True)
    nodes = torch.cat([to_device(ids, src.device), sources])
    edge_index = torch.stack([inverse + ids.numel(), dst])
    return nodes, edge_index


class BatchDegrees:
    """In-degrees (edges + pruned-edge corrections, without self-loops) of the vertices of one
    batch that have in-edges there, looked up by global id (thread-safe: read-only)."""

    def __init__(self, ids: Tensor, degrees: Tensor) -> None:
        order = torch.argsort(ids)
        self.ids, self.degrees = ids[order], degrees[order]

    @classmethod
    def of_batch(cls, n_id: Tensor, edge_index: Tensor, num_nodes: int,
                 extra: Tensor | None) -> "BatchDegrees":
        deg = torch.bincount(edge_index[1].cpu(), minlength=num_nodes).to(torch.float64)
        if extra is not None:
            deg = deg + extra.cpu().to(torch.float64)
        has = deg > 0
        return cls(n_id.cpu()[has], deg[has])

    def lookup(self, ids: Tensor) -> Tensor:
        """Batch in-degree of each global id (0 for vertices without in-edges there)."""
        if self.ids.numel() == 0:
            return torch.zeros(ids.numel(), dtype=torch.float64)
        pos = torch.searchsorted(self.ids, ids).clamp_max(self.ids.numel() - 1)
        found = self.ids[pos] == ids
        return torch.where(found, self.degrees[pos], torch.zeros((), dtype=torch.float64))


def rows_on(x: Tensor, nodes: Tensor, device: torch.device) -> Tensor:
    """x[nodes] on `device`, indexed where `x` lives. Host rows bound for a CUDA device are
    gathered straight into pinned memory and copied asynchronously on the current stream (the
    caching host allocator keeps the block until the copy is done): never a pageable copy."""
    if x.device == device:
        return x.index_select(0, to_device(nodes, device))
    if device.type != "cuda" or x.device.type != "cpu":
        return x.index_select(0, nodes.to(x.device)).to(device)
    nodes = nodes.cpu()   # ids drawn on the device: the host gathers with host ids
    rows = torch.empty((nodes.numel(),) + tuple(x.shape[1:]), dtype=x.dtype, pin_memory=True)
    torch.index_select(x, 0, nodes, out=rows)
    return rows.to(device, non_blocking=True)


def _gcn(layer: Any) -> bool:
    from torch_geometric.nn import GCNConv

    return isinstance(layer, GCNConv) and layer.normalize


def layer_rows(layer: Any, x: Tensor, ids: Tensor, src: Tensor, dst: Tensor, pair: bool,
               device: torch.device, degrees: BatchDegrees | None,
               unpatched: LayerCall, linear: str | None = None
               ) -> tuple[Tensor, Tensor | None, int]:
    """(the layer's output for `ids` on the refresh graph given by (src, dst), computed without
    gradient by `unpatched(layer, ...)`; with `linear` (the layer's aggregation, "mean" or
    "sum"), the raw aggregate of each row (`raw_aggregate`) from the same gathered rows, else
    None; the number of raw feature rows gathered). Each distinct row is gathered once, where
    `x` lives, and both results are computed from it on `device`."""
    nodes, edge_index = refresh_graph(ids, src, dst)
    xs = rows_on(x, nodes, device)
    n = ids.numel()
    edge_index = to_device(edge_index, device)
    aux = (raw_aggregate(xs, n, edge_index[0], edge_index[1], linear)
           if linear is not None else None)
    with torch.no_grad():
        if pair:
            return unpatched(layer, (xs, xs[:n]), edge_index), aux, nodes.numel()
        if not _gcn(layer):
            return unpatched(layer, xs, edge_index)[:n], aux, nodes.numel()
        # GCN: the batch's normalisation, made explicit (see the module docstring); the
        # degrees are looked up on the host (`BatchDegrees`)
        src, dst = src.cpu(), dst.cpu()
        fill = 2.0 if layer.improved else 1.0
        deg_dst = torch.bincount(dst, minlength=n).to(torch.float64) + fill
        deg_src = fill + (degrees.lookup(src) if degrees is not None
                          else torch.zeros(src.numel(), dtype=torch.float64))
        weight = torch.cat([(deg_src * deg_dst[dst]).rsqrt(), fill / deg_dst])
        loops = torch.arange(n, device=edge_index.device)
        edge_index = torch.cat([edge_index, torch.stack([loops, loops])], 1)
        layer.normalize = False  # a private snapshot: safe to switch
        try:
            out = unpatched(layer, xs, edge_index, to_device(weight.to(xs.dtype), device))
        finally:
            layer.normalize = True
        return out[:n], aux, nodes.numel()


def gcn_aggregate(x: Tensor, ids: Tensor, src: Tensor, dst: Tensor, fill: float,
                  degrees: BatchDegrees | None) -> tuple[Tensor, int]:
    """The weight-independent part of GCN rows (``store="aggregate"``):
    a_v = sum over refresh in-edges u -> v of x_u / sqrt(deg(u) deg(v)), degrees as in
    `layer_rows`, without v's self-loop term (the batch adds it: a pruned v keeps its degree).
    Then the layer's row is lin(x_v fill / deg(v) + a_v) + bias with the *current* weights.
    Returns (a [len(ids), F_in] float64-accumulated in x's dtype, raw rows gathered)."""
    n = ids.numel()
    src, dst = src.cpu(), dst.cpu()   # the degrees are looked up on the host (`BatchDegrees`)
    deg_dst = torch.bincount(dst, minlength=n).to(torch.float64) + fill
    deg_src = fill + (degrees.lookup(src) if degrees is not None
                      else torch.zeros(src.numel(), dtype=torch.float64))
    weight = to_device((deg_src * deg_dst[dst]).rsqrt().to(x.dtype), x.device)
    sources, inverse = torch.unique(src, return_inverse=True)
    rows = x.index_select(0, to_device(sources, x.device))
    out = x.new_zeros((n,) + tuple(x.shape[1:]))
    out.index_add_(0, to_device(dst, x.device),
                   rows.index_select(0, to_device(inverse, x.device))
                   * weight.view(-1, *([1] * (x.dim() - 1))))
    return out, n + sources.numel()


def linear_parts(layer: Any) -> tuple[Any, Any, str] | None:
    """(lin applied to the neighbour aggregate, lin applied to the vertex itself or None, the
    aggregation) of a bottom layer that is linear in its weights, else None. The aggregation
    is the one PyG runs, its ``aggr_module`` (a ``layer.aggr = "mean"`` written after
    construction, as PyG's graph_saint.py example does, changes the string, not the sum)."""
    from torch_geometric.nn import GraphConv, SAGEConv
    from torch_geometric.nn.aggr import MeanAggregation, SumAggregation

    aggr = {SumAggregation: "sum", MeanAggregation: "mean"}.get(
        type(getattr(layer, "aggr_module", None)))
    if aggr is None:
        return None
    if isinstance(layer, SAGEConv) and not layer.project and not layer.normalize:
        return layer.lin_l, (layer.lin_r if layer.root_weight else None), aggr
    if isinstance(layer, GraphConv):
        return layer.lin_rel, layer.lin_root, aggr
    return None


def raw_aggregate(x: Tensor, num: int, src: Tensor, dst: Tensor, aggr: str) -> Tensor:
    """The layer's aggregation of the rows of `x` over the edges src -> dst (src: rows of `x`;
    dst: in range(num)), on `x`'s device."""
    src, dst = to_device(src, x.device), to_device(dst, x.device)
    out = x.new_zeros((num,) + tuple(x.shape[1:]))
    out.index_add_(0, dst, x.index_select(0, src))
    if aggr == "mean":
        count = torch.bincount(dst, minlength=num).clamp_min(1).to(x.dtype)
        out /= count.view(-1, *([1] * (x.dim() - 1)))
    return out


class InterleaveRows(torch.autograd.Function):
    """out[first_rows] = first, out[second_rows] = second, for index sets that partition the
    rows of out: one write of every row forward, one gather per input backward. (The same
    with ``torch.cat([first, second])[order]`` copies every row twice forward and scatters the
    whole gradient with accumulation backward: 2-3x the memory traffic on the bottom layer's
    largest tensor.)"""

    @staticmethod
    def forward(ctx: Any, first: Tensor, second: Tensor, first_rows: Tensor,
                second_rows: Tensor) -> Tensor:
        num = first_rows.numel() + second_rows.numel()
        out = first.new_empty((num,) + tuple(first.shape[1:]))
        out.index_copy_(0, first_rows, first)
        out.index_copy_(0, second_rows, second.to(first.dtype))
        ctx.save_for_backward(first_rows, second_rows)
        ctx.second_dtype = second.dtype
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        first_rows, second_rows = ctx.saved_tensors
        g_first = grad.index_select(0, first_rows) if ctx.needs_input_grad[0] else None
        g_second = (grad.index_select(0, second_rows).to(ctx.second_dtype)
                    if ctx.needs_input_grad[1] else None)
        return g_first, g_second, None, None


class CachedLinearRows(torch.autograd.Function):
    """Cached rows of a layer linear in its weights, value = lin_a(a) + lin_r(r) computed with
    older weights: the forward returns the cached value, the backward gives the weights the
    exact gradient g^T a (+ g^T r, and sum(g) for the bias), which does not depend on them."""

    @staticmethod
    def forward(ctx: Any, value: Tensor, agg: Tensor, root: Tensor | None, w_a: Tensor,
                b_a: Tensor | None, w_r: Tensor | None) -> Tensor:
        ctx.save_for_backward(agg, root if root is not None else agg)
        ctx.flags = (b_a is not None, w_r is not None)
        return value.view_as(value)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        agg, root = ctx.saved_tensors
        has_bias, has_root = ctx.flags
        g = grad.reshape(grad.size(0), -1)
        gw_a = g.t().mm(agg.reshape(agg.size(0), -1).to(g.dtype))
        gb_a = g.sum(0) if has_bias else None
        gw_r = g.t().mm(root.reshape(root.size(0), -1).to(g.dtype)) if has_root else None
        return None, None, None, gw_a, gb_a, gw_r


class Refresher:
    """Computes rows for hot vertices with a weight snapshot of the live bottom layer.

    The snapshot is a private copy of the layer (eval mode: no dropout inside it; no gradient):
    `snapshot()` copies the live weights into it, in the trainer thread, between steps. A
    refresher is used by one thread at a time; the cache keeps one for the trainer (on-demand
    refreshes) and one for the background thread. `features` is where it reads the raw
    features at each refresh (`FeatureSource`: a device-resident copy when the data path has
    one, so refreshes gather on the device); `unpatched` is how it calls the snapshot (see
    `LayerCall`).
    """

    def __init__(self, live: torch.nn.Module, features: FeatureSource, hood: Neighbourhoods,
                 chunk_rows: int, aggregate: bool = False, *, unpatched: LayerCall) -> None:
        self.live = live
        self.shadow = copy.deepcopy(live).eval()
        for p in self.shadow.parameters():
            p.requires_grad_(False)
        self.features, self.hood, self.chunk_rows = features, hood, chunk_rows
        self.unpatched = unpatched
        self.pair = isinstance(live, pair_recomputable())
        self.device = next((p.device for p in live.parameters()), torch.device("cpu"))
        self.aggregate = aggregate  # store GCN aggregates of raw features, not outputs
        self.linear: str | None = None  # gradient="linear": the aggregation kept beside rows
        self.gathered = 0          # raw feature rows gathered by refreshes
        self.edges = 0             # refresh in-edges aggregated

    def snapshot(self) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.shadow.parameters(), self.live.parameters()):
                mine.copy_(theirs)
            for mine, theirs in zip(self.shadow.buffers(), self.live.buffers()):
                mine.copy_(theirs)

    def compute(self, ids: Tensor,
                degrees: BatchDegrees | None = None) -> tuple[Tensor, Tensor | None]:
        """(rows for the global vertex ids `ids` (distinct) with the snapshot's weights (GCN:
        the degrees of the batch `degrees` describes), their raw aggregates when `linear` is
        set, else None)."""
        parts, auxes = [], []
        x = self.features()
        ids = to_device(ids, self.hood.colptr.device)   # once: the draw and the graph use them
        for start in range(0, ids.numel(), self.chunk_rows):
            chunk = ids[start:start + self.chunk_rows]
            src, dst = self.hood.edges(chunk)
            if self.aggregate:
                rows, gathered = gcn_aggregate(x, chunk, src, dst, self._fill(), degrees)
                rows = to_device(rows, self.device)
            else:
                rows, aux, gathered = layer_rows(self.shadow, x, chunk, src, dst, self.pair,
                                                 self.device, degrees, self.unpatched,
                                                 self.linear)
                if aux is not None:
                    auxes.append(aux)
            self.gathered += gathered
            self.edges += src.numel()
            parts.append(rows)
        if not parts:
            return torch.empty(0), None
        aux = torch.cat(auxes) if auxes else None
        return (torch.cat(parts) if len(parts) > 1 else parts[0]), aux

    def compute_on(self, ids: Tensor, src: Tensor, dst: Tensor,
                   degrees: BatchDegrees | None = None) -> Tensor:
        """The layer's output rows for `ids` on given in-edges, computed the way this refresher
        stores them (the one-off check against a batch)."""
        x = self.features()
        if not self.aggregate:
            return layer_rows(self.shadow, x, ids, src, dst, self.pair, self.device,
                              degrees, self.unpatched)[0]
        fill = self._fill()
        agg, _ = gcn_aggregate(x, ids, src, dst, fill, degrees)
        deg = torch.bincount(dst, minlength=ids.numel()).to(x.device, x.dtype) + fill
        inner = x[ids.to(x.device)] * (fill / deg).view(-1, *([1] * (x.dim() - 1))) + agg
        with torch.no_grad():
            out = self.shadow.lin(inner.to(self.device))
            return out + self.shadow.bias if self.shadow.bias is not None else out

    def own_output(self, *args: Any) -> Any:
        """The snapshot's own output on a graph of the caller's (no gradient)."""
        with torch.no_grad():
            return self.unpatched(self.shadow, *args)

    def _fill(self) -> float:
        return 2.0 if getattr(self.shadow, "improved", False) else 1.0
