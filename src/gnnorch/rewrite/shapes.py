"""The shape of one message-passing layer call, and the bucket it falls into.

A layer call maps ``n_src`` source rows of width ``f_in`` along ``n_edges`` edges onto
``n_dst`` destination rows of width ``f_out``. These five numbers, plus whether gradients
flow into the input features and whether a backward pass follows at all, determine the
cost of either order of transform and aggregation. Calls are grouped into buckets of
log2-rounded sizes so that a decision measured on one batch is reused for similar ones.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["LayerShape", "Bucket", "log2_bucket"]

#: Bucket key: (log2 n_src, log2 n_dst, log2 n_edges, input_grad, backward).
Bucket = tuple[int, int, int, bool, bool]


def log2_bucket(value: int) -> int:
    """``round(log2(value))`` for ``value >= 1``; 0 for empty sizes."""
    return 0 if value <= 1 else int(round(math.log2(value)))


@dataclass(frozen=True)
class LayerShape:
    """Sizes of one layer call.

    ``n_edges`` counts the messages actually aggregated (self-loops that the layer adds
    included). ``input_grad``: the input features require a gradient. ``backward``: a
    backward pass will follow (grad mode on and something requires a gradient).
    ``weight_grad``: the call's edge weights require a gradient (then an aggregate-first
    order's transform needs its input's gradient even where the features do not).
    """

    n_src: int
    n_dst: int
    n_edges: int
    f_in: int
    f_out: int
    input_grad: bool
    backward: bool
    weight_grad: bool = False

    def bucket(self) -> Bucket:
        """The log2 bucket of this shape (widths are fixed per layer, so not part of it)."""
        return (log2_bucket(self.n_src), log2_bucket(self.n_dst), log2_bucket(self.n_edges),
                self.input_grad, self.backward)

    def as_dict(self) -> dict[str, int | bool]:
        """JSON-friendly form."""
        return asdict(self)
