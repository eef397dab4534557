"""Pre-transformation on the host (DAHA): the bottom layer's ``X W^T`` computed on the CPU.

When the features live in host memory and the model on a GPU, PyG copies a batch's
``n_src x f_in`` feature rows to the GPU and multiplies them there. For a transform-first order
(``GCNConv``; ``SAGEConv`` and ``GINConv`` rewritten) the GPU only ever needs ``X W^T``,
``n_src x f_out``: when ``f_out < f_in`` it is cheaper to multiply on the CPU and copy the
narrower product. Whether it *is* cheaper depends on the CPU's matmul speed against the copy
bandwidth and the GPU, so the engine measures both placements per layer and batch size
(:mod:`gnnorch.rewrite.placement`) and keeps the faster one.

The seam: the loader announces a batch whose ``x`` is a :class:`HostBatchFeatures` (a plain CPU
tensor in every respect, see :func:`mark_host_features`). Moving it to a CUDA device
(``batch.to(device)``, ``x.cuda()``) copies nothing: it becomes a :class:`DeferredFeatures`, a
tensor of that device whose rows still live on the host. Row-prefix slices (what trimming
takes) stay deferred; any other operation copies the rows to the device once (cached) and
runs on the copy, so user code sees an ordinary device tensor. Only the rewrite engine reads
the host rows directly, through :func:`transform_rows`.

Exactness. :class:`HostLinear` computes ``Y = X W^T`` on the CPU (in the weight's dtype) and
returns ``Y`` on the device; its backward is ``dL/dW = G^T X`` with ``G = dL/dY`` copied back
to the host: the same gradient as ``F.linear`` up to floating-point rounding of the CPU's
matmul (no gradient flows into ``X``: deferred rows never require one).

Overlap. The forward runs in row chunks: the CPU multiplies chunk i+1 while chunk i is copied
(pinned buffer, asynchronous copy); the backward copies ``G`` in chunks and multiplies each as
soon as it has arrived. The batch's structure is copied by the user's ``batch.to(device)``
before the model runs, so it does not overlap with the host matmul.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..compat import CompatError
from ..compat import torch as compat_torch
from ..compat.torch import tree_map
from ..device.twin import PlainWhenCopied, copy_target

__all__ = ["HostBatchFeatures", "DeferredFeatures", "HostLinear", "mark_host_features",
           "transform_rows", "deferred_input", "materialised", "HOST", "DEVICE"]

HOST = "host"
DEVICE = "device"
#: device types a HostBatchFeatures defers its copy to
DEFER_TO = ("cuda",)
_aten = torch.ops.aten
# torch's "no __torch_function__ for subclasses" context. Without it (or any other name
# `compat_torch.host_subclass_reason` checks) `mark_host_features` marks nothing, so neither
# subclass below is ever built and the stand-ins are never used.
_DisableSubclass = compat_torch.disable_torch_function_subclass() or contextlib.nullcontext


def _unavailable(cls: type, *args: object, **kwargs: object) -> None:
    raise CompatError(compat_torch.host_subclass_reason())


class _Root:
    """The host rows of one batch's features and their (lazy, cached) device copy."""

    def __init__(self, host: Tensor, device: torch.device, non_blocking: bool) -> None:
        self.host = host.contiguous()
        self.device = device
        self.non_blocking = non_blocking
        self.copy: Tensor | None = None
        self.dirty = False     # written to through the device copy: the host rows are stale

    def device_rows(self, fresh: bool = False) -> Tensor:
        """All rows on the device (``fresh``: a new copy, not the cached one)."""
        if fresh:
            return self.host.to(self.device, non_blocking=self.non_blocking)
        if self.copy is None:
            self.copy = self.host.to(self.device, non_blocking=self.non_blocking)
        return self.copy


