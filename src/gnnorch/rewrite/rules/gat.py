"""GATConv with one head: aggregate raw features with the attention weights, then transform.

PyG transforms first: ``h_j = W_s x_j``, logits ``e_ij = LeakyReLU(<h_j, a_s> + <W_d x_i, a_d>
[+ <W_e e_ij, a_e>])``, ``alpha = dropout(softmax_i(e))``, ``out_i = sum_j alpha_ij h_j [+ res]
+ b``. Two identities move ``W_s`` behind the aggregation:

    <W x, a> = <x, W^T a>                  (logits in the input space, one mat-vec)
    sum_j alpha_ij (W_s x_j) = W_s (sum_j alpha_ij x_j)

so the rewrite computes ``v_s = W_s^T a_s`` and ``v_d = W_d^T a_d``, the logits
``x_j . v_s + x_i . v_d``, the attention through the layer's own ``edge_updater`` (same
self-loops, ``fill_value``, edge features, negative slope, softmax and dropout), aggregates
the raw ``x_j`` with ``alpha``, and applies ``W_s`` to the ``n_dst`` aggregated rows. It pays
when ``f_in < f_out`` or ``n_src >> n_dst``.

Attention dropout stays exact even in training: the rewrite calls ``F.dropout`` on an
attention tensor of the same shape at the same point of the random stream, so it draws
the same mask. Only ``heads == 1`` is rewritten (several heads would aggregate ``heads``
copies of the raw features). ``return_attention_weights`` is honoured for a Tensor
``edge_index``.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module
from torch_geometric.nn import GATConv
from torch_geometric.utils import add_self_loops, remove_self_loops

from ...compat import pyg as compat_pyg
from ..costmodel import Op
from ..shapes import LayerShape
from .base import Call, Rule, backward_expected, requires_grad

__all__ = ["GATRule"]


def _lins(layer: GATConv) -> tuple[Module, Module]:
    """The source and destination transforms (one shared ``lin`` or ``lin_src``/``lin_dst``)."""
    if layer.lin is not None:
        return layer.lin, layer.lin
    return layer.lin_src, layer.lin_dst


class GATRule(Rule):
    """Aggregate-first single-head GATConv."""

    layer_type = GATConv
    original_order = "transform-first"
    rewritten_order = "aggregate-first"
    required_attributes = ("heads", "lin", "lin_src", "lin_dst", "att_src", "att_dst",
                           "add_self_loops", "fill_value", "bias", "out_channels")

    def attributes(self, layer: GATConv) -> tuple[str, ...]:
        # PyG >= 2.6 may add a residual (`res`); a layer of such a version without it is
        # laid out in a way the rule does not know
        return self.required_attributes + (("res",) if compat_pyg.gat_has_residual() else ())

    def config_reason(self, layer: GATConv) -> str | None:
        if layer.heads != 1:
            return f"GATConv with heads={layer.heads}: only one head is rewritten"
        return None

    def call_reason(self, layer: GATConv, call: Call) -> str | None:
        if call["return_attention_weights"] is False:  # PyG < 2.8 returns them for False too
            return "return_attention_weights=False: PyG versions differ on what it returns"
        return None

    def moved_modules(self, layer: GATConv) -> list[Module]:
        return list(dict.fromkeys(_lins(layer)))

    def shape(self, layer: GATConv, call: Call, params_grad: bool) -> LayerShape:
        x = call["x"]
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        size = call["size"]
        if size is not None:
            n_dst = int(size[1])
        else:
            n_dst = x_dst.size(0) if x_dst is not None else x_src.size(0)
        n_edges = call["edge_index"].size(1)
        if layer.add_self_loops:
            n_edges += min(x_src.size(0), n_dst)
        return LayerShape(n_src=x_src.size(0), n_dst=n_dst, n_edges=n_edges,
                          f_in=x_src.size(-1), f_out=layer.out_channels,
                          input_grad=requires_grad(x_src, x_dst),
                          backward=backward_expected(params_grad, x_src, x_dst))

    def ops(self, layer: GATConv, shape: LayerShape, rewritten: bool) -> list[Op]:
        s, b = shape, shape.backward
        ops = [Op("edge_softmax", n_dst=s.n_dst, n_edges=s.n_edges, backward=b),
               Op("elementwise", n=s.n_dst, f_in=s.f_out, backward=b)]
        if rewritten:
            ops += [Op("linear", n=s.n_src, f_in=s.f_in, f_out=1, backward=b,
                       input_grad=s.input_grad),
                    Op("agg_weighted", n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges,
                       f_in=s.f_in, backward=b, input_grad=s.input_grad, weight_grad=True),
                    Op("linear", n=s.n_dst, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=True)]
        else:
            ops += [Op("linear", n=s.n_src, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=s.input_grad),
                    Op("elementwise", n=s.n_src, f_in=s.f_out, backward=b),
                    Op("agg_weighted", n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges,
                       f_in=s.f_out, backward=b, input_grad=True, weight_grad=True)]
        return ops

    def forward(self, layer: GATConv, call: Call) -> Tensor | tuple:
        x, edge_index, edge_attr, size = (call["x"], call["edge_index"], call["edge_attr"],
                                          call["size"])
        lin_src, lin_dst = _lins(layer)
        residual = layer.res if compat_pyg.gat_has_residual() else None  # PyG 2.5: none
        res: Tensor | None = None
        if isinstance(x, Tensor):
            if residual is not None:
                res = residual(x)
            x_src = x_dst = x
        else:
            x_src, x_dst = x
            if x_dst is not None and residual is not None:
                res = residual(x_dst)
        # <W x, a> = <x, W^T a>: attention logits in the input space.
        v_src = layer.att_src.view(1, -1) @ lin_src.weight
        alpha_src = x_src @ v_src.view(-1, 1)
        alpha_dst = None
        if x_dst is not None:
            v_dst = layer.att_dst.view(1, -1) @ lin_dst.weight
            alpha_dst = x_dst @ v_dst.view(-1, 1)
        if layer.add_self_loops:
            num_nodes = x_src.size(0)
            if x_dst is not None:
                num_nodes = min(num_nodes, x_dst.size(0))
            num_nodes = min(size) if size is not None else num_nodes
            edge_index, edge_attr = remove_self_loops(edge_index, edge_attr)
            edge_index, edge_attr = add_self_loops(edge_index, edge_attr,
                                                   fill_value=layer.fill_value,
                                                   num_nodes=num_nodes)
        alpha = layer.edge_updater(edge_index, alpha=(alpha_src, alpha_dst),
                                   edge_attr=edge_attr, size=size)
        raw = (x_src.unsqueeze(1), None if x_dst is None else x_dst.unsqueeze(1))
        out = layer.propagate(edge_index, x=raw, alpha=alpha, size=size)
        # sum_j alpha_ij (W x_j) = W sum_j alpha_ij x_j; one head: concat and mean are views.
        out = F.linear(out.squeeze(1), lin_src.weight)
        if res is not None:
            out = out + res
        if layer.bias is not None:
            out = out + layer.bias
        if call["return_attention_weights"]:
            return out, (edge_index, alpha)
        return out
