"""A fitted model of forward + backward time for the operations of a GNN layer (DAHA-style).

Every operation kind has a linear model in a few *work* features of its sizes::

    t(op) = sum_k c[kind, k] * phi_k(op),    c >= 0

    linear        (n x f_in @ f_in x f_out, b = backward, g = input needs a gradient)
                  phi = [1, n f_in f_out, b n f_in f_out, b g n f_in f_out,
                         (1 + b) n (f_in + f_out), big(n f_out) + b g big(n f_in)]
    agg_sum/mean  (gather E rows of width f, scatter onto n_dst rows)
                  phi = [1, E f, n_dst f, E, b g E f, b g n_src f, (1 + b g) big(E f)]
    agg_weighted  (as agg_sum, every message scaled by a per-edge weight; w = the weights
                  need a gradient)  phi = agg features + [b w E f]
    edge_softmax  phi = [1, E, b E]
    elementwise   (n x f)  phi = [1, n f, b n f, big(n f)]

``big(k) = max(0, k - 8M)`` elements: tensors above 32 MB (float32) are served by fresh
``mmap`` pages on every allocation (glibc's largest mmap threshold), so each element also
pays a page fault; the hinge lets that regime have its own slope.

A layer call is a sum of operations, so its time is linear in the *same* coefficients:
``t(layer) = sum_ops c . phi(op)``. One least-squares problem therefore holds both the
start-up micro-benchmarks (one operation per row) and the measured layer calls (a sum of
operations per row). It is solved by non-negative least squares on *relative* residuals
(each row divided by its measured time), which is what the mean absolute percentage error
(MAPE) measures. Layer rows weigh more than micro-benchmark rows: they are the real thing.

A layer call can also carry a ``key`` (the engine uses "<layer>:<order>"): the model then
keeps that key's recent calls and scales its prediction by the median ratio
measured / predicted over them -- the part of a particular layer's time the operation
sum does not explain (an MLP tail, a framework path), learnt online.

Each new layer measurement is first predicted with the current fit and only then added,
so :meth:`CostModel.mape` is an honest held-out (prequential) error.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Op", "CostModel", "features", "OP_KINDS", "work", "dominated", "dominates"]

_AGG_KINDS = ("agg_sum", "agg_mean")

#: Elements above which a float32 tensor is always freshly mmapped (32 MB).
BIG_ELEMENTS = 8_000_000


def _big(elements: float) -> float:
    return max(0.0, elements - BIG_ELEMENTS)


#: The operation kinds.
OP_KINDS: tuple[str, ...] = ("linear", "agg_sum", "agg_mean", "agg_weighted",
                             "edge_softmax", "elementwise")


@dataclass(frozen=True)
class Op:
    """One operation of a layer call: a kind and its sizes.

    Sizes not used by a kind are left 0. ``backward``: a backward pass runs; ``input_grad``:
    the operation's (dense) input needs a gradient; ``weight_grad``: per-edge weights need
    one (``agg_weighted`` only).
    """

    kind: str
    n: int = 0
    n_src: int = 0
    n_dst: int = 0
    n_edges: int = 0
    f_in: int = 0
    f_out: int = 0
    backward: bool = False
    input_grad: bool = False
    weight_grad: bool = False


def features(op: Op) -> list[float]:
    """The work features ``phi(op)`` of one operation (see the module docstring)."""
    b = float(op.backward)
    g = float(op.input_grad)
    if op.kind == "linear":
        mnk = float(op.n) * op.f_in * op.f_out
        return [1.0, mnk, b * mnk, b * g * mnk, (1.0 + b) * op.n * (op.f_in + op.f_out),
                _big(float(op.n) * op.f_out) + b * g * _big(float(op.n) * op.f_in)]
    if op.kind in _AGG_KINDS or op.kind == "agg_weighted":
        ef = float(op.n_edges) * op.f_in
        phi = [1.0, ef, float(op.n_dst) * op.f_in, float(op.n_edges), b * g * ef,
               b * g * op.n_src * op.f_in, (1.0 + b * g) * _big(ef)]
        if op.kind == "agg_weighted":
            phi.append(b * float(op.weight_grad) * ef)
        return phi
    if op.kind == "edge_softmax":
        return [1.0, float(op.n_edges), b * op.n_edges]
    if op.kind == "elementwise":
        nf = float(op.n) * op.f_in
        return [1.0, nf, b * nf, _big(nf)]
    raise ValueError(f"unknown operation kind {op.kind!r}; expected one of {OP_KINDS}")


def work(ops: Iterable[Op]) -> dict[str, float]:
    """Arithmetic work per operation kind: multiply-adds of the forward, plus the backward's
    (weight and, where needed, input gradients)."""
    total: dict[str, float] = {}
    for op in ops:
        b, g = float(op.backward), float(op.input_grad)
        if op.kind == "linear":
            amount = float(op.n) * op.f_in * op.f_out * (1.0 + b + b * g)
        elif op.kind in _AGG_KINDS or op.kind == "agg_weighted":
            amount = float(op.n_edges) * op.f_in * (1.0 + b * g)
        elif op.kind == "edge_softmax":
            amount = float(op.n_edges) * (1.0 + b)
        else:
            amount = float(op.n) * op.f_in * (1.0 + b)
        total[op.kind] = total.get(op.kind, 0.0) + amount
    return total


def dominated(candidate: Iterable[Op], reference: Iterable[Op]) -> bool:
    """True when ``candidate`` does at least as much work of every kind as ``reference``
    (so no machine runs it faster, short of framework quirks): such a rewrite is not worth
    a probe."""
    a, b = work(candidate), work(reference)
    return all(a.get(kind, 0.0) >= amount for kind, amount in b.items())


def dominates(candidate: Iterable[Op], reference: Iterable[Op]) -> bool:
    """True when ``candidate`` does at most as much work of every kind as ``reference`` and
    strictly less of at least one (so no machine runs it slower, short of framework quirks):
    such a rewrite may run before it has been measured."""
    a, b = work(candidate), work(reference)
    kinds = set(a) | set(b)
    return (all(a.get(kind, 0.0) <= b.get(kind, 0.0) for kind in kinds)
            and any(a.get(kind, 0.0) < b.get(kind, 0.0) for kind in kinds))


@dataclass
class _Row:
    """One measurement: the operations' summed features per kind, seconds, row weight."""

    ops: tuple[Op, ...]
    seconds: float
    weight: float
    phi: dict[str, np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self.phi = {}
        for op in self.ops:
            f = np.asarray(features(op))
            self.phi[op.kind] = self.phi[op.kind] + f if op.kind in self.phi else f


@dataclass
class CostModel:
    """Least-squares model of fwd+bwd seconds per operation kind, for one device.

    ``layer_weight``: relative weight of a measured layer call against one micro-benchmark
    row. ``max_layer_rows``: only the most recent layer rows are kept (the model tracks the
    machine as it is now). ``keyed_rows``: recent calls per key behind its ratio.
    """

    device: str = "cpu"
    layer_weight: float = 3.0
    max_layer_rows: int = 400
    keyed_rows: int = 16
    _micro: list[_Row] = field(default_factory=list)
    _layer: list[_Row] = field(default_factory=list)
    _columns: dict[str, slice] = field(default_factory=dict)
    _coef: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _errors: list[tuple[float, float]] = field(default_factory=list)
    _keyed: dict[str, deque] = field(default_factory=dict)
    _ratio: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------------ data
    def add_micro(self, op: Op, seconds: float) -> None:
        """Add one micro-benchmark measurement (one operation, fwd+bwd seconds); no refit."""
        self._register([op])
        self._micro.append(_Row((op,), float(seconds), 1.0))

    def observe(self, ops: Sequence[Op], seconds: float, key: str | None = None) -> float:
        """Add a measured layer call (its operations and fwd+bwd seconds) and refit.

        ``key`` names the layer and order the call belongs to (see the module docstring).
        Returns the prediction made *before* the measurement was added; the pair is kept
        for :meth:`mape`.
        """
        predicted = self.predict(ops, key)
        self._errors.append((predicted, float(seconds)))
        self._register(ops)
        row = _Row(tuple(ops), float(seconds), self.layer_weight)
        self._layer.append(row)
        del self._layer[:-self.max_layer_rows]
        if key is not None:
            self._keyed.setdefault(key, deque(maxlen=self.keyed_rows)).append(row)
        self.fit()
        return predicted

    # ------------------------------------------------------------------ fit / predict
    def fit(self) -> None:
        """Solve the non-negative relative least-squares problem over all rows."""
        rows = self._micro + self._layer
        if not rows:
            return
        width = self._width()
        a = np.zeros((len(rows), width))
        for i, row in enumerate(rows):
            for kind, phi in row.phi.items():
                a[i, self._columns[kind]] = phi * (row.weight / row.seconds)
        rhs = np.array([row.weight for row in rows])
        scale = np.abs(a).max(axis=0)
        scale[scale == 0] = 1.0
        # imported here: scipy.optimize is 0.2 s of every `import gnnorch` otherwise, and a
        # fit runs only once rewrite decisions are measured
        from scipy.optimize import nnls

        coef, _ = nnls(a / scale, rhs, maxiter=50 * width)
        self._coef = coef / scale
        self._ratio = {}
        for key, keyed in self._keyed.items():
            ratios = [row.seconds / base for row in keyed if (base := self._base_row(row)) > 0]
            if ratios:
                self._ratio[key] = float(np.median(ratios))

    def predict(self, ops: Iterable[Op], key: str | None = None) -> float:
        """Predicted fwd+bwd seconds of a sequence of operations (unseen kinds count 0),
        scaled by ``key``'s learnt ratio when there is one."""
        return self._base(tuple(ops)) * self._ratio.get(key, 1.0)

    # ------------------------------------------------------------------ accuracy
    def mape(self, last: int | None = None) -> float | None:
        """Mean absolute percentage error of the prequential predictions (held-out by
        construction), over all or the ``last`` observations; None before any."""
        pairs = self._errors if last is None else self._errors[-last:]
        if not pairs:
            return None
        return float(np.mean([abs(p - m) / m for p, m in pairs]))

    @staticmethod
    def mape_of(pairs: Iterable[tuple[float, float]]) -> float | None:
        """MAPE of explicit (predicted, measured) pairs; None when empty."""
        pairs = list(pairs)
        if not pairs:
            return None
        return float(np.mean([abs(p - m) / m for p, m in pairs]))

    def summary(self) -> dict[str, object]:
        """JSON-friendly state: row counts, coefficients per kind, prequential MAPE."""
        return {
            "device": self.device,
            "micro_rows": len(self._micro),
            "layer_rows": len(self._layer),
            "layer_ratios": dict(self._ratio),
            "observations": len(self._errors),
            "mape_prequential": self.mape(),
            "mape_last_20": self.mape(20),
            "coefficients": {kind: [float(c) for c in self._coef[cols]]
                             for kind, cols in self._columns.items()
                             if cols.stop <= len(self._coef)},
        }

    @property
    def calibrated(self) -> bool:
        """True once micro-benchmark rows exist."""
        return bool(self._micro)

    # ------------------------------------------------------------------ internals
    def _base(self, ops: tuple[Op, ...]) -> float:
        return self._base_row(_Row(ops, 0.0, 0.0))

    def _base_row(self, row: _Row) -> float:
        """The fitted operation sum (no key ratio); kinds not fitted yet count 0."""
        total = 0.0
        for kind, phi in row.phi.items():
            cols = self._columns.get(kind)
            if cols is not None and cols.stop <= len(self._coef):
                total += float(phi @ self._coef[cols])
        return total

    def _register(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if op.kind not in self._columns:
                start = self._width()
                self._columns[op.kind] = slice(start, start + len(features(op)))

    def _width(self) -> int:
        return max((cols.stop for cols in self._columns.values()), default=0)
