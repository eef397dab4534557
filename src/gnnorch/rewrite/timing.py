"""Wall-clock timing of one forward (+ backward) of a closure, without side effects.

The backward pass is run with :func:`torch.autograd.grad` on explicitly listed tensors, so
no ``.grad`` field is touched; on CUDA the device is synchronised around the clock reads.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["synchronize", "time_call", "first_tensor"]


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_tensor(out: object) -> Tensor:
    """The output tensor of a layer call (``(out, attention)`` tuples give ``out``)."""
    while isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, Tensor):
        raise TypeError(f"layer returned {type(out).__name__}, expected a Tensor")
    return out


def time_call(fn: Callable[[], object], wrt: Sequence[Tensor], backward: bool,
              device: torch.device) -> tuple[float, Tensor]:
    """Seconds for ``fn()`` plus, when ``backward``, the gradient of its output w.r.t. ``wrt``;
    and the (detached) output.

    The output gradient is all ones. Times the forward only when ``backward`` is False or
    nothing in ``wrt`` is reachable from the output.
    """
    synchronize(device)
    start = time.perf_counter()
    with torch.set_grad_enabled(backward):
        out = first_tensor(fn())
    if backward and out.requires_grad and wrt:
        torch.autograd.grad(out, list(wrt), torch.ones_like(out), allow_unused=True)
    synchronize(device)
    return time.perf_counter() - start, out.detach()
