"""Per-layer, per-shape-bucket choice between a layer's original and rewritten order.

"Measure, then decide": the first ``probes_per_bucket`` (default 2; with 1, single noisy
probes chose slower orders: the 60K-node tuner bench ran its steady epochs about 2x slower) calls
of every (layer, bucket) are probed -- both orders timed forward + backward on the real inputs,
twice, alternating -- and from then on the
bucket runs the order with the lower *measured* median time. Before a bucket has been
measured, and for buckets never probed, the cost model's prediction decides. Either way a
rewrite must win by ``margin`` (default 3%): within the noise the layer keeps PyG's order.
A bucket whose rewrite does at least as much work of every kind as PyG's order
(``costmodel.dominated``, e.g. SAGE transform-first when f_out >= f_in) keeps PyG's order
and is never probed (probes are expensive on big batches: the 500K-node bench's first step
took 50 s with rewrites on, 6 s off). Symmetrically, a bucket whose rewrite does at most as
much work of every kind and strictly less of one (``costmodel.dominates``, e.g. GCN
aggregate-first when f_in < f_out and the features need no gradient) runs the rewrite from
its first call (``decided_by = "work"``), until its own probes, when the bucket has paid for
them, measure the two orders. Every ``reprobe_every`` calls a bucket is probed again,
which keeps the cost model refined and lets the choice follow a machine whose speed drifts.
The model alone never decides a bucket it could measure: its held-out error (20-80 % per
layer type at batch sizes far above its calibration) is too large to act on unmeasured.

Paying for itself (``probe_after``, :func:`probe_after_for`): probe k of a bucket (k = 0, 1, ...)
waits until the bucket has run ``probe_after * (k + 1)`` calls. A probe costs about
``2 * repeats`` calls of the bucket, so with ``probe_after = ceil(2 * repeats / f)`` the probes
cost at most a fraction f of the time already spent in that bucket; a bucket seen only a few
times (a one-off check's untrimmed forward, a short run) is never probed, and keeps PyG's
order (``decided_by = "unmeasured"``) unless a prediction is given. The runtime uses f = 5 %;
the default ``probe_after = 1`` probes the first calls (direct use, benchmarks).
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from .shapes import Bucket, LayerShape

__all__ = ["ORIGINAL", "REWRITTEN", "BucketState", "Planner", "probe_after_for"]

ORIGINAL = "original"
REWRITTEN = "rewritten"


@dataclass
class BucketState:
    """Everything known about one (layer, bucket)."""

    shape: LayerShape
    calls: int = 0
    probes: int = 0
    predicted: dict[str, float] = field(default_factory=dict)
    measured: dict[str, deque] = field(
        default_factory=lambda: {ORIGINAL: deque(maxlen=8), REWRITTEN: deque(maxlen=8)})
    errors: list[tuple[float, float]] = field(default_factory=list)
    rewrite: bool = False
    decided_by: str = "unmeasured"
    dominated: bool = False   # the rewrite does at least as much work of every kind
    dominates: bool = False   # the rewrite does at most as much of every kind, less of one

    def median(self, order: str) -> float | None:
        """Median measured fwd+bwd seconds of ``order``; None before any probe."""
        samples = self.measured[order]
        return statistics.median(samples) if samples else None

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly summary: predicted beside measured, the choice and its basis."""
        return {
            "bucket": list(self.shape.bucket()),
            "shape": self.shape.as_dict(),
            "calls": self.calls,
            "probes": self.probes,
            "choice": REWRITTEN if self.rewrite else ORIGINAL,
            "decided_by": self.decided_by,
            "predicted_s": dict(self.predicted),
            "measured_s": {order: self.median(order) for order in (ORIGINAL, REWRITTEN)},
            "speedup_measured": _ratio(self.median(ORIGINAL), self.median(REWRITTEN)),
            "mape_prequential": (sum(abs(p - m) / m for p, m in self.errors) / len(self.errors)
                                 if self.errors else None),
        }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


