"""GCNConv: aggregate first, transform the aggregated features.

PyG transforms first: ``out = Â (X W^T) + b`` with ``Â`` the (normalised) adjacency that
``gcn_norm`` builds (self-loops, ``improved``, ``edge_weight``, the ``cached`` copy). ``Â``
acts on rows and ``W`` on columns, so ``Â (X W^T) = (Â X) W^T``; the rewrite computes::

    out = (Â X) W^T + b

with ``Â`` built exactly as PyG builds it (same ``gcn_norm`` call, same cache), which is
cheaper when ``f_in < f_out`` (the sparse product runs at the narrower width). ``lin`` has
no bias in GCNConv, so there is no bias to move. GCNConv takes a single feature Tensor.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from ...compat import pyg as compat_pyg
from ..costmodel import Op
from ..host import transform_rows
from ..shapes import LayerShape
from .base import Call, Rule, backward_expected, linear_aggr_kind, requires_grad

__all__ = ["GCNRule"]


class GCNRule(Rule):
    """Aggregate-first GCNConv."""

    layer_type = GCNConv
    original_order = "transform-first"
    rewritten_order = "aggregate-first"
    required_attributes = ("lin", "bias", "normalize", "cached", "improved", "add_self_loops",
                           "flow", "node_dim", "out_channels")

    def config_reason(self, layer: GCNConv) -> str | None:
        # the rewrite must share the layer's normalisation cache (a private attribute)
        return compat_pyg.gcn_cache_reason(layer) if layer.normalize else None

    def moved_modules(self, layer: GCNConv) -> list[Module]:
        return [layer.lin]

    def call_reason(self, layer: GCNConv, call: Call) -> str | None:
        if not isinstance(call["x"], Tensor):
            return "x is not a Tensor (GCNConv has no bipartite form)"
        return None

    def shape(self, layer: GCNConv, call: Call, params_grad: bool) -> LayerShape:
        x, edge_index = call["x"], call["edge_index"]
        n = x.size(layer.node_dim)
        n_edges = edge_index.size(1) + (n if layer.add_self_loops else 0)
        return LayerShape(n_src=n, n_dst=n, n_edges=n_edges, f_in=x.size(-1),
                          f_out=layer.out_channels, input_grad=requires_grad(x),
                          backward=backward_expected(params_grad, x, call["edge_weight"]),
                          weight_grad=requires_grad(call["edge_weight"]))

    def ops(self, layer: GCNConv, shape: LayerShape, rewritten: bool) -> list[Op]:
        s, b = shape, shape.backward
        weighted = layer.normalize
        kind = "agg_weighted" if weighted else (linear_aggr_kind(layer) or "agg_sum")

        def aggregate(width: int, grad: bool) -> Op:
            return Op(kind, n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges, f_in=width,
                      backward=b, input_grad=grad)

        # aggregate-first: the transform's input (Â X) needs a gradient where X or Â's
        # weights do; transform-first: where X does
        transform = Op("linear", n=s.n_src, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=s.input_grad or (rewritten and s.weight_grad))
        order = ([aggregate(s.f_in, s.input_grad), transform] if rewritten
                 else [transform, aggregate(s.f_out, True)])
        return [*order, Op("elementwise", n=s.n_dst, f_in=s.f_out, backward=b)]

    def forward(self, layer: GCNConv, call: Call) -> Tensor:
        x = call["x"]
        edge_index, edge_weight = self._normalised(layer, call)
        out = layer.propagate(edge_index, x=x, edge_weight=edge_weight)
        out = F.linear(out, layer.lin.weight)
        if layer.bias is not None:
            out = out + layer.bias
        return out

    def host_reason(self, layer: GCNConv, call: Call) -> str | None:
        return None

    def forward_host(self, layer: GCNConv, call: Call) -> Tensor:
        """PyG's own order, ``Â (X W^T) + b``, with ``X W^T`` taken on the host."""
        edge_index, edge_weight = self._normalised(layer, call)
        h = transform_rows(call["x"], layer.lin.weight)
        out = layer.propagate(edge_index, x=h, edge_weight=edge_weight)
        if layer.bias is not None:
            out = out + layer.bias
        return out

    @staticmethod
    def _normalised(layer: GCNConv, call: Call) -> tuple[Tensor, Tensor | None]:
        """``Â``'s edges and weights exactly as GCNConv builds them (same cache)."""
        x, edge_index, edge_weight = call["x"], call["edge_index"], call["edge_weight"]
        if layer.normalize:
            cache = compat_pyg.gcn_cached(layer)
            if cache is None:
                edge_index, edge_weight = gcn_norm(
                    edge_index, edge_weight, x.size(layer.node_dim), layer.improved,
                    layer.add_self_loops, layer.flow, x.dtype)
                if layer.cached:
                    compat_pyg.set_gcn_cached(layer, (edge_index, edge_weight))
            else:
                edge_index, edge_weight = cache[0], cache[1]
        return edge_index, edge_weight
