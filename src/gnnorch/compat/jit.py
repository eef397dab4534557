"""TorchScript, for the bodies gnnorch compiles, resolved once and checked, failing closed.

A function written in the subset of Python that TorchScript compiles (the sampler's body,
`gnnorch.sampling.uniform`) runs in TorchScript's interpreter: the same operations in the same
order, without Python's cost per operation and without holding the GIL while it runs. torch
2.13 warns that ``torch.jit.script`` is deprecated; where it is gone or cannot compile a body,
`compiled_function` answers None and the caller runs the body eagerly (same results), with
the reason in `gnnorch.compat.unavailable`.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

import torch
from torch import Tensor

from .registry import Missing, Probe

__all__ = ["JIT_SCRIPT", "compiled_function"]


def _callable(value: Any, name: str) -> Any:
    if not callable(value):
        raise Missing(f"{name} is a {type(value).__name__}, not callable")
    return value


def _probe_body(x: Tensor, generator: torch.Generator | None) -> Tensor:
    """What a compiled body of gnnorch uses: an optional generator, an in-place scatter with a
    reduction, a data-dependent size (`nonzero`), a loop over a list of ints."""
    u = torch.rand(x.shape, dtype=torch.float64, generator=generator)
    x.scatter_reduce_(0, (u < 2.0).nonzero().squeeze(1), x.flip(0), "amin")
    for k in [1, 2]:
        x = x + k
    return x


def _jit_script() -> Callable[[Callable[..., Any]], Any]:
    script = _callable(torch.jit.script, "torch.jit.script")
    with warnings.catch_warnings():   # torch 2.13 warns that TorchScript is deprecated
        warnings.simplefilter("ignore")
        probe = script(_probe_body)
    got = probe(torch.arange(3), torch.Generator().manual_seed(0))
    if got.tolist() != [3, 4, 3]:
        raise Missing(f"a compiled probe returned {got.tolist()}, expected [3, 4, 3]")
    return script


JIT_SCRIPT = Probe(
    "torch.jit.script", "sampling/uniform.py, sampling/hetero.py (the compiled sampler bodies)",
    "the sampler's body runs eagerly: the same batches, with Python's cost per operation and "
    "the GIL held while it samples", _jit_script)

_COMPILED: dict[Callable[..., Any], Any] = {}
_COMPILING = threading.Lock()


def compiled_function(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` compiled by TorchScript, once per process; None where TorchScript is missing or
    cannot compile ``fn`` (the reason goes to `gnnorch.compat.unavailable` under
    ``torch.jit.script``; the caller runs ``fn`` eagerly).

    A compiled function runs the same operations in the same order, so it returns what ``fn``
    returns; calling it releases the GIL until it returns.
    """
    if fn in _COMPILED:
        return _COMPILED[fn]
    with _COMPILING:
        if fn not in _COMPILED:
            _COMPILED[fn] = _compile(fn)
    return _COMPILED[fn]


def _compile(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    script = JIT_SCRIPT.get()
    if script is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = script(fn)
    except Exception as error:  # noqa: BLE001 - any failure: run it eagerly
        JIT_SCRIPT.mark_missing(f"compiling {fn.__qualname__} failed: "
                                f"{type(error).__name__}: {str(error).splitlines()[0]}")
        return None

    def run(*args: Any) -> Any:
        # the interpreter alone: no profiling, specialisation or fusion (which could compile
        # kernels at run time, or round differently); the switch is the calling thread's
        with torch.jit.optimized_execution(False):
            return compiled(*args)

    run.__qualname__ = run.__name__ = f"compiled_{fn.__name__}"
    return run
