"""What every rewrite rule shares: the rule interface and the checks that keep it exact.

A rule re-orders the linear transform ``W`` and the linear aggregation ``A`` of one PyG
layer type, using the identity ``A (X W^T) = (A X) W^T`` (aggregation is a linear map over
rows, the transform a linear map over columns, so they commute). A rule only applies when
nothing observable depends on the order:

* the layer is exactly the PyG class (a subclass may override ``forward`` or ``message``) and
  has every attribute the rule reads (``required_attributes``; another PyG version may lay
  the layer out differently);
* its aggregation is ``sum`` or ``mean`` (both linear; ``max``, ``std``, ``lstm`` ... are not);
* no parameter is still lazy, no propagate/message/aggregate/edge-update hook is registered
  (it would see the other order's tensors), explain mode is off and autocast is off (in
  reduced precision the two orders round differently, and a bias added after the aggregation
  would promote autocast's output back to float32);
* the sub-modules the rewrite calls in a different place (e.g. ``lin_l``) carry no hooks;
* per call: ``edge_index`` is a plain dense ``[2, E]`` LongTensor (a ``SparseTensor``,
  ``torch.sparse`` tensor or ``EdgeIndex`` is left to PyG).
"""
from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.nn import Module
from torch.nn.parameter import is_lazy
from torch_geometric.nn.aggr import MeanAggregation, SumAggregation
from torch_geometric.nn.conv import MessagePassing

from ...compat import pyg as compat_pyg
from ...compat import torch as compat_torch
from ..costmodel import Op
from ..shapes import LayerShape

__all__ = ["Call", "Rule", "bind_call", "hook_reason", "edge_index_reason",
           "linear_aggr_kind", "requires_grad", "backward_expected"]

#: The bound arguments of one layer call, by parameter name (defaults applied).
Call = dict[str, Any]

@functools.lru_cache(maxsize=None)
def _forward_signature(layer_type: type[MessagePassing]) -> inspect.Signature:
    return inspect.signature(layer_type.forward)


@functools.lru_cache(maxsize=None)
def _plain_parameters(layer_type: type[MessagePassing]
                      ) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """(names, defaults) of ``forward``'s parameters after ``self`` when every one of them is
    positional-or-keyword (PyG's layers); None otherwise."""
    params = list(_forward_signature(layer_type).parameters.values())[1:]
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    return (tuple(p.name for p in params),
            {p.name: p.default for p in params if p.default is not inspect.Parameter.empty})


def bind_call(layer_type: type[MessagePassing], layer: MessagePassing, args: tuple,
              kwargs: dict) -> Call:
    """``layer_type.forward``'s arguments for this call by name, defaults applied, in the
    signature's order: what ``inspect.Signature.bind`` + ``apply_defaults`` give (without
    ``self``), which it raises ``TypeError`` for. A call runs this once per layer call, so the
    common case (positional-or-keyword parameters only, the call well formed) is assembled
    directly; anything else goes to ``inspect``."""
    plain = _plain_parameters(layer_type)
    if plain is not None:
        names, defaults = plain
        free = names[len(args):]               # the parameters not given by position
        if len(args) <= len(names) and all(k in free for k in kwargs):
            given = dict(zip(names, args))
            given.update(kwargs)
            if all(n in given or n in defaults for n in names):
                return {n: given[n] if n in given else defaults[n] for n in names}
    bound = _forward_signature(layer_type).bind(layer, *args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments)
    del call["self"]
    return call


def linear_aggr_kind(layer: MessagePassing) -> str | None:
    """``"agg_sum"`` / ``"agg_mean"`` for a linear aggregation, else None."""
    module = type(getattr(layer, "aggr_module", None))
    if module is SumAggregation:
        return "agg_sum"
    if module is MeanAggregation:
        return "agg_mean"
    return None


