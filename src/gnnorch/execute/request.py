"""`Request`: what to run and how, everything but the core plan (`execute.run(plan, request)`)."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..launch.config import FIELDS as LAUNCH_FIELDS
from ..launch.config import LaunchConfig
from ..launch.plan import CorePlan, RankCores, assign_cores
from ..launch.topology import Topology, current_topology
from ..run_options import RunOptions


@dataclasses.dataclass(frozen=True)
class Request:
    """One call of the user's function: `fn(*args, **kwargs)` with `options`, on `device`.

    `seed` is the run's seed (the data's where `seed_given`, else the fallback of
    `intercept.data_seed`); `launch` says how ranks are
    laid out and started (binding to the cores `assign_cores` gives them on `topology`, None:
    this machine's; the log folder; the start-up and collective timeouts). Defaults are those
    of `RunOptions` and `LaunchConfig`, not repeated here; `bind`, `log_dir`,
    `start_timeout` and `collective_timeout` read `launch`.
    """

    fn: Callable
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    options: RunOptions = dataclasses.field(default_factory=RunOptions)
    launch: LaunchConfig = dataclasses.field(default_factory=LaunchConfig)
    seed: int = 0
    seed_given: bool = False     # `seed` is the user's ``Runtime(seed=)`` (`intercept.data_seed`)
    device: str = "cpu"
    topology: Topology | None = None

    @property
    def bind(self) -> bool:
        return self.launch.bind

    @property
    def log_dir(self) -> str | os.PathLike | None:
        return self.launch.log_dir

    @property
    def start_timeout(self) -> float:
        return self.launch.start_timeout

    @property
    def collective_timeout(self) -> float:
        return self.launch.collective_timeout

    def replace(self, **changes: Any) -> "Request":
        """A copy with `changes`: fields of the request, or of its `launch` config by their
        `LaunchConfig` name (e.g. ``log_dir=...`` for a probe's own log folder)."""
        launch = {k: changes.pop(k) for k in LAUNCH_FIELDS if k in changes}
        if launch:
            changes["launch"] = dataclasses.replace(changes.get("launch", self.launch), **launch)
        return dataclasses.replace(self, **changes)

    def cores(self, plan: CorePlan) -> list[RankCores] | None:
        """Each rank's cores under `plan` (None: binding is off)."""
        if not self.launch.bind:
            return None
        return assign_cores(plan, self.topology or current_topology())

    def logs(self) -> Path:
        """The folder for rank logs: `launch.log_dir`, else a fresh temporary one."""
        if self.launch.log_dir is not None:
            return Path(self.launch.log_dir)
        return Path(tempfile.mkdtemp(prefix="gnnorch-"))
