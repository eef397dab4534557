"""Host tensors of a batch that already have their copy on the training device.

A served loader's batch keeps its id fields (``n_id``, ``e_id``, ``input_id``) on the host: user
code indexes host tensors with them. A plain PyG loop then calls ``batch.to(device)``, which
would copy them again, from pageable memory, in the trainer's thread: each such copy waits for
all the work queued on the trainer's stream (CUDA synchronises before a pageable host-to-device
copy), so the CPU could never run ahead of the GPU by more than a batch.

The pipeline already has those ids on the device (the sampler's output there, or a copy made
from pinned memory on its side stream). `twinned(host, device_copy)` returns ``host`` as a
`DeviceTwinned`: a plain CPU tensor in every respect (indexing, ``tolist``, numpy; every
operation returns plain tensors) except that ``.to(d)`` / ``.cuda()`` towards the twin's device
(same dtype, no ``copy=True``) return the twin: nothing is copied and nothing waits. The batch
is handed over once the trainer's stream waits for the side stream (`device.transfer`), and the
twins are marked used on that stream (``record_stream``) with the batch's other device tensors.

Invariant: a twin holds the same values as its host tensor. Both are made from one value, and
both in-place version counters are taken then: once the user writes to either (``batch.x[:, 0]
= 0`` before ``batch.to(device)``, or to the device tensor ``.to`` returned while keeping the
host one), `device_twin` returns None and ``.to`` copies the host values as torch would.
Without the torch names the subclass needs (`gnnorch.compat.torch.twin_subclass_reason`), or
without version counters, `twinned` returns the host tensor unchanged and the fields are
copied as before.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from ..compat import torch as compat_torch

__all__ = ["DeviceTwinned", "PlainWhenCopied", "concrete_device", "copy_target", "device_twin",
           "twinned", "host_twin"]

_DisableSubclass = compat_torch.disable_torch_function_subclass() or contextlib.nullcontext


class PlainWhenCopied(Tensor):
    """A tensor subclass that marks a batch's tensor for this process's pipeline: pickled
    (``torch.save``) and deep-copied as the plain tensor it stands for."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.as_subclass(Tensor).__reduce_ex__(protocol)

    def __deepcopy__(self, memo: dict) -> Tensor:
        out = memo[id(self)] = self.as_subclass(Tensor).clone()
        return out


class DeviceTwinned(PlainWhenCopied):
    """A host tensor whose copy on a device already exists (the module docstring)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in (Tensor.to, Tensor.cuda) and args and isinstance(args[0], DeviceTwinned):
            twin = device_twin(args[0])
            target = copy_target(func, args, kwargs)
            if (twin is not None and target is not None and target[0] == twin.device
                    and target[1] in (None, twin.dtype)):
                return twin
        with _DisableSubclass():
            return func(*args, **kwargs)


def twinned(host: Tensor, device_copy: Tensor) -> Tensor:
    """`host` (a plain CPU tensor) carrying `device_copy` (its values, on another device) as
    its twin; `host` unchanged where that cannot be (module docstring)."""
    if (compat_torch.twin_subclass_reason() is not None or type(host) is not Tensor
            or host.device.type != "cpu" or device_copy.device.type == "cpu"
            or host.requires_grad or device_copy.shape != host.shape
            or device_copy.dtype != host.dtype):
        return host
    versions = (compat_torch.tensor_version(host), compat_torch.tensor_version(device_copy))
    if None in versions:
        return host
    out = compat_torch.make_subclass(DeviceTwinned, host)
    out._gnnorch_twin = device_copy
    out._gnnorch_versions = versions
    return out


def device_twin(tensor: Any) -> Tensor | None:
    """The device copy `tensor` carries (`twinned`), or None (none, or either tensor was
    written in place since: the copy may be stale)."""
    if not isinstance(tensor, DeviceTwinned):
        return None
    twin = tensor.__dict__.get("_gnnorch_twin")
    if not isinstance(twin, torch.Tensor):
        return None
    with _DisableSubclass():
        current = (compat_torch.tensor_version(tensor), compat_torch.tensor_version(twin))
    return twin if current == tensor.__dict__.get("_gnnorch_versions") else None


def concrete_device(device: torch.device | str) -> torch.device:
    """`device` with a bare ``"cuda"`` resolved to the current CUDA device (``cuda:0`` when
    none was set): torch's tensors always carry the index, and ``torch.device("cuda") !=
    torch.device("cuda:0")``, so device comparisons are made on this form."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def copy_target(func: Any, args: tuple,
                kwargs: dict) -> tuple[torch.device, torch.dtype | None, bool] | None:
    """``(device, dtype, non_blocking)`` when ``func(*args, **kwargs)`` (``Tensor.to`` or
    ``Tensor.cuda`` of ``args[0]``) asks for a plain copy to a device (a bare ``"cuda"`` or
    ``cuda()`` resolved to the current CUDA device); None for every other call, e.g. with
    ``copy=True``, a ``memory_format``, no device, or while torch's parser is unavailable."""
    if func is Tensor.cuda:
        device = args[1] if len(args) > 1 else kwargs.get("device")
        if isinstance(device, int) or device is None:
            device = torch.device("cuda", torch.cuda.current_device() if device is None
                                  else device)
        non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        return torch.device(device), None, non_blocking
    if func is not Tensor.to or kwargs.get("copy") or kwargs.get("memory_format") is not None:
        return None
    parse = compat_torch.parse_to()
    if parse is None:
        return None
    try:
        device, dtype, non_blocking, memory_format = parse(
            *args[1:], **{k: v for k, v in kwargs.items() if k != "copy"})
    except (TypeError, RuntimeError):
        return None
    if device is None or memory_format is not None:
        return None
    return concrete_device(device), dtype, bool(non_blocking)


def host_twin(host: Any, device: torch.device, device_copy: Tensor | None = None) -> Any:
    """An id field kept on the host, carrying its copy on `device` (`device.twin`:
    ``batch.to(device)`` then copies nothing): `device_copy` when it is there already, else
    one made now (from pinned memory on CUDA: asynchronous, on the current stream). On the
    CPU, `host` itself."""
    if device.type == "cpu" or not isinstance(host, Tensor):
        return host
    if device_copy is None or device_copy.device != device:
        source = host.pin_memory() if device.type == "cuda" else host
        device_copy = source.to(device, non_blocking=device.type == "cuda")
    return twinned(host, device_copy)
