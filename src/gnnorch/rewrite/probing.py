"""Probing helpers of the rewrite engine: run two ways of computing one layer call on the same
inputs, from the same random state, without side effects, and compare their outputs.

Invariants: a probe touches no ``.grad`` (gradients via ``torch.autograd.grad`` on detached
leaves), leaves the layer's buffers as they were (BatchNorm statistics) and the user's random
stream where it was (every run starts from the current state, which is restored after it).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.nn import Module

from .planner import ORIGINAL, REWRITTEN
from .timing import time_call

__all__ = ["detach", "buffers_restored", "same_random_stream", "outputs_differ", "time_alternating",
           "time_orders", "ORIGINAL", "REWRITTEN"]


def detach(value: Any, wrt: list[Tensor]) -> Any:
    """A copy of an argument whose floating tensors that need a gradient are fresh leaves
    (collected in ``wrt``); tuples and lists are copied one level deep."""
    if isinstance(value, Tensor) and value.requires_grad:
        leaf = value.detach().requires_grad_()
        wrt.append(leaf)
        return leaf
    if isinstance(value, (tuple, list)):
        return type(value)(detach(v, wrt) for v in value)
    return value


@contextlib.contextmanager
def buffers_restored(layer: Module) -> Iterator[None]:
    """Run a probe without changing the layer's buffers (e.g. BatchNorm statistics)."""
    saved = [(buf, buf.detach().clone()) for buf in layer.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)


def same_random_stream(device: torch.device) -> contextlib.AbstractContextManager:
    """Every run inside starts from the current random state, which is restored after it:
    both orders draw the same dropout masks and the user's stream does not move."""
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


def outputs_differ(original: Tensor, rewritten: Tensor) -> str | None:
    """Why two outputs of one call are not the same result, or None.

    The bound is loose on purpose (1e-3 of the output's scale, or 30 machine epsilons for
    half precision): reordering moves float32 results by ~1e-6 relative, a wrong rewrite
    by O(1).
    """
    if original.shape != rewritten.shape:
        return f"shape {tuple(rewritten.shape)} != {tuple(original.shape)}"
    if original.numel() == 0:
        return None
    scale = float(original.abs().max()) + 1e-12
    worst = float((original.double() - rewritten.double()).abs().max())
    tolerance = max(1e-3, 30 * torch.finfo(original.dtype).eps) * scale
    if not worst <= tolerance:  # also catches NaN
        return f"max |difference| {worst:.3g} at output scale {scale:.3g}"
    return None



def time_alternating(runs: dict[str, Callable[[], Any]], wrt: list[Tensor], backward: bool,
                      device: torch.device, repeats: int
                      ) -> tuple[dict[str, list[float]], dict[str, Tensor]]:
    """Fwd(+bwd) seconds of every run, ``repeats`` times, alternating which goes first; each
    from the same random state (same dropout masks; the user's stream does not move). Returns
    the times per run and each run's last output."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, Tensor] = {}
    names = list(runs)
    for repeat in range(repeats):
        for name in (names if repeat % 2 == 0 else names[::-1]):
            with same_random_stream(device):
                seconds, outputs[name] = time_call(runs[name], wrt, backward, device)
            times[name].append(seconds)
    return times, outputs


def time_orders(rule: Any, layer: Module, original_forward: Callable[..., Any], args: tuple,
                kwargs: dict, params: tuple[Tensor, ...], backward: bool, device: torch.device,
                repeats: int) -> tuple[dict[str, list[float]], dict[str, Tensor]]:
    """Fwd(+bwd) seconds and outputs of PyG's order (ORIGINAL) and the rule's (REWRITTEN) on
    detached copies of the call's inputs, gradients taken for the parameters that need one
    and those inputs; the layer's buffers are restored afterwards."""
    with buffers_restored(layer):
        inputs: list[Tensor] = []
        d_args = detach(tuple(args), inputs)
        d_kwargs = {k: detach(v, inputs) for k, v in kwargs.items()}
        call = rule.bind(layer, d_args, d_kwargs)
        wrt = [p for p in params if p.requires_grad] + inputs
        runs: dict[str, Callable[[], Any]] = {
            ORIGINAL: lambda: original_forward(*d_args, **d_kwargs),
            REWRITTEN: lambda: rule.forward(layer, call),
        }
        return time_alternating(runs, wrt, backward, device, repeats)
