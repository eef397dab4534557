"""What hop-aware trimming knows about one model (its outermost module on a batch).

`layers` is K, the number of MessagePassing calls on the batch's own edge_index per forward,
learnt from the model's first forward on a batch (untrimmed). `trim` is set only after the
one-off check (`gnnorch.trim.verify`) found trimmed and untrimmed seed outputs equal; it is
cleared for good (with `reason`) by anything that breaks the invariant later.
"""
from __future__ import annotations

import dataclasses

__all__ = ["ModelState", "SELF_TRIMMING"]

SELF_TRIMMING = ("the model trims its own layers (PyG's trim_to_layer / BasicGNN's "
                 "num_sampled_nodes_per_hop): left to PyG's trimming")


@dataclasses.dataclass
class ModelState:
    """What the layer seam knows about one outermost module ("model")."""

    name: str
    layers: int | None = None      # K: MessagePassing calls on the batch graph per forward
    trim: bool = False
    compact: bool = False          # layers return only the rows the next layer reads
    reason: str | None = "not yet seen on a batch with hop counts"
    trimmed_forwards: int = 0
    untrimmed_forwards: int = 0
    materialized: int = 0          # trimmed forwards recomputed untrimmed (non-seed rows read)
    speculated: bool = False       # the first forward was run trimmed before the check
    verified_by: str | None = None  # what established that trimming is exact for it

    def disable(self, reason: str) -> None:
        """Trimming off for this model from now on, for `reason`."""
        self.trim, self.reason = False, reason

    def to_dict(self) -> dict:
        return {"model": self.name, "layers": self.layers, "trimmed": self.trim,
                "compact": self.compact,
                "reason": None if self.trim else self.reason,
                "trimmed_forwards": self.trimmed_forwards,
                "untrimmed_forwards": self.untrimmed_forwards,
                "materialized": self.materialized,
                "verified_by": self.verified_by if self.trim else None}
