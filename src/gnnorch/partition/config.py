"""`PartitionConfig`: the knobs of the partitioned feature store, and how the Runtime option
``partition_features`` maps onto it.

``Runtime(train, partition_features=True)`` is ``PartitionConfig()``;
``partition_features={"hot_budget_mb": 64}`` (or a `PartitionConfig`) sets fields; ``False``
(default) is off. The value is plain data: it round-trips through `to_dict` / `from_dict`
(JSON), so it reaches rank processes inside `gnnorch.run_options.RunOptions`. Validation follows
`gnnorch.options`: an unknown field name is a `TypeError`, a bad value a `ValueError` naming
the option and the field.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..options import check_bool, check_choice, check_int, check_keys, check_number, config_option

HOTNESS = ("sampling", "degree")
OPTION = "partition_features"


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """Knobs of the partitioned feature store (``Runtime(partition_features=...)``).

    Attributes:
        hot_budget_mb: memory, in MiB per rank, for replicated copies of the hottest rows
            other ranks own (0: none; every remote row is fetched from its owner). A rank
            holds its own partition's rows plus at most this many bytes of remote rows.
        hotness: how remote rows are ranked for replication. ``"sampling"``: expected
            sampling events per epoch of the first loader built on the data (its seeds and
            fanouts, `gnnorch.cache.hotness.expected_events`, summed over hops); falls back to
            ``"degree"`` when the loader's fanouts are not a plain list. ``"degree"``:
            in-degree.
        imbalance: partition balance tolerance: every partition holds at most
            ``max(ceil(N / parts), floor((1 + imbalance) * N / parts))`` vertices (rows).
        refine_rounds: rounds of balanced label-propagation refinement after the BFS blocks
            (`gnnorch.partition.partitioner`); 0 keeps the BFS blocks.
        prefetch: for loaders with worker processes, fetch batch k+1's remote rows in the
            background while the user's step on batch k runs (loaders without workers fetch
            when the batch is asked for: sampling there shares the torch RNG with the step,
            so sampling early would change the batches).
    """

    hot_budget_mb: float = 0.0
    hotness: str = "sampling"
    imbalance: float = 0.03
    refine_rounds: int = 8
    prefetch: bool = True

    def __post_init__(self) -> None:
        check_number(f"{OPTION}['hot_budget_mb']", self.hot_budget_mb, low=0)
        check_choice(f"{OPTION}['hotness']", self.hotness, HOTNESS)
        check_number(f"{OPTION}['imbalance']", self.imbalance, low=0, high=1)
        check_int(f"{OPTION}['refine_rounds']", self.refine_rounds, 0, 1000)
        check_bool(f"{OPTION}['prefetch']", self.prefetch)

    @property
    def hot_budget_bytes(self) -> int:
        return int(self.hot_budget_mb * 2 ** 20)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "PartitionConfig":
        check_keys(OPTION, values, FIELDS, what="setting")
        return cls(**values)


FIELDS = tuple(f.name for f in dataclasses.fields(PartitionConfig))


def resolve_partition(value: Any) -> PartitionConfig | None:
    """The configuration `value` (the option) asks for; None when off. Raises `TypeError`
    for unknown dict keys and `ValueError` for anything else that is not allowed."""
    return config_option(OPTION, value, PartitionConfig, default=(True,), off=(False,),
                         accepts="True, False")
