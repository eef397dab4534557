"""What hop-aware trimming knows about one model, and the layer seam's forward modes.

`ModelState.layers` is K, the number of MessagePassing calls on the batch's own edge_index per
forward. It is guessed from the batch's hop count when the model's first forward may run trimmed
(a trusted BasicGNN, `gnnorch.trim.trusted`: its trimmed forward cannot fail where its untrimmed
one would not), else learnt from that first forward, which then runs untrimmed. `trim` is set
only once the model's trimmed seed outputs are known to equal its untrimmed ones (the one-off
check, `gnnorch.trim.verify`, or exact by construction); it is cleared for good (with `reason`)
by anything that breaks the invariant later.

`Mode` is how one forward of a model on a batch runs; the transition functions below are the
whole of the layer seam's logic between modes (`intercept.layers` is a thin adapter that
feeds them events and carries out the `Action` they return). They are pure: the current mode
and an event in, the next mode and an action out.

    event                        from                      to            action
    model boundary entered       (outside a forward)       see `enter`   -
    self-trimming, no call yet   TRIM | SPECULATE          PLAIN         DISABLE
                                 CHECK_TRIM                CHECK_PLAIN   DISABLE
    self-trimming, later         any                       same          NOTE_PROBLEM
    forward ended                CHECK_*                   same          RECORD_CHECK
                                 PLAIN                     PLAIN         COUNT_UNTRIMMED
                                 CALIBRATE                 CALIBRATE     LEARN
                                 SPECULATE, K calls, ok    SPECULATE     VERIFY
                                 SPECULATE, otherwise      CALIBRATE     REPLAY_RELEARN
                                 TRIM, K calls, ok         TRIM          SERVE_TRIMMED
                                 TRIM, otherwise           PLAIN         RECOMPUTE
    first-batch check passed     SPECULATE                 TRIM          SERVE_TRIMMED
    first-batch check failed     SPECULATE                 PLAIN         REPLAY
    non-seed rows read           TRIM                      PLAIN         RECOMPUTE

A recomputation re-enters the model: the re-entered forward runs in the `to` mode.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Callable, Hashable, NamedTuple

__all__ = ["Action", "CHECKPOINTED", "Mode", "ModelState", "SELF_TRIMMING", "Step", "check_result", "enter",
           "forward_end", "non_seed_read", "self_trimming"]

SELF_TRIMMING = ("the model trims its own layers (PyG's trim_to_layer / BasicGNN's "
                 "num_sampled_nodes_per_hop): left to PyG's trimming")
CHECKPOINTED = ("layers run under activation checkpointing (torch.utils.checkpoint), whose "
                "backward pass recomputes them and needs every saved tensor back with the shape "
                "it had: those calls run past gnnorch's layer seam, and the model untrimmed")


class Mode(enum.Enum):
    """How one forward of a model on the current batch runs."""

    PLAIN = "plain"                # untrimmed, as without gnnorch
    CALIBRATE = "calibrate"        # untrimmed; K is learnt from it, then the one-off check
    SPECULATE = "speculate"        # first forward, trimmed (padded) with K = the hop count
    TRIM = "trim"                  # trimmed
    CHECK_PLAIN = "check-plain"    # the one-off check's untrimmed reference forward
    CHECK_TRIM = "check-trim"      # the one-off check's trimmed forward

    @property
    def checking(self) -> bool:
        """A forward of the one-off check: no outer hooks, no row statistics."""
        return self in (Mode.CHECK_PLAIN, Mode.CHECK_TRIM)

    @property
    def untrimmed(self) -> bool:
        """Layer calls run untrimmed without looking at their inputs."""
        return self in (Mode.PLAIN, Mode.CHECK_PLAIN)

    @property
    def compact(self) -> bool:
        """Layer inputs may be compact (only the rows the layer reads), when the model is."""
        return self in (Mode.TRIM, Mode.CHECK_TRIM)


class Action(enum.Enum):
    """What the layer seam does on a transition."""

    NONE = "none"
    DISABLE = "disable"                  # trimming off for the model (SELF_TRIMMING)
    NOTE_PROBLEM = "note-problem"        # this forward cannot be trimmed as planned
    RECORD_CHECK = "record-check"        # the check's forward: note its problem, if any
    COUNT_UNTRIMMED = "count-untrimmed"  # the output as it is; one more untrimmed forward
    LEARN = "learn"                      # the output as it is; learn K, run the check
    VERIFY = "verify"                    # the check on the speculated forward (-> check_result)
    SERVE_TRIMMED = "serve-trimmed"      # the trimmed output, padded and prefix-exact
    RECOMPUTE = "recompute"              # untrimmed again (trimming now off for the model)
    REPLAY = "replay"                    # untrimmed again from the forward's RNG state
    REPLAY_RELEARN = "replay-relearn"    # REPLAY, with K forgotten (learnt by the replay)


class Step(NamedTuple):
    mode: Mode
    action: Action


def enter(*, check: Mode | None, trim_enabled: bool, has_layout: bool, layers_known: bool,
          trims: bool, may_speculate: Callable[[], bool]) -> Mode:
    """The mode of a forward whose model boundary was just entered on a batch. `check`: the
    mode the seam asked for the next forward (the one-off check's, or a recomputation's);
    `may_speculate` is asked only for a model's first forward on a trimmable batch."""
    if check is not None:
        return check
    if not trim_enabled or not has_layout:
        return Mode.PLAIN
    if not layers_known:
        return Mode.SPECULATE if may_speculate() else Mode.CALIBRATE
    return Mode.TRIM if trims else Mode.PLAIN


