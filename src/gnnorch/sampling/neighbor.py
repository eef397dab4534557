"""PyG's :class:`~torch_geometric.sampler.NeighborSampler` with gnnorch's vectorised sampler.

:class:`FastNeighborSampler` keeps PyG's constructor, CSC conversion (``colptr``, ``row``,
``perm``), fanout handling and post-processing (``sample_from_nodes`` /
``sample_from_edges``, bidirectional conversion); it only replaces ``_sample`` for
homogeneous, non-temporal, unweighted, non-disjoint sampling, and returns per-hop node and
edge counts there (so ``trim_to_layer`` works without pyg-lib). Everything else goes to
PyG's own ``_sample``; :attr:`FastNeighborSampler.fallback_reason` says why. With
``use_pyg = True`` (``sampler="auto"`` measured pyg-lib faster on this graph:
:mod:`gnnorch.sampling.choice`) every call goes to PyG's ``_sample`` too, on the same CSC.
Samplers over the same graph share one CSC while any of them holds it (`gnnorch.sampling.csc`).
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Iterable
from typing import Any, Literal

import torch
from torch import Tensor
from torch_geometric.sampler import NeighborSampler, SamplerOutput
from torch_geometric.sampler.base import DataType, SubgraphType

from gnnorch.compat import pyg as compat_pyg
from gnnorch.sampling.csc import SHARED_CSC
from gnnorch.sampling.uniform import new_workspace, sample_neighbors
from gnnorch.sampling.workspace_pool import WorkspacePool

__all__ = ["FastNeighborSampler", "PYG_LIB_WARNING", "supported_options"]

# PyG warns that sampling without pyg-lib is deprecated; it does not apply to our fast path.
PYG_LIB_WARNING = r"Using '.*' without a 'pyg-lib' installation is deprecated"


class FastNeighborSampler(NeighborSampler):
    """Drop-in :class:`~torch_geometric.sampler.NeighborSampler` (same arguments).

    The fast path draws from the same distribution as PyG: uniform without replacement
    (an exact uniform ``k``-subset per node), i.i.d. uniform with replacement, every node
    expanded once at the hop it first appears. Exclusion (:meth:`set_exclusion`) stops chosen
    nodes from being expanded at chosen hops, on the fast path only.

    Pickles without its scratch buffers (DataLoader workers re-create them lazily). Safe to
    call from several threads at once: each concurrent call borrows its own buffer.
    """

    def __init__(
        self,
        data: Any,
        num_neighbors: Any,
        subgraph_type: SubgraphType | str = "directional",
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        weight_attr: str | None = None,
        is_sorted: bool = False,
        share_memory: bool = False,
        directed: bool = True,
        sample_direction: Literal["forward", "backward"] = "forward",
    ):
        start = time.perf_counter()
        fast = (DataType.from_data(data) == DataType.homogeneous and time_attr is None
                and weight_attr is None and not disjoint)
        options = supported_options(dict(
            subgraph_type=subgraph_type, replace=replace, disjoint=disjoint,
            temporal_strategy=temporal_strategy, time_attr=time_attr, weight_attr=weight_attr,
            is_sorted=is_sorted, share_memory=share_memory, directed=directed,
            sample_direction=sample_direction))
        with warnings.catch_warnings(), compat_pyg.neighbor_sampler_csc(SHARED_CSC.wrap):
            if fast:
                warnings.filterwarnings("ignore", message=PYG_LIB_WARNING)
            hits = SHARED_CSC.hits   # constructors run one at a time in here: the count is ours
            super().__init__(data, num_neighbors, **options)
            # whether this sampler took its CSC from another's over the same graph
            self.csc_shared = SHARED_CSC.hits > hits
        if "sample_direction" not in options:   # PyG < 2.7 samples forward only
            self.sample_direction = sample_direction
        self._exclude: Tensor | None = None
        self._exclude_hops: frozenset[int] = frozenset()
        # free global-to-local maps per CUDA stream
        self._workspaces = WorkspacePool(self._new_workspace)
        self._host_structure: tuple[Tensor, Tensor] | None = None   # see `host_structure`
        self.use_pyg = False               # every call to PyG's own _sample (pyg-lib)
        # the fast path's random source (None: torch's global RNG of the CSC's device); not
        # pickled: DataLoader workers draw from their own, seeded, global RNG
        self.generator: torch.Generator | None = None
        # counts `set_exclusion` calls; each fast-path output carries the count it sampled
        # with (``out.exclusion_version``), so a batch drawn ahead says which mask pruned it
        self.exclusion_version = 0
        self.setup_s = time.perf_counter() - start  # PyG's CSC conversion, mostly

    def sample_ours(self, seed: Tensor) -> Any:
        """One call of gnnorch's vectorised sampler on `seed` (whatever `use_pyg` says)."""
        return self._route(seed, None, {}, use_pyg=False)

    def sample_pyg(self, seed: Tensor) -> Any:
        """One call of PyG's own sampling backend (pyg-lib when installed) on `seed`."""
        return compat_pyg.pyg_sample(self, seed)

    def move_to(self, device: torch.device | str, keep_host: bool = False) -> None:
        """Keep the CSC (``colptr``, ``row``, ``perm``) and the exclusion mask on `device`:
        the fast path samples there from now on (its results are on `device`). `keep_host`:
        the host CSC stays referenced as `host_structure` (for host-side users of the graph,
        e.g. the historical-embedding cache's hotness and refresh)."""
        device = torch.device(device)
        self._keep_host_structure(keep_host and device.type != "cpu")
        self.colptr, self.row = self.colptr.to(device), self.row.to(device)
        if self.perm is not None:
            self.perm = self.perm.to(device)
        if self._exclude is not None:
            self._exclude = self._exclude.to(device)
        self._workspaces.clear()

    def use_structure(self, colptr: Tensor, row: Tensor, perm: Tensor | None,
                      keep_host: bool = False) -> None:
        """Sample from `colptr` / `row` / `perm` (the same CSC as this sampler's own, e.g. one
        device copy shared by the loaders of one graph) from now on; `keep_host` as in
        `move_to`."""
        if colptr.shape != self.colptr.shape or row.shape != self.row.shape:
            raise ValueError("use_structure: not the CSC of this sampler's graph")
        self._keep_host_structure(keep_host and colptr.device.type != "cpu")
        self.colptr, self.row, self.perm = colptr, row, perm
        if self._exclude is not None:
            self._exclude = self._exclude.to(colptr.device)
        self._workspaces.clear()

    def _keep_host_structure(self, keep: bool) -> None:
        if not keep:
            self._host_structure = None
        elif self.colptr.device.type == "cpu":
            self._host_structure = (self.colptr, self.row)

    @property
    def host_structure(self) -> tuple[Tensor, Tensor]:
        """``(colptr, row)`` on the host: the sampler's own where it samples on the CPU, else
        the host CSC kept by `move_to(..., keep_host=True)`, else a copy made now."""
        if self.colptr.device.type == "cpu":
            return self.colptr, self.row
        if self._host_structure is None:
            self._host_structure = (self.colptr.cpu(), self.row.cpu())
        return self._host_structure

    @property
    def fallback_reason(self) -> str | None:
        """Why sampling goes to PyG's own ``_sample``, or None when the fast path is used."""
        hook = compat_pyg.sampler_hook_reason()   # PyG would never call ours
        if hook is not None:
            return hook
        if self.is_hetero:
            return "heterogeneous graph"
        if self.is_temporal:
            return "temporal sampling (time_attr)"
        if self.edge_weight is not None:
            return "weighted sampling (weight_attr)"
        if self.disjoint:
            return "disjoint sampling"
        if self.colptr.dtype != torch.long or self.row.dtype != torch.long:
            return (f"{self.row.dtype} graph structure (pyg-lib keeps int32 indices; gnnorch's "
                    f"sampler indexes with int64)")
        return None

    def set_exclusion(self, mask: Tensor | None, hops: Iterable[int] = ()) -> None:
        """Nodes in ``mask`` (bool ``[num_nodes]``) are not expanded at the listed hops.

        Hop 0 is the seeds' hop. ``mask=None`` clears the exclusion. Not to be called while
        another thread samples (outputs are tagged with `exclusion_version`).
        """
        self.exclusion_version += 1
        if mask is None:
            self._exclude, self._exclude_hops = None, frozenset()
            return
        if mask.dtype != torch.bool or mask.shape != (self.colptr.numel() - 1,):
            raise ValueError(f"exclusion mask must be bool [{self.colptr.numel() - 1}], "
                             f"got {mask.dtype} {list(mask.shape)}")
        self._exclude = mask.to(self.colptr.device)
        self._exclude_hops = frozenset(int(h) for h in hops)

    @property
    def exclusion(self) -> tuple[Tensor | None, frozenset[int]]:
        """The current ``(mask, hops)`` set by :meth:`set_exclusion`."""
        return self._exclude, self._exclude_hops

    def _sample(self, seed: Any, seed_time: Any = None, **kwargs: Any) -> Any:
        """PyG's hook: one sampling call for a seed tensor (or dict, for PyG's path); the hook's
        shape is checked by `gnnorch.compat.pyg` (`fallback_reason` says when it changed)."""
        return self._route(seed, seed_time, kwargs, self.use_pyg)

    def _route(self, seed: Any, seed_time: Any, kwargs: dict, use_pyg: bool) -> Any:
        """The fast path, or PyG's own ``_sample`` when `use_pyg` or the call needs it."""
        if (use_pyg or not isinstance(seed, Tensor) or seed_time is not None
                or self.fallback_reason is not None):
            return compat_pyg.pyg_sample(self, seed, seed_time, **kwargs)
        induced = self.subgraph_type == SubgraphType.induced
        version = self.exclusion_version
        with self._workspaces.borrow(self.colptr.device) as workspace:
            out = sample_neighbors(
                self.colptr, self.row, seed, self.num_neighbors.get_mapped_values(),
                replace=self.replace, directed=not induced, exclude=self._exclude,
                exclude_hops=self._exclude_hops, workspace=workspace,
                generator=self.generator)
        row, col = out.row, out.col
        if self.sample_direction == "backward":
            row, col = col, row
        # PyG reports no hop counts for induced subgraphs (their edges are not hop-ordered).
        result = SamplerOutput(
            node=out.node, row=row, col=col, edge=out.edge, batch=None,
            num_sampled_nodes=None if induced else out.num_sampled_nodes,
            num_sampled_edges=out.num_sampled_edges)
        result.exclusion_version = version   # the mask it was sampled with (see __init__)
        return result

    def _new_workspace(self, device: torch.device) -> Tensor:
        return new_workspace(self.colptr.numel() - 1, device)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_host_structure"] = None
        state["generator"] = None
        return state


_DEFAULTS = {"sample_direction": "forward", "weight_attr": None, "directed": True}


def supported_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options the installed PyG's ``NeighborSampler`` takes (``sample_direction``: PyG >=
    2.7); an option it lacks is dropped at its default and refused otherwise, as PyG would."""
    accepted = compat_pyg.sampler_parameters()
    if accepted is None:      # signature unreadable: pass all, PyG raises on what it lacks
        return options
    out = {}
    for name, value in options.items():
        if name in accepted:
            out[name] = value
        elif name not in _DEFAULTS or value != _DEFAULTS[name]:
            import torch_geometric

            raise TypeError(f"gnnorch's sampler: {name}={value!r} needs a newer PyG "
                            f"(torch_geometric {torch_geometric.__version__}'s NeighborSampler "
                            f"does not take {name!r})")
    return out
