"""Negative link samples drawn from a generator of one's own (link loaders the device data path
serves, `gnnorch.intercept.device_path`).

PyG's ``NegativeSampling.sample(num_samples, endpoint, num_nodes)`` draws ``num_samples`` node
indices from torch's global CPU RNG: i.i.d. uniform on ``[0, num_nodes)``, or i.i.d. from the
endpoint's node weights (``multinomial`` with replacement). `seeded_negatives` returns a copy of
the user's ``NegativeSampling`` that draws the same law from ``generator``, so a producer thread
sampling batches ahead neither takes numbers from the user's random stream (dropout,
initialisation) nor draws batches that depend on how far ahead it ran.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from ..compat import pyg as compat_pyg

if TYPE_CHECKING:
    from torch_geometric.sampler import NegativeSampling

__all__ = ["seeded_negatives"]


def seeded_negatives(negatives: NegativeSampling,
                     generator: torch.Generator) -> NegativeSampling | None:
    """A copy of `negatives` (PyG's ``NegativeSampling``) drawing from `generator` (a CPU
    generator), or None when it cannot be made to draw the same law from it: this PyG's
    ``NegativeSampling`` is not the shape relied on (`compat.pyg.negative_sampling_class`),
    `negatives` is of a subclass (its own ``sample``), or a node weight is not on the CPU."""
    base = compat_pyg.negative_sampling_class()
    if base is None or type(negatives) is not base:
        return None
    weights = (negatives.src_weight, negatives.dst_weight)
    if any(w is not None and w.device.type != generator.device.type for w in weights):
        return None
    seeded = _seeded_class(base)(negatives.mode, negatives.amount, *weights)
    seeded.generator = generator
    return seeded


@functools.lru_cache(maxsize=None)
def _seeded_class(base: type) -> type:
    class SeededNegativeSampling(base):  # type: ignore[misc, valid-type]
        """PyG's ``NegativeSampling`` whose draws come from ``self.generator``."""

        generator: torch.Generator | None = None

        def sample(self, num_samples: int, endpoint: str,
                   num_nodes: int | None = None) -> torch.Tensor:
            weight = self.src_weight if endpoint == "src" else self.dst_weight
            if weight is None:
                if num_nodes is None:
                    raise ValueError(f"Cannot sample negatives in '{type(self).__name__}' "
                                     f"without passing the 'num_nodes' argument")
                return torch.randint(num_nodes, (num_samples,), generator=self.generator)
            if num_nodes is not None and weight.numel() != num_nodes:
                raise ValueError(f"The node weight of '{type(self).__name__}' has "
                                 f"{weight.numel()} entries for {num_nodes} nodes")
            return torch.multinomial(weight, num_samples, replacement=True,
                                     generator=self.generator)

    return SeededNegativeSampling