def self_trimming(mode: Mode, calls: int) -> Step:
    """The model trims itself with PyG's `TrimToLayer` (`calls` layer calls made so far)."""
    if calls == 0 and mode in (Mode.TRIM, Mode.SPECULATE):
        return Step(Mode.PLAIN, Action.DISABLE)
    if calls == 0 and mode is Mode.CHECK_TRIM:
        return Step(Mode.CHECK_PLAIN, Action.DISABLE)
    return Step(mode, Action.NOTE_PROBLEM)


def forward_end(mode: Mode, *, calls: int, layers: int | None, problem: str | None) -> Step:
    """The forward ended (it returned) after `calls` layer calls on the batch's edge_index;
    `layers` is K as the model state knows it, `problem` why the forward could not run as
    planned (None: it did)."""
    as_planned = problem is None and calls == layers
    if mode.checking:
        return Step(mode, Action.NONE if as_planned else Action.RECORD_CHECK)
    if mode is Mode.PLAIN:
        return Step(mode, Action.COUNT_UNTRIMMED)
    if mode is Mode.CALIBRATE:
        return Step(mode, Action.LEARN)
    if mode is Mode.SPECULATE:
        return (Step(mode, Action.VERIFY) if as_planned
                else Step(Mode.CALIBRATE, Action.REPLAY_RELEARN))
    return Step(Mode.TRIM, Action.SERVE_TRIMMED) if as_planned else \
        Step(Mode.PLAIN, Action.RECOMPUTE)


def check_result(mode: Mode, passed: bool) -> Step:
    """The one-off check on a speculated forward passed or failed."""
    if mode is not Mode.SPECULATE:
        raise ValueError(f"no check result is expected in mode {mode.value}")
    return Step(Mode.TRIM, Action.SERVE_TRIMMED) if passed else Step(Mode.PLAIN, Action.REPLAY)


def non_seed_read(mode: Mode) -> Step:
    """A trimmed forward's output was read beyond the seed rows."""
    if mode is not Mode.TRIM:
        raise ValueError(f"only a trimmed forward's output is prefix-exact ({mode.value})")
    return Step(Mode.PLAIN, Action.RECOMPUTE)


@dataclasses.dataclass
class ModelState:
    """What the layer seam knows about one outermost module ("model")."""

    name: str
    layers: int | None = None      # K: MessagePassing calls on the batch graph per forward
    trim: bool = False
    compact: bool = False          # layers return only the rows the next layer reads
    reason: str | None = "not yet seen on a batch with hop counts"
    trimmed_forwards: int = 0
    untrimmed_forwards: int = 0
    materialized: int = 0          # trimmed forwards recomputed untrimmed (non-seed rows read)
    speculated: bool = False       # the first forward was run trimmed before the check
    verified_by: str | None = None  # what established that trimming is exact for it
    checkpointed_calls: int = 0    # layer calls run past the seam under checkpointing
    # trimmed at these sub-modules' outputs rather than the model's (`intercept.encoder`):
    # their names, and per call in a forward (name, node type of a one-tensor output on a
    # HeteroData batch, layer calls made when it returns)
    encoder: str | None = None
    encoder_calls: tuple[tuple[str, str | None, int], ...] = ()
    # that output (the model's or the encoder's) holds only the seed rows, the module keeping
    # them itself (`trim.verify.seed_rows_only`): all exact, handed back as it is
    seeds_only: bool = False
    # per layer call in forward order, (edge key, layer): layers from data flow, for models
    # whose layers do not all call the same edge types (`intercept.dataflow`)
    plan: tuple[tuple[Hashable, int], ...] | None = None

    @property
    def pads_output(self) -> bool:
        """Whether a trimmed forward's output (the model's or its encoder's) is zero-padded
        to a row per vertex: compact, and not holding only the seed rows."""
        return self.compact and not self.seeds_only

    def disable(self, reason: str) -> None:
        """Trimming off for this model from now on, for `reason`."""
        self.trim, self.reason = False, reason

    def to_dict(self) -> dict:
        return {"model": self.name, "layers": self.layers, "trimmed": self.trim,
                "compact": self.compact,
                "reason": None if self.trim else self.reason,
                "trimmed_forwards": self.trimmed_forwards,
                "untrimmed_forwards": self.untrimmed_forwards,
                "materialized": self.materialized,
                "verified_by": self.verified_by if self.trim else None,
                "checkpointed_calls": self.checkpointed_calls,
                "encoder": self.encoder,
                "encoder_calls": len(self.encoder_calls) if self.encoder else None,
                "seeds_only": self.seeds_only,
                "layer_plan": None if self.plan is None else [layer for _, layer in self.plan]}
