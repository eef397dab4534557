"""Modules whose output for a vertex depends on other vertices' rows of the same tensor.

Trimming leaves the rows a layer does not need at zero (and the model output's non-seed rows at
NaN); an operation that mixes rows across the batch would then see different inputs, so a model
containing one is left untrimmed. The module types below are detected statically;
`gnnorch.intercept.layers` also checks each model once by comparing trimmed and untrimmed seed
outputs, which catches functional operations (e.g. global pooling written as `x.mean(0)`).
"""
from __future__ import annotations

import torch

from ..compat import torch as compat_torch


def _torch_mixing() -> list[tuple[type, bool]]:
    """(module type, whether it mixes rows only in training mode) for torch's own modules."""
    return ([(cls, True) for cls in compat_torch.batch_norm_types()]
            + [(cls, False) for cls in compat_torch.instance_norm_types()]
            + [(torch.nn.MultiheadAttention, False)])


def _pyg_mixing() -> list[tuple[type, bool]]:
    from torch_geometric import nn as pyg_nn

    found: list[tuple[type, bool]] = []
    for name, training_only in (("BatchNorm", True), ("GraphNorm", False), ("PairNorm", False),
                                ("DiffGroupNorm", True), ("InstanceNorm", False),
                                ("MessageNorm", False), ("HeteroBatchNorm", True)):
        cls = getattr(pyg_nn, name, None)
        if isinstance(cls, type):
            found.append((cls, training_only))
    layer_norm = getattr(pyg_nn, "LayerNorm", None)
    if isinstance(layer_norm, type):
        found.append((layer_norm, False))  # mode="graph" mixes rows; checked below
    aggregation = getattr(pyg_nn, "Aggregation", None)
    if isinstance(aggregation, type):
        found.append((aggregation, False))  # global pooling modules
    return found


def _is_kind(module: torch.nn.Module, cls: type) -> bool:
    """Whether `module` is a `cls`, or was one before ``torch.jit.script`` compiled it: a
    scripted model's submodules are all ``RecursiveScriptModule``s, each naming the class it
    was scripted from in ``original_name``, matched against the names of `cls` and of its
    subclasses (a user's class that shares one of those names counts as mixing: the safe
    side)."""
    if isinstance(module, cls):
        return True
    return (isinstance(module, torch.jit.ScriptModule)
            and getattr(module, "original_name", None) in _names(cls))


def _names(cls: type) -> set[str]:
    """The names of `cls` and of every subclass of it defined so far."""
    seen, todo = set(), [cls]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(current.__subclasses__())
    return {c.__name__ for c in seen}


def _mixes(module: torch.nn.Module, cls: type, training_only: bool, any_mode: bool) -> bool:
    if not _is_kind(module, cls):
        return False
    if cls.__name__ == "LayerNorm" and cls.__module__.startswith("torch_geometric"):
        return getattr(module, "mode", "graph") == "graph"
    if cls.__name__ == "MessageNorm":
        return False  # normalises per vertex: row-local
    if training_only and not module.training and not any_mode:
        # BatchNorm in eval mode uses running statistics unless told otherwise
        return bool(getattr(module, "track_running_stats", True)) is False
    return True


def batch_mixing_modules(root: torch.nn.Module, any_mode: bool = False) -> list[str]:
    """Qualified names (with types) of submodules of `root` that mix rows across the batch in
    their current mode (`any_mode`: in training or eval mode, e.g. BatchNorm always counts).

    Aggregation modules that are part of a MessagePassing layer are row-local per destination
    and not listed; any other module inside a layer is, like one outside: a layer's own
    normalisation runs over the rows the layer computes, which trimming makes fewer (e.g.
    `GENConv`'s MLP with `norm="batch"` or `"layer"`, a `GINConv` whose `nn` holds a
    `BatchNorm1d`: batch statistics over other rows)."""
    from torch_geometric.nn import MessagePassing
    from torch_geometric.nn.aggr import Aggregation

    kinds = _torch_mixing() + _pyg_mixing()
    layer_aggregations = {id(m) for layer in root.modules() if isinstance(layer, MessagePassing)
                          for m in layer.modules() if isinstance(m, Aggregation)}
    found = []
    for name, module in root.named_modules():
        if id(module) in layer_aggregations:
            continue
        if any(_mixes(module, cls, training_only, any_mode) for cls, training_only in kinds):
            found.append(f"{name or '<model>'} ({_class_name(module)})")
    return found


def batch_statistics_modules(root: torch.nn.Module) -> list[str]:
    """Qualified names (with types) of submodules of `root` that normalise with statistics of
    the whole batch in training mode (BatchNorm and its kin), whatever their mode now. Such a
    model trained on p shards of a batch is not the model trained on the batch: each shard's
    statistics differ from the batch's (`intercept.loader` keeps graph-level epochs whole for
    it). Per-graph normalisation (GraphNorm, InstanceNorm, LayerNorm) is not listed."""
    kinds = [(cls, True) for cls, training_only in _torch_mixing() + _pyg_mixing()
             if training_only]
    return [f"{name or '<model>'} ({_class_name(module)})"
            for name, module in root.named_modules()
            if any(_mixes(module, cls, True, True) for cls, _ in kinds)]


def _class_name(module: torch.nn.Module) -> str:
    """The module's class name; a scripted module's, the class it was scripted from."""
    if isinstance(module, torch.jit.ScriptModule):
        return str(getattr(module, "original_name", type(module).__name__))
    return type(module).__name__
