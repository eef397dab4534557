"""`DataPathConfig`: how NeighborLoader batches reach the training device (``Runtime(data_path=...)``).

The device data path (issue 21) keeps a loader's graph structure and node features on the
training device when they fit a memory budget (`gnnorch.device.placement`), samples there with
gnnorch's sampler, gathers every node and edge attribute of a batch there (or from pinned host
memory with side-stream copies when the features do not fit), and prepares batch k+1 while
batch k trains (`gnnorch.device.pipeline`). A config is plain data: it round-trips through
`to_dict` / `from_dict` (JSON), so it reaches rank processes inside `RunOptions`. Validation
follows `gnnorch.options`: an unknown field is a `TypeError`, a bad value a `ValueError`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..options import check_bool, check_choice, check_int, check_keys, check_number, config_option

MODES = ("auto", "device", "host")
FEATURES = ("auto", "host")


@dataclasses.dataclass(frozen=True)
class DataPathConfig:
    """Knobs of the device data path.

    Attributes:
        mode: ``"auto"`` (default): the device path serves a loader when the run trains on a
            CUDA device (``device="cuda"``, or ``"auto"`` with a GPU visible); ``"device"``:
            always, with the CPU as the device on a machine without one (the same code runs:
            placement, sampling on the "device" tensors, gathering, the prefetch thread, an
            identity transfer; this is how CI tests it); ``"host"``: never (batches are built
            on the host as PyG builds them).
        features: ``"auto"``: node features go to the device when they fit what the budget
            leaves after the structure, else their most-gathered rows do where that pays
            (a split: `gnnorch.device.placement`), else they stay on the host; ``"host"``:
            they stay in pinned host memory whatever the budget (gathered on the host into
            pinned buffers, copied on a side stream).
        budget_bytes: device memory the path may use for one loader's structure and features
            (None: `budget_fraction` of the device's free memory when the loader is built).
        budget_fraction: see `budget_bytes`, in (0, 1].
        pin: host-resident features live in pinned memory, so copies are asynchronous.
        prefetch: batches prepared ahead of the trainer by the pipeline's producer thread
            (0: no thread; each batch is prepared when the trainer asks for it).
    """

    mode: str = "auto"
    features: str = "auto"
    budget_bytes: int | None = None
    budget_fraction: float = 0.5
    pin: bool = True
    prefetch: int = 2

    def __post_init__(self) -> None:
        check_choice("data_path.mode", self.mode, MODES)
        check_choice("data_path.features", self.features, FEATURES)
        check_int("data_path.budget_bytes", self.budget_bytes, 0, allow_none=True)
        check_number("data_path.budget_fraction", self.budget_fraction, 0.0, 1.0,
                     low_open=True)
        check_bool("data_path.pin", self.pin)
        check_int("data_path.prefetch", self.prefetch, 0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "DataPathConfig":
        """The config of a dict of its fields (`TypeError` for an unknown name)."""
        check_keys("data_path", values, [f.name for f in dataclasses.fields(cls)])
        return cls(**values)


def resolve_data_path(value: Any) -> DataPathConfig:
    """The run's data-path configuration from ``Runtime(data_path=...)``: None (defaults), a
    mode string (``"auto"`` / ``"device"`` / ``"host"``), a `DataPathConfig` or a dict of its
    fields."""
    if isinstance(value, str):
        return DataPathConfig(mode=value)
    return config_option("data_path", value, DataPathConfig,
                         accepts=f"None, one of {MODES}")
