"""Neighbour sampling for gnnorch.

`uniform`: :func:`sample_neighbors`, a vectorised plain-torch k-hop uniform neighbour sampler
(CPU or CUDA) with PyG's semantics, plus optional pruning of chosen nodes at chosen hops.
`hetero`: :func:`sample_hetero_neighbors`, the same per edge type of a heterogeneous graph.
`neighbor` / `hetero_neighbor`: :class:`FastNeighborSampler` / :class:`FastHeteroNeighborSampler`,
drop-in :class:`torch_geometric.sampler.NeighborSampler` subclasses that use them for
unweighted, non-temporal, non-disjoint sampling of a ``Data`` / ``HeteroData`` and defer to
PyG otherwise; pass one to ``NeighborLoader(..., neighbor_sampler=...)``.
"""
from gnnorch.sampling.hetero import SampledHeteroSubgraph, sample_hetero_neighbors
from gnnorch.sampling.hetero_neighbor import FastHeteroNeighborSampler
from gnnorch.sampling.neighbor import FastNeighborSampler
from gnnorch.sampling.uniform import UNSEEN, SampledSubgraph, new_workspace, sample_neighbors

__all__ = ["UNSEEN", "FastHeteroNeighborSampler", "FastNeighborSampler",
           "SampledHeteroSubgraph", "SampledSubgraph", "new_workspace", "sample_hetero_neighbors",
           "sample_neighbors"]
