"""The sampling law's per-edge probability, for estimates that propagate it instead of sampling.

Expanding a node with in-degree ``d`` and fanout ``k`` (`gnnorch.sampling.uniform`) draws each
of its in-edges with probability

* ``q = 1`` when ``k < 0`` (every in-edge);
* ``q = min(1, k / d)`` without replacement (a uniform ``k``-subset, or all ``d <= k`` edges);
* ``q = 1 - (1 - 1/d)^k`` with replacement (``k`` independent uniform draws: the chance that
  at least one of them is this edge).

``d`` is clamped to 1 so a node without in-edges gives a finite value (it has no edge to draw).
Used by the cache's hotness estimate (`cache.hotness`) and the split placement's row ranking
(`device.hot_rows`).
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["edge_draw_probability"]


def edge_draw_probability(degree: Tensor, fanout: int, replace: bool) -> Tensor:
    """Per node, the probability that one given in-edge is drawn when the node is expanded
    with `fanout` (see the module docstring); `degree` is floating point, the result has its
    dtype and device."""
    if fanout < 0:
        return torch.ones_like(degree)
    d = degree.clamp_min(1.0)
    if replace:
        return 1.0 - torch.pow(1.0 - 1.0 / d, fanout)
    return (fanout / d).clamp_max(1.0)
