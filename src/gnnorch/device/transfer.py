"""Copying a batch to the training device on a side stream, for `pipeline.Prefetcher`.

`DeviceTransfer(device)` is the pair (transfer, ready) a Prefetcher takes, plus the context its
producer thread runs in (`producing`):

* `producing()`: the training device and a dedicated CUDA stream become the producer thread's
  current device and stream (both are per thread in torch), so whatever the producer runs on
  the device (sampling, gathering, copies) is queued on that side stream, never behind the
  trainer's kernels;
* `transfer` (producer thread) copies every tensor of a batch (anything with PyG's ``.to`` /
  ``.apply`` or a tensor), except the fields named in ``host_fields``, to ``device`` on the side
  stream, from pinned memory (tensors not pinned yet are pinned first, so the copy is
  asynchronous and never a pageable copy), and records an event after *all* the work queued on
  the side stream so far; with ``twin_all`` (batches PyG built, the path only copying them)
  every tensor instead stays on the host, as PyG left it, and carries its device copy made
  there (`device.twin`): the user's code sees the batch PyG gives (host tensors: indexing,
  ``numpy()``, in-place writes before the copy), and ``batch.to(device)`` copies nothing;
* `ready` (consumer thread) makes its current stream wait for that event, and marks every
  device tensor (and every host id field's device twin, `device.twin`) as used on that stream
  (``record_stream``) so the caching allocator does not hand the memory to another tensor
  while the consumer's kernels may still read it.

On a CPU device all three are the identity (``.to`` a CPU device is a no-op).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from ..compat.torch import tensor_version, twin_subclass_reason
from .twin import device_twin, twinned

__all__ = ["DeviceTransfer", "ids_on_host", "to_device"]


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` on `device`, never by a pageable copy: a host tensor bound for a CUDA device
    is copied into new pinned memory first, then asynchronously on the current stream. torch's
    copy from pageable host memory synchronises the current stream (the calling thread waits
    for every kernel queued on it before), so on a training step's path each such copy is a
    stall. The pinned copy is new and held by torch's caching host allocator until the
    device copy has run: the caller may write `tensor` at once. Any other move (CPU to CPU, a
    tensor already there, device to host) is ``tensor.to(device)``."""
    device = torch.device(device)
    if tensor.device.type != "cpu" or device.type != "cuda":
        return tensor.to(device)
    pinned = torch.empty_like(tensor, pin_memory=True)
    pinned.copy_(tensor)
    return pinned.to(device, non_blocking=True)


def _each_tensor(value: Any, fn: Callable[[torch.Tensor], torch.Tensor],
                 skip: tuple[str, ...] = ()) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if hasattr(value, "apply"):          # PyG Data / HeteroData / Batch
        if skip and hasattr(value, "keys"):
            keys = [k for k in value.keys() if k not in skip]
            return value.apply(fn, *keys) if keys else value
        return value.apply(fn)
    if isinstance(value, (list, tuple)):
        return type(value)(_each_tensor(v, fn, skip) for v in value)
    if isinstance(value, dict):
        return {k: _each_tensor(v, fn, skip) for k, v in value.items()}
    return value


class DeviceTransfer:
    """`producing` / `transfer` / `ready` for a Prefetcher towards `device` (see the module
    docstring). ``host_fields``: names of batch fields that stay where they are (e.g. the id
    fields ``n_id`` / ``e_id`` / ``input_id``, kept on the host); ``twin_all``: every other
    tensor kept on the host with a device twin (module docstring)."""

    def __init__(self, device: torch.device | str, pin: bool = True,
                 host_fields: tuple[str, ...] = (), twin_all: bool = False) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.pin = pin and self.cuda
        self.host_fields = tuple(host_fields)
        self.twin_all = twin_all
        # a high priority: the side stream's small sampling kernels (and the syncs the
        # producer waits on) are scheduled ahead of the trainer's queued work
        self.stream = torch.cuda.Stream(self.device, priority=-1) if self.cuda else None

    @contextlib.contextmanager
    def producing(self) -> Iterator[None]:
        """The producer thread's device and side stream (nothing on a CPU device)."""
        if not self.cuda:
            yield
            return
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            yield

    def transfer(self, batch: Any) -> Any:
        if not self.cuda:
            return batch
        if self.twin_all:
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                out = _each_tensor(batch, self.twin_of, self.host_fields)
                event = torch.cuda.Event()
                event.record(self.stream)
            return out, event
        skip = self.host_fields
        if self.pin:
            batch = _each_tensor(batch, lambda t: t if t.is_cuda or t.is_pinned()
                                 else t.pin_memory(), skip)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            out = _each_tensor(batch, lambda t: t.to(self.device, non_blocking=True), skip)
            event = torch.cuda.Event()
            event.record(self.stream)
        return out, event

    def twin_of(self, host: torch.Tensor) -> torch.Tensor:
        """`host` (pinned first) carrying its copy on the device, made on the current stream;
        `host` itself where it cannot carry one (`device.twin.twinned`: on a device already,
        requiring grad, a tensor subclass, no version counters): the user's ``.to`` copies
        it then, as in PyG."""
        if (host.device.type != "cpu" or host.requires_grad or type(host) is not torch.Tensor
                or twin_subclass_reason() is not None or tensor_version(host) is None):
            return host
        source = host.pin_memory() if self.pin and not host.is_pinned() else host
        return twinned(source, source.to(self.device, non_blocking=self.pin))

    def batch_of(self, item: Any) -> Any:
        """The batch inside a `transfer` result that is not `ready` yet: its host fields
        (``n_id``) can be read at once, its device tensors only after `ready`."""
        return item[0] if self.cuda else item

    def ready(self, item: Any) -> Any:
        if not self.cuda:
            return item
        out, event = item
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)

        def mark(t: torch.Tensor) -> torch.Tensor:
            for used in (t, device_twin(t)):   # a host id field's device copy (device.twin)
                if used is not None and used.is_cuda and used.layout == torch.strided:
                    used.record_stream(current)
            return t

        out = _each_tensor(out, mark)
        for value in vars(out).values() if hasattr(out, "stores") else ():
            if isinstance(value, torch.Tensor):   # outside the batch's store (PyG's
                mark(value)                       # _orig_edge_index), unseen by apply
        return out


def ids_on_host(ids: list[Tensor | None]) -> list[Tensor | None]:
    """Each of `ids` (1-D id tensors, or None) on the host: those on a device copied in one
    transfer (one wait for the device, not one a tensor), the others as they are. The host
    copies of one call are views of one buffer; a tensor whose dtype differs from the first's
    is copied alone, so every copy keeps its dtype."""
    away = [t for t in ids if t is not None and t.device.type != "cpu"]
    if not away:
        return list(ids)
    dtype = away[0].dtype
    joint = [t for t in away if t.dtype == dtype]
    parts = iter(torch.cat(joint).cpu().split([t.numel() for t in joint]))
    return [t if t is None or t.device.type == "cpu"
            else next(parts) if t.dtype == dtype else t.cpu() for t in ids]