@dataclass
class Planner:
    """Decisions per (layer key, bucket). Holds no model: predictions are passed in."""

    probes_per_bucket: int = 2
    reprobe_every: int = 1000
    margin: float = 0.03
    probe_after: int = 1
    buckets: dict[tuple[str, Bucket], BucketState] = field(default_factory=dict)

    def state(self, layer_key: str, shape: LayerShape) -> BucketState:
        """The state of ``shape``'s bucket for this layer (created on first sight)."""
        key = (layer_key, shape.bucket())
        if key not in self.buckets:
            self.buckets[key] = BucketState(shape=shape)
        return self.buckets[key]

    def plan(self, state: BucketState, predicted: tuple[float, float] | None) -> bool:
        """Count a call, update the bucket's choice (``state.rewrite``); True when this call
        should be probed first (then :meth:`finish_probe` re-decides).

        ``predicted``: the model's (original, rewritten) seconds for this call, or None when
        the bucket's measured choice stands and no prediction was needed.
        """
        state.calls += 1
        if state.dominated:            # never faster: PyG's order, no probe, no prediction
            state.rewrite, state.decided_by = False, "work"
            return False
        if predicted is not None:
            state.predicted = {ORIGINAL: predicted[0], REWRITTEN: predicted[1]}
        probe = ((state.probes < self.probes_per_bucket
                  and state.calls >= self.probe_after * (state.probes + 1))
                 or (self.reprobe_every > 0 and state.calls % self.reprobe_every == 0))
        self._decide(state)
        return probe

    def needs_prediction(self, state: BucketState) -> bool:
        """True while the bucket's choice still rests on the model."""
        return state.decided_by != "measured" and not state.dominated

    def record(self, state: BucketState, order: str, predicted: float, measured: float) -> None:
        """Add one probe measurement of ``order`` (with the prediction made before it)."""
        state.measured[order].append(measured)
        state.errors.append((predicted, measured))

    def finish_probe(self, state: BucketState) -> None:
        """Close a probe (both orders recorded) and re-decide the bucket."""
        state.probes += 1
        self._decide(state)

    def export(self) -> list[dict]:
        """The buckets measured in both orders, as JSON rows (see :meth:`load`)."""
        return [{"key": key[0], "bucket": list(key[1]), "shape": state.shape.as_dict(),
                 "measured": {order: list(state.measured[order])
                              for order in (ORIGINAL, REWRITTEN)}}
                for key, state in self.buckets.items()
                if state.median(ORIGINAL) is not None and state.median(REWRITTEN) is not None]

    def load(self, rows: list[dict]) -> int:
        """Adopt buckets measured by another process of this machine (:meth:`export`) as if
        probed here: they are decided by those measurements and not probed again (until
        ``reprobe_every``). Buckets known here are kept. Returns the number adopted."""
        adopted = 0
        for row in rows:
            key = (row["key"], tuple(row["bucket"]))
            if key in self.buckets:
                continue
            state = BucketState(shape=LayerShape(**row["shape"]))
            for order in (ORIGINAL, REWRITTEN):
                state.measured[order].extend(float(v) for v in row["measured"][order])
            state.probes = self.probes_per_bucket
            self._decide(state)
            self.buckets[key] = state
            adopted += 1
        return adopted

    def _decide(self, state: BucketState) -> None:
        original, rewritten = state.median(ORIGINAL), state.median(REWRITTEN)
        if original is not None and rewritten is not None:
            state.rewrite = rewritten < (1.0 - self.margin) * original
            state.decided_by = "measured"
        elif state.dominates:          # less work of some kind, no more of any
            state.rewrite, state.decided_by = True, "work"
        elif state.predicted:
            state.rewrite = (state.predicted[REWRITTEN]
                             < (1.0 - self.margin) * state.predicted[ORIGINAL])
            state.decided_by = "model"
        else:
            state.rewrite, state.decided_by = False, "unmeasured"


def probe_after_for(repeats: int, max_overhead: float) -> int:
    """Calls a bucket runs before each of its probes so that probing costs at most
    `max_overhead` of the time spent in the bucket (a probe: both orders, `repeats` times)."""
    if not 0 < max_overhead <= 1:
        raise ValueError(f"max_overhead must be in (0, 1], got {max_overhead!r}")
    return max(1, math.ceil(2 * repeats / max_overhead))
