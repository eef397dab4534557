"""Which sampler draws an intercepted loader's batches (`RunOptions.sampler`).

For a homogeneous `Data`, "gnnorch" and "auto" pass gnnorch's vectorised `FastNeighborSampler`
as the loader's `neighbor_sampler` (PyG's own argument), built from the loader's own sampling
arguments; it draws from PyG's law and returns hop counts. For a `HeteroData` they pass
`FastHeteroNeighborSampler` the same way (PyG's law per edge type, hop counts per type). With
pyg-lib installed, "auto" times both backends on the loader's graph once
(`gnnorch.sampling.choice`) and keeps the faster, with two exceptions that keep gnnorch's
sampler untimed: the cache's homogeneous training loaders (it prunes with gnnorch's exclusion
mask), and loaders the GPU data path samples on the device (no PyG
backend samples on a device; timing both on the host cost 3 s of set-up per run on an H200 at
products scale). "pyg" leaves PyG's choice; loaders over a feature / graph store and loaders
given their own ``neighbor_sampler`` run as PyG runs them. Where gnnorch's sampler hands every
batch to PyG's own sampling (disjoint, temporal or weighted sampling: its `fallback_reason`),
the loader's record names PyG's backend, with that reason, and nothing is timed.

`choose_backend` runs before PyG's ``__init__`` (the sampler must be an argument of it); the
timing it returns runs after the loader is built and the device path has placed it.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..compat import pyg as compat_pyg
from .feeds import LoaderState

if TYPE_CHECKING:
    from ..sampling.hetero_neighbor import FastHeteroNeighborSampler
    from ..sampling.neighbor import FastNeighborSampler

__all__ = ["choose_backend", "time_backends"]

#: PyG `NeighborSampler` arguments a loader passes on to its sampler, and so to gnnorch's
SAMPLER_ARGS = ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
                "weight_attr", "is_sorted", "directed")


def choose_backend(choice: str, state: LoaderState, init: Any, args: tuple, kwargs: dict,
                   cached: bool) -> Callable[[bool], None] | None:
    """Put gnnorch's sampler into `kwargs` (``neighbor_sampler``) where `choice` and the loader
    allow, recording the backend and why in `state` (`init`: PyG's own ``__init__`` of the
    loader's class; `cached`: the cache attaches to the training loaders). Returns the timing
    ``sampler="auto"`` asks for, to call once the loader is placed with whether it samples on
    the device (`time_backends`), or None: nothing to time."""
    from torch_geometric.data import Data, HeteroData
    import torch_geometric.typing as pyg_typing

    bound = compat_pyg.loader_arguments(init, args, kwargs)  # {}: PyG samples
    data = bound.get("data")
    state.graph = "feature/graph store" if isinstance(data, tuple) else type(data).__name__
    if choice == "pyg":
        state.backend_reason = "sampler='pyg'"
    elif bound.get("neighbor_sampler") is not None:
        state.backend_reason = "the loader was given its own neighbor_sampler"
    elif not isinstance(data, (Data, HeteroData)):
        state.backend_reason = f"{state.graph} input is sampled by PyG"
    else:
        from ..sampling.hetero_neighbor import FastHeteroNeighborSampler
        from ..sampling.neighbor import FastNeighborSampler

        extra = bound.get("kwargs", {})
        workers = int(extra.get("num_workers", 0) or 0)
        options = {name: bound[name] for name in SAMPLER_ARGS if name in bound}
        kind = FastHeteroNeighborSampler if isinstance(data, HeteroData) else FastNeighborSampler
        sampler = kind(data, num_neighbors=bound["num_neighbors"], share_memory=workers > 0,
                       **options)
        kwargs["neighbor_sampler"] = sampler
        state.backend, state.setup_s = "gnnorch", sampler.setup_s
        if sampler.fallback_reason is not None:   # it hands each batch to PyG's own sampling
            state.backend = "pyg"
            state.backend_reason = (f"gnnorch's sampler defers to PyG's for "
                                    f"{sampler.fallback_reason}")
        pruned = state.role == "train" and cached and kind is FastNeighborSampler
        measurable = (sampler.fallback_reason is None and pyg_typing.WITH_PYG_LIB
                      and not pruned)
        if choice == "auto" and measurable:  # (the cache prunes with ours; not a HeteroData)
            return functools.partial(time_backends, sampler, state, bound, extra, workers)
    if state.backend == "pyg" and pyg_typing.WITH_PYG_LIB:
        state.backend = "pyg-lib"
    elif state.backend == "pyg" and pyg_typing.WITH_TORCH_SPARSE:
        state.backend = "torch_sparse"
    return None


def time_backends(sampler: FastNeighborSampler | FastHeteroNeighborSampler, state: LoaderState,
                  bound: dict, extra: dict, workers: int, on_device: bool) -> None:
    """`sampler="auto"` with pyg-lib installed: time both backends on this graph
    (`gnnorch.sampling.choice`) and keep the faster one (`sampler.use_pyg`); `on_device`: the
    device path samples this loader on the device, where only gnnorch's sampler runs."""
    if on_device:
        state.backend_reason = ("sampled on the device by gnnorch's sampler (PyG has no "
                                "device neighbour sampler): the host samplers not timed")
        return
    from ..sampling.choice import choose_sampler, seed_pool

    batch_size = int(extra.get("batch_size", 1) or 1)
    input_type, input_nodes = _seed_input(bound, sampler)
    if input_type is None:
        num_nodes, num_edges = sampler.colptr.numel() - 1, sampler.row.numel()
        calls = {"gnnorch": sampler.sample_ours, "pyg-lib": sampler.sample_pyg}
    else:   # a HeteroData: seeds of one node type
        num_nodes = int(sampler.num_nodes[input_type])
        num_edges = sum(int(row.numel()) for row in sampler.row_dict.values())
        calls = {"gnnorch": lambda seeds: sampler.sample_ours({input_type: seeds}),
                 "pyg-lib": lambda seeds: sampler.sample_pyg({input_type: seeds})}
    key = (input_type, num_nodes, num_edges, str(bound["num_neighbors"]), batch_size,
           bool(sampler.replace), str(sampler.subgraph_type))
    choice = choose_sampler(calls, seed_pool(input_nodes, num_nodes), batch_size, key,
                            threads=1 if workers > 0 else torch.get_num_threads())
    sampler.use_pyg = choice.backend == "pyg-lib"
    state.backend, state.backend_reason = choice.backend, choice.reason
    state.sampler_choice = choice.to_dict()


def _seed_input(bound: dict, sampler: FastNeighborSampler | FastHeteroNeighborSampler
                ) -> tuple[str | None, Any]:
    """``(node type, nodes)`` the timing draws seeds from: a loader's ``input_nodes`` (PyG's
    forms: a tensor or None for a Data; a node type, or ``(node type, tensor or None)`` for a
    HeteroData), or every node of a link loader's source type (``edge_label_index``: an edge
    type, or ``(edge type, tensor or None)``); the node type is None for a Data."""
    input_nodes = bound.get("input_nodes")
    if not sampler.is_hetero:
        return None, input_nodes
    if isinstance(input_nodes, str):
        return input_nodes, None
    if isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2:
        return input_nodes[0], input_nodes[1]
    labelled = bound.get("edge_label_index")
    edge_type = labelled[0] if isinstance(labelled, (tuple, list)) and len(labelled) == 2 \
        else labelled
    if isinstance(edge_type, (tuple, list)) and len(edge_type) == 3:
        return edge_type[0], None
    return sampler.node_types[0], None
