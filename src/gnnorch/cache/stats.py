"""What one training loader's cache counted and measured (its report: `report.loader_report`)."""
from __future__ import annotations

from typing import Any


class CacheStats:
    """Counters, seconds and decisions of one loader's cache, written by its parts (admission,
    hot set, bottom-layer swap, background refresher) and read by `report`."""

    def __init__(self) -> None:
        self.counters = dict(forwards=0, lookups=0, hits=0, batches=0, sampled_nodes=0,
                             sampled_edges=0, pruned_batches=0, pruned_vertices=0,
                             pruned_edges=0, refreshes=0, refresh_rows=0,
                             background_refreshes=0, background_rows=0, cold_rows=0,
                             skipped_rows=0, written_back_rows=0,
                             lookahead_jobs=0)
        self.seconds = dict(setup=0.0, hotness=0.0, refresh=0.0, background=0.0, wait=0.0)
        self.max_staleness = 0       # the largest row age a forward used
        self.info: dict[str, Any] = {}  # decisions, in the order they were taken

    def saw_age(self, age: int) -> None:
        self.max_staleness = max(self.max_staleness, age)
