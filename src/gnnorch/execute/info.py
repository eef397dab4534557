"""`RunInfo`: what one execution did (public as `gnnorch.RunInfo`, `Runtime.last_run`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..run_options import RunOptions
from ..launch.plan import CorePlan, RankCores


@dataclasses.dataclass
class RunInfo:
    """What the last call did: plan, per-rank cores, where logs went, timings, and each
    feature's statistics (`stats[rank][feature]`, e.g. the sampler backend and trimming).
    `gnnorch.execute.summary.render_summary` says it in a few lines (`Runtime.summary()`)."""

    plan: CorePlan
    cores: list[RankCores] | None
    device: str
    log_dir: Path | None
    wall_seconds: float
    epochs: dict[int, list[dict]]
    options: RunOptions = dataclasses.field(default_factory=RunOptions)
    stats: dict[int, dict] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_summaries(cls, plan: CorePlan, cores: list[RankCores] | None, device: str,
                       log_dir: Path | None, wall: float, options: RunOptions,
                       summaries: dict[int, dict]) -> "RunInfo":
        return cls(plan, cores, device, log_dir, wall,
                   {r: s["epochs"] for r, s in summaries.items()}, options,
                   {r: s["stats"] for r, s in summaries.items()})

    def epoch_seconds(self, rank: int = 0) -> list[float]:
        """Wall seconds of each training epoch measured inside `rank`."""
        return [e["seconds"] for e in self.epochs.get(rank, [])]
