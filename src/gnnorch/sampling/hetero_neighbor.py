"""PyG's :class:`~torch_geometric.sampler.NeighborSampler` over a ``HeteroData``, with
gnnorch's vectorised heterogeneous sampler (`gnnorch.sampling.hetero`).

:class:`FastHeteroNeighborSampler` keeps PyG's constructor (the per-edge-type CSC conversion
``colptr_dict`` / ``row_dict`` / ``perm``), fanout handling and post-processing
(``sample_from_nodes`` / ``sample_from_edges``, negative sampling, bidirectional conversion);
it only replaces ``_sample`` for directional, non-temporal, unweighted, non-disjoint, forward
sampling of a ``HeteroData``, and returns per-hop node and edge counts there as pyg-lib does
(so PyG's heterogeneous ``trim_to_layer`` works without pyg-lib). Everything else goes to
PyG's own ``_sample``; :attr:`FastHeteroNeighborSampler.fallback_reason` says why.
"""
from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput, NeighborSampler
from torch_geometric.sampler.base import DataType, SubgraphType

from gnnorch.compat import pyg as compat_pyg
from gnnorch.sampling.hetero import new_hetero_workspace, sample_hetero_neighbors
from gnnorch.sampling.neighbor import PYG_LIB_WARNING, supported_options
from gnnorch.sampling.workspace_pool import WorkspacePool

__all__ = ["FastHeteroNeighborSampler", "hetero_csc_bytes"]

#: the keyword arguments of PyG's NeighborSampler this class passes on
OPTIONS = ("subgraph_type", "replace", "disjoint", "temporal_strategy", "time_attr",
           "weight_attr", "is_sorted", "share_memory", "directed", "sample_direction")

#: what the fast path reads of PyG's heterogeneous NeighborSampler (PyG 2.5 to 2.8)
_PYG_ATTRIBUTES = ("node_types", "edge_types", "colptr_dict", "row_dict", "to_rel_type",
                   "num_nodes", "node_time", "edge_time")


