"""GINConv whose ``nn`` starts with a Linear: transform first through that Linear.

PyG computes ``out_i = nn((1 + eps) x_i + sum_{j in N(i)} x_j)``. When ``nn = rest ∘ L``
with ``L(z) = W z + b`` affine, linearity of ``W`` gives::

    L((1 + eps) x_i + sum_j x_j) = (1 + eps) (W x_i) + sum_j (W x_j) + b

so the rewrite transforms source (and destination) rows by ``W`` without the bias,
sums the narrower rows, adds ``(1 + eps) W x_i`` and ``b``, then applies ``rest`` unchanged.
``nn`` may be a Linear (``torch.nn.Linear`` or PyG's ``Linear``), a ``torch.nn.Sequential``
whose first module is one, or PyG's ``MLP`` (its first operation is ``lins[0]``; the rest
of ``MLP.forward`` -- act/norm/dropout per layer, the plain last layer -- is replayed
step for step after it).

A layer call asks for the split several times (admission, shape, forward): `_split_of` keeps it
per ``nn`` while ``nn`` still starts with the same Linear (splitting PyG's ``MLP`` was most of
the engine's per-call work on a small GIN; the tails are read live, so a module replaced after
the first Linear is honoured).
"""
from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module
from torch_geometric.nn import GINConv
from torch_geometric.nn.dense.linear import Linear as PygLinear
from torch_geometric.nn.models import MLP

from ..costmodel import Op
from ..host import transform_rows
from ..shapes import LayerShape
from .base import Call, Rule, backward_expected, linear_aggr_kind, requires_grad

__all__ = ["GINRule", "split_first_linear"]

_LINEARS = (torch.nn.Linear, PygLinear)
# what `_mlp_after_first` replays of MLP.forward (the same in PyG 2.5 to 2.8)
_MLP_ATTRIBUTES = ("lins", "norms", "act", "act_first", "supports_norm_batch", "dropout",
                   "plain_last")


def _mlp_after_first(mlp: MLP) -> Callable[[Tensor], Tensor]:
    """``MLP.forward`` (PyG 2.8, no batch / return_emb) minus the first ``lins[0]`` call."""
    def rest(x: Tensor) -> Tensor:
        for i, norm in enumerate(mlp.norms):
            if i > 0:
                x = mlp.lins[i](x)
            if mlp.act is not None and mlp.act_first:
                x = mlp.act(x)
            x = norm(x, None, None) if mlp.supports_norm_batch else norm(x)
            if mlp.act is not None and not mlp.act_first:
                x = mlp.act(x)
            x = F.dropout(x, p=mlp.dropout[i], training=mlp.training)
        if mlp.plain_last:
            if len(mlp.norms) > 0:
                x = mlp.lins[-1](x)
            x = F.dropout(x, p=mlp.dropout[-1], training=mlp.training)
        return x
    return rest


Split = tuple[Module, Callable[[Tensor], Tensor], list[Module]]


def _identity(x: Tensor) -> Tensor:
    return x


def split_first_linear(nn: Module) -> Split | str:
    """``(L, rest, bypassed)`` with ``nn(z) == rest(L(z))``, or why ``nn`` cannot be split.

    ``bypassed``: modules whose ``__call__`` the split skips (they must carry no hooks).
    ``rest`` reads ``nn``'s later modules when called.
    """
    if type(nn) in _LINEARS:
        return nn, _identity, [nn]
    if type(nn) is torch.nn.Sequential:
        first = next(iter(nn), None)
        if type(first) not in _LINEARS:
            return "nn is a Sequential that does not start with a Linear"

        def rest(x: Tensor) -> Tensor:
            for module in itertools.islice(nn, 1, None):
                x = module(x)
            return x
        return first, rest, [nn, first]
    if type(nn) is MLP:
        missing = [n for n in _MLP_ATTRIBUTES if not hasattr(nn, n)]
        if missing:
            return f"MLP has no {', '.join(missing)} (another PyG version): not split"
        if type(nn.lins[0]) not in _LINEARS:
            return "MLP's first layer is not a Linear"
        return nn.lins[0], _mlp_after_first(nn), [nn, nn.lins[0]]
    return (f"nn is a {type(nn).__name__}: only Linear, Sequential(Linear, ...) or MLP "
            "are split")


#: nn -> (its first module when split, the split); an entry holds while that module is first
_SPLITS: weakref.WeakKeyDictionary[Module, tuple[Module, Split]] = weakref.WeakKeyDictionary()


def _first_module(nn: Module) -> Module | None:
    """The module ``split_first_linear`` takes as ``L`` (a cheap read; None: no candidate)."""
    if type(nn) is torch.nn.Sequential:
        return next(iter(nn), None)
    if type(nn) is MLP:
        lins = getattr(nn, "lins", None)
        return next(iter(lins), None) if isinstance(lins, torch.nn.ModuleList) else None
    return nn


def _split_of(layer: GINConv) -> Split | str:
    """``split_first_linear(layer.nn)``, kept per ``nn`` while its first module is the same
    (a reason not to split is not kept: it is computed again)."""
    nn = layer.nn
    kept = _SPLITS.get(nn)
    if kept is not None and _first_module(nn) is kept[0]:
        return kept[1]
    split = split_first_linear(nn)
    if not isinstance(split, str):
        _SPLITS[nn] = (split[0], split)
    return split


