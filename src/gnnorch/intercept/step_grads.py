"""What one rank puts into a step's gradient average (`gradsync`), dense or row-sparse.

In a step round every rank (steppers and followers) hands the same parameters, in the same
order (`param_order`), to the same collectives:

* A parameter without a gradient on every stepping rank keeps None everywhere (the update
  skips it, as it would in one process); one with a gradient on some stepping rank gets zeros
  on the ranks that have none or only follow, so the sum over ranks is the steppers' sum.
* A parameter whose gradient is sparse on every stepping rank that has one (the gradient of an
  ``Embedding(sparse=True)``, as PyG's ``Node2Vec`` / ``MetaPath2Vec`` train with
  ``SparseAdam``) is averaged *row-sparse* (`FlatCollectives.average_rows`): the average is
  sparse again, over the union of the ranks' rows, as a sparse optimizer requires; a rank
  without one sends an empty one. A sparse gradient with several sparse dimensions
  (``gather(..., sparse_grad=True)``) is first written by rows: every row it touches, whole.
* A parameter whose gradient is sparse on some rank and dense on another is averaged dense
  (the sparse ones made dense): the same sum.

Which parameters have a gradient, and which a sparse one, is summed over the ranks only when
some stepper lacks a gradient or holds a sparse one (`join.Decision.flags_needed`,
`sparse_needed`): one all-reduce of two flags per parameter.
"""
from __future__ import annotations

import torch

from .collectives import FlatCollectives

__all__ = ["gradient_layouts", "round_gradients"]


def gradient_layouts(collectives: FlatCollectives, params: list[torch.Tensor],
                     stepping: bool) -> tuple[list[bool], list[bool]]:
    """Per parameter, summed over the ranks: whether some stepping rank has a gradient, and
    whether every stepping rank that has one holds a sparse one (module docstring)."""
    n = len(params)
    has = [stepping and p.grad is not None for p in params]
    sparse = [h and p.grad.is_sparse for h, p in zip(has, params)]
    flags = torch.tensor(has + sparse, dtype=torch.int32)
    collectives.sum_flags(flags)
    counts = flags.tolist()
    present = [c > 0 for c in counts[:n]]
    return present, [0 < s == c for c, s in zip(counts[:n], counts[n:])]


def round_gradients(params: list[torch.Tensor], present: list[bool], sparse: list[bool],
                    stepping: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """This rank's gradients for the round, set in place on `params` (module docstring): the
    dense gradients to average, and the parameters whose gradients are averaged row-sparse."""
    dense: list[torch.Tensor] = []
    rows: list[torch.Tensor] = []
    for p, has, row_sparse in zip(params, present, sparse):
        if not has:
            if not stepping:
                p.grad = None   # no stepping rank has a gradient: the update skips p
            continue
        if row_sparse:
            p.grad = _by_rows(p.grad) if stepping and p.grad is not None else _no_rows(p)
            rows.append(p)
            continue
        if p.grad is None or not stepping:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse:
            p.grad = p.grad.to_dense()
        dense.append(p.grad)
    return dense, rows


def _no_rows(p: torch.Tensor) -> torch.Tensor:
    """An empty row-sparse gradient of `p`'s shape."""
    index = torch.empty(1, 0, dtype=torch.long, device=p.device)
    return torch.sparse_coo_tensor(index, p.new_zeros((0, *p.shape[1:])), p.shape,
                                   check_invariants=False)


def _by_rows(grad: torch.Tensor) -> torch.Tensor:
    """`grad` with one sparse dimension: itself, or every row it touches, whole."""
    if grad.sparse_dim() == 1:
        return grad
    grad = grad.coalesce()
    touched = grad.indices()[0].unique()
    return torch.sparse_coo_tensor(touched.view(1, -1), grad.to_dense()[touched], grad.shape,
                                   check_invariants=False)