class FastHeteroNeighborSampler(NeighborSampler):
    """Drop-in :class:`~torch_geometric.sampler.NeighborSampler` (same arguments) for a
    ``HeteroData``.

    The fast path draws from PyG's law per edge type (uniform ``k``-subsets without
    replacement, i.i.d. draws with replacement, every node expanded once at the hop it first
    appears; the module docstring of `gnnorch.sampling.hetero`). Pickles without its scratch
    buffers; safe to call from several threads at once (each call borrows its own maps).
    """

    def __init__(self, data: Any, num_neighbors: Any, **options: Any) -> None:
        """`options`: PyG's ``NeighborSampler`` keyword arguments (`OPTIONS`), passed on as
        `FastNeighborSampler` passes them (`supported_options`); any other raises TypeError."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"FastHeteroNeighborSampler got unexpected keyword argument(s) "
                            f"{unknown}; it takes PyG NeighborSampler's: {', '.join(OPTIONS)}")
        start = time.perf_counter()
        sample_direction = options.get("sample_direction", "forward")
        fast = (DataType.from_data(data) == DataType.heterogeneous
                and options.get("time_attr") is None and options.get("weight_attr") is None
                and not options.get("disjoint", False))
        options = supported_options(options)
        with warnings.catch_warnings():
            if fast:
                warnings.filterwarnings("ignore", message=PYG_LIB_WARNING)
            super().__init__(data, num_neighbors, **options)
        if "sample_direction" not in options:   # PyG < 2.7 samples forward only
            self.sample_direction = sample_direction
        self._workspaces = WorkspacePool(self._new_workspace)
        self.use_pyg = False     # every call to PyG's own _sample (pyg-lib)
        # the fast path's random source (None: torch's global RNG); not pickled, as
        # `FastNeighborSampler.generator`
        self.generator: torch.Generator | None = None
        self.setup_s = time.perf_counter() - start   # PyG's CSC conversion, mostly

    @property
    def fallback_reason(self) -> str | None:
        """Why sampling goes to PyG's own ``_sample``, or None when the fast path is used."""
        hook = compat_pyg.sampler_hook_reason()   # PyG would never call ours
        if hook is not None:
            return hook
        if not self.is_hetero:
            return "homogeneous graph (FastNeighborSampler serves it)"
        absent = compat_pyg.missing_attributes(self, _PYG_ATTRIBUTES)
        if absent is not None:
            return absent
        if self.is_temporal:
            return "temporal sampling (time_attr)"
        if getattr(self, "edge_weight", None) is not None:
            return "weighted sampling (weight_attr)"
        if self.disjoint:
            return "disjoint sampling"
        if self.subgraph_type == SubgraphType.induced:
            return "induced heterogeneous subgraphs"
        if self.sample_direction != "forward":
            return f"sample_direction={self.sample_direction!r}"
        wide = [e for e in self.edge_types
                if self.colptr_dict[self.to_rel_type[e]].dtype != torch.long
                or self.row_dict[self.to_rel_type[e]].dtype != torch.long]
        if wide:
            return (f"non-int64 graph structure of {wide[0]} (gnnorch's sampler indexes with "
                    f"int64)")
        return None

    @property
    def structure_device(self) -> torch.device:
        """Where the per-edge-type CSCs live, and so where the fast path samples."""
        first = next(iter(self.colptr_dict.values()), None)
        return first.device if isinstance(first, Tensor) else torch.device("cpu")

    @property
    def structure_bytes(self) -> int:
        """Bytes of the per-edge-type CSCs (`hetero_csc_bytes`)."""
        return hetero_csc_bytes(self)

    def move_to(self, device: torch.device | str, keep_host: bool = False) -> None:
        """Keep every edge type's CSC and edge permutation on `device`: the fast path samples
        there from now on (its results are on `device`). `keep_host` is taken for the
        homogeneous sampler's signature: nothing here reads a host copy."""
        device = torch.device(device)
        self.use_structure({k: v.to(device) for k, v in self.colptr_dict.items()},
                           {k: v.to(device) for k, v in self.row_dict.items()},
                           {k: None if v is None else v.to(device)
                            for k, v in (self.perm or {}).items()})

    def use_structure(self, colptr_dict: dict[str, Tensor], row_dict: dict[str, Tensor],
                      perm: dict[Any, Tensor | None]) -> None:
        """Sample from these CSCs (e.g. a device copy shared by the loaders of one graph):
        the same keys as ``colptr_dict``, ``row_dict`` and ``perm`` (PyG's)."""
        self.colptr_dict, self.row_dict, self.perm = dict(colptr_dict), dict(row_dict), \
            dict(perm)

    def sample_ours(self, seed: dict[str, Tensor]) -> HeteroSamplerOutput:
        """One call of gnnorch's vectorised sampler on `seed` (whatever `use_pyg` says)."""
        return self._route(seed, None, {}, use_pyg=False)

    def sample_pyg(self, seed: dict[str, Tensor]) -> Any:
        """One call of PyG's own sampling backend (pyg-lib when installed) on `seed`."""
        return compat_pyg.pyg_sample(self, seed)

    def _sample(self, seed: Any, seed_time: Any = None, **kwargs: Any) -> Any:
        """PyG's hook: one sampling call for a seed dict (`gnnorch.compat.pyg` checks the
        hook's shape; `fallback_reason` says when it changed)."""
        return self._route(seed, seed_time, kwargs, self.use_pyg)

    def _route(self, seed: Any, seed_time: Any, kwargs: dict, use_pyg: bool) -> Any:
        """The fast path, or PyG's own ``_sample`` when `use_pyg` or the call needs it."""
        if (use_pyg or not isinstance(seed, dict) or seed_time is not None
                or self.fallback_reason is not None):
            return compat_pyg.pyg_sample(self, seed, seed_time, **kwargs)
        fanouts = self.num_neighbors.get_mapped_values(self.edge_types)
        rel = self.to_rel_type
        colptr = {e: self.colptr_dict[rel[e]] for e in self.edge_types}
        device = next(iter(colptr.values())).device if colptr else torch.device("cpu")
        with self._workspaces.borrow(device) as workspace:
            out = sample_hetero_neighbors(
                colptr, {e: self.row_dict[rel[e]] for e in self.edge_types}, seed,
                {e: fanouts[rel[e]] for e in self.edge_types}, self._node_counts(),
                replace=self.replace, generator=self.generator, workspace=workspace)
        return HeteroSamplerOutput(
            node=out.node, row=out.row, col=out.col, edge=out.edge, batch=None,
            num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)

    def _node_counts(self) -> dict[str, int]:
        """The node count of every node type (PyG's ``num_nodes``), 0 where PyG has none."""
        return {t: int(self.num_nodes.get(t) or 0) for t in self.node_types}

    def _new_workspace(self, device: torch.device) -> dict[str, Tensor]:
        return new_hetero_workspace(self._node_counts(), device)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["generator"] = None
        return state


def hetero_csc_bytes(sampler: NeighborSampler) -> int:
    """Bytes of a heterogeneous PyG sampler's CSCs (gnnorch's or PyG's own): every edge type's
    ``colptr``, ``row`` and edge permutation."""
    tensors = [*(getattr(sampler, "colptr_dict", None) or {}).values(),
               *(getattr(sampler, "row_dict", None) or {}).values(),
               *(getattr(sampler, "perm", None) or {}).values()]
    return sum(int(t.numel()) * t.element_size() for t in tensors if isinstance(t, Tensor))