def _tail_modules(nn: Module) -> list[Module]:
    """The modules ``nn`` applies after its first Linear, in order (for the cost model)."""
    if type(nn) is torch.nn.Sequential:
        return list(nn)[1:]
    if type(nn) is not MLP:
        return []
    tail: list[Module] = []
    for i, norm in enumerate(nn.norms):
        tail += ([nn.lins[i]] if i > 0 else []) + [norm] + ([nn.act] if nn.act is not None else [])
    if nn.plain_last and len(nn.norms) > 0:
        tail.append(nn.lins[-1])
    return tail


def _tail_ops(nn: Module, n: int, backward: bool) -> list[Op]:
    """Cost-model operations of ``nn`` after its first Linear, on ``n`` rows (the same in
    both orders): its Linears, and one elementwise pass per other module."""
    ops, width = [], _first_module(nn).weight.size(0)
    for module in _tail_modules(nn):
        if type(module) in _LINEARS:
            ops.append(Op("linear", n=n, f_in=width, f_out=module.weight.size(0),
                          backward=backward, input_grad=True))
            width = module.weight.size(0)
        elif not isinstance(module, torch.nn.Identity):
            ops.append(Op("elementwise", n=n, f_in=width, backward=backward))
    return ops


class GINRule(Rule):
    """Transform-first GINConv through the first Linear of ``nn``."""

    layer_type = GINConv
    original_order = "aggregate-first"
    rewritten_order = "transform-first"
    required_attributes = ("nn", "eps")

    def config_reason(self, layer: GINConv) -> str | None:
        split = _split_of(layer)
        return split if isinstance(split, str) else None

    def call_reason(self, layer: GINConv, call: Call) -> str | None:
        """The configuration checked again per call: an ``nn`` replaced after the layer was
        admitted may no longer start with a Linear."""
        split = _split_of(layer)
        return split if isinstance(split, str) else None

    def moved_modules(self, layer: GINConv) -> list[Module]:
        split = _split_of(layer)
        return [] if isinstance(split, str) else split[2]

    def never_pays(self, layer: GINConv) -> str | None:
        """Transform-first runs the first Linear on the n_src >= n_dst source rows, aggregates
        f_out columns instead of f_in and adds two elementwise passes: never less work when
        f_out >= f_in, unless a trained ``eps`` makes PyG's order backpropagate into the
        aggregate where the rewrite would not."""
        f_out, f_in = _split_of(layer)[0].weight.shape
        if f_out < f_in or getattr(layer.eps, "requires_grad", False):
            return None
        return f"transform-first never does less work at widths {f_in} -> {f_out}"

    def shape(self, layer: GINConv, call: Call, params_grad: bool) -> LayerShape:
        x = call["x"]
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        size = call["size"]
        first = _split_of(layer)[0]
        if size is not None and size[1] is not None:
            n_dst = int(size[1])
        else:
            n_dst = x_dst.size(0) if x_dst is not None else x_src.size(0)
        return LayerShape(n_src=x_src.size(0), n_dst=n_dst,
                          n_edges=call["edge_index"].size(1), f_in=x_src.size(-1),
                          f_out=first.weight.size(0), input_grad=requires_grad(x_src, x_dst),
                          backward=backward_expected(params_grad, x_src, x_dst))

    def ops(self, layer: GINConv, shape: LayerShape, rewritten: bool) -> list[Op]:
        s, b = shape, shape.backward
        kind = linear_aggr_kind(layer) or "agg_sum"
        if rewritten:
            ops = [Op("linear", n=s.n_src, f_in=s.f_in, f_out=s.f_out, backward=b,
                       input_grad=s.input_grad),
                    Op(kind, n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges, f_in=s.f_out,
                       backward=b, input_grad=True),
                    Op("elementwise", n=s.n_dst, f_in=s.f_out, backward=b),
                    Op("elementwise", n=s.n_dst, f_in=s.f_out, backward=b)]
        else:
            ops = [Op(kind, n_src=s.n_src, n_dst=s.n_dst, n_edges=s.n_edges, f_in=s.f_in,
                       backward=b, input_grad=s.input_grad),
                    Op("elementwise", n=s.n_dst, f_in=s.f_in, backward=b),
                    Op("linear", n=s.n_dst, f_in=s.f_in, f_out=s.f_out, backward=b,
                       # the aggregate needs a gradient only if x or a trained eps does
                       input_grad=s.input_grad or bool(getattr(layer.eps, "requires_grad",
                                                               False)))]
        return ops + _tail_ops(layer.nn, s.n_dst, b)

    def forward(self, layer: GINConv, call: Call) -> Tensor:
        first, rest, _ = _split_of(layer)
        x = call["x"]
        if isinstance(x, Tensor):
            h_src = h_dst = transform_rows(x, first.weight)
        else:
            h_src = transform_rows(x[0], first.weight)
            h_dst = None if x[1] is None else transform_rows(x[1], first.weight)
        out = layer.propagate(call["edge_index"], x=(h_src, h_dst), size=call["size"])
        if h_dst is not None:
            out = out + (1 + layer.eps) * h_dst
        if first.bias is not None:
            out = out + first.bias
        return rest(out)

    def host_reason(self, layer: GINConv, call: Call) -> str | None:
        return None

    def forward_host(self, layer: GINConv, call: Call) -> Tensor:
        return self.forward(layer, call)    # transform_rows takes deferred rows to the host
