"""`Request`: what to run and how, everything but the core plan (`execute.run(plan, request)`)."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..run_options import RunOptions
from ..launch.plan import CorePlan, RankCores, assign_cores
from ..launch.topology import Topology, current_topology


@dataclasses.dataclass(frozen=True)
class Request:
    """One call of the user's function: `fn(*args, **kwargs)` with `options`, on `device`.

    `seed` seeds the common per-epoch shuffle of training seeds; `bind` pins ranks and loader
    workers to the cores `assign_cores` gives them on `topology` (None: this machine's);
    `log_dir` is where rank processes write their logs (None: a fresh temporary folder when
    one is needed); the timeouts bound rank start-up and one collective.
    """

    fn: Callable
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    options: RunOptions = dataclasses.field(default_factory=RunOptions)
    seed: int = 0
    device: str = "cpu"
    topology: Topology | None = None
    bind: bool = True
    log_dir: str | os.PathLike | None = None
    start_timeout: float = 120.0
    collective_timeout: float = 1800.0

    def replace(self, **changes: Any) -> "Request":
        return dataclasses.replace(self, **changes)

    def cores(self, plan: CorePlan) -> list[RankCores] | None:
        """Each rank's cores under `plan` (None: binding is off)."""
        if not self.bind:
            return None
        return assign_cores(plan, self.topology or current_topology())

    def logs(self) -> Path:
        """The folder for rank logs: `log_dir`, else a fresh temporary one."""
        if self.log_dir is not None:
            return Path(self.log_dir)
        return Path(tempfile.mkdtemp(prefix="gnnorch-"))
