"""What the layer seam learns of each batch of an intercepted loader (`intercept.loader`).

While the user works on a batch, the seam knows its `BatchGraph`: its ``edge_index``, node
count, seed count (``batch_size``) and, when the loader's batches are directional neighbour
samples, its hop layout (`gnnorch.trim.hops.HopLayout`: from the sampler's per-hop counts, or
derived from the edges), which trimming needs. A link batch carries no ``batch_size``; its
seeds are its first hop's nodes (`link_seeds`), so it is announced and trimmed as a node batch
is. On a CUDA machine with rewrites on, each
batch's ``x`` is marked so that moving it to the device defers the copy for DAHA's host
pre-transformation (`gnnorch.rewrite.host`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import torch

from ..launch.context import RankContext
from ..trim.hetero import HeteroBatchGraph, SampledGraph, hetero_layout
from ..trim.hops import HopLayout, hops_from_edges
from .feeds import LoaderState
from .layers import BatchGraph, LayerSeam

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

__all__ = ["announced", "batch_graph", "batch_transform", "defers_features",
           "hetero_batch_graph", "layout_kind", "link_seeds", "stored_batch_size"]


def layout_kind(loader: NeighborLoader) -> tuple[bool, int | None]:
    """(whether the loader's batches are directional hop-ordered samples, number of hops).
    Disjoint (and so temporal) samples count: pyg-lib, which PyG needs for them, expands every
    seed's tree hop by hop over all trees at once, so the batch's vertices and edges come hop
    by hop with per-hop counts, as a shared sample's do."""
    from torch_geometric.sampler import NeighborSampler
    from torch_geometric.sampler.base import SubgraphType

    sampler = getattr(loader, "node_sampler", getattr(loader, "link_sampler", None))
    if not isinstance(sampler, NeighborSampler):
        return False, None
    directional = (sampler.subgraph_type == SubgraphType.directional
                   and getattr(loader, "transform_sampler_output", None) is None)
    if sampler.is_hetero:
        return directional, sampler.num_neighbors.num_hops
    return directional, len(sampler.num_neighbors.get_mapped_values())


def batch_transform(loader: NeighborLoader) -> str | None:
    """The loader's batch ``transform`` (its repr), or None: PyG applies it after sampling,
    so the edges and vertices it adds are not in the sampler's hop counts."""
    transform = getattr(loader, "transform", None)
    return None if transform is None else repr(transform)


def batch_graph(batch: Any, state: LoaderState, training: bool = True) -> SampledGraph | None:
    """What the layer seam needs to know of a batch, with its hop layout when trimmable."""
    from torch_geometric.data import Data, HeteroData

    if isinstance(batch, HeteroData):
        return hetero_batch_graph(batch, state, training)
    edge_index = getattr(batch, "edge_index", None) if isinstance(batch, Data) else None
    size = stored_batch_size(batch)
    if size is None and state.kind == "link":
        size = link_seeds(batch)
    if not isinstance(edge_index, torch.Tensor) or not isinstance(size, int):
        return None
    graph = BatchGraph(edge_index=edge_index, num_nodes=int(batch.num_nodes), batch_size=size,
                       layout=None, n_id=getattr(batch, "n_id", None),
                       training=training)
    if not state.directional or state.num_hops is None:
        graph.reason = "the loader's batches are not directional neighbour samples"
        return graph
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if nodes is not None and edges is not None and len(nodes) == len(edges) + 1:
        graph.layout = HopLayout.from_counts(list(map(int, nodes)), list(map(int, edges)))
        # the sampler's counts: its edges come hop by hop, unless a transform changed them
        graph.edges_grouped = state.transform is None and graph.layout.num_edges == int(
            edge_index.size(1))
        if state.transform is not None and not graph.layout.admits(edge_index, graph.num_nodes):
            graph.layout = None
            graph.reason = (f"the loader's transform {state.transform} adds vertices, or edges "
                            f"across more than one hop, to its batches")
        return graph
    graph.layout = hops_from_edges(edge_index, graph.num_nodes, size, state.num_hops)
    if graph.layout is None:
        graph.reason = "the batch's vertices are not laid out by hop"
    graph.edges_grouped = graph.layout is not None   # `hops_from_edges` checked the grouping
    return graph


def hetero_batch_graph(batch: Any, state: LoaderState,
                       training: bool = True) -> HeteroBatchGraph | None:
    """What the layer seam needs to know of a HeteroData batch (`gnnorch.trim.hetero`), with
    its per-type hop layout when trimmable; None when it has no edge_index tensors."""
    edges = {key: store["edge_index"] for key, store in zip(batch.edge_types, batch.edge_stores)
             if isinstance(store.get("edge_index"), torch.Tensor)}
    if not edges:
        return None
    stores = dict(zip(batch.node_types, batch.node_stores))
    output_type = next((t for t, store in stores.items()
                        if isinstance(store.get("batch_size"), int)), None)
    graph = HeteroBatchGraph(edge_index_dict=edges,
                             num_nodes_dict={t: int(s.num_nodes or 0) for t, s in stores.items()},
                             seeds={}, output_type=output_type, layout=None, training=training)
    if not state.directional or state.num_hops is None:
        graph.reason = "the loader's batches are not directional neighbour samples"
    elif state.transform is not None:
        graph.reason = f"the loader transforms its batches ({state.transform}) after sampling"
    else:
        graph.layout, graph.reason = hetero_layout(
            {t: s["num_sampled_nodes"] for t, s in stores.items() if "num_sampled_nodes" in s},
            {key: store["num_sampled_edges"] for key, store in
             zip(batch.edge_types, batch.edge_stores) if "num_sampled_edges" in store},
            graph.num_nodes_dict, {key: int(e.size(1)) for key, e in edges.items()})
    if graph.layout is not None:
        graph.seeds = {t: counts[0] for t, counts in graph.layout.nodes.items()}
    return graph


def stored_batch_size(batch: Any) -> int | None:
    """The seed count a node loader stored on its batch as ``batch_size`` (None if none).

    Read from the batch's storage (``batch["batch_size"]``), never as an attribute: a loader
    over graphs merged by ``Batch.from_data_list`` yields `Batch` objects, whose class
    property ``batch_size`` is PyG's alias of ``num_graphs`` (the merged graph count) and
    shadows the stored value.
    """
    from torch_geometric.data import Data

    if not isinstance(batch, Data) or "batch_size" not in batch:
        return None
    size = batch["batch_size"]
    return size if isinstance(size, int) else None


def link_seeds(batch: Any) -> int | None:
    """The seed count of a link batch: the nodes of its first hop (None without hop counts).

    PyG's ``LinkLoader`` samples from the endpoints of the batch's supervision edges and
    negatives, deduplicated (``unique`` with the inverse, unless ``disjoint``), and the sampler
    lays its seeds out first; ``edge_label_index`` (``src_index`` / ``dst_pos_index`` /
    ``dst_neg_index`` for triplets) holds that inverse, so every row a link objective reads at
    those indices lies in ``[0, num_sampled_nodes[0])``: the rows trimming computes exactly.
    A read of any other row materialises the untrimmed output (`gnnorch.trim.exact_output`).
    """
    counts = getattr(batch, "num_sampled_nodes", None)
    if counts is None or len(counts) == 0:
        return None
    return int(counts[0])


def defers_features(ctx: RankContext) -> bool:
    """Batch features may wait on the host for the rewrite engine's host transform
    (`gnnorch.rewrite.host`): rewrites are on and a CUDA device is visible."""
    return ctx.options.rewrite is not False and torch.cuda.is_available()


def _mark_features(batch: Any) -> None:
    """Mark a batch's `x` so that moving it to a CUDA device defers the copy."""
    from torch_geometric.data import Data

    from ..rewrite.host import mark_host_features

    if isinstance(batch, Data) and isinstance(getattr(batch, "x", None), torch.Tensor):
        batch.x = mark_host_features(batch.x)


def announced(iterator: Iterator[Any], seam: LayerSeam, state: LoaderState,
              training: bool, defer: bool) -> Iterator[Any]:
    """Announce each batch to the layer seam while the user works on it (and, with `defer`: a
    CUDA machine with rewrites on, mark its features for the host transform)."""
    try:
        for batch in iterator:
            if defer:
                _mark_features(batch)
            graph = batch_graph(batch, state, training)
            if graph is not None and training and state.cache is not None and not graph.hetero:
                state.cache.annotate(graph, batch)
            seam.set_batch(graph)
            yield batch
    finally:
        seam.set_batch(None)
