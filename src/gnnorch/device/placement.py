"""Where a loader's graph structure and node features live when training on a GPU.

Sizes (bytes): the structure is PyG's CSC as the sampler holds it (``colptr``: (N + 1) int64,
``row`` and ``perm``: E int64 each); the features are every node-level tensor the batches
gather (``x``, ``y``, masks). Budget: ``budget_bytes`` (given) or ``budget_fraction`` of the
device's free memory at decision time (what the model, its optimizer state and the activations
of the steps also need stays outside it).

Rule, in order: the structure goes to the GPU when it fits the budget (GPU sampling needs it
there; it is also the smaller of the two for feature-rich graphs); the features go to the GPU
when they fit what is left (and ``features_host`` does not keep them on the host); otherwise,
when the hottest rows that fit what is left would serve at least `SPLIT_MIN_SHARE` of the rows
batches gather (``device_share``: `gnnorch.device.hot_rows`), the features are *split*: those
rows of every node-level tensor live on the GPU (with a table of `TABLE_BYTES` a vertex that
says which) and the rest on the host; otherwise features stay on the host, pinned when ``pin``
(copies then run asynchronously on a side stream) and pageable otherwise. Host rows of a split
are pinned or pageable alike. Features another loader split already (``shared_rows``) are
split the same way: those rows are on the GPU already, so the split costs no budget and no
ranking. A structure that does not fit keeps sampling on the host. Every choice carries its
reason and the numbers behind it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .split_rows import TABLE_BYTES

__all__ = ["DataPlacement", "device_label", "plan_data_placement", "structure_bytes",
           "feature_bytes", "SPLIT_MIN_SHARE"]

GPU, PINNED, HOST, SPLIT = "gpu", "pinned", "host", "split"

#: the least expected share of gathered rows for which a split pays: below it each batch's
#: extra work (looking its rows up, assembling them on the device) outweighs the host rows saved
SPLIT_MIN_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class DataPlacement:
    """The decision for one loader's data (see the module docstring)."""

    structure: str                 # "gpu" | "host": where the CSC lives and sampling runs
    features: str                  # "gpu" | "split" | "pinned" | "host"
    structure_bytes: int
    feature_bytes: int
    budget_bytes: int
    reasons: tuple[str, ...]
    device_rows: int = 0           # "split": rows of the node-level tensors on the GPU
    device_share: float = 0.0      # "split": expected share of gathered rows they serve
                                   # (0.0 when shared with another loader: not predicted)
    host_rows: str = HOST          # "split": where the other rows live ("pinned" | "host")

    @property
    def samples_on_gpu(self) -> bool:
        return self.structure == GPU

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["reasons"] = list(self.reasons)
        return out


def device_label(device: Any) -> str:
    """What placement reasons call `device` (a `torch.device`): "GPU" for CUDA, else "device
    (cpu)" and the like (the path runs the same with the CPU standing in for a GPU)."""
    return "GPU" if device.type == "cuda" else f"device ({device.type})"


def structure_bytes(num_nodes: int, num_edges: int) -> int:
    """Bytes of PyG's CSC of a graph: colptr (N + 1), row and perm (E each), int64."""
    return 8 * (num_nodes + 1) + 16 * num_edges


def feature_bytes(tensors: dict[str, Any]) -> int:
    """Bytes of the node-level tensors a loader gathers (name -> tensor)."""
    return sum(int(t.numel()) * t.element_size() for t in tensors.values())


