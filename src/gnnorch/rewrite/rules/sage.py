"""SAGEConv (``mean`` / ``sum``): transform first, aggregate the narrower result.

PyG aggregates first: ``out_i = W_l agg_{j in N(i)} x_j + b_l [+ W_r x_i]``. Because ``agg``
is linear, ``W_l agg_j x_j = agg_j (W_l x_j)``, so the rewrite computes ``h = x_src W_l^T``
*without* the bias, aggregates ``h``, and adds ``b_l`` afterwards::

    out_i = agg_{j in N(i)} (W_l x_j) + b_l [+ W_r x_i]

Adding the bias after the aggregation keeps zero-in-degree vertices exact: PyG gives them
``W_l 0 + b_l = b_l``, and so does the rewrite (the aggregation of nothing is 0). With
``project=True`` the projection ``relu(lin(x_src))`` is applied first, as PyG does, and the
rewrite starts from its output; ``root_weight`` and ``normalize`` are unchanged.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module
from torch_geometric.nn import SAGEConv

from ...compat import torch as compat_torch
from ..costmodel import Op
from ..shapes import LayerShape
from ..host import DeferredFeatures, transform_rows
from .base import Call, Rule, backward_expected, linear_aggr_kind, requires_grad

__all__ = ["SAGERule"]


def _pair(x: Tensor | tuple) -> tuple[Tensor, Tensor | None]:
    return (x, x) if isinstance(x, Tensor) else (x[0], x[1])


class SAGERule(Rule):
    """Transform-first SAGEConv (sum or mean aggregation)."""

    layer_type = SAGEConv
    original_order = "aggregate-first"
    rewritten_order = "transform-first"
    required_attributes = ("lin_l", "project", "normalize", "root_weight", "out_channels")

    def attributes(self, layer: SAGEConv) -> tuple[str, ...]:
        return self.required_attributes + (("lin_r",) if getattr(layer, "root_weight", True)
                                           else ())

    def config_reason(self, layer: SAGEConv) -> str | None:
        return None

    def moved_modules(self, layer: SAGEConv) -> list[Module]:
        return [layer.lin_l]

    def never_pays(self, layer: SAGEConv) -> str | None:
        """Transform-first runs ``lin_l`` on the n_src >= n_dst source rows, aggregates f_out
        columns instead of f_in (and backpropagates into them) and adds an elementwise pass:
        never less work when f_out >= f_in."""
        f_out, f_in = layer.lin_l.weight.shape
        if f_out < f_in:
            return None
        return f"transform-first never does less work at widths {f_in} -> {f_out}"

    def shape(self, layer: SAGEConv, call: Call, params_grad: bool) -> LayerShape:
        x_src, x_dst = _pair(call["x"])
        size = call["size"]
        n_dst = _n_dst(x_dst, size, call["edge_index"])
        grad_in = requires_grad(x_src) or (layer.project and backward_expected(params_grad))
        return LayerShape(n_src=x_src.size(0), n_dst=n_dst,
                          n_edges=call["edge_index"].size(1), f_in=x_src.size(-1),
                          f_out=layer.out_channels, input_grad=bool(grad_in),
                          backward=backward_expected(params_grad, x_src, x_dst))

    def ops(self, layer: SAGEConv, shape: LayerShape, rewritten: bool) -> list[Op]:
        s, b = shape, shape.backward
        aggr = linear_aggr_kind(layer) or "agg_sum"
        ops: list[Op] = []
        if layer.project:
            ops += [Op("linear", n=s.n_src, f_in=s.f_in, f_out=s.f_in, backward=b,
                       input_grad=s.input_grad),
                    Op("elementwise", n=s.n_src, f_in=s.f_in, backward=b)]
        if rewritten:
            ops += [Op("linear", n=s.n_src, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=s.input_grad),
                    Op(aggr, n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges, f_in=s.f_out,
                       backward=b, input_grad=True),
                    Op("elementwise", n=s.n_dst, f_in=s.f_out, backward=b)]
        else:
            ops += [Op(aggr, n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges, f_in=s.f_in,
                       backward=b, input_grad=s.input_grad),
                    # the aggregate needs a gradient only when x does
                    Op("linear", n=s.n_dst, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=s.input_grad)]
        if layer.root_weight:
            ops += [Op("linear", n=s.n_dst, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=s.input_grad),
                    Op("elementwise", n=s.n_dst, f_in=s.f_out, backward=b)]
        return ops

    def forward(self, layer: SAGEConv, call: Call) -> Tensor:
        x = _pair(call["x"])
        if layer.project and hasattr(layer, "lin"):
            x = (layer.lin(x[0]).relu(), x[1])
        h = transform_rows(x[0], layer.lin_l.weight)
        out = layer.propagate(call["edge_index"], x=(h, x[1]), size=call["size"])
        if layer.lin_l.bias is not None:
            out = out + layer.lin_l.bias
        x_r = x[1]
        if layer.root_weight and x_r is not None:
            if isinstance(x_r, DeferredFeatures):     # host path: lin_r's rows on the host too
                out = out + transform_rows(x_r, layer.lin_r.weight)
                if layer.lin_r.bias is not None:
                    out = out + layer.lin_r.bias
            else:
                out = out + layer.lin_r(x_r)
        if layer.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out


    def host_reason(self, layer: SAGEConv, call: Call) -> str | None:
        if layer.project:
            return "project=True transforms the input rows with a ReLU first"
        if layer.root_weight:
            hooked = compat_torch.hooks_reason(layer.lin_r)
            if hooked is not None:
                return f"lin_r: {hooked}"
        return None

    def forward_host(self, layer: SAGEConv, call: Call) -> Tensor:
        return self.forward(layer, call)    # transform_rows takes deferred rows to the host


def _n_dst(x_dst: Tensor | None, size: tuple | None, edge_index: Tensor) -> int:
    """Rows of the output: ``size[1]``, else ``x_dst``'s rows, else max target index + 1."""
    if size is not None and size[1] is not None:
        return int(size[1])
    if x_dst is not None:
        return x_dst.size(0)
    return int(edge_index[1].max()) + 1 if edge_index.numel() else 0


