"""Which loaders the device data path serves, on which device, and where their data lives:
the path's decisions, each a function of the loader, its data, the run's device and the
`DataPathConfig` (`intercept.device_path.DevicePath` carries them out and records them).

* `resolve_device`: the device a run's path serves (``mode`` "auto", "device" or "host").
* `why_not_served`: why a loader is left to PyG (input other than a Data or a HeteroData, no
  ``edge_index`` tensor, ``adj_t``, partitioned features, an overridden ``filter_fn``, learnt
  features, numpy attributes where PyG's ``index_select`` is missing), or None.
* `pyg_filter_fn`: PyG's own ``filter_fn`` of a loader kind (a class that overrides it is
  left to PyG; `intercept.draw_ahead` asks too). Whether batches are drawn ahead of the
  trainer is `intercept.draw_ahead`'s decision.
* `unservable_now`: why a served loader whose data the user changed is given back.
* `data_placement`: where its structure and tensor attributes live, under the device's
  memory budget (`gnnorch.device.placement.plan_data_placement`), failing closed where torch
  has no in-place version counters to keep device copies current; `row_ranking`: its feature
  rows by expected gathers, for a split placement (`gnnorch.device.hot_rows`), on the device
  `ranking_device` picks; `shared_split`: the rows of a split another loader made of the same
  tensors, which a loader shares instead of ranking and copying its own;
  `hetero_data_placement`: the same for a HeteroData (no split).
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..compat.pyg import pyg_index_select
from ..compat.torch import tensor_version
from ..device.config import DataPathConfig
from ..device.gather import (ResidentTensors, device_attributes, gathered_attributes,
                             learnt_attributes, untensored_attributes)
from ..device.hetero_gather import (hetero_device_attributes, hetero_learnt_attributes,
                                    hetero_untensored_attributes)
from ..device.hot_rows import RowRanking, rank_rows, working_bytes
from ..device.placement import DataPlacement, device_label, plan_data_placement
from ..device.state import LoaderDevice

if TYPE_CHECKING:
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import BaseSampler

    from ..sampling.neighbor import FastNeighborSampler

    from .feeds import LoaderState

__all__ = ["data_placement", "hetero_data_placement", "host_sampling_reason", "learnt_reason",
           "resolve_device", "ranking_device", "row_ranking", "shared_split", "unservable_now",
           "pyg_filter_fn", "why_not_served"]


def why_not_served(loader: NeighborLoader, state: "LoaderState", device: torch.device | None,
                   reason: str) -> str | None:
    """Why the path does not serve `loader` (`state`: the loader seam's record of it) on
    `device`, or None; `reason`: why the run has no device when `device` is None."""
    from torch_geometric.data import Data, HeteroData
    if device is None:
        return reason
    if getattr(state, "kind", None) == "graph":
        return ("a graph-level DataLoader: PyG collates its graphs; on a device the path copies "
                "its batches")
    data = getattr(loader, "data", None)
    hetero = isinstance(data, HeteroData)
    if not hetero and not isinstance(data, Data):
        return f"{type(data).__name__} input: batches are built as PyG builds them"
    if not hetero and not isinstance(getattr(data, "edge_index", None), torch.Tensor):
        return "the data has no edge_index tensor (e.g. adj_t): built as PyG builds them"
    if reason := _rebuilt_adjacency(data):
        return reason
    if getattr(state, "partition", None) is not None:
        return "its features are partitioned over ranks (partition_features)"
    if type(loader).filter_fn is not pyg_filter_fn(state):
        return f"{type(loader).__name__} overrides filter_fn"
    if learnt := _learnt(data):
        return learnt_reason(learnt)
    untensored = (hetero_untensored_attributes if hetero else untensored_attributes)(data)
    if untensored and pyg_index_select() is None:
        return (f"its data holds attributes that are not tensors ({', '.join(untensored)})"
                f" and PyG's index_select, which gathers them, is unavailable "
                f"(gnnorch.compat.unavailable() says why)")
    return None


def _learnt(data: Any) -> list[str]:
    """Tensors of `data` (a Data or a HeteroData) that require grad."""
    from torch_geometric.data import HeteroData
    return (hetero_learnt_attributes if isinstance(data, HeteroData)
            else learnt_attributes)(data)


def pyg_filter_fn(state: "LoaderState") -> Callable[..., Any]:
    """PyG's own ``filter_fn`` for the loader kind `state` records (node or link)."""
    from torch_geometric.loader.link_loader import LinkLoader
    from torch_geometric.loader.node_loader import NodeLoader

    return LinkLoader.filter_fn if state.kind == "link" else NodeLoader.filter_fn


def learnt_reason(keys: list[str]) -> str:
    """Why tensors that require grad (`keys`) keep a loader off the path."""
    return (f"its data holds tensors that require grad ({', '.join(keys)}): PyG's gather gives "
            f"them gradients, a device copy would not")


def unservable_now(data: Any, planned: Any) -> str | None:
    """Why a served loader's data, changed by the user since its plan was made over `planned`,
    cannot be served any more."""
    from torch_geometric.data import HeteroData
    if not isinstance(data, type(planned)) or (
            not isinstance(data, HeteroData)
            and not isinstance(getattr(data, "edge_index", None), torch.Tensor)):
        return f"its data was replaced by a {type(data).__name__} without an edge_index tensor"
    if reason := _rebuilt_adjacency(data):
        return reason
    return learnt_reason(learnt) if (learnt := _learnt(data)) else None


def _rebuilt_adjacency(data: Any) -> str | None:
    """PyG's ``filter_fn`` rebuilds an ``adj_t`` beside ``edge_index`` for each batch (the
    sampled edges as a SparseTensor of the batch's size, `filter_edge_store_`); the gather
    plans do not, so such data (a Data, or any edge type of a HeteroData) is left to PyG."""
    from torch_geometric.data import HeteroData
    stores = ([data[e] for e in data.edge_types] if isinstance(data, HeteroData) else [data])
    if any("adj_t" in store for store in stores):
        return ("the data holds adj_t beside edge_index, which PyG rebuilds for each batch: "
                "built as PyG builds them")
    return None


def resolve_device(config: DataPathConfig,
                   device: torch.device | None) -> tuple[torch.device | None, str]:
    """(the device the path serves, why) or (None, why not)."""
    if config.mode == "host":
        return None, "data_path mode 'host': batches are built on the host as PyG builds them"
    if config.mode == "device":
        target = device if device is not None else torch.device("cpu")
        return target, f"data_path mode 'device': served on {target}"
    if device is not None and device.type == "cuda":
        return device, f"the run trains on {device}"
    return None, ("the run trains on the CPU (mode 'auto' serves CUDA runs; mode 'device' runs "
                  "the same path with the CPU as the device)")


def data_placement(device: torch.device, cfg: DataPathConfig, data: Any, num_edges: int,
                   resident: ResidentTensors, host_sampling: str | None,
                   ranking: Callable[[], RowRanking] | None = None,
                   defer: tuple[str, ...] = (),
                   shared_rows: torch.Tensor | None = None) -> DataPlacement:
    """Where one loader's structure and tensor attributes live (`plan_data_placement`): the
    budget from the device's free memory or ``budget_bytes``, bytes already resident there
    free of charge; features on the host where asked, or where torch has no in-place version
    counters to keep device copies current (`device_path.DevicePath._replan`): failing closed.
    Features that do not fit whole may be split (`ranking`: the loader's rows by expected
    gathers, asked for only then; `shared_rows`: another loader's split rows, `shared_split`,
    used instead; `defer`: attributes kept on the host whatever happens)."""
    free, budget = _budget(device, cfg)
    host_why: bool | str = cfg.features == "host"
    if not host_why and tensor_version(data.edge_index) is None:
        host_why = "torch has no in-place version counters to keep device copies current"
    tensors = device_attributes(data)
    on_device = sum(t.numel() * t.element_size() for t in tensors.values()
                    if resident.has_on_device(t, device))
    split = _splittable(data, device, resident, defer)
    row_bytes = sum(t[:1].numel() * t.element_size() for t in split)
    return plan_data_placement(
        int(data.num_nodes), int(num_edges), tensors, free_bytes=free, budget_bytes=budget,
        budget_fraction=cfg.budget_fraction, pin=cfg.pin and device.type == "cuda",
        features_host=host_why, host_sampling=host_sampling, resident_bytes=on_device,
        row_bytes=row_bytes if ranking is not None else 0,
        device_share=(lambda rows: ranking().share(rows)) if ranking is not None else None,
        shared_rows=int(shared_rows.numel()) if shared_rows is not None else 0,
        device_label=device_label(device))


def _splittable(data: Any, device: torch.device, resident: ResidentTensors,
                defer: tuple[str, ...]) -> list[torch.Tensor]:
    """The tensors a split would divide by rows: node-level, gathered, not deferred, not on
    `device` already."""
    node_level = set(gathered_attributes(data)[0])
    return [t for k, t in device_attributes(data).items()
            if k in node_level and k not in defer and t.dim() > 0
            and data.__cat_dim__(k, t) == 0 and not resident.has_on_device(t, device)]


def shared_split(data: Any, device: torch.device, resident: ResidentTensors,
                 defer: tuple[str, ...] = ()) -> torch.Tensor | None:
    """The hot rows of a split another loader made of `data`'s tensors on `device` (one
    loader ranks; the others over the same tensors share its rows and device copies, so
    loaders do not multiply the budget), or None."""
    return next((rows for t in _splittable(data, device, resident, defer)
                 if (rows := resident.split_rows(t, device)) is not None), None)


def host_sampling_reason(sampler: BaseSampler) -> str | None:
    """Why a served loader's `sampler` cannot sample on the device (only gnnorch's own
    samplers, on their fast path, can), or None."""
    from ..sampling.hetero_neighbor import FastHeteroNeighborSampler
    from ..sampling.neighbor import FastNeighborSampler

    ours = isinstance(sampler, (FastNeighborSampler, FastHeteroNeighborSampler))
    if ours and sampler.fallback_reason is None:
        return None
    why = f", {sampler.fallback_reason}" if ours else ""
    return f"its sampler ({type(sampler).__name__}{why}) has no device path"


def hetero_data_placement(device: torch.device, cfg: DataPathConfig, data: HeteroData,
                          sampler: BaseSampler, resident: ResidentTensors,
                          host_sampling: str | None) -> DataPlacement:
    """Where a HeteroData loader's structure (one CSC per edge type, the sampler's) and tensor
    attributes (every gathered one of every store) live: `data_placement`'s rule, budget and
    failing closed, without a split (the features fit whole or stay on the host)."""
    free, budget = _budget(device, cfg)
    host_why: bool | str = cfg.features == "host"
    edge_index = next((data[e].edge_index for e in data.edge_types
                       if isinstance(data[e].get("edge_index"), torch.Tensor)), None)
    if not host_why and edge_index is not None and tensor_version(edge_index) is None:
        host_why = "torch has no in-place version counters to keep device copies current"
    tensors = hetero_device_attributes(data)
    on_device = sum(t.numel() * t.element_size() for t in tensors.values()
                    if resident.has_on_device(t, device))
    from ..sampling.hetero_neighbor import hetero_csc_bytes

    return plan_data_placement(
        int(data.num_nodes or 0), sum(int(data[e].num_edges) for e in data.edge_types),
        tensors, free_bytes=free, budget_bytes=budget, budget_fraction=cfg.budget_fraction,
        pin=cfg.pin and device.type == "cuda", features_host=host_why,
        host_sampling=host_sampling, resident_bytes=on_device,
        structure_size=hetero_csc_bytes(sampler), device_label=device_label(device))


def row_ranking(loader: NeighborLoader, sampler: FastNeighborSampler, device: torch.device,
                record: LoaderDevice) -> RowRanking:
    """`loader`'s feature rows by expected gathers per epoch (`gnnorch.device.hot_rows`): its
    input nodes as seeds (a link loader's: both ends of its input edges, so its batch size
    counts both ends), its fanouts and batch size; on `ranking_device` (one pass over the
    edges per hop: seconds on a products-scale graph on the host, a copy of the CSC and
    milliseconds on a GPU). Where it ran and the seconds it took go to `record`."""
    start = time.perf_counter()
    colptr, row = sampler.host_structure
    where = ranking_device(device, colptr.numel() - 1, row)
    record.ranking_on = str(where)
    try:
        if where.type == "cuda":
            try:
                return _row_ranking(loader, sampler, colptr.to(where), row.to(where))
            except torch.OutOfMemoryError:   # another process took the room since the check
                record.ranking_on = f"cpu (out of memory on {where})"
        return _row_ranking(loader, sampler, colptr, row)
    finally:
        if where.type == "cuda":   # the working set is gone: give its cached blocks back
            torch.cuda.synchronize(where)
            torch.cuda.empty_cache()
        record.ranking_s += time.perf_counter() - start


def ranking_device(device: torch.device, num_nodes: int, row: torch.Tensor) -> torch.device:
    """Where a split's ranking runs: on `device` when it is a GPU with twice the bytes free
    that a copy of the CSC and `working_bytes` take there (the copy and the working set are
    freed once the ranking is made), else on the host. Under
    `torch.use_deterministic_algorithms(True)` always on the host: the ranking's weighted
    `bincount` and floating-point `cumsum` have no deterministic CUDA kernel, and torch
    raises rather than run them there."""
    if device.type != "cuda" or torch.are_deterministic_algorithms_enabled():
        return torch.device("cpu")
    need = 8 * (num_nodes + 1) + row.numel() * row.element_size() \
        + working_bytes(num_nodes, row.numel())
    return device if int(torch.cuda.mem_get_info(device)[0]) >= 2 * need \
        else torch.device("cpu")


def _row_ranking(loader: NeighborLoader, sampler: FastNeighborSampler, colptr: torch.Tensor,
                 row: torch.Tensor) -> RowRanking:
    node = getattr(loader.input_data, "node", None)
    batch_size = int(loader.batch_size or 1)
    if node is None and hasattr(loader.input_data, "row"):   # a link loader
        node, batch_size = torch.cat([loader.input_data.row, loader.input_data.col]), \
            2 * batch_size
    if node is None:
        node = torch.arange(colptr.numel() - 1)
    fanouts = [int(k) for k in sampler.num_neighbors.get_mapped_values()]
    return rank_rows(colptr, row, node, fanouts, batch_size, bool(sampler.replace))


def _budget(device: torch.device, config: DataPathConfig) -> tuple[int | None, int | None]:
    """(free bytes of the device, the configured budget) for `plan_data_placement`."""
    if config.budget_bytes is not None:
        return None, config.budget_bytes
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]), None
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), None
