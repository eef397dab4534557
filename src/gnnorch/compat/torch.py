"""torch's private names gnnorch uses, each resolved once and checked, failing closed.

Tensor subclassing (trimming's prefix-exact outputs, the host transform's deferred features),
autograd version counters, module hook registries, the fx tracing flag and normalisation base
classes (process-level names: `compat.processes`). Every accessor returns something safe when its
name is missing: ``None`` (the feature is off), or a conservative answer ("has hooks", "mutates"),
with the reason in `gnnorch.compat.unavailable`. Resolution is lazy: nothing here runs at import
beyond defining the probes.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import Tensor

from .registry import Missing, Probe

__all__ = ["disable_torch_function_subclass", "host_subclass_reason", "make_subclass",
           "disabled_torch_function_impl", "make_wrapper_subclass", "parse_to", "aten_to_copy",
           "op_is_mutable", "tree_map", "tensor_version", "tensor_versions",
           "tensor_private_properties",
           "is_fx_tracing", "in_activation_checkpoint", "batch_norm_types", "instance_norm_types",
           "hooks_reason"]


def _callable(value: Any, name: str) -> Any:
    if not callable(value):
        raise Missing(f"{name} is a {type(value).__name__}, not callable")
    return value


# -- tensor subclassing --------------------------------------------------------------------

def _disable_subclass() -> type:
    cls = torch._C.DisableTorchFunctionSubclass
    with cls():       # a context manager taking no arguments, as gnnorch uses it
        pass
    return cls


DISABLE_TORCH_FUNCTION_SUBCLASS = Probe(
    "torch._C.DisableTorchFunctionSubclass", "trim/exact_output.py, rewrite/host.py",
    "trimmed outputs are recomputed untrimmed at once (trimming off for the model); the host "
    "transform is off", _disable_subclass)

DISABLED_TORCH_FUNCTION = Probe(
    "torch._C._disabled_torch_function_impl", "rewrite/host.py (DeferredFeatures)",
    "the host transform is off",
    lambda: _callable(torch._C._disabled_torch_function_impl,
                      "torch._C._disabled_torch_function_impl"))


def _wrapper_subclass() -> Callable[..., Tensor]:
    make = _callable(Tensor._make_wrapper_subclass, "Tensor._make_wrapper_subclass")
    return make


MAKE_WRAPPER_SUBCLASS = Probe(
    "torch.Tensor._make_wrapper_subclass", "rewrite/host.py (DeferredFeatures)",
    "the host transform is off", _wrapper_subclass)


def _parse_to() -> Callable[..., tuple]:
    parse = _callable(torch._C._nn._parse_to, "torch._C._nn._parse_to")
    got = parse("cpu")
    if not (isinstance(got, tuple) and len(got) == 4 and got[0] == torch.device("cpu")):
        raise Missing(f"torch._C._nn._parse_to('cpu') returned {got!r}, expected "
                      f"(device, dtype, non_blocking, memory_format)")
    return parse


PARSE_TO = Probe("torch._C._nn._parse_to",
                 "rewrite/host.py, device/twin.py (Tensor.to on batch features and ids)",
                 "the host transform is off; batch ids are copied by batch.to(device)", _parse_to)


def _aten_to_copy() -> Any:
    op = torch.ops.aten._to_copy.default
    if op._schema.is_mutable:
        raise Missing("aten::_to_copy is declared mutating")
    return op


ATEN_TO_COPY = Probe(
    "torch.ops.aten._to_copy.default", "rewrite/host.py (DeferredFeatures)",
    "a same-device .to() of deferred rows copies them to the device (exact, no saving)",
    _aten_to_copy)


def _schema_mutability() -> Callable[[Any], bool]:
    aten = torch.ops.aten
    if aten.add_.Tensor._schema.is_mutable is not True or \
            aten.add.Tensor._schema.is_mutable is not False:
        raise Missing("OpOverload._schema.is_mutable does not tell add_ from add")
    return lambda func: bool(func._schema.is_mutable)


OP_SCHEMA_MUTABLE = Probe(
    "torch._ops.OpOverload._schema.is_mutable", "rewrite/host.py (DeferredFeatures)",
    "every operation on deferred rows counts as a write (their host copy is then stale and "
    "the host transform skips them)", _schema_mutability)


def _make_subclass() -> Callable[[type, Tensor], Tensor]:
    make = _callable(Tensor._make_subclass, "Tensor._make_subclass")
    return lambda cls, x: make(cls, x)


MAKE_SUBCLASS = Probe(
    "torch.Tensor._make_subclass", "rewrite/host.py (mark_host_features)",
    "Tensor.as_subclass is used instead (same storage)", _make_subclass,
    fallback=lambda cls, x: x.as_subclass(cls))

_HOST_NEEDS = (DISABLE_TORCH_FUNCTION_SUBCLASS, DISABLED_TORCH_FUNCTION, MAKE_WRAPPER_SUBCLASS,
               PARSE_TO)


def disable_torch_function_subclass() -> type | None:
    """``torch._C.DisableTorchFunctionSubclass`` (a context manager class), or None."""
    return DISABLE_TORCH_FUNCTION_SUBCLASS.get()


def disabled_torch_function_impl() -> Callable[..., Any] | None:
    """``torch._C._disabled_torch_function_impl`` (a subclass's ``__torch_function__`` that
    turns torch functions off for it), or None."""
    return DISABLED_TORCH_FUNCTION.get()


def make_wrapper_subclass() -> Callable[..., Tensor] | None:
    """``Tensor._make_wrapper_subclass``, or None."""
    return MAKE_WRAPPER_SUBCLASS.get()


def parse_to() -> Callable[..., tuple] | None:
    """``torch._C._nn._parse_to`` (``Tensor.to``'s argument parser), or None."""
    return PARSE_TO.get()


def aten_to_copy() -> Any:
    """The ``aten::_to_copy`` overload a ``.to()`` dispatches to, or None."""
    return ATEN_TO_COPY.get()


def make_subclass(cls: type, x: Tensor) -> Tensor:
    """``x``'s storage as a ``cls`` instance (``Tensor._make_subclass``, else ``as_subclass``)."""
    return MAKE_SUBCLASS.get()(cls, x)


def op_is_mutable(func: Any) -> bool:
    """Whether an ATen overload writes to an argument; True when torch cannot tell us."""
    check = OP_SCHEMA_MUTABLE.get()
    if check is None:
        return True
    try:
        return check(func)
    except Exception:  # noqa: BLE001 - not an OpOverload as we know it: assume a write
        return True


def host_subclass_reason() -> str | None:
    """Why the host transform's tensor subclasses cannot work here; None when they can."""
    return _first_missing(_HOST_NEEDS, "host transform off")


def twin_subclass_reason() -> str | None:
    """Why a host tensor cannot carry its device twin here (`gnnorch.device.twin`: ids are then
    copied by ``batch.to(device)``); None when it can."""
    return _first_missing((DISABLE_TORCH_FUNCTION_SUBCLASS, PARSE_TO),
                          "batch ids copied by batch.to(device)")


def _first_missing(probes: tuple[Probe, ...], consequence: str) -> str | None:
    for probe in probes:
        if not probe.available:
            return f"{probe.name} unavailable ({probe.reason}): {consequence}"
    return None



# -- pytree ----------------------------------------------------------------------------------

def _local_tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``fn`` on every leaf of nested tuples / lists / dicts (what ATen arguments hold)."""
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return type(tree)(_local_tree_map(fn, v) for v in tree)
    if isinstance(tree, tuple):       # a named tuple
        return type(tree)(*(_local_tree_map(fn, v) for v in tree))
    if isinstance(tree, dict):
        return {k: _local_tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def _torch_tree_map() -> Callable[..., Any]:
    from torch.utils import _pytree

    tree_map = _callable(_pytree.tree_map, "torch.utils._pytree.tree_map")
    if tree_map(lambda v: v + 1, {"a": [1, (2,)]}) != {"a": [2, (3,)]}:
        raise Missing("torch.utils._pytree.tree_map does not map nested containers")
    return tree_map


TREE_MAP = Probe("torch.utils._pytree.tree_map", "rewrite/host.py",
                 "a local tree_map over tuples, lists and dicts is used", _torch_tree_map,
                 fallback=_local_tree_map)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``fn`` applied to every leaf of ``tree`` (torch's pytree, else a local one)."""
    return TREE_MAP.get()(fn, tree)


# -- autograd version counters ------------------------------------------------------------

def _version_counter() -> Callable[[Tensor], int]:
    probe = torch.zeros(1)
    before = probe._version
    probe.add_(1)
    if not (isinstance(before, int) and probe._version > before):
        raise Missing("Tensor._version does not count in-place writes")
    return lambda t: t._version


VERSION = Probe("torch.Tensor._version", "trim/materialize.py, device/gather.py",
                "parameters are copied at each trimmed forward and compared by value instead; "
                "the device data path gathers a batch's rows from the user's tensors "
                "(no device copy of them)", _version_counter)


def tensor_version(tensor: Tensor) -> int | None:
    """`tensor`'s in-place version counter (bumped by every in-place write to it or to a view
    of it); None when torch has none."""
    version = VERSION.get()
    return None if version is None else version(tensor)


def tensor_versions(tensors: tuple[Tensor, ...]) -> tuple[int, ...] | None:
    """In-place version counters of `tensors`; None when torch has none."""
    version = VERSION.get()
    if version is None:
        return None
    return tuple([version(t) for t in tensors])


def tensor_private_properties() -> tuple[str, ...]:
    """Tensor's private metadata properties (``_base``, ``_version``) that exist here; reading
    one of them on a prefix-exact output needs no recomputation."""
    return tuple(name for name in ("_base", "_version") if hasattr(Tensor, name))


# -- activation checkpointing -------------------------------------------------------------

def _checkpoint_source() -> tuple[Callable[[int], Any], str]:
    import sys
    import torch.utils.checkpoint as checkpointing

    getframe = _callable(getattr(sys, "_getframe", None), "sys._getframe")
    source = checkpointing.checkpoint.__code__.co_filename
    if getframe(0).f_code is not _checkpoint_source.__code__:
        raise Missing("sys._getframe(0) is not the calling frame")
    return getframe, source


CHECKPOINT_SOURCE = Probe(
    "sys._getframe, torch.utils.checkpoint.checkpoint.__code__.co_filename",
    "intercept/layers.py", "every MessagePassing call counts as activation-checkpointed: no "
    "model is trimmed, cached or rewritten", _checkpoint_source)


def in_activation_checkpoint() -> bool:
    """Whether the caller runs inside ``torch.utils.checkpoint``: a checkpointed forward, or its
    recomputation during the backward pass (re-entrant or not; ``checkpoint_sequential`` and
    wrappers built on them too). True when torch cannot say (the safe answer)."""
    found = CHECKPOINT_SOURCE.get()
    if found is None:
        return True
    getframe, source = found
    frame = getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == source:
            return True
        frame = frame.f_back
    return False


# -- fx tracing --------------------------------------------------------------------------------

def _fx_tracing() -> Callable[[], bool]:
    from torch.fx import _symbolic_trace

    if isinstance(getattr(_symbolic_trace, "_is_fx_tracing_flag", None), bool):
        return functools.partial(getattr, _symbolic_trace, "_is_fx_tracing_flag", False)
    # (not `is_fx_tracing()`: torch >= 2.11 logs a deprecation warning from it)
    check = getattr(_symbolic_trace, "is_fx_symbolic_tracing", None)
    if callable(check) and check() is False:
        return check
    raise Missing("torch.fx._symbolic_trace has neither _is_fx_tracing_flag nor "
                  "is_fx_symbolic_tracing()")


FX_TRACING = Probe(
    "torch.fx._symbolic_trace._is_fx_tracing_flag / is_fx_symbolic_tracing",
    "intercept/chain.py", "fx tracing is recognised by its patched Module.__call__ only "
    "(torch's and PyG's tracers both patch it)", _fx_tracing, fallback=lambda: False)


def is_fx_tracing() -> bool:
    """Whether torch.fx is symbolically tracing right now (False when torch cannot say)."""
    return FX_TRACING.get()()


# -- normalisation base classes ------------------------------------------------------------

_BATCH_NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d",
                "LazyBatchNorm2d", "LazyBatchNorm3d", "SyncBatchNorm")