def hook_reason(layer: MessagePassing, moved: Iterable[Module]) -> str | None:
    """Why hooks, explain mode or autocast forbid a rewrite right now; None when nothing does
    (hooks that cannot be checked forbid it too: `gnnorch.compat`)."""
    reason = compat_pyg.message_passing_hooks_reason(layer)
    if reason is not None:
        return reason
    if getattr(layer, "explain", None):
        return "explain mode is on"
    autocast = [d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
    if autocast:
        return (f"autocast is on ({', '.join(autocast)}): the other order would round in "
                f"another place in reduced precision, and its bias add would leave autocast's "
                f"dtype")
    for module in moved:
        reason = compat_torch.hooks_reason(module)
        if reason is not None:
            return reason
    return None


def edge_index_reason(edge_index: object) -> str | None:
    """None for a plain ``[2, E]`` integer tensor; else why the call is left to PyG."""
    if type(edge_index) is not Tensor:
        return f"edge_index is a {type(edge_index).__name__}: left to PyG"
    if edge_index.layout != torch.strided:
        return f"edge_index has layout {edge_index.layout}: left to PyG"
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        return f"edge_index has shape {tuple(edge_index.shape)}, expected [2, E]"
    return None


def requires_grad(*tensors: Tensor | None) -> bool:
    """True when any given tensor requires a gradient."""
    return any(t is not None and t.requires_grad for t in tensors)


def backward_expected(params_grad: bool, *inputs: Tensor | None) -> bool:
    """A backward pass will run through this call: grad mode is on and a parameter
    (``params_grad``) or an input requires a gradient."""
    return torch.is_grad_enabled() and (params_grad or requires_grad(*inputs))


class Rule(ABC):
    """An exact alternative order for one PyG layer type.

    ``original_order`` / ``rewritten_order`` name the two orders ("aggregate-first",
    "transform-first"); ``forward`` computes the rewritten order and must equal the layer's
    own forward (values and gradients) whenever ``applicable`` and ``bind`` accept.
    """

    layer_type: ClassVar[type[MessagePassing]]
    original_order: ClassVar[str]
    rewritten_order: ClassVar[str]
    #: attributes of the layer the rule reads (beyond MessagePassing's own)
    required_attributes: ClassVar[tuple[str, ...]] = ()

    def applicable(self, layer: MessagePassing) -> str | None:
        """None when the layer may be rewritten now, else the reason it is left alone."""
        return self.static_reason(layer) or self.dynamic_reason(layer)

    def static_reason(self, layer: MessagePassing) -> str | None:
        """The part of :meth:`applicable` fixed once the layer is built and initialised:
        class, aggregation, configuration, lazy parameters."""
        if type(layer) is not self.layer_type:
            return f"{type(layer).__name__} subclasses {self.layer_type.__name__}: not rewritten"
        missing = compat_pyg.missing_attributes(layer, self.attributes(layer))
        if missing is not None:
            return missing
        if linear_aggr_kind(layer) is None:
            return f"aggregation {layer.aggr!r} is not linear (needs sum or mean)"
        if any(is_lazy(p) for p in layer.parameters()):
            return "parameters are not initialised yet (lazy)"
        return self.config_reason(layer)

    def attributes(self, layer: MessagePassing) -> tuple[str, ...]:
        """The layer attributes this rule reads for this layer (``required_attributes`` by
        default; a rule whose needs depend on the configuration extends it)."""
        return self.required_attributes

    def dynamic_reason(self, layer: MessagePassing) -> str | None:
        """The part of :meth:`applicable` that may change between calls: hooks, explain mode,
        autocast."""
        return hook_reason(layer, self.moved_modules(layer))

    def bind(self, layer: MessagePassing, args: tuple, kwargs: dict) -> Call | str:
        """The call's arguments by name, or the reason this call is left to PyG."""
        try:
            call = bind_call(self.layer_type, layer, args, kwargs)
        except TypeError as error:
            return f"arguments do not match {self.layer_type.__name__}.forward: {error}"
        return (edge_index_reason(call["edge_index"]) or _dense_reason(call.get("x"))
                or self.call_reason(layer, call) or call)

    def call_reason(self, layer: MessagePassing, call: Call) -> str | None:
        """Per-call reason to leave this call to PyG (beyond edge_index); None by default."""
        return None

    @abstractmethod
    def config_reason(self, layer: MessagePassing) -> str | None:
        """Reason the layer's configuration forbids the rewrite; None when it allows it."""

    @abstractmethod
    def moved_modules(self, layer: MessagePassing) -> list[Module]:
        """Sub-modules whose call the rewrite bypasses or moves (they must carry no hooks)."""

    def never_pays(self, layer: MessagePassing) -> str | None:
        """Why the rewritten order does at least as much work of every kind as PyG's
        (`costmodel.dominated`) at every call whose source rows are at least its destination
        rows -- every call on a sampled or whole graph -- at this layer's widths; None when a
        call's shape decides (the default). The engine reads it once, when it first admits
        the layer, and then runs such a layer's calls in PyG's order without binding or
        measuring them."""
        return None

    @abstractmethod
    def shape(self, layer: MessagePassing, call: Call, params_grad: bool) -> LayerShape:
        """Sizes of this call; ``params_grad``: some parameter of the layer needs a gradient."""

    @abstractmethod
    def ops(self, layer: MessagePassing, shape: LayerShape, rewritten: bool) -> list[Op]:
        """The operations either order runs, for the cost model."""

    @abstractmethod
    def forward(self, layer: MessagePassing, call: Call) -> Any:
        """The rewritten order; returns what the layer's forward returns."""

    def host_reason(self, layer: MessagePassing, call: Call) -> str | None:
        """Why this call cannot transform its deferred input rows on the host
        (:mod:`gnnorch.rewrite.host`); None when :meth:`forward_host` may run it."""
        return f"{type(layer).__name__} has no transform-first order"

    def forward_host(self, layer: MessagePassing, call: Call) -> Any:
        """The transform-first order with the input rows' transform taken on the host
        (``transform_rows``); must equal the layer's forward like :meth:`forward`."""
        raise NotImplementedError(self.host_reason(layer, call))


def _dense_reason(x: Any) -> str | None:
    """Rewritten orders use dense (strided) kernels: sparse node features (PyG's GCNConv takes
    a sparse COO x through its Linear) are left to PyG's own order."""
    parts = x if isinstance(x, (tuple, list)) else (x,)
    for part in parts:
        if isinstance(part, torch.Tensor) and part.layout != torch.strided:
            return f"x has layout {part.layout} (rewrites need dense features)"
    return None
