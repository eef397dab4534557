"""Uneven ranks: what each rank asks of a gradient-seam collective, and what all ranks decide.

Every collective of the gradient seam (`gradsync`) is preceded by a *round*: one small
all-reduce on a gloo group of its own, in which each rank writes what it is about to do (an
`Ask`) into its own row of a ``world x FIELDS`` table, so that every rank sees every rank's ask
and takes the same `decide` decision without another message. A rank asks

* ``STEP``: an optimizer step (the optimizer's index in construction order, its tensors);
* ``JOIN``: this rank's training epoch ended (it left its loop or the loader ran out); it waits
  until every rank has ended that epoch;
* ``FINAL``: the user's function returned; it waits until every rank's has;
* ``BROADCAST``: a module's first forward or a new optimizer: rank 0's tensors to every rank;
* ``NORM``: the total norm ``clip_grad_norm_`` scales by (`tensors`: the parameters of every
  optimizer, the index space in which ranks say which of them they clip);
* ``ORDER``: a sharded loader's training epoch starts: the digest of the permutation this
  rank drew for it (`numel`, `epoch_order`); also its ``JOIN`` where its last epoch ended.

Decisions (the semantics; docs/reliability.md):

* Some ranks ``STEP`` and none ``BROADCAST``: the steppers' gradients are averaged over the
  steppers only, ``g = (1/c) * sum_{r stepping} g_r`` with ``c`` stepping ranks (weighted by
  each stepper's seeds where those differ: `Decision.scale`); every ``JOIN`` /
  ``FINAL`` rank *follows*: it contributes nothing, receives that average and applies the same
  optimizer update, so parameters, buffers and optimizer states stay identical on every rank.
  Steppers that disagree (different optimizers or tensors) cannot be averaged:
  `UnevenRanksError` on every rank, naming each rank's step.
* Every rank ``BROADCAST`` with the same tensors: the broadcast runs. Any other round with a
  ``BROADCAST`` is void: the broadcasting ranks keep that module as their own (it was not built
  or run on every rank), the others ask again.
* Some ranks ``NORM`` and none ``STEP`` or ``BROADCAST``: the clipping ranks' gradients are
  averaged over them as for a step (followers send zeros and keep nothing), and each clipping
  rank is told the norm of that average: the norm one process clips by. Scaling each rank's
  gradient by ``max_norm / norm`` before the step's average is then scaling the average.
  ``NORM`` beside ``STEP`` (a rank steps where another clips), or clipping ranks whose
  parameters differ: `UnevenRanksError`.
* Nobody steps, clips or broadcasts: ``JOIN`` ranks go on; ``FINAL`` ranks go on when all are
  ``FINAL``. Every rank ``ORDER``: they go on, knowing whether their digests are equal
  (`Decision.same_order`); an ``ORDER`` rank beside a ``FINAL`` one goes on knowing they are
  not (that rank trains no more epochs); beside others, it asks again (``ORDER`` ranks follow
  steps and clips as ``JOIN`` ranks do).

A round waits at most the run's ``collective_timeout`` (the side group's timeout); then
`CollectiveError` names the ranks that did not arrive and where each was last seen (`watching`:
the run's watchdog publishes every rank's `PROGRESS` in the world's store).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import os
import random
import time
from typing import Callable, Iterator, Protocol

import torch
import torch.distributed as dist

from ..errors import CollectiveError, UnevenRanksError

FIELDS = 12
# test-only (scripts/soak.py): each round starts after a random sleep of up to this many seconds
SEAM_DELAY = float(os.environ.get("GNNORCH_SEAM_DELAY") or 0)
_DELAYS = random.Random()
FIX = ("gnnorch averages the k-th optimizer step of every rank with the k-th of the others "
       "within a training epoch; make every rank step the same optimizers in the same order "
       "(a skipped step or an early `break` is fine), or pass processes=1")


class Kind(enum.IntEnum):
    STEP = 1
    JOIN = 2
    FINAL = 3
    BROADCAST = 4
    NORM = 5
    ORDER = 6


@dataclasses.dataclass(frozen=True)
class Ask:
    """What one rank asks of a round. `epoch` / `step` locate it for messages: training
    epochs this rank has ended, optimizer steps it took since its last epoch join."""

    kind: Kind
    optimizer: int = -1      # STEP: index of the optimizer (construction order)
    tensors: int = 0         # STEP: parameters; BROADCAST: tensors
    numel: int = 0
    buffers: int = 0         # STEP: floating-point buffers broadcast after the step
    hypers: int = 0          # STEP: numeric hyper-parameters of its param groups
    all_grads: bool = True   # STEP: every parameter has a gradient; NORM: every one is clipped
    epoch: int = 0
    step: int = 0
    hyper_sum: float = 0.0   # STEP: the sum of those hyper-parameters (do the ranks' differ?)
    weight: int = -1         # STEP / NORM: seeds of the training batches since its last step
    #                          (-1: no training batch since then, e.g. a full-batch step)
    sparse: int = 0          # STEP: parameters whose gradient is sparse (Embedding(sparse=True))

    def row(self) -> list[float]:
        return [float(self.kind), float(self.optimizer), float(self.tensors), float(self.numel),
                float(self.buffers), float(self.hypers), float(self.all_grads),
                float(self.epoch), float(self.step), float(self.weight), float(self.sparse),
                float(self.hyper_sum)]

    @classmethod
    def from_row(cls, row: list[float]) -> "Ask":
        v = [int(round(x)) for x in row[:FIELDS - 1]]
        return cls(Kind(v[0]), v[1], v[2], v[3], v[4], v[5], bool(v[6]), v[7], v[8],
                   float(row[FIELDS - 1]), v[9], v[10])

    def signature(self) -> tuple[int, ...]:
        return (self.optimizer, self.tensors, self.numel, self.buffers, self.hypers)

    def where(self) -> str:
        at = f"step {self.step + 1} of its training epoch {self.epoch + 1}"
        if self.kind == Kind.STEP:
            return (f"optimizer #{self.optimizer}'s {at} ({self.tensors} parameters, "
                    f"{self.numel} values)")
        if self.kind == Kind.BROADCAST:
            return f"the broadcast of a new module's {self.tensors} tensors, before {at}"
        if self.kind == Kind.NORM:
            return (f"clip_grad_norm_ before {at} ({self.tensors} optimizer parameters, "
                    f"{self.numel} values)")
        if self.kind == Kind.JOIN:
            return f"the end of its training epoch {self.epoch} (after {self.step} steps)"
        if self.kind == Kind.ORDER:
            return f"the start of its training epoch {self.epoch + 1} (its permutation)"
        return f"the end of the function (after {self.step} steps of its last epoch)"


@dataclasses.dataclass(frozen=True)
class Decision:
    """What every rank does after a round (the same on every rank)."""

    action: str                    # "step" | "norm" | "broadcast" | "void" | "release" | "order"
    asks: tuple[Ask, ...]

    def ranks(self, *kinds: Kind) -> list[int]:
        return [r for r, a in enumerate(self.asks) if a.kind in kinds]

    @property
    def steppers(self) -> list[int]:
        return self.ranks(Kind.STEP)

    @property
    def clippers(self) -> list[int]:
        return self.ranks(Kind.NORM)

    @property
    def followers(self) -> list[int]:
        return self.ranks(Kind.JOIN, Kind.FINAL, Kind.ORDER)

    @property
    def source(self) -> int:
        """The rank whose buffers and hyper-parameters followers adopt: the first stepper."""
        return self.steppers[0]

    @property
    def optimizer(self) -> int:
        return self.asks[self.source].optimizer

    @property
    def adopt_hypers(self) -> bool:
        """Whether every rank takes the source's hyper-parameters this step: some rank
        follows, or the steppers' differ (e.g. a scheduler stepped per batch on one rank only)."""
        return bool(self.followers) or len({self.asks[r].hyper_sum for r in self.steppers}) > 1

    def scale(self, rank: int) -> float:
        """The factor by which contributing rank `rank` multiplies its gradient before the
        average over the c contributors (the steppers; the clipping ranks of a norm round), so
        that the average weighs each contributor by the seeds it trained since its last step:
        ``sum_r w_r g_r / W = (1/c) * sum_r (c w_r / W) g_r`` with ``W = sum_r w_r``. For a loss
        that is a mean over the batch's seeds that is the gradient of the mean over all the
        contributors' seeds, also when their batches differ in size (p does not divide the
        batch size, or the epoch's last batch: `shard.ShardSampler`). 1 when every weight is
        equal, or some contributor drew no training batch since its last step (weight -1: a
        full-batch step): the plain average. A padding batch's weight is 0
        (`shard.ShardSampler`): it adds nothing."""
        ranks = self.clippers if self.action == "norm" else self.steppers
        weights = [self.asks[r].weight for r in ranks]
        if rank not in ranks or min(weights) < 0 or len(set(weights)) == 1 or not sum(weights):
            return 1.0
        return len(ranks) * self.asks[rank].weight / sum(weights)

    @property
    def flags_needed(self) -> bool:
        """Whether some stepper lacks a gradient, or some clipping rank does not clip every
        optimizer parameter (then which parameters take part is summed)."""
        ranks = self.clippers if self.action == "norm" else self.steppers
        return not all(self.asks[r].all_grads for r in ranks)

    @property
    def sparse_needed(self) -> bool:
        """Whether some stepper holds a sparse gradient: then every rank learns which
        parameters' gradients are sparse (a follower contributes an empty one for them)."""
        return self.action == "step" and any(self.asks[r].sparse for r in self.steppers)

    @property
    def all_final(self) -> bool:
        return all(a.kind == Kind.FINAL for a in self.asks)

    @property
    def same_order(self) -> bool:
        """Every rank asked ORDER with one digest."""
        return self.action == "order" and len({a.numel for a in self.asks}) == 1

    def released(self, rank: int) -> bool:
        """Whether a waiting (JOIN / FINAL / ORDER) rank may go on: nobody steps or
        broadcasts, and every rank is FINAL (for FINAL), or every rank has ended at least as
        many training epochs as this one (for JOIN; a FINAL rank has ended all of its own), or
        every rank asks ORDER or some rank is FINAL (for ORDER)."""
        mine = self.asks[rank]
        if mine.kind == Kind.ORDER:
            return self.action == "order" or (self.action == "release"
                                              and any(a.kind == Kind.FINAL for a in self.asks))
        if self.action != "release":
            return False
        if mine.kind == Kind.FINAL:
            return self.all_final
        return all(a.kind == Kind.FINAL or a.epoch >= mine.epoch for a in self.asks)


