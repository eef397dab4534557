"""The one-off check that decides whether a model may be trimmed, and the padding of compact
outputs.

Invariant checked: on one batch, in eval mode, without gradients and from the same random
state, the seed rows [0, batch_size) of the trimmed forward equal those of the untrimmed one
within `VERIFY_RTOL` / `VERIFY_ATOL` (NaN equal to NaN). Compact trimming (layers return only
the rows the next layer reads) is tried first; a model whose code between layers needs every
row (a residual on all rows, JumpingKnowledge) fails it, loudly (an exception) or by a
different output, and is checked padded instead.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .batch import BatchGraph

__all__ = ["VERIFY_RTOL", "VERIFY_ATOL", "pad_compact", "verify_trimming"]

VERIFY_RTOL = 1e-4
VERIFY_ATOL = 1e-5

NOT_ONE_TENSOR = "the model's output is not one tensor with a row per vertex"


def pad_compact(output: Any, batch: BatchGraph, compact: bool) -> Any:
    """A compact model output (seed rows only) zero-padded to a row per batch vertex; other
    outputs unchanged. Only the seed rows of the result are exact."""
    if (compact and isinstance(output, Tensor) and output.dim() >= 1
            and output.size(0) == batch.batch_size and batch.num_nodes > batch.batch_size):
        pad = [0, 0] * (output.dim() - 1) + [0, batch.num_nodes - batch.batch_size]
        return F.pad(output, pad)
    return output


def verify_trimming(plain: Any, trimmed: Callable[[bool], tuple[Any, str | None]],
                    batch_size: int) -> tuple[bool, bool, str | None]:
    """(trim, compact, reason) for a model whose untrimmed output is `plain`.

    `trimmed(compact)` runs the trimmed forward and returns its padded output and the problem
    the seam met on the way (None: none); it may raise, which counts as a failed try.
    """
    if not (isinstance(plain, Tensor) and plain.dim() >= 1 and plain.size(0) >= batch_size):
        return False, False, NOT_ONE_TENSOR
    reason = NOT_ONE_TENSOR
    for compact in (True, False):
        try:
            out, problem = trimmed(compact)
        except Exception as exc:  # noqa: BLE001 - compact shapes may not fit
            reason = f"trimmed forward failed: {type(exc).__name__}: {exc}"
            continue
        if problem is not None:
            reason = problem
            continue
        if not (isinstance(out, Tensor) and out.shape == plain.shape):
            continue
        if out.dtype != plain.dtype:
            reason = (f"the trimmed output is {out.dtype}, the untrimmed one {plain.dtype}")
            continue
        a, b = plain[:batch_size], out[:batch_size]
        if torch.allclose(a, b, rtol=VERIFY_RTOL, atol=VERIFY_ATOL, equal_nan=True):
            return True, compact, None
        diff = float((a - b).abs().nan_to_num(math.inf).max())
        reason = (f"trimmed and untrimmed seed outputs differ (max abs diff {diff:.3g}): the "
                  f"model mixes vertices across the batch")
    return False, False, reason
