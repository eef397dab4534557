"""``clip_grad_norm_`` with several ranks: every rank clips by the norm of the averaged gradient.

One process over the global batch (or DDP, whose backward averages) clips the global gradient
``g``: ``g <- g * min(1, max_norm / ||g||)``. gnnorch averages gradients at the optimizer step
(`gradsync`), after the user's clip, so when ``clip_grad_norm_`` runs each rank holds only its
own ``g_r``. Clipping that alone would scale every rank by a different, larger norm (each
rank's batch is smaller, its gradient noisier) and change the update.

While a run has several ranks, ``clip_grad_norm_``'s total norm (torch's
``clip_grad._get_total_norm``, replaced through `compat.grad_clip.total_norm_replaced`) comes
from a ``NORM`` round (`join`): the clipping ranks' gradients are averaged,
``gbar = (1/c) * sum_r g_r`` over the ``c`` ranks that clip (a follower -- a rank whose epoch
or function ended -- sends zeros; weighted by each rank's seeds where those differ, as the
step's average is: `step_weight`), and each clipping rank is told ``||gbar||``, computed by
torch's own function on the averaged tensors (averaged in the parameters' common dtype, as the
step averages). Each rank then scales its own ``g_r`` by ``s = min(1, max_norm / ||gbar||)``,
and the step's average of the scaled gradients is ``(1/c) * sum_r s * g_r = s * gbar``: the
clipped gradient of one process, equal up to floating-point rounding.

Index space: the parameters of the run's optimizers in construction order (the same on every
rank). Unless every clipping rank clips all of them, each says which it clips (flags summed
over ranks); one clipped on some rank but without a gradient on another counts as zero there,
as in a step. The norm of tensors that are not all gradients of optimizer parameters
(``clip_grad_norm_`` on something else) is torch's own, of this rank's tensors.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Protocol

import torch

from .collectives import FlatCollectives, Optimizers
from .join import Ask, Decision, Kind, Rounds
from .step_weight import StepWeight, weigh

__all__ = ["NormHost", "AveragedNorm"]


class NormHost(Protocol):
    """What the norm rounds need of the gradient synchroniser (`gradsync`)."""

    collectives: FlatCollectives
    optimizers: Optimizers
    weight: StepWeight       # this rank's weight in the average

    @property
    def rounds(self) -> Rounds: ...

    def ask(self, kind: Kind, **fields: Any) -> Ask:
        """This rank's ask, located at its epoch and step."""

    def averaging(self) -> bool:
        """Whether gnnorch averages this rank's gradients now (not following another rank's
        step, not under the user's own torch.distributed)."""

    def join_if_ended(self) -> None:
        """If this rank's training epoch ended since its last step, follow the other ranks
        until they end it too (its own gradients kept)."""


class AveragedNorm:
    """The ``clip_grad_norm_`` total norm of a run with several ranks (module docstring)."""

    def __init__(self, host: NormHost) -> None:
        self.host = host
        self.rounds = 0      # NORM rounds this rank clipped in

    def total_norm(self, original: Callable[..., torch.Tensor], tensors: Any, norm_type: float,
                   error_if_nonfinite: bool, foreach: Any) -> torch.Tensor:
        """torch's ``_get_total_norm`` of the averaged gradients (`tensors` the gradients
        ``clip_grad_norm_`` collected), or of `tensors` themselves when they are not all
        gradients of optimizer parameters or gnnorch does not average now."""
        grads = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        host = self.host
        space = host.optimizers.parameters() if host.averaging() and grads else []
        mine = _positions(grads, space)
        if mine is None or any(g.is_sparse for g in grads):   # sparse: torch's own error
            return original(grads, norm_type, error_if_nonfinite, foreach)
        host.join_if_ended()
        ask = host.ask(Kind.NORM, tensors=len(space), numel=sum(p.numel() for p in space),
                       all_grads=len(mine) == len(space), weight=host.weight.now())
        decision = host.rounds.round(ask)
        while decision.action != "norm":   # void: a rank asked for a broadcast meanwhile
            decision = host.rounds.round(ask)
        averaged = self._average(space, mine, decision, clipping=True)
        self.rounds += 1
        return original(averaged, norm_type, error_if_nonfinite, foreach)

    def follow(self, decision: Decision) -> None:
        """A waiting rank's part in another rank's NORM round: zeros in, nothing kept."""
        self._average(self.host.optimizers.parameters(), set(), decision, clipping=False)

    def _average(self, space: list[torch.Tensor], mine: set[int], decision: Decision,
                 clipping: bool) -> list[torch.Tensor]:
        """The clipping ranks' average of the gradients any of them clips, in space order."""
        rounds, collectives = self.host.rounds, self.host.collectives
        ask = decision.asks[decision.clippers[0]]
        what = ask.where()
        if decision.followers:   # a follower must hold the clipping ranks' index space
            rounds.agree((len(space), sum(p.numel() for p in space)),
                         f"the gradient norm at {what}",
                         lambda row: f"optimizers of {row[0]} parameters ({row[1]} values)")
        chosen = list(enumerate(space))
        if decision.flags_needed:
            flags = torch.tensor([i in mine for i in range(len(space))], dtype=torch.int32)
            with rounds.collective(f"which gradients are clipped at {what}"):
                collectives.sum_flags(flags)
            chosen = [(i, p) for (i, p), flag in zip(chosen, flags.tolist()) if flag]
        if not chosen:
            return []
        device = chosen[0][1].device
        dtype = functools.reduce(torch.promote_types, (p.dtype for _, p in chosen))
        flat = torch.cat([
            (p.grad if clipping and i in mine else torch.zeros_like(p)).detach().reshape(-1)
            .to(device=device, dtype=dtype) for i, p in chosen])
        weigh([flat], decision.scale(rounds.rank) if clipping else 1.0)   # as the step will
        with rounds.collective(f"the gradient average of {what}"):
            collectives.average([flat], contributors=len(decision.clippers))
        parts, offset = [], 0
        for i, p in chosen:
            dtype = p.grad.dtype if i in mine else p.dtype
            parts.append(flat[offset:offset + p.numel()].view_as(p).to(device=p.device,
                                                                        dtype=dtype))
            offset += p.numel()
        return parts


def _positions(grads: list[torch.Tensor], space: list[torch.Tensor]) -> set[int] | None:
    """The positions in `space` of the parameters whose gradients `grads` are (None unless
    every one of `grads` is the gradient of a parameter of `space`)."""
    if not space:
        return None
    where = {id(p.grad): i for i, p in enumerate(space) if p.grad is not None}
    found = {where.get(id(g), -1) for g in grads}
    return None if -1 in found else found