def decide(asks: tuple[Ask, ...]) -> Decision:
    """The decision of a round (module docstring); raises `UnevenRanksError` when the steppers
    cannot be averaged together."""
    kinds = [a.kind for a in asks]
    if Kind.BROADCAST in kinds:
        signatures = {(a.tensors, a.numel) for a in asks}
        if all(k == Kind.BROADCAST for k in kinds) and len(signatures) == 1:
            return Decision("broadcast", asks)
        return Decision("void", asks)
    if Kind.STEP in kinds and Kind.NORM in kinds:
        raise UnevenRanksError(
            "some ranks clip their gradients (clip_grad_norm_) while others step: " + "; ".join(
                f"rank {r} is at {a.where()}" for r, a in enumerate(asks)
                if a.kind in (Kind.STEP, Kind.NORM)) + f". {FIX}")
    if Kind.NORM in kinds:
        decision = Decision("norm", asks)
        if len({(asks[r].tensors, asks[r].numel) for r in decision.clippers}) > 1:
            raise UnevenRanksError(
                "the ranks' clip_grad_norm_ calls cannot be averaged together: " + "; ".join(
                    f"rank {r} is at {asks[r].where()}" for r in decision.clippers) + f". {FIX}")
        return decision
    if Kind.STEP in kinds:
        decision = Decision("step", asks)
        if len({asks[r].signature() for r in decision.steppers}) > 1:
            raise UnevenRanksError(
                "the ranks' optimizer steps cannot be averaged together: " + "; ".join(
                    f"rank {r} is at {asks[r].where()}" for r in decision.steppers)
                + f". {FIX}")
        return decision
    if all(k == Kind.ORDER for k in kinds):
        return Decision("order", asks)
    return Decision("release", asks)