class DeferredFeatures(Tensor):
    """A device tensor whose rows ``[start, stop)`` of a batch's features are still on the host.

    Behaves as the device tensor it stands for: any operation except a row-prefix slice,
    ``alias`` or ``detach`` copies the rows to the device first (once per batch).
    """

    __torch_function__ = (compat_torch.disabled_torch_function_impl()
                          or classmethod(_unavailable))
    _root: _Root
    _start: int
    _stop: int

    @staticmethod
    def __new__(cls, root: _Root, start: int = 0, stop: int | None = None) -> "DeferredFeatures":
        stop = root.host.size(0) if stop is None else stop
        rows = root.host[start:stop]
        make = compat_torch.make_wrapper_subclass() or _unavailable
        obj = make(cls, rows.shape, strides=rows.stride(), dtype=rows.dtype,
                   device=root.device, requires_grad=False)
        obj._root, obj._start, obj._stop = root, start, stop
        return obj

    @classmethod
    def defer(cls, host: Tensor, device: torch.device | str,
              non_blocking: bool = False) -> "DeferredFeatures":
        """``host`` (a CPU tensor) standing for its copy on ``device``."""
        return cls(_Root(host, torch.device(device), non_blocking))

    @property
    def host_rows(self) -> Tensor:
        """The rows this tensor stands for, on the host."""
        return self._root.host[self._start:self._stop]

    @property
    def usable(self) -> bool:
        """False once the rows were written to on the device (the host rows are stale)."""
        return not self._root.dirty

    def materialise(self, fresh: bool = False) -> Tensor:
        """The rows on the device (``fresh``: copied anew, for timing)."""
        return self._root.device_rows(fresh)[self._start:self._stop]

    def __repr__(self) -> str:  # printing must not copy the rows
        return (f"DeferredFeatures(shape={tuple(self.shape)}, dtype={self.dtype}, "
                f"device={self.device}, rows on the host)")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _aten.slice.Tensor and args and isinstance(args[0], DeferredFeatures):
            sliced = _row_slice(*args, **kwargs)
            if sliced is not None:
                return sliced
        if func in (_aten.alias.default, _aten.detach.default):
            self = args[0]
            return DeferredFeatures(self._root, self._start, self._stop)
        if func is compat_torch.aten_to_copy():
            self = args[0]
            device = kwargs.get("device", self.device)
            same = (torch.device(device) == self.device
                    and kwargs.get("dtype", self.dtype) in (None, self.dtype)
                    and set(kwargs) <= {"device", "dtype", "non_blocking", "layout"})
            if same:
                return DeferredFeatures(self._root, self._start, self._stop)
        if compat_torch.op_is_mutable(func):
            for value in (*args, *kwargs.values()):
                if isinstance(value, DeferredFeatures):
                    value._root.dirty = True

        def unwrap(value: Any) -> Any:
            return value.materialise() if isinstance(value, DeferredFeatures) else value

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))


def _row_slice(self: DeferredFeatures, dim: int = 0, start: int | None = None,
               end: int | None = None, step: int = 1) -> DeferredFeatures | None:
    """``self[start:end]`` along rows as a deferred tensor (None for other slices)."""
    if dim != 0 or step != 1:
        return None
    n = self.size(0)
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None or end >= sys.maxsize else (end + n if end < 0 else end)
    start, end = min(max(start, 0), n), min(max(end, 0), n)
    end = max(end, start)
    return DeferredFeatures(self._root, self._start + start, self._start + end)


class HostBatchFeatures(PlainWhenCopied):
    """A batch's CPU feature rows that defer their copy when moved to a CUDA device.

    In every other respect a plain CPU tensor: other operations return plain tensors; pickled
    and deep-copied as one.
    """

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in (Tensor.to, Tensor.cuda) and args and isinstance(args[0], HostBatchFeatures):
            target = _target(func, args, kwargs)
            if target is not None:
                device, non_blocking = target
                return DeferredFeatures.defer(_plain(args[0]), device, non_blocking)
        with _DisableSubclass():
            out = func(*args, **kwargs)
        if func is Tensor.pin_memory and isinstance(out, Tensor):
            return mark_host_features(out)   # pinning keeps the deferral
        return out


def _plain(x: Tensor) -> Tensor:
    """The same storage as a plain Tensor."""
    with _DisableSubclass():
        return x.view(x.shape)


