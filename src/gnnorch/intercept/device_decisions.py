"""Which loaders the device data path serves, on which device, and where their data lives:
the path's decisions, each a function of the loader, its data, the run's device and the
`DataPathConfig` (`intercept.device_path.DevicePath` carries them out and records them).

* `resolve_device`: the device a run's path serves (``mode`` "auto", "device" or "host").
* `why_not_served`: why a loader is left to PyG (HeteroData, no ``edge_index`` tensor,
  partitioned features, an overridden ``filter_fn``, learnt features, numpy attributes where
  PyG's ``index_select`` is missing), or None.
* `unservable_now`: why a served loader whose data the user changed is given back.
* `data_placement`: where its structure and tensor attributes live, under the device's
  memory budget (`gnnorch.device.placement.plan_data_placement`), failing closed where torch
  has no in-place version counters to keep device copies current.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from ..compat.pyg import pyg_index_select
from ..compat.torch import tensor_version
from ..device.config import DataPathConfig
from ..device.gather import (ResidentTensors, device_attributes, learnt_attributes,
                             untensored_attributes)
from ..device.placement import DataPlacement, plan_data_placement

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from .feeds import LoaderState

__all__ = ["data_placement", "learnt_reason", "resolve_device", "unservable_now",
           "why_not_served"]


def why_not_served(loader: NeighborLoader, state: "LoaderState", device: torch.device | None,
                   reason: str) -> str | None:
    """Why the path does not serve `loader` (`state`: the loader seam's record of it) on
    `device`, or None; `reason`: why the run has no device when `device` is None."""
    from torch_geometric.data import Data
    from torch_geometric.loader.link_loader import LinkLoader
    from torch_geometric.loader.node_loader import NodeLoader

    if device is None:
        return reason
    if not isinstance(getattr(loader, "data", None), Data):
        return f"{type(loader.data).__name__} input: batches are built as PyG builds them"
    if not isinstance(getattr(loader.data, "edge_index", None), torch.Tensor):
        return "the data has no edge_index tensor (e.g. adj_t): built as PyG builds them"
    if getattr(state, "partition", None) is not None:
        return "its features are partitioned over ranks (partition_features)"
    pyg_filter = LinkLoader.filter_fn if state.kind == "link" else NodeLoader.filter_fn
    if type(loader).filter_fn is not pyg_filter:
        return f"{type(loader).__name__} overrides filter_fn"
    if learnt := learnt_attributes(loader.data):
        return learnt_reason(learnt)
    untensored = untensored_attributes(loader.data)
    if untensored and pyg_index_select() is None:
        return (f"its data holds attributes that are not tensors ({', '.join(untensored)})"
                f" and PyG's index_select, which gathers them, is unavailable "
                f"(gnnorch.compat.unavailable() says why)")
    return None


def learnt_reason(keys: list[str]) -> str:
    """Why tensors that require grad (`keys`) keep a loader off the path."""
    return (f"its data holds tensors that require grad ({', '.join(keys)}): PyG's gather gives "
            f"them gradients, a device copy would not")


def unservable_now(data: Any, planned: Any) -> str | None:
    """Why a served loader's data, changed by the user since its plan was made over `planned`,
    cannot be served any more."""
    if (not isinstance(data, type(planned))
            or not isinstance(getattr(data, "edge_index", None), torch.Tensor)):
        return f"its data was replaced by a {type(data).__name__} without an edge_index tensor"
    return learnt_reason(learnt) if (learnt := learnt_attributes(data)) else None


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
                   resident: ResidentTensors, host_sampling: str | None) -> DataPlacement:
    """Where one loader's structure and tensor attributes live (`plan_data_placement`): the
    budget from the device's free memory or ``budget_bytes``, bytes already resident there
    free of charge; features on the host where asked, or where torch has no in-place version
    counters to keep device copies current (`device_path.DevicePath._replan`): failing closed."""
    free, budget = _budget(device, cfg)
    host_why: bool | str = cfg.features == "host"
    if not host_why and tensor_version(data.edge_index) is None:
        host_why = "torch has no in-place version counters to keep device copies current"
    tensors = device_attributes(data)
    on_device = sum(t.numel() * t.element_size() for t in tensors.values()
                    if resident.has_on_device(t, device))
    return plan_data_placement(
        int(data.num_nodes), int(num_edges), tensors, free_bytes=free, budget_bytes=budget,
        budget_fraction=cfg.budget_fraction, pin=cfg.pin and device.type == "cuda",
        features_host=host_why, host_sampling=host_sampling, resident_bytes=on_device)


def _budget(device: torch.device, config: DataPathConfig) -> tuple[int | None, int | None]:
    """(free bytes of the device, the configured budget) for `plan_data_placement`."""
    if config.budget_bytes is not None:
        return None, config.budget_bytes
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]), None
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), None