def _optimizer_held(row: tuple[int, ...]) -> str:
    return (f"optimizer #{row[0]} with {row[1]} parameters ({row[2]} values)" if row[0] >= 0
            else "no such optimizer")


class RunWatch(Protocol):
    """What the run's watchdog offers a round that waited too long (`execute.watchdog`)."""

    def whereabouts(self) -> dict[int, str]:
        """Where each rank was last seen (published every beat)."""

    def report(self, text: str) -> str:
        """Post the run's failure (``"rank r: ..."``, found and raised by this rank) unless one
        stands, so that the other ranks are stopped; returns the failure that stands."""


class Progress:
    """Where this rank's gradient seam is; updated by the main thread, read by the watchdog."""

    def __init__(self) -> None:
        self.round = 0
        self.doing = "has not reached a gnnorch collective yet"
        self.since = time.monotonic()
        self.waiting = False

    def describe(self) -> str:
        state = "waiting in" if self.waiting else "last finished"
        return (f"{state} gnnorch round {self.round} ({self.doing}) "
                f"{time.monotonic() - self.since:.1f} s ago")


PROGRESS = Progress()
_WATCH: RunWatch | None = None


@contextlib.contextmanager
def watching(watch: RunWatch) -> Iterator[None]:
    """Make `watch` the run's watch in this process for the block."""
    global _WATCH
    previous, _WATCH = _WATCH, watch
    try:
        yield
    finally:
        _WATCH = previous