_INSTANCE_NORMS = ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
                   "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d")


def _public(names: tuple[str, ...]) -> tuple[type, ...]:
    return tuple(cls for cls in (getattr(torch.nn, n, None) for n in names)
                 if isinstance(cls, type))


def _base(module: str, name: str, public: tuple[str, ...]) -> Callable[[], tuple[type, ...]]:
    def resolve() -> tuple[type, ...]:
        import importlib

        cls = getattr(importlib.import_module(module), name)
        missed = [c.__name__ for c in _public(public) if not issubclass(c, cls)]
        if not isinstance(cls, type) or missed:
            raise Missing(f"{module}.{name} is not the base of {missed or 'torch.nn norms'}")
        return (cls,)
    return resolve


BATCH_NORM = Probe(
    "torch.nn.modules.batchnorm._BatchNorm", "trim/mixing.py",
    "torch.nn's public BatchNorm classes are listed instead",
    _base("torch.nn.modules.batchnorm", "_BatchNorm", _BATCH_NORMS),
    fallback=_public(_BATCH_NORMS))
INSTANCE_NORM = Probe(
    "torch.nn.modules.instancenorm._InstanceNorm", "trim/mixing.py",
    "torch.nn's public InstanceNorm classes are listed instead",
    _base("torch.nn.modules.instancenorm", "_InstanceNorm", _INSTANCE_NORMS),
    fallback=_public(_INSTANCE_NORMS))