def plan_data_placement(num_nodes: int, num_edges: int, node_tensors: dict[str, Any], *,
                        free_bytes: int | None = None, budget_bytes: int | None = None,
                        budget_fraction: float = 0.5, pin: bool = True,
                        features_host: bool | str = False,
                        host_sampling: str | None = None,
                        resident_bytes: int = 0, row_bytes: int = 0,
                        device_share: Callable[[int], float] | None = None,
                        shared_rows: int = 0,
                        structure_size: int | None = None,
                        device_label: str = "GPU") -> DataPlacement:
    """Decide where the structure and the features live (the module docstring's rule).

    ``free_bytes``: the device's free memory (e.g. ``torch.cuda.mem_get_info()[0]``), used
    with ``budget_fraction`` when ``budget_bytes`` is not given. ``features_host``: the
    features stay on the host whatever the budget (True: ``DataPathConfig.features="host"``;
    a string: why).
    ``host_sampling``: why the structure cannot be sampled on the device (e.g. the loader's
    sampler has no device path): it stays on the host whatever the budget.
    ``resident_bytes``: bytes of these tensors already on the device (another loader's copy,
    or the user's own): they need no new memory, so the budget grows by them.
    ``row_bytes``: bytes of one row of the node-level tensors a split would divide (0: no
    split); ``device_share(k)``: the expected share of gathered rows that the k hottest rows
    serve (None: no split). Called only when the features do not fit whole.
    ``shared_rows``: rows of these tensors another loader keeps on the device for its split
    (0: none); features that do not fit whole are then split over those rows.
    ``structure_size``: the structure's bytes when it is not one CSC of `num_nodes` and
    `num_edges` (a HeteroData's: one CSC per edge type).
    ``device_label``: what the reasons call the device ("GPU"; `device_label(device)` names a
    device that stands in for one, as the CPU does in CI).
    """
    if budget_bytes is None:
        if free_bytes is None:
            raise ValueError("give budget_bytes or the device's free_bytes")
        if not 0 < budget_fraction <= 1:
            raise ValueError(f"budget_fraction must be in (0, 1], got {budget_fraction!r}")
        budget_bytes = int(free_bytes * budget_fraction)
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
    budget_bytes += max(int(resident_bytes), 0)
    s_bytes = (structure_bytes(num_nodes, num_edges) if structure_size is None
               else int(structure_size))
    f_bytes = feature_bytes(node_tensors)
    mib = 1 << 20
    left = budget_bytes
    reasons = []
    if host_sampling is not None:
        structure = HOST
        reasons.append(f"structure ({s_bytes / mib:.0f} MiB) sampled on the host: "
                       f"{host_sampling}")
    elif s_bytes <= left:
        structure = GPU
        left -= s_bytes
        reasons.append(f"structure ({s_bytes / mib:.0f} MiB) fits the {device_label} budget "
                       f"({budget_bytes / mib:.0f} MiB): sampled on the {device_label}")
    else:
        structure = HOST
        reasons.append(f"structure ({s_bytes / mib:.0f} MiB) exceeds the {device_label} "
                       f"budget ({budget_bytes / mib:.0f} MiB): sampled on the host")
    if features_host:
        features = PINNED if pin else HOST
        why = features_host if isinstance(features_host, str) else "features='host'"
        reasons.append(f"features ({f_bytes / mib:.0f} MiB) kept on the host "
                       f"({why}): gathered on the host "
                       f"({'pinned, copied asynchronously' if pin else 'pageable'})")
    elif f_bytes <= left:
        features = GPU
        reasons.append(f"features ({f_bytes / mib:.0f} MiB) fit the rest of the budget "
                       f"({left / mib:.0f} MiB): gathered on the {device_label}")
    else:
        features = PINNED if pin else HOST
        how = "pinned, copied asynchronously" if pin else "pageable"
        exceed = (f"features ({f_bytes / mib:.0f} MiB) exceed the rest of the budget "
                  f"({left / mib:.0f} MiB)")
        if shared_rows > 0:
            reasons.append(f"{exceed}: split as another loader split them, its {shared_rows} "
                           f"hottest of {num_nodes} rows on the {device_label} already (no new "
                           f"copy, no ranking); the rest gathered on the host ({how})")
            return DataPlacement(structure, SPLIT, s_bytes, f_bytes, budget_bytes,
                                 tuple(reasons), shared_rows, 0.0, features)
        # the split's slot table (int32 a vertex) comes out of the budget too
        rows = (min(max(left - TABLE_BYTES * num_nodes, 0) // row_bytes, num_nodes)
                if row_bytes > 0 else 0)
        share = device_share(rows) if rows > 0 and device_share is not None else 0.0
        if share >= SPLIT_MIN_SHARE:
            reasons.append(f"{exceed}: split, the {rows} hottest of {num_nodes} rows "
                           f"({rows * row_bytes / mib:.0f} MiB) on the {device_label}, expected "
                           f"to serve {100 * share:.1f} % of the rows batches gather; the rest "
                           f"gathered on the host ({how})")
            return DataPlacement(structure, SPLIT, s_bytes, f_bytes, budget_bytes,
                                 tuple(reasons), rows, share, features)
        why_whole = (f"; its {rows} hottest rows would serve {100 * share:.1f} % of the rows "
                     f"batches gather, under the {100 * SPLIT_MIN_SHARE:.0f} % a split needs"
                     if rows > 0 and device_share is not None else "")
        reasons.append(f"{exceed}: gathered on the host ({how}){why_whole}")
    return DataPlacement(structure, features, s_bytes, f_bytes, budget_bytes, tuple(reasons))
