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
from typing import Any, Callable, Hashable

import torch
import torch.nn.functional as F
from torch import Tensor

from .hetero import SampledGraph

__all__ = ["VERIFY_RTOL", "VERIFY_ATOL", "output_parts", "pad_compact", "rows_per_vertex",
           "same_values", "seed_rows_differ", "seed_rows_only", "verify_trimming"]

VERIFY_RTOL = 1e-4
VERIFY_ATOL = 1e-5

NOT_ONE_TENSOR = "the model's output is not one tensor with a row per vertex"
NOT_PER_TYPE = ("the model's output is neither one tensor with a row per vertex of the seeds' "
                "type nor a dict of such tensors by node type")

Parts = dict[Hashable, tuple[Tensor, int, int]]


def output_parts(output: Any, batch: SampledGraph) -> Parts | None:
    """The parts of a model output trimming vouches for, key -> (tensor, exact rows, rows):
    a one-tensor output (key None), or each tensor of a dict output by node type (a
    HeteroData batch's: `to_hetero` and `HeteroConv` models return one); None for anything
    else."""
    if isinstance(output, Tensor):
        rows = batch.output_rows(None)
        return None if rows is None or output.dim() < 1 else {None: (output, *rows)}
    if not (batch.hetero and isinstance(output, dict) and output):
        return None
    parts: Parts = {}
    for key, value in output.items():
        rows = batch.output_rows(key)
        if rows is None or not isinstance(value, Tensor) or value.dim() < 1:
            return None
        parts[key] = (value, *rows)
    return parts


def rows_per_vertex(output: Any, batch: SampledGraph) -> bool:
    """Whether `output` (an untrimmed one) has exactly a row per batch vertex in each of its
    parts (`output_parts`), and some exact row: what an encoder returns."""
    parts = output_parts(output, batch)
    return parts is not None and all(value.size(0) == rows for value, _, rows in
                                     parts.values()) and any(e for _, e, _ in parts.values())


def seed_rows_only(output: Any, batch: SampledGraph) -> bool:
    """Whether `output` (an untrimmed one) holds exactly the seed rows of each of its parts
    (`output_parts`), some of them, and fewer than a row per vertex: the module kept them
    itself (``return x[:batch_size]``; a head on ``x_dict[seed_type][:batch_size]``). All its
    rows are then rows trimming vouches for: a trimmed forward's is handed back as it is."""
    parts = output_parts(output, batch)
    return parts is not None and all(value.size(0) == exact for value, exact, _ in
                                     parts.values()) and \
        any(exact for _, exact, _ in parts.values()) and \
        any(exact < rows for _, exact, rows in parts.values())


def same_values(a: Any, b: Any) -> bool:
    """Whether two outputs are equal within the check's tolerance (NaN equal to NaN): tensors
    of one shape and dtype, or dicts, lists and tuples of such, or other values equal."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and a.device == b.device):
            return False
        if not (a.is_floating_point() or a.is_complex()):
            return torch.equal(a, b)
        return torch.allclose(a, b, rtol=VERIFY_RTOL, atol=VERIFY_ATOL, equal_nan=True)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_values, a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that cannot say: not known equal
        return False


def _rebuilt(parts: dict[Hashable, Any]) -> Any:
    """An output of the same form from its parts: the tensor, or a dict by node type."""
    return parts[None] if None in parts else dict(parts)


def pad_compact(output: Any, batch: SampledGraph, compact: bool) -> Any:
    """A compact model output (seed rows only, per part) zero-padded to a row per batch
    vertex; other outputs unchanged. Only the seed rows of the result are exact."""
    parts = output_parts(output, batch) if compact else None
    if parts is None:
        return output
    return _rebuilt({key: _padded(value, exact, rows)
                     for key, (value, exact, rows) in parts.items()})


def _padded(value: Tensor, exact: int, rows: int) -> Tensor:
    if value.size(0) == exact and rows > exact:
        return F.pad(value, [0, 0] * (value.dim() - 1) + [0, rows - exact])
    return value


def verify_trimming(plain: Any, trimmed: Callable[[bool], tuple[Any, str | None]],
                    batch: SampledGraph) -> tuple[bool, bool, str | None]:
    """(trim, compact, reason) for a model whose untrimmed output is `plain` on `batch`.

    `trimmed(compact)` runs the trimmed forward and returns its padded output and the problem
    the seam met on the way (None: none); it may raise, which counts as a failed try. Every
    part's exact rows are compared (`output_parts`); at least one row must be.
    """
    unfit = NOT_PER_TYPE if batch.hetero else NOT_ONE_TENSOR
    parts = output_parts(plain, batch)
    if parts is None or any(value.size(0) < exact for value, exact, _ in parts.values()) or \
            not any(exact for _, exact, _ in parts.values()):
        return False, False, unfit
    reason = unfit
    for compact in (True, False):
        try:
            out, problem = trimmed(compact)
        except Exception as exc:  # noqa: BLE001 - compact shapes may not fit
            reason = f"trimmed forward failed: {type(exc).__name__}: {exc}"
            continue
        if problem is not None:
            reason = problem
            continue
        got = output_parts(out, batch)
        if got is None or got.keys() != parts.keys() or any(
                got[key][0].shape != value.shape for key, (value, _, _) in parts.items()):
            continue
        verdict = _compare(parts, got)
        if verdict is None:
            return True, compact, None
        reason = verdict
    return False, False, reason


def seed_rows_differ(plain: Any, trimmed: Any, batch: SampledGraph) -> str | None:
    """Why the exact rows of a trimmed output differ from those of the untrimmed `plain`, or
    why they cannot be compared (None: they are equal)."""
    want, got = output_parts(plain, batch), output_parts(trimmed, batch)
    if want is None or got is None or want.keys() != got.keys():
        return "its trimmed and untrimmed outputs differ in form"
    if any(got[key][0].size(0) < exact for key, (_, exact, _) in want.items()):
        return "its trimmed output has fewer rows than the seeds"
    return _compare(want, got)


def _compare(plain: Parts, trimmed: Parts) -> str | None:
    """Why the exact rows of `trimmed` differ from those of `plain` (None: they do not)."""
    for key, (value, exact, _) in plain.items():
        out = trimmed[key][0]
        if out.dtype != value.dtype:
            return f"the trimmed output is {out.dtype}, the untrimmed one {value.dtype}"
        a, b = value[:exact], out[:exact]
        if not torch.allclose(a, b, rtol=VERIFY_RTOL, atol=VERIFY_ATOL, equal_nan=True):
            diff = float((a - b).abs().nan_to_num(math.inf).max())
            return (f"trimmed and untrimmed seed outputs differ (max abs diff {diff:.3g}): "
                    f"the model mixes vertices across the batch")
    return None
