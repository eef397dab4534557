"""Which of gnnorch's computation features a run uses, validated once and sent to every rank.

A `RunOptions` value is plain data (JSON round-trip with `to_dict` / `from_dict`), so it travels
to rank processes inside their start-up spec. Each feature is a seam installed by
`intercept.session` for the duration of one run:

* `sampler`: which backend draws NeighborLoader batches. ``"auto"``: with pyg-lib installed,
  whichever of it and gnnorch's vectorised sampler is measured faster on the loader's graph
  (`gnnorch.sampling.choice`), else gnnorch's (`gnnorch.sampling`);
  ``"gnnorch"``: always ours; ``"pyg"``: PyG's own choice (pyg-lib or torch_sparse), untouched.
* `trim`: hop-aware trimming of the user's MessagePassing layers (exact for seed rows).
* `rewrite`: exact re-ordering of transform and aggregation per layer where a fitted cost model
  and measurements say it is cheaper (`gnnorch.rewrite`): True, False, or ``"report"`` (decide
  and report, never swap).
* `allocator`: the user's ``LaunchConfig.allocator`` (default there), carried to every rank:
  ``"tuned"`` keeps large tensors in glibc's heap instead of fresh mmap pages every step
  (applied by `gnnorch.launch.allocator`); ``"default"`` leaves malloc as it is.
* `cache`: the hotness-aware historical-embedding cache (`gnnorch.cache`; off by default, it
  changes numerics): False, True, a `gnnorch.CacheConfig` or a dict of its fields;
  `cache_config` gives the configuration (None when off).
* `data_path`: how NeighborLoader batches reach the training device
  (`gnnorch.device.config.DataPathConfig`: on CUDA the graph, sampling and features on the
  device; ``mode="device"`` runs the same path with the CPU as the device).
* `partition_features`: the partitioned feature store for worlds of > 1 rank
  (`gnnorch.partition`; off by default). False, True, a `gnnorch.partition.PartitionConfig` or
  a dict of its fields (e.g. ``{"hot_budget_mb": 64}``); `partition_config` gives the
  configuration (None when off). With one rank it is a no-op, said so in the run's stats.

Ground floor: plain validated data (validation by `gnnorch.options`); it names the allowed
values of every feature itself, so nothing here reaches up into the launcher or the seams.
Each default is written once, here (or in the config dataclass a field holds); `Runtime`'s
signature shows these same values.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .cache.config import CacheConfig, resolve_cache
from .device.config import DataPathConfig, resolve_data_path
from .launch.config import ALLOCATORS, LaunchConfig
from .options import check_bool, check_choice
from .partition.config import PartitionConfig, resolve_partition

SAMPLERS = ("auto", "gnnorch", "pyg")
REWRITE_MODES = (True, False, "report")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Computation features of one run (see the module docstring)."""

    sampler: str = "auto"
    trim: bool = True
    rewrite: bool | str = True
    cache: bool | CacheConfig = False   # a dict is converted
    allocator: str = LaunchConfig.allocator
    partition_features: bool | PartitionConfig = False   # a dict is converted
    data_path: DataPathConfig = dataclasses.field(default_factory=DataPathConfig)

    def __post_init__(self) -> None:
        check_choice("allocator", self.allocator, ALLOCATORS)
        check_choice("sampler", self.sampler, SAMPLERS)
        check_bool("trim", self.trim)
        check_choice("rewrite", self.rewrite, REWRITE_MODES, allowed="True, False or 'report'")
        # True / False stay as given; a dict (from to_dict / JSON, or the user's) becomes a
        # validated CacheConfig (unknown keys: TypeError; bad values: ValueError)
        cache = resolve_cache(self.cache)
        if cache is not None and not isinstance(self.cache, bool):
            object.__setattr__(self, "cache", cache)
        # True / False stay as given; a dict (from to_dict / JSON, or the user's) becomes a
        # validated PartitionConfig (unknown keys: TypeError; bad values: ValueError)
        partition = resolve_partition(self.partition_features)
        if partition is not None and not isinstance(self.partition_features, bool):
            object.__setattr__(self, "partition_features", partition)
        # None / a mode string / a dict (from to_dict / JSON) become a DataPathConfig
        object.__setattr__(self, "data_path", resolve_data_path(self.data_path))

    @property
    def cache_config(self) -> CacheConfig | None:
        """The run's cache configuration (None: the cache is off)."""
        return resolve_cache(self.cache)

    @property
    def partition_config(self) -> PartitionConfig | None:
        """The run's partitioned-feature configuration (None: off)."""
        return resolve_partition(self.partition_features)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "RunOptions":
        return cls(**values)
