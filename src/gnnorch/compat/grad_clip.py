"""The torch name behind ``clip_grad_norm_`` that a run with several ranks replaces.

``torch.nn.utils.clip_grad_norm_`` computes its total norm with ``clip_grad._get_total_norm``,
looked up in its module's globals at every call. `total_norm_replaced` puts another function
there for the length of a run (`intercept.clipnorm`: the norm of the gradient averaged over
the ranks), which reaches ``clip_grad_norm_`` however the user imported it. The name is checked
once, by calling ``clip_grad_norm_`` with a spy in place; when it is missing or behaves
otherwise, nothing is replaced and clipping stays per rank.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from .registry import Missing, Probe

__all__ = ["TOTAL_NORM", "TotalNorm", "total_norm_replaced"]

#: ``replacement(original, tensors, norm_type, error_if_nonfinite, foreach)``
TotalNorm = Callable[[Callable[..., Tensor], Any, float, bool, Any], Tensor]


def _total_norm_seam() -> Any:
    """``torch.nn.utils.clip_grad``, whose ``clip_grad_norm_`` looks ``_get_total_norm`` up in
    the module's globals at every call (so a replacement reaches ``clip_grad_norm_`` however
    the user imported it): checked by calling ``clip_grad_norm_`` with a spy in place."""
    import torch.nn.utils.clip_grad as module

    original = module._get_total_norm
    if not callable(original):
        raise Missing("torch.nn.utils.clip_grad._get_total_norm is not callable")
    if torch.nn.utils.clip_grad_norm_ is not module.clip_grad_norm_:
        raise Missing("torch.nn.utils.clip_grad_norm_ is not clip_grad.clip_grad_norm_")
    seen: list[int] = []

    def spy(tensors: Any, *args: Any, **kwargs: Any) -> Tensor:
        seen.append(len(list(tensors)))
        return torch.tensor(4.0)

    param = torch.nn.Parameter(torch.zeros(3))
    param.grad = torch.ones(3)
    module._get_total_norm = spy
    try:
        norm = torch.nn.utils.clip_grad_norm_([param], 1.0)
    finally:
        module._get_total_norm = original
    if seen != [1] or float(norm) != 4.0 or not torch.allclose(param.grad, torch.full((3,), 0.25)):
        raise Missing("clip_grad_norm_ does not scale by the norm clip_grad._get_total_norm "
                      "returns")
    return module


TOTAL_NORM = Probe(
    "torch.nn.utils.clip_grad._get_total_norm", "intercept/gradsync.py",
    "with several ranks, clip_grad_norm_ clips each rank's own gradient before the average "
    "(not the averaged gradient one process would clip)", _total_norm_seam)


@contextlib.contextmanager
def total_norm_replaced(replacement: TotalNorm) -> Iterator[bool]:
    """For the block, every ``clip_grad_norm_`` gets its total norm from ``replacement``
    (given torch's own function and the call's arguments); yields False, and replaces
    nothing, when the seam is missing."""
    module = TOTAL_NORM.get()
    if module is None:
        yield False
        return
    original = module._get_total_norm

    def total_norm(tensors: Any, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: Any = None) -> Tensor:
        return replacement(original, tensors, norm_type, error_if_nonfinite, foreach)

    module._get_total_norm = total_norm
    try:
        yield True
    finally:
        module._get_total_norm = original
