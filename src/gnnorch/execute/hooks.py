"""Hooks: what a caller (the auto-tuner) adds to one run without the launcher knowing of it.

A hook is a plain object (picklable when the run has rank processes: each rank gets its own
copy) with two methods, called in every rank of the run around the user's function:

* ``prepare(ctx)``: the rank context exists, no seam is installed yet, the user's function has
  not started: add batch callbacks, replace ``ctx.epochs`` with a feed, keep ``ctx``;
* ``finish(ctx, exc) -> bool``: the function returned (``exc`` None) or raised ``exc``; the
  seams are removed and ``ctx.stats`` is complete. Returning True says ``exc`` is the hook's
  own normal end (e.g. a probe's budget is spent): the run then returns None as the value.
  Every hook's ``finish`` is called, in reverse order.

A hook with ``mute = True`` asks that the user's output not reach the caller: discarded when
the rank runs in the caller's process, written to ``<log_dir>/rank0.log`` by rank 0 of rank
processes (the others always write their logs).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..launch.context import RankContext


class Hook:
    """Base class (optional: any object with these members will do)."""

    mute: bool = False

    def prepare(self, ctx: RankContext) -> None:
        """Before the user's function starts in this rank."""

    def finish(self, ctx: RankContext, exc: BaseException | None) -> bool:
        """After it ended; True: `exc` is this hook's normal end of the run."""
        return False


class Mute(Hook):
    """Keep the user's output from the caller (probes)."""

    mute = True


def muted(hooks: Iterable[Hook]) -> bool:
    """Whether any hook asks for the user's output to be kept from the caller."""
    return any(getattr(hook, "mute", False) for hook in hooks)


def prepare_all(hooks: Sequence[Hook], ctx: RankContext) -> None:
    for hook in hooks:
        hook.prepare(ctx)


def finish_all(hooks: Sequence[Hook], ctx: RankContext, exc: BaseException | None) -> bool:
    """Call every hook's `finish` (last prepared first); True when one of them says `exc` is
    its normal end."""
    handled = False
    for hook in reversed(hooks):
        handled = bool(hook.finish(ctx, exc)) or handled
    return handled and exc is not None