class Rounds:
    """The rounds of one run in one rank: a gloo side group whose timeout is the bound, the
    round counter, and the conversion of a collective's failure into a gnnorch error."""

    def __init__(self, rank: int, world_size: int, bound: float) -> None:
        self.rank, self.world_size, self.bound = rank, world_size, bound
        self._group: dist.ProcessGroup | None = None
        self.count = 0

    @property
    def group(self) -> dist.ProcessGroup:
        """The side group, made at the run's first round: every rank makes one then, and a run
        without rounds (the user's own distribution) makes none. (Made at the start of every
        run instead, a rank whose run had no round could destroy it while another rank was
        still connecting to it: gloo's "Connection closed by peer".)"""
        if self._group is None:
            self._group = dist.new_group(backend="gloo",
                                         timeout=datetime.timedelta(seconds=self.bound))
        return self._group

    def close(self) -> None:
        if self._group is not None:
            with contextlib.suppress(Exception):
                dist.destroy_process_group(self._group)
            self._group = None

    def round(self, ask: Ask) -> Decision:
        """Every rank's ask for the next round, and the decision."""
        if SEAM_DELAY:
            time.sleep(_DELAYS.uniform(0, SEAM_DELAY))
        table = torch.zeros(self.world_size, FIELDS, dtype=torch.float64)
        table[self.rank] = torch.tensor(ask.row(), dtype=torch.float64)
        self.count += 1
        with self.collective(ask.where()):
            dist.all_reduce(table, group=self.group)
        return decide(tuple(Ask.from_row(row) for row in table.tolist()))

    def agree(self, values: tuple[int, ...], what: str,
              describe: Callable[[tuple[int, ...]], str] | None = None) -> None:
        """Every rank's `values` (the optimizer a step round uses, as each rank holds it) must
        be equal; else `UnevenRanksError` on every rank (`describe` words one rank's values)."""
        table = torch.zeros(self.world_size, len(values), dtype=torch.float64)
        table[self.rank] = torch.tensor(values, dtype=torch.float64)
        with self.collective(what):
            dist.all_reduce(table, group=self.group)
        rows = [tuple(int(round(x)) for x in row) for row in table.tolist()]
        if len(set(rows)) > 1:
            describe = describe or _optimizer_held
            held = "; ".join(f"rank {r} holds {describe(row)}" for r, row in enumerate(rows))
            raise UnevenRanksError(f"the ranks cannot all apply {what}: {held}. {FIX}")

    @contextlib.contextmanager
    def collective(self, what: str) -> Iterator[None]:
        """Run one collective of this rank (`what`), converting its failure: past the bound, a
        `CollectiveError` naming the ranks that did not arrive; a peer gone, one naming it."""
        PROGRESS.doing, PROGRESS.since, PROGRESS.waiting = what, time.monotonic(), True
        PROGRESS.round = self.count
        start = time.monotonic()
        try:
            yield
        except (RuntimeError, dist.DistError) as exc:
            if isinstance(exc, (CollectiveError, UnevenRanksError)):
                raise
            raise self._failure(what, time.monotonic() - start, exc) from exc
        finally:
            PROGRESS.waiting, PROGRESS.since = False, time.monotonic()

    def _failure(self, what: str, waited: float, exc: BaseException) -> CollectiveError:
        timed_out = waited >= 0.9 * self.bound or "timed out" in str(exc).lower()
        places = {}
        if _WATCH is not None:
            with contextlib.suppress(Exception):
                places = _WATCH.whereabouts()
        others = [r for r in range(self.world_size) if r != self.rank]
        seen = "; ".join(f"rank {r} {places[r]}" for r in others if r in places)
        seen = f" Last seen: {seen}." if seen else ""
        if timed_out:
            absent = [r for r in others if not places.get(r, "").startswith(
                f"waiting in gnnorch round {self.count}")] or others
            names = ", ".join(map(str, absent))
            text = (f"rank{'s' if len(absent) > 1 else ''} {names} did not reach gnnorch's "
                    f"collective within {self.bound:g} s: rank {self.rank} waited in round "
                    f"{self.count} ({what})."
                    f"{seen} A rank that stops stepping its optimizer (a long evaluation on "
                    f"one rank, a sleep, a deadlock in the training function) holds the others; "
                    f"if that is expected, raise the bound: launch={{'collective_timeout': "
                    f"seconds}}")
            failed = absent[0]
        else:
            text = (f"rank {self.rank}'s {what} failed: another rank left the world in the "
                    f"middle of it (it died, or its function ended with an error).{seen} "
                    f"({type(exc).__name__}: {str(exc)[:300]})")
            failed = self.rank
        if _WATCH is not None and timed_out:
            with contextlib.suppress(Exception):
                _WATCH.report(f"rank {failed}: {text}")
        return CollectiveError(text)
