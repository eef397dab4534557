"""Hop-aware trimming: compute layer l of K only where the seeds' outputs need it.

`hops`: the hop layout of a sampled batch (vertices and edges per hop) and the per-layer bounds
derived from it; hop counts recovered from the edges when a sampler gives none. `hetero`: the
same per node and edge type for HeteroData batches. `mixing`: static
detection of modules that mix vertices across a batch (trimming would change their result).
The seam that applies the bounds to the user's layers is `gnnorch.intercept.layers`.
"""
from .hops import HopLayout, LayerBounds, hops_from_edges
from .mixing import batch_mixing_modules

__all__ = ["HopLayout", "LayerBounds", "hops_from_edges", "batch_mixing_modules"]