def _target(func: Any, args: tuple, kwargs: dict) -> tuple[torch.device, bool] | None:
    """(device, non_blocking) when ``func(*args)`` copies a tensor unchanged to a deferring
    device; None for every other conversion."""
    target = copy_target(func, args, kwargs)
    if target is None:
        return None
    device, dtype, non_blocking = target
    if device.type not in DEFER_TO or dtype not in (None, args[0].dtype):
        return None
    return device, non_blocking


def mark_host_features(x: Tensor) -> Tensor:
    """``x`` (a floating CPU tensor) as :class:`HostBatchFeatures`, sharing its storage;
    anything else unchanged, and everything while torch lacks a name the subclasses need
    (`gnnorch.compat`: the host transform is then off)."""
    if compat_torch.host_subclass_reason() is not None:
        return x
    if (type(x) is not Tensor or x.device.type != "cpu" or not x.is_floating_point()
            or x.requires_grad or x.dim() != 2):
        return x
    return compat_torch.make_subclass(HostBatchFeatures, x)


class HostLinear(torch.autograd.Function):
    """``x_host @ weight^T`` computed on the host, returned on ``weight``'s device.

    Forward: chunks of rows multiplied on the CPU into a pinned buffer, each copied
    asynchronously while the next is multiplied. Backward: ``grad_W = G^T x_host`` with ``G``
    copied back in chunks, each multiplied as soon as it has arrived.
    """

    @staticmethod
    def forward(ctx: Any, weight: Tensor, x_host: Tensor, chunk: int) -> Tensor:
        device = weight.device
        w_host = weight.detach().to("cpu", x_host.dtype)
        n, f_out = x_host.size(0), weight.size(0)
        pin = device.type == "cuda"
        out = torch.empty((n, f_out), dtype=weight.dtype, device=device)
        buffer = torch.empty((n, f_out), dtype=x_host.dtype, pin_memory=pin)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            torch.mm(x_host[start:stop], w_host.t(), out=buffer[start:stop])
            out[start:stop].copy_(buffer[start:stop], non_blocking=pin)
        ctx.save_for_backward(x_host)
        ctx.chunk, ctx.weight_dtype = chunk, weight.dtype
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, None, None]:
        (x_host,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        device = grad_out.device
        n, chunk = x_host.size(0), ctx.chunk
        pin = device.type == "cuda"
        g_host = torch.empty(tuple(grad_out.shape), dtype=x_host.dtype, pin_memory=pin)
        arrived = []
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            g_host[start:stop].copy_(grad_out[start:stop], non_blocking=pin)
            if pin:
                event = torch.cuda.Event()
                event.record()
                arrived.append(event)
        grad_w = torch.zeros((grad_out.size(1), x_host.size(1)), dtype=x_host.dtype)
        for i, start in enumerate(range(0, n, chunk)):
            stop = min(n, start + chunk)
            if pin:
                arrived[i].synchronize()
            grad_w.addmm_(g_host[start:stop].t(), x_host[start:stop])
        return grad_w.to(device, ctx.weight_dtype), None, None


def transform_rows(x: Tensor, weight: Tensor, chunk: int | None = None) -> Tensor:
    """``x W^T`` (no bias): on the host for deferred rows, else ``F.linear``."""
    if isinstance(x, DeferredFeatures) and x.usable:
        rows = x.host_rows
        chunk = chunk or max(1024, -(-rows.size(0) // 8))
        return HostLinear.apply(weight, rows, chunk)
    return F.linear(x, weight)


def deferred_input(x: Any) -> bool:
    """True when a layer's ``x`` (a tensor or a (source, destination) pair) is deferred host
    rows that the host path can read: every tensor in it deferred and usable."""
    parts = [p for p in (x if isinstance(x, (tuple, list)) else (x,)) if p is not None]
    return bool(parts) and all(isinstance(p, DeferredFeatures) and p.usable for p in parts)


def materialised(value: Any, fresh: bool = False) -> Any:
    """``value`` with every deferred tensor (also inside tuples, lists, dicts) on the device."""
    def unwrap(v: Any) -> Any:
        return v.materialise(fresh) if isinstance(v, DeferredFeatures) else v

    return tree_map(unwrap, value)
