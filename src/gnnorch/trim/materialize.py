"""Recomputing a trimmed forward untrimmed when its output is read beyond the seed rows.

A trimmed forward's output (`gnnorch.trim.exact_output.PrefixExact`) holds exact values in its
seed rows only. When anything reads another row, the forward is recomputed untrimmed, once:
same batch, inputs, grad mode and train/eval flag, and — when the model's parameters changed
in place since (an optimizer step) — the parameter values of *that* forward. A training forward
(gradients on, training mode) keeps a copy of its parameters for this; any other forward whose
model changed is refused with `TrimmingError`, since its old weights are gone. Trimming is then
switched off for the model, with a `TrimmingWarning`.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor

from ..compat import torch as compat_torch
from ..errors import TrimmingError, TrimmingWarning
from .state import ModelState

__all__ = ["parameter_versions", "ParameterSnapshot", "parameter_snapshot", "materializer",
           "run_as"]

Rerun = Callable[[bool, bool, "dict[str, Tensor] | None"], Tensor]


def parameter_versions(model: torch.nn.Module) -> tuple[int, ...] | None:
    """In-place version counters of the model's parameters (an optimizer step bumps them);
    None when torch keeps none (`gnnorch.compat`: parameters are then compared by value)."""
    return compat_torch.tensor_versions(tuple(model.parameters()))


def _changed(model: torch.nn.Module, params: tuple[Tensor, ...],
             versions: tuple[int, ...] | None, reference: "ParameterSnapshot | None") -> bool:
    """Whether the model's parameters changed since `params` were its parameters with
    `versions` (or, without version counters, the values of `reference`): replaced, or
    written in place."""
    now = tuple(model.parameters())
    if len(now) != len(params) or any(a is not b for a, b in zip(now, params)):
        return True
    if versions is not None:
        return compat_torch.tensor_versions(now) != versions
    return any(not torch.equal(p.detach(), value)
               for p, value in zip(now, reference.tensors().values()))


class ParameterSnapshot:
    """A detached copy of a model's parameters, taken at every training forward.

    Taking it costs one copy per dtype and device (a concatenation of the flattened
    parameters, under ``no_grad``), not one per parameter: on a GPU each copy is a kernel
    launch, and on the trainer's thread each Python-level operation is host time. The
    per-parameter tensors (views of the copy: leaves with the parameters' ``requires_grad``)
    are built only when asked for (`tensors`): the rare recomputation path."""

    __slots__ = ("_named", "_flat", "_tensors")

    def __init__(self, named: list[tuple[str, Tensor]]) -> None:
        self._named = [(name, p.shape, p.requires_grad, (p.dtype, p.device))
                       for name, p in named]
        groups: dict[tuple[torch.dtype, torch.device], list[Tensor]] = {}
        for _, p in named:
            groups.setdefault((p.dtype, p.device), []).append(p)
        with torch.no_grad():
            self._flat = {key: torch.cat([p.reshape(-1) for p in members])
                          for key, members in groups.items()}
        self._tensors: dict[str, Tensor] | None = None

    def tensors(self) -> dict[str, Tensor]:
        """The copy by parameter name, in the model's parameter order."""
        if self._tensors is None:
            sizes: dict[tuple[torch.dtype, torch.device], list[int]] = {}
            for _, shape, _, key in self._named:
                sizes.setdefault(key, []).append(shape.numel())
            parts = {key: iter(flat.split(sizes[key])) for key, flat in self._flat.items()}
            self._tensors = {name: next(parts[key]).view(shape).requires_grad_(requires_grad)
                             for name, shape, requires_grad, key in self._named}
        return self._tensors


def parameter_snapshot(model: torch.nn.Module) -> dict[str, Tensor]:
    """A detached copy of the model's parameters (leaves with the same `requires_grad`)."""
    return ParameterSnapshot(list(model.named_parameters())).tensors()


def run_as(model: torch.nn.Module, grad: bool, training: bool,
           parameters: "dict[str, Tensor] | None", args: tuple, kwargs: dict) -> Tensor:
    """`model(*args, **kwargs)` with that grad mode and train/eval flag (restored after), and
    with `parameters` instead of the model's own when given."""
    flip = model.training != training
    try:
        if flip:
            model.train(training)
        with torch.set_grad_enabled(grad):
            if parameters is not None:
                return torch.func.functional_call(model, parameters, args, kwargs, strict=False)
            return model(*args, **kwargs)
    finally:
        if flip:
            model.train(not training)


def materializer(model: torch.nn.Module, state: ModelState, batch_size: int,
                 rerun: Rerun, name: str | None = None) -> Callable[[str], Tensor]:
    """What recomputes the forward just run when its output is read beyond the seed rows.

    `model` is the module whose output it is (the model, or its encoder: `name` names it for
    the messages; default: the model's name). `rerun(grad, training, parameters)` runs the
    same call untrimmed with that grad mode and train/eval flag (and those parameter values
    instead of the module's, when given); the returned function takes the name of the reading
    operation (for the warning).
    """
    name = name or state.name
    grad, training = torch.is_grad_enabled(), model.training
    named = list(model.named_parameters())      # one walk of the model per forward
    params = tuple(p for _, p in named)
    versions = compat_torch.tensor_versions(params)
    snapshot = ParameterSnapshot(named) if grad and training else None
    reference = None if versions is not None else (snapshot or ParameterSnapshot(named))

    def materialize(reason: str) -> Tensor:
        stale = _changed(model, params, versions, reference)
        if stale and snapshot is None:
            state.disable("output read beyond the seeds after a change")
            raise TrimmingError(
                f"gnnorch: the output of {name} was read beyond its first {batch_size} "
                f"rows (the seed rows) by {reason} after its parameters changed in place. "
                f"Hop-aware trimming computes only the seed rows exactly and can no longer "
                f"recompute the others with the old weights. Read those rows before changing "
                f"the model, or pass trim=False to gnnorch.Runtime.")
        state.disable(f"its output was read beyond the seed rows ({reason})")
        state.materialized += 1
        warnings.warn(TrimmingWarning(
            f"gnnorch: the output of {name} was read beyond its first {batch_size} rows "
            f"(the seed rows of the batch) by {reason}; hop-aware trimming computes only the "
            f"seed rows, so this forward was recomputed untrimmed (exact values) and trimming "
            f"is now off for this model. To keep trimming, read only out[:batch.batch_size] (of a "
            f"link batch: the rows at its edge_label_index); "
            f"to silence this, pass trim=False to gnnorch.Runtime."), stacklevel=4)
        return rerun(grad, training, snapshot.tensors() if stale else None)

    return materialize
