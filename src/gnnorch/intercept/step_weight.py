"""A rank's weight in a step's gradient average: the seeds it trained since its last step.

Where the ranks' batches differ in size (p does not divide the batch size, or an epoch's last
batch: `shard.ShardSampler`), averaging their gradients with equal weights is not the
gradient of a mean loss over the global batch; weighing rank r's by its seeds w_r is
(`join.Decision.scale`). `StepWeight` counts w_r from the training batches the loader seam
draws (`launch.context.EpochTimer.add`: a batch's seeds, a padding batch's none): the growth
of the rank's (batches, seeds) since its own last step, or -1 when it drew no training batch
in between (a full-batch step: the plain average). Gradient accumulation over several batches
adds their seeds, which weighs each rank by what its accumulated gradient stands for.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..launch import context

__all__ = ["StepWeight", "trained_in_context", "weigh"]


def trained_in_context() -> tuple[int, int]:
    """The active rank context's training batches and their seeds so far ((0, 0) outside a
    run)."""
    ctx = context.current()
    return (ctx.batches_trained, ctx.seeds_trained) if ctx is not None else (0, 0)


class StepWeight:
    """This rank's step weight (module docstring). `trained` returns the (batches, seeds) of
    training batches drawn so far (default: the active rank context's counts)."""

    def __init__(self, trained: Callable[[], tuple[int, int]] | None = None) -> None:
        self.trained = trained or trained_in_context
        self._at_step = (0, 0)   # `trained()` at this rank's last own step

    def now(self) -> int:
        """The weight of a step taken now: seeds since the last step, -1 when no batch."""
        batches, seeds = self.trained()
        return -1 if batches == self._at_step[0] else seeds - self._at_step[1]

    def stepped(self) -> None:
        """This rank took its own step: the next one counts from here."""
        self._at_step = self.trained()


def weigh(tensors: list[torch.Tensor], factor: float) -> None:
    """Multiply `tensors` in place by `factor` (nothing to do for 1)."""
    if factor != 1.0:
        with torch.no_grad():
            for t in tensors:
                t.mul_(factor)
