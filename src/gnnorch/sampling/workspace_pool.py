"""Scratch buffers a sampler reuses from call to call, kept per CUDA stream.

A sampling call borrows a buffer (a global-to-local id map, `gnnorch.sampling.uniform.
new_workspace`, or one per node type) and gives it back once it has *queued* its last use of
it. On a GPU that use may not have run yet, so a buffer goes back to the pool of the stream
the call ran on, and only a call on the same stream (which runs its work in order) takes it
again: loaders sampling on two side streams never share one. On the CPU there is one pool.
Several threads may borrow at once (``dict.setdefault``, ``list.pop`` and ``list.append`` are
atomic); each gets its own buffer. Pickles empty: a DataLoader worker makes its own.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Generic, Iterator, TypeVar

import torch

__all__ = ["WorkspacePool"]

T = TypeVar("T")


class WorkspacePool(Generic[T]):
    """Free buffers made by ``make(device)``, per CUDA stream (module docstring)."""

    def __init__(self, make: Callable[[torch.device], T]) -> None:
        self.make = make
        self._free: dict[int, list[T]] = {}

    @contextlib.contextmanager
    def borrow(self, device: torch.device) -> Iterator[T]:
        """A free buffer for `device` (a new one when none is free), back in the pool of the
        current stream when the block ends, also by an exception (the sampler resets it)."""
        key = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        free = self._free.setdefault(key, [])
        try:
            buffer = free.pop()
        except IndexError:
            buffer = self.make(device)
        try:
            yield buffer
        finally:
            free.append(buffer)

    def pools(self) -> dict[int, list[T]]:
        """The free buffers per stream key (0 on the CPU)."""
        return self._free

    def clear(self) -> None:
        """Forget every buffer (the sampler's structure moved: sizes or device changed)."""
        self._free = {}

    def __getstate__(self) -> dict:
        return {"make": self.make, "_free": {}}
