"""Copying a batch to the training device on a side stream, for `pipeline.Prefetcher`.

`DeviceTransfer(device)` is the pair (transfer, ready) a Prefetcher takes: `transfer` runs in
the producer thread and copies every tensor of a batch (anything with PyG's ``.to`` / ``.apply``
or a tensor) to ``device`` on a dedicated CUDA stream, from pinned memory (tensors not pinned
yet are pinned first, so the copy is asynchronous), and records an event; `ready` runs in the
consumer's thread and makes its current stream wait for that event, and marks every tensor as
used on that stream (``record_stream``) so the caching allocator does not hand the memory to
another tensor while the consumer's kernels may still read it. On a CPU device both are the
identity (``.to`` a CPU device is a no-op).
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["DeviceTransfer"]


def _each_tensor(value: Any, fn) -> Any:  # noqa: ANN001 - fn: Tensor -> Tensor
    if isinstance(value, torch.Tensor):
        return fn(value)
    if hasattr(value, "apply"):          # PyG Data / HeteroData / Batch
        return value.apply(fn)
    if isinstance(value, (list, tuple)):
        return type(value)(_each_tensor(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _each_tensor(v, fn) for k, v in value.items()}
    return value


class DeviceTransfer:
    """`transfer` / `ready` for a Prefetcher towards `device` (see the module docstring)."""

    def __init__(self, device: torch.device | str, pin: bool = True) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.pin = pin and self.cuda
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None

    def transfer(self, batch: Any) -> Any:
        if not self.cuda:
            return batch
        if self.pin:
            batch = _each_tensor(batch, lambda t: t if t.is_cuda or t.is_pinned()
                                 else t.pin_memory())
        with torch.cuda.stream(self.stream):
            out = _each_tensor(batch, lambda t: t.to(self.device, non_blocking=True))
            event = torch.cuda.Event()
            event.record(self.stream)
        return out, event

    def ready(self, item: Any) -> Any:
        if not self.cuda:
            return item
        out, event = item
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)

        def mark(t: torch.Tensor) -> torch.Tensor:
            if t.is_cuda:
                t.record_stream(current)
            return t

        return _each_tensor(out, mark)
