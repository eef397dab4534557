"""Neighbour sampling for gnnorch.

`uniform`: :func:`sample_neighbors`, a vectorised plain-torch k-hop uniform neighbour sampler
(CPU or CUDA) with PyG's semantics, plus optional pruning of chosen nodes at chosen hops.
`neighbor`: :class:`FastNeighborSampler`, a drop-in
:class:`torch_geometric.sampler.NeighborSampler` that uses it for homogeneous, unweighted,
non-temporal, non-disjoint sampling and defers to PyG otherwise; pass it to
``NeighborLoader(..., neighbor_sampler=...)``.
"""
from gnnorch.sampling.neighbor import FastNeighborSampler
from gnnorch.sampling.uniform import UNSEEN, SampledSubgraph, new_workspace, sample_neighbors

__all__ = ["UNSEEN", "FastNeighborSampler", "SampledSubgraph", "new_workspace", "sample_neighbors"]
