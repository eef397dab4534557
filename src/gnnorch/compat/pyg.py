"""PyG's private names and layer internals gnnorch uses, each checked once, failing closed.

In the style of ``torch_geometric/typing.py``: each name is probed once (lazily: importing
PyG is not cheap) and the rest of gnnorch asks the accessor. A probe checks the name's shape,
not just its presence: the parameters gnnorch passes, and where it is cheap, that PyG itself
still uses the name the way gnnorch relies on (a `BasicGNN` still holds a `TrimToLayer`; a
cached `GCNConv` still fills ``_cached_edge_index``). When a check fails the feature steps
aside with the reason in `gnnorch.compat.unavailable`: trimming treats every model as trimming
itself, the sampler leaves sampling to PyG, a rewrite rule declines.
"""
from __future__ import annotations

# size: one catalogue of PyG's private names, a probe and an accessor each (docs/compat.md);
# split by subject when a subject grows a module's worth

import contextlib
import functools
import inspect
import re
import threading
from typing import Any, Callable, Iterator

import torch

from .registry import CompatError, Missing, Probe

__all__ = ["trim_to_layer_type", "self_trimming", "sampler_hook_reason", "pyg_sample",
           "sampler_parameters", "message_passing_hooks_reason", "gcn_cache_reason",
           "gcn_cached", "set_gcn_cached", "gat_has_residual", "missing_attributes",
           "loader_arguments", "basic_gnn_forward", "bind_arguments", "MESSAGE_PASSING_HOOKS",
           "set_orig_edge_index", "pyg_index_select", "negative_sampling_class",
           "neighbor_sampler_csc", "graph_loader_keywords"]


