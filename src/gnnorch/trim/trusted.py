"""Models whose trimming is exact by construction, so the one-off check can be skipped.

The one-off check (`trim.verify`) runs one untrimmed forward of the first batch as a
reference: on large sampled batches it costs about as much as a vanilla forward (seconds at
millions of vertices) and sets the run's peak memory. For a closed set of PyG models the
answer is known in advance, because every piece of them is row-local and gnnorch's trimmed
call of every layer type in the set is tested equal to PyG's untrimmed call, forward and
backward (`tests/test_trim.py`):

* the model's class is exactly one of PyG's `GraphSAGE`, `GCN`, `GIN`, `GAT` with
  `BasicGNN.forward` (no subclass, no overridden forward);
* every sub-module is one of: the conv layers `SAGEConv`, `GCNConv` (not `cached`), `GINConv`,
  `GATConv` (no `edge_dim`), exactly those classes; PyG's `MLP` without normalisation and
  `Linear`; torch's `Linear`, `Dropout`, `Identity`, `ModuleList` and activation modules;
  PyG's basic aggregations (sum, mean, max, min); `JumpingKnowledge` in mode "cat" or "max";
  PyG's `TrimToLayer` (unused unless hop counts are passed, which the call check excludes);
  activations (`act`) that are torch activation modules, not arbitrary callables;
* the call passes only `x` and `edge_index` (no edge weights or features, batch vector,
  batch size or hop counts).

Anything else gets the one-off check. Compact trimming (no padding) is exact for these models
without JumpingKnowledge; with it they are trimmed padded.
"""
from __future__ import annotations

import functools

import torch

from ..compat import pyg as compat_pyg

__all__ = ["trusted_model", "trusted_trimming"]


@functools.lru_cache(maxsize=None)
def _types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    from torch_geometric.nn import GAT, GCN, GIN, MLP, GATConv, GCNConv, GINConv, GraphSAGE
    from torch_geometric.nn import SAGEConv
    from torch_geometric.nn.aggr import MaxAggregation, MeanAggregation, MinAggregation
    from torch_geometric.nn.aggr import SumAggregation
    from torch_geometric.nn.dense.linear import Linear as PyGLinear
    from torch_geometric.nn.models import JumpingKnowledge

    models = (GraphSAGE, GCN, GIN, GAT)
    modules = (SAGEConv, GCNConv, GINConv, GATConv, MLP, PyGLinear, torch.nn.Linear,
               torch.nn.Dropout, torch.nn.Identity, torch.nn.ModuleList, SumAggregation,
               MeanAggregation, MaxAggregation, MinAggregation, JumpingKnowledge)
    trim = compat_pyg.trim_to_layer_type()   # unrecognised: BasicGNN models are not trusted
    return models, modules + ((trim,) if trim is not None else ())


def _module_ok(module: torch.nn.Module, models: tuple, modules: tuple) -> str | None:
    kind = type(module)
    act = getattr(module, "act", None)  # BasicGNN / MLP keep a resolved activation here
    if act is not None and not (isinstance(act, torch.nn.Module)
                                and type(act).__module__ == "torch.nn.modules.activation"):
        return f"activation {act!r} is not one of torch's activation modules"
    if kind in models:
        return None
    if kind.__module__ == "torch.nn.modules.activation":
        return None
    if kind not in modules:
        return f"{kind.__name__} is not a known row-local module"
    name = kind.__name__
    if name == "GCNConv" and module.cached:
        return "GCNConv(cached=True)"
    if name == "GATConv" and module.lin_edge is not None:
        return "GATConv with edge features"
    if name == "MLP" and any(not isinstance(n, torch.nn.Identity) for n in module.norms):
        return "MLP with normalisation"
    if name == "JumpingKnowledge" and module.mode not in ("cat", "max"):
        return f"JumpingKnowledge(mode={module.mode!r})"
    return None


def trusted_model(model: torch.nn.Module) -> tuple[bool, str]:
    """(trusted, why): whether the model itself meets the module docstring's conditions on its
    class and sub-modules (the call is checked by `trusted_trimming`). Such a model's trimmed
    forward keeps every shape its untrimmed forward has (padded), whatever it is called with."""
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    models, modules = _types()
    if type(model) not in models or type(model).forward is not BasicGNN.forward:
        return False, f"{type(model).__name__} is not one of PyG's GraphSAGE, GCN, GIN, GAT"
    for module in model.modules():
        problem = _module_ok(module, models, modules)
        if problem is not None:
            return False, problem
    return True, f"PyG {type(model).__name__} built from row-local layers"


def trusted_trimming(model: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[bool, str]:
    """(trusted, why): whether `model(*args, **kwargs)` is trimmed exactly by construction
    (the module docstring's conditions), and the reason either way."""
    trusted, why = trusted_model(model)
    if not trusted:
        return False, why
    forward = compat_pyg.basic_gnn_forward()
    if forward is None:
        return False, f"BasicGNN.forward unrecognised ({compat_pyg.BASIC_GNN_FORWARD.reason})"
    bound = compat_pyg.bind_arguments(forward, (model, *args), kwargs)
    if bound is None:
        return False, "the call does not match BasicGNN.forward"
    extra = [name for name, value in bound.items()
             if name not in ("self", "x", "edge_index") and value is not None]
    if extra:
        return False, "the call passes " + ", ".join(extra)
    return True, f"{why} (exact by construction)"
