"""One trimmed layer call: layer l of K on a sampled batch, computing only the rows it must.

Invariant (`gnnorch.trim.hops`): with bounds (num_src, num_dst) for layer l, output rows
[0, num_dst) computed from input rows [0, num_src) and the edges whose destination is below
num_dst equal those rows of the untrimmed call. So the call keeps exactly those edges (and the
edge-aligned tensors that go with them: weights, edge features; in a batch laid out by the
sampler, whose edges come hop by hop, those edges are a prefix: `LayerBounds.num_edges`),
hands a bipartite (x_src, x_dst) pair to layers that accept one (`layer_types.pair_capable`),
else the first num_src rows, and returns rows [0, num_dst): compact, or zero-padded to one row
per batch vertex (zeros, not NaN: rows nobody reads must not poison gradients through row-wise
ops).

GCNConv normalises by degrees in the whole sampled graph, so its symmetric normalisation is
computed once per batch on the untrimmed edges (`BatchGraph.gcn_norm`), trimmed with the
edges, and the layer runs with `normalize=False` for the call.
"""
from __future__ import annotations

from typing import Any, Callable

import torch.nn.functional as F
from torch import Tensor

from .hetero import SampledGraph
from .hops import LayerBounds
from .layer_types import pair_capable


def trimmable(layer: Any, kwargs: dict, hetero: bool = False) -> bool:
    """Whether this call of `layer` may be trimmed: messages flow source to target, no attention
    weights are returned (they would be per kept edge) and no cached GCN normalisation (it
    belongs to another graph). On a HeteroData batch a normalising GCN layer runs untrimmed:
    its degrees would be those of one edge type's graph, which `BatchGraph.gcn_norm` does
    not keep."""
    if getattr(layer, "flow", "source_to_target") != "source_to_target":
        return False
    if kwargs.get("return_attention_weights"):
        return False
    from torch_geometric.nn import GCNConv

    return not (isinstance(layer, GCNConv) and (layer.cached or hetero and layer.normalize))


def trimmed_call(call: Callable[..., Any], layer: Any, args: tuple, kwargs: dict, x: Any,
                 edge_index: Tensor, batch: SampledGraph, bounds: LayerBounds | None,
                 compact: bool, *, rows: int) -> Tensor:
    """`call(*args, **kwargs)` (the layer's call further down the chain) on rows
    [0, bounds.num_dst) only, of `rows` destination rows (padded back to them unless
    `compact`). `x` is one tensor or a bipartite (source, destination) pair (a HeteroData
    batch's edge type between two node types). bounds None: every row, but with GCN's
    normalisation taken from the batch (`BatchGraph.gcn_norm`, which counts pruned in-edges
    when the cache set `extra_degree`)."""
    from torch_geometric.nn import GCNConv

    if bounds is None:
        bounds = LayerBounds(num_src=rows, num_dst=rows)
    num_edges = edge_index.size(1)
    rest_args = list(args[2:])
    rest_kwargs = {k: v for k, v in kwargs.items() if k not in ("x", "edge_index")}
    gcn = isinstance(layer, GCNConv) and layer.normalize
    if gcn:  # normalise on the untrimmed batch graph, then trim (a Data batch's only)
        weight = rest_args.pop(0) if rest_args else rest_kwargs.pop("edge_weight", None)
        edge_index, weight = batch.gcn_norm(edge_index, weight, layer.improved,
                                            layer.add_self_loops, layer.flow, x.dtype)
        rest_kwargs["edge_weight"] = weight
        num_edges = edge_index.size(1)
    if not gcn and batch.edges_grouped and bounds.num_edges is not None:
        # the edges into rows [0, num_dst) are a prefix: views, no mask (on a GPU: no kernel
        # and no wait for the device to count the mask)
        keep: Tensor | slice = slice(0, bounds.num_edges)
        edge_index = edge_index[:, keep]
    else:
        keep = edge_index[1] < bounds.num_dst
        edge_index = edge_index[:, keep]
    rest_args = [_keep_edges(v, keep, num_edges) for v in rest_args]
    rest_kwargs = {k: _keep_edges(v, keep, num_edges) for k, v in rest_kwargs.items()}
    if isinstance(x, tuple):
        inputs: Any = (_rows(x[0], bounds.num_src),
                       None if x[1] is None else _rows(x[1], bounds.num_dst))
    elif isinstance(layer, _pair_types()):
        inputs = (_rows(x, bounds.num_src), _rows(x, bounds.num_dst))
    else:
        inputs = _rows(x, bounds.num_src)
    if gcn:
        layer.normalize = False
    try:
        out = call(inputs, edge_index, *rest_args, **rest_kwargs)
    finally:
        if gcn:
            layer.normalize = True
    out = _rows(out, bounds.num_dst)
    if compact:
        return out
    pad = [0, 0] * (out.dim() - 1) + [0, rows - bounds.num_dst]
    return F.pad(out, pad)


def _rows(tensor: Tensor, n: int) -> Tensor:
    """Rows [0, n) of `tensor`: itself when it has exactly n (in a compact forward each layer
    receives the rows it reads), so that no slice is recorded whose backward (on a GPU: a
    zero fill and a copy) would only hand the gradient through."""
    return tensor if tensor.size(0) == n else tensor[:n]


_PAIR: list[tuple[type, ...]] = []


def _pair_types() -> tuple[type, ...]:
    if not _PAIR:  # once per process: the installed PyG's classes do not change
        _PAIR.append(pair_capable())
    return _PAIR[0]


def _keep_edges(value: Any, keep: Tensor | slice, num_edges: int) -> Any:
    """Edge-aligned tensors (edge weights, edge features) follow the kept edges (a mask, or
    the prefix slice of a batch whose edges are grouped by hop)."""
    if isinstance(value, Tensor) and value.dim() >= 1 and value.size(0) == num_edges:
        return value[keep]
    return value
