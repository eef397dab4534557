"""What the device data path decided for one loader, and what its epochs measured.

`LoaderDevice` is the object the loader seam keeps as ``state.device``: `samples_on_device`
tells the seam to run the loader without worker processes (its sampling runs on the device, in
the pipeline's producer thread); `to_dict` is the loader's entry in the run's
``stats[rank]["device"]``. Invariant: a loader is ``served`` exactly when `reason` says why the
path serves it; otherwise `reason` says why it stepped aside and the loader runs as PyG runs it
(the user's workers kept); where the run has a device, PyG's batches are then copied there by
the path (``copied``), drawn ahead where that changes nothing a fixed seed gives
(``prefetch_reason`` says why not).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .placement import DataPlacement
from .split_rows import SplitCounts

__all__ = ["LoaderDevice"]


@dataclasses.dataclass
class LoaderDevice:
    """The device path's decision and counters for one loader."""

    key: int                        # order among the loaders the path saw (equal on all ranks)
    role: str                       # "train" | "eval"
    device: str
    served: bool = False
    reason: str = ""
    samples_on_device: bool = False
    placement: DataPlacement | None = None
    features: str | None = None     # "gpu" | "split" | "pinned" | "host" (where batches gather)
    deferred: tuple[str, ...] = ()  # attributes left in pinned host rows for DAHA
    num_workers: str | None = None  # what became of the user's num_workers
    prefetch: int = 0               # batches prepared ahead of the trainer (latest epoch)
    prefetch_reason: str = ""       # why the latest epoch prepared none ahead, if so
    copied: bool = False            # not served: PyG's batches copied to the device by the path
    epochs: int = 0
    batches: int = 0
    wait_s: float = 0.0             # consumer blocked waiting for a batch, all epochs
    bytes_on_device: int = 0        # structure and attributes this loader put on the device
    replans: int = 0                # gather plans made again: the user changed loader.data
    split_rows: SplitCounts | None = None   # "split": rows taken from the device / the host
    ranking_s: float = 0.0          # seconds spent ranking rows for a split (when considered)
    ranking_on: str | None = None   # where that ranking ran ("cuda:0", "cpu")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["placement"] = self.placement.to_dict() if self.placement is not None else None
        # where the structure is sampled and the attributes gathered ("host" when not served)
        out["structure"] = self.placement.structure if self.served and self.placement else "host"
        out["features"] = self.features if self.served and self.features else "host"
        out["deferred"] = list(self.deferred)
        out["split_rows"] = self.split_rows.to_dict() if self.split_rows is not None else None
        return out