def batch_norm_types() -> tuple[type, ...]:
    """Classes whose instances are torch batch norms (the base class, or every public one)."""
    return BATCH_NORM.get()


def instance_norm_types() -> tuple[type, ...]:
    """Classes whose instances are torch instance norms."""
    return INSTANCE_NORM.get()


# -- module hook registries ----------------------------------------------------------------

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
               "_backward_pre_hooks")


def _hook_registries() -> tuple[str, ...]:
    module = torch.nn.Identity()
    handle = module.register_forward_hook(lambda *a: None)
    pre = module.register_forward_pre_hook(lambda *a: None)
    try:
        sizes = {name: len(getattr(module, name)) for name in _HOOK_DICTS}
    finally:
        handle.remove()
        pre.remove()
    if sizes["_forward_hooks"] != 1 or sizes["_forward_pre_hooks"] != 1:
        raise Missing(f"registering hooks did not fill torch.nn.Module's registries {sizes}")
    if len(module._forward_hooks) or len(module._forward_pre_hooks):
        raise Missing("removing hooks did not empty torch.nn.Module's registries")
    return _HOOK_DICTS


MODULE_HOOKS = Probe(
    "torch.nn.Module._forward_hooks / _forward_pre_hooks / _backward_hooks / "
    "_backward_pre_hooks", "rewrite/rules/base.py, rewrite/rules/sage.py",
    "every module counts as hooked: rewrites that move or bypass a sub-module's call decline",
    _hook_registries)


def hooks_reason(module: torch.nn.Module) -> str | None:
    """Why ``module`` may carry forward or backward hooks (None: it carries none)."""
    names = MODULE_HOOKS.get()
    if names is None:
        return (f"{type(module).__name__}'s hooks cannot be checked "
                f"({MODULE_HOOKS.reason})")
    for name in names:
        if getattr(module, name, None):
            kind = name.strip("_").replace("_", " ")
            return f"{type(module).__name__} sub-module has {kind}"
    return None