def _parameters(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


# -- TrimToLayer (BasicGNN's own trimming) ---------------------------------------------------

def _trim_to_layer() -> type:
    from torch_geometric.nn.models.basic_gnn import BasicGNN
    from torch_geometric.utils._trim_to_layer import TrimToLayer

    if not (isinstance(TrimToLayer, type) and issubclass(TrimToLayer, torch.nn.Module)):
        raise Missing("torch_geometric.utils._trim_to_layer.TrimToLayer is not a Module")
    params = _parameters(TrimToLayer.forward)[1:3]
    if params != ["layer", "num_sampled_nodes_per_hop"]:
        raise Missing(f"TrimToLayer.forward takes {params} first, expected "
                      f"['layer', 'num_sampled_nodes_per_hop']")

    class _TrimProbe(BasicGNN):
        """BasicGNN's own construction around identity layers: a real PyG layer would have
        PyG compile its `propagate` template when its class is first built."""

        supports_edge_weight = supports_edge_attr = False

        def init_conv(self, in_channels: Any, out_channels: int, **kwargs: Any) -> Any:
            return torch.nn.Identity()

    with torch.random.fork_rng(devices=[]):     # the user's random stream is untouched
        model = _TrimProbe(2, 2, num_layers=1)
    if not any(isinstance(m, TrimToLayer) for m in model.modules()):
        raise Missing("PyG's BasicGNN no longer trims through a TrimToLayer module")
    return TrimToLayer


TRIM_TO_LAYER = Probe(
    "torch_geometric.utils._trim_to_layer.TrimToLayer", "trim/trusted.py, intercept/layers.py",
    "every model counts as trimming itself (gnnorch's trimming off); BasicGNN models are not "
    "in the trusted set", _trim_to_layer)


def trim_to_layer_type() -> type | None:
    """PyG's ``TrimToLayer`` module class, or None."""
    return TRIM_TO_LAYER.get()


def self_trimming(module: torch.nn.Module, args: tuple) -> bool:
    """Whether this module call is PyG trimming a model with hop counts (``TrimToLayer`` called
    with ``num_sampled_nodes_per_hop``). True for every call when ``TrimToLayer`` cannot be
    recognised: gnnorch must not trim a model that may trim itself."""
    cls = TRIM_TO_LAYER.get()
    if cls is None:
        return True
    return isinstance(module, cls) and len(args) > 1 and args[1] is not None


# -- NeighborSampler ----------------------------------------------------------------------------

def _sample_hook() -> type:
    from torch_geometric.sampler import NeighborSampler

    hook = NeighborSampler.__dict__.get("_sample")
    if hook is None:
        raise Missing("torch_geometric.sampler.NeighborSampler defines no _sample")
    params = inspect.signature(hook).parameters
    kinds = [p.kind for p in params.values()]
    if list(params)[:3] != ["self", "seed", "seed_time"] or \
            inspect.Parameter.VAR_KEYWORD not in kinds:
        raise Missing(f"NeighborSampler._sample{inspect.signature(hook)} is not "
                      f"(self, seed, seed_time, **kwargs)")
    return NeighborSampler


SAMPLE_HOOK = Probe(
    "torch_geometric.sampler.NeighborSampler._sample", "sampling/neighbor.py",
    "gnnorch's sampler is not used: sampling stays with PyG (no hop exclusion for the cache)",
    _sample_hook)


def sampler_hook_reason() -> str | None:
    """Why gnnorch's sampler cannot plug into PyG's ``NeighborSampler``; None when it can."""
    if SAMPLE_HOOK.get() is None:
        return f"PyG's NeighborSampler._sample hook unavailable ({SAMPLE_HOOK.reason})"
    return None


def pyg_sample(sampler: Any, seed: Any, seed_time: Any = None, **kwargs: Any) -> Any:
    """PyG's own ``NeighborSampler._sample`` on ``sampler`` (looked up at each call)."""
    cls = SAMPLE_HOOK.get()
    if cls is None:
        raise CompatError(sampler_hook_reason())
    return cls._sample(sampler, seed, seed_time, **kwargs)


def _sampler_parameters() -> frozenset[str]:
    from torch_geometric.sampler import NeighborSampler

    names = _parameters(NeighborSampler.__init__)
    if names[:3] != ["self", "data", "num_neighbors"]:
        raise Missing(f"NeighborSampler.__init__ takes {names[:3]} first")
    return frozenset(names[1:])


SAMPLER_PARAMETERS = Probe(
    "torch_geometric.sampler.NeighborSampler.__init__ (sample_direction: PyG >= 2.7)",
    "sampling/neighbor.py",
    "every option is passed to PyG as given (an option PyG lacks raises its TypeError)",
    _sampler_parameters)


def sampler_parameters() -> frozenset[str] | None:
    """The keyword parameters of the installed ``NeighborSampler.__init__``, or None."""
    return SAMPLER_PARAMETERS.get()


# -- MessagePassing's hook registries ---------------------------------------------------------

_MP_HOOK = re.compile(r"^_[a-z_]+_forward(_pre)?_hooks$")
#: the hook registries of PyG 2.5 to 2.8's MessagePassing (a newer PyG may add more: the probe
#: takes every registry a fresh MessagePassing has)
MESSAGE_PASSING_HOOKS = frozenset(f"_{stage}_forward{pre}_hooks"
                         for stage in ("propagate", "message", "aggregate",
                                       "message_and_aggregate", "edge_update")
                         for pre in ("", "_pre"))


def _mp_hooks() -> tuple[str, ...]:
    from torch_geometric.nn import MessagePassing

    class _HookProbe(MessagePassing):
        """A throwaway subclass: PyG's first instantiation of a class compiles its
        ``propagate`` and sets it *on that class*; on the base class itself it would change
        every subclass defined afterwards (their explain mode and TorchScript). Its own
        ``propagate`` makes PyG skip that compilation, which it does for any class defining
        one."""

        def propagate(self, *args: Any, **kwargs: Any) -> Any:
            return MessagePassing.propagate(self, *args, **kwargs)

    layer = _HookProbe()
    found = tuple(sorted(n for n, v in vars(layer).items()
                         if _MP_HOOK.match(n) and isinstance(v, dict)))
    missing = sorted(MESSAGE_PASSING_HOOKS - set(found))
    if missing:
        raise Missing(f"MessagePassing has no hook registries {missing}")
    handle = layer.register_message_forward_hook(lambda *a: None)
    filled = len(layer._message_forward_hooks)
    handle.remove()
    if filled != 1 or layer._message_forward_hooks:
        raise Missing("register_message_forward_hook does not use _message_forward_hooks")
    return found


MP_HOOKS = Probe(
    "torch_geometric.nn.MessagePassing._{propagate,message,aggregate,message_and_aggregate,"
    "edge_update}_forward[_pre]_hooks", "rewrite/rules/base.py",
    "every layer counts as hooked: no rewrite", _mp_hooks)


def message_passing_hooks_reason(layer: Any) -> str | None:
    """Why a propagate / message / aggregate / edge-update hook may be registered on
    ``layer``; None when none is."""
    names = MP_HOOKS.get()
    if names is None:
        return f"{type(layer).__name__}'s hooks cannot be checked ({MP_HOOKS.reason})"
    for name in names:
        if getattr(layer, name, None):
            return f"{name.strip('_').replace('_', ' ')} registered: hooks would see the " \
                   f"other order"
    return None


# -- GCNConv's normalisation cache ------------------------------------------------------------

def _gcn_cache() -> bool:
    from torch_geometric.nn import GCNConv

    with torch.random.fork_rng(devices=[]):     # the user's random stream is untouched
        layer = GCNConv(2, 2, cached=True)
    if getattr(layer, "_cached_edge_index", 0) is not None:
        raise Missing("GCNConv(cached=True) has no empty _cached_edge_index")
    # (read, not run: a probe may resolve inside a run, where layer calls go through the seams)
    if "self._cached_edge_index = " not in inspect.getsource(GCNConv.forward):
        raise Missing("GCNConv.forward no longer caches in _cached_edge_index")
    return True


GCN_CACHE = Probe(
    "torch_geometric.nn.GCNConv._cached_edge_index", "rewrite/rules/gcn.py",
    "a GCNConv with cached=True is not rewritten (uncached ones still are)", _gcn_cache)


def gcn_cache_reason(layer: Any) -> str | None:
    """Why the rewrite cannot share this GCNConv's normalisation cache; None when it can (or
    when the layer caches nothing)."""
    if not getattr(layer, "cached", True) or GCN_CACHE.get():
        return None
    return f"GCNConv(cached=True) cache unavailable ({GCN_CACHE.reason})"


def gcn_cached(layer: Any) -> tuple | None:
    """The layer's cached ``(edge_index, edge_weight)``, or None (nothing cached yet, or an
    uncached layer)."""
    if not GCN_CACHE.get():
        return None
    return layer._cached_edge_index


def set_gcn_cached(layer: Any, value: tuple) -> None:
    """Store ``(edge_index, edge_weight)`` where GCNConv looks for its cache."""
    if GCN_CACHE.get():
        layer._cached_edge_index = value


# -- GATConv's residual ------------------------------------------------------------------------

def _gat_residual() -> bool:
    from torch_geometric.nn import GATConv

    return "residual" in _parameters(GATConv.__init__)


GAT_RESIDUAL = Probe(
    "torch_geometric.nn.GATConv(residual=) / .res (PyG >= 2.6)", "rewrite/rules/gat.py",
    "a GATConv without a `res` attribute is not rewritten", _gat_residual)


def gat_has_residual() -> bool:
    """Whether this PyG's GATConv may carry a residual (``res``); True when unknown, so that
    a layer lacking ``res`` is declined rather than rewritten without it."""
    return GAT_RESIDUAL.get() is not False


# -- the loader's batch: the original edges of a bidirectional subgraph ---------------------

def _orig_edge_index() -> bool:
    from torch_geometric.loader.node_loader import NodeLoader

    if "._orig_edge_index = " not in inspect.getsource(NodeLoader.filter_fn):
        raise Missing("PyG's NodeLoader.filter_fn no longer sets _orig_edge_index")
    return True


ORIG_EDGE_INDEX = Probe(
    "torch_geometric.loader.node_loader.NodeLoader.filter_fn (data._orig_edge_index)",
    "device/gather.py", "batches gathered by gnnorch carry no _orig_edge_index (as PyG's "
    "would not)", _orig_edge_index)


def set_orig_edge_index(batch: Any, edge_index: Any) -> None:
    """Give a batch gnnorch built the original (pre-bidirectional) edges where PyG's own
    loader puts them (``batch._orig_edge_index``); nothing when PyG no longer does."""
    if ORIG_EDGE_INDEX.get():
        batch._orig_edge_index = edge_index


# -- the loader's gather of an attribute that is not a tensor (numpy, TensorFrame) -----------

def _index_select() -> Callable[..., Any]:
    import numpy as np
    from torch_geometric.loader.utils import index_select

    params = _parameters(index_select)[:3]
    if params != ["value", "index", "dim"]:
        raise Missing(f"torch_geometric.loader.utils.index_select takes {params}, expected "
                      f"['value', 'index', 'dim']")
    out = index_select(np.arange(4.0).reshape(2, 2), torch.tensor([1]), dim=0)
    if not (isinstance(out, torch.Tensor) and out.tolist() == [[2.0, 3.0]]):
        raise Missing("torch_geometric.loader.utils.index_select no longer gathers numpy rows "
                      "into a tensor")
    return index_select


INDEX_SELECT = Probe(
    "torch_geometric.loader.utils.index_select", "device/gather.py, intercept/device_path.py",
    "a loader whose data holds a node or edge attribute that is not a tensor (a numpy array, "
    "a TensorFrame) is not served by the device data path", _index_select)


def pyg_index_select() -> Callable[..., Any] | None:
    """PyG's ``index_select(value, index, dim)``, which its loaders use to gather a node or
    edge attribute of any type they support (tensor, numpy array, TensorFrame); None when
    missing."""
    return INDEX_SELECT.get()


# -- NegativeSampling ------------------------------------------------------------------------

def _negative_sampling() -> type:
    from torch_geometric.sampler import NegativeSampling

    for fn, want in ((NegativeSampling.__init__, ["mode", "amount", "src_weight", "dst_weight"]),
                     (NegativeSampling.sample, ["num_samples", "endpoint", "num_nodes"])):
        if (got := _parameters(fn)[1:]) != want:
            raise Missing(f"NegativeSampling.{fn.__name__} takes {got}, expected {want}")
    with torch.random.fork_rng(devices=[]):     # the user's random stream is untouched
        out = NegativeSampling("binary", 2).sample(3, "src", 5)
    if not (isinstance(out, torch.Tensor) and out.dtype == torch.long and out.shape == (3,)):
        raise Missing("NegativeSampling.sample no longer returns num_samples node indices")
    return NegativeSampling


NEGATIVE_SAMPLING = Probe(
    "torch_geometric.sampler.NegativeSampling.sample(num_samples, endpoint, num_nodes)",
    "sampling/negatives.py", "a link loader with negatives that the device data path serves "
    "samples in the trainer's thread (PyG draws them from torch's global RNG): no prefetch",
    _negative_sampling)


def negative_sampling_class() -> type | None:
    """PyG's ``NegativeSampling`` if `gnnorch.sampling.negatives` can copy it, else None."""
    return NEGATIVE_SAMPLING.get()


# -- NeighborSampler's CSC conversion -------------------------------------------------------

_TO_CSC_PARAMS = ["data", "device", "share_memory", "is_sorted", "src_node_time", "edge_time"]


def _to_csc_module() -> Any:
    import torch_geometric.sampler.neighbor_sampler as module

    if (got := _parameters(module.to_csc)[:6]) != _TO_CSC_PARAMS:
        raise Missing(f"torch_geometric.sampler.neighbor_sampler.to_csc takes {got}, "
                      f"expected {_TO_CSC_PARAMS}")
    return module


TO_CSC = Probe(
    "torch_geometric.sampler.neighbor_sampler.to_csc", "sampling/neighbor.py, sampling/csc.py",
    "each loader's sampler converts the graph to CSC itself, as in PyG (none shared)",
    _to_csc_module)
_TO_CSC_LOCK = threading.Lock()


@contextlib.contextmanager
def neighbor_sampler_csc(build: Callable[[Callable[..., Any]], Callable[..., Any]]
                         ) -> Iterator[bool]:
    """While active, PyG's ``NeighborSampler.__init__`` converts its graph with
    ``build(to_csc)`` instead of ``to_csc`` (one caller at a time). Yields whether it does:
    False when the name is missing or changed, and PyG's own conversion runs."""
    module = TO_CSC.get()
    if module is None:
        yield False
        return
    with _TO_CSC_LOCK:
        original = module.to_csc
        module.to_csc = build(original)
        try:
            yield True
        finally:
            module.to_csc = original


# -- layer attributes and argument binding --------------------------------------------------

def missing_attributes(layer: Any, names: tuple[str, ...] | list[str]) -> str | None:
    """Why ``layer`` lacks attributes a rewrite reads (its PyG version lays the layer out
    differently); None when it has them all."""
    absent = [name for name in names if not hasattr(layer, name)]
    if not absent:
        return None
    return (f"{type(layer).__name__} has no {', '.join(absent)} (this PyG version lays it out "
            f"differently): not rewritten")


def bind_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict | None:
    """``fn``'s parameters bound to ``args`` / ``kwargs`` by name, or None when they do not
    bind (or ``fn`` has no readable signature)."""
    signature = _signature(fn)
    if signature is None:
        return None
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError:
        return None


@functools.lru_cache(maxsize=64)
def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


_LOADER_NEEDS = ("data", "num_neighbors", "neighbor_sampler")

LOADER_INIT = Probe(
    "torch_geometric.loader.NeighborLoader.__init__ (data, num_neighbors, neighbor_sampler)",
    "intercept/loader.py", "gnnorch's sampler is not used: sampling stays with PyG",
    lambda: True)   # checked on the real __init__ at each use (the class is patched in runs)


def loader_arguments(init: Callable[..., Any], args: tuple, kwargs: dict) -> dict:
    """``NeighborLoader.__init__``'s arguments by name (``init``: the unpatched method).
    Empty when they do not bind (PyG's own ``__init__`` then reports the user's mistake) or
    when the signature lacks what gnnorch's sampler needs (recorded as unavailable)."""
    signature = _signature(init)
    absent = [n for n in _LOADER_NEEDS if signature is None or n not in signature.parameters]
    if absent:
        LOADER_INIT.mark_missing(f"NeighborLoader.__init__ has no parameters {absent}")
        return {}
    try:
        return dict(signature.bind(None, *args, **kwargs).arguments)
    except TypeError:
        return {}


_GRAPH_LOADER_NEEDS = ("dataset", "batch_size", "shuffle")

GRAPH_LOADER_INIT = Probe(
    "torch_geometric.loader.DataLoader.__init__ (dataset, batch_size, shuffle, **kwargs)",
    "intercept/loader.py", "graph-level DataLoaders are not sharded over ranks nor timed: "
    "they run as PyG runs them", lambda: True)   # checked on the real __init__ at each use


def graph_loader_keywords(init: Callable[..., Any], args: tuple,
                          kwargs: dict) -> tuple[tuple, dict] | None:
    """PyG's ``DataLoader(dataset, batch_size=1, shuffle=False, ...)`` arguments as
    ``((dataset,), keywords)``, every other argument by name (``init``: the unpatched
    method), so that ``batch_size`` and ``shuffle`` given by position (PyG's
    ``mutag_gin.py`` passes the batch size second) are seen. None when they do not bind (PyG's
    own ``__init__`` then reports the user's mistake) or when the signature lacks one of them
    (recorded as unavailable)."""
    signature = _signature(init)
    absent = [n for n in _GRAPH_LOADER_NEEDS
              if signature is None or n not in signature.parameters]
    if absent or signature is None:
        GRAPH_LOADER_INIT.mark_missing(f"DataLoader.__init__ has no parameters {absent}")
        return None
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError:
        return None
    keywords: dict[str, Any] = {}
    for name, value in list(bound.arguments.items())[1:]:   # (the loader itself first)
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            keywords.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            return None   # no by-name form
        else:
            keywords[name] = value
    dataset = keywords.pop("dataset")
    return (dataset,), keywords


def _basic_gnn_forward() -> Callable[..., Any]:
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    forward = BasicGNN.forward
    if _parameters(forward)[:3] != ["self", "x", "edge_index"]:
        raise Missing(f"BasicGNN.forward{inspect.signature(forward)} does not start with "
                      f"(self, x, edge_index)")
    return forward


BASIC_GNN_FORWARD = Probe(
    "torch_geometric.nn.models.basic_gnn.BasicGNN.forward(self, x, edge_index, ...)",
    "trim/trusted.py", "no model is trusted: every model's first forward runs untrimmed and "
    "the one-off check decides", _basic_gnn_forward)


def basic_gnn_forward() -> Callable[..., Any] | None:
    """``BasicGNN.forward`` when it still takes ``(self, x, edge_index, ...)``, else None."""
    return BASIC_GNN_FORWARD.get()
