"""The rewrite decisions of this process, shared by every run in it and handed to its ranks.

Measuring which order (and, on a GPU, which placement) is faster for a layer and shape bucket
costs training steps, so it is done once per process: the cost models and the decision tables
live here for the life of the process (the tuner's default run, its in-process probes and the
real run all reuse them), and a process that starts rank processes writes them to a file
(`export_decisions`) that each rank adopts (`load_decisions`) before its session starts.

Ground floor: plain data and files, nothing of processes or seams.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

_COST_MODELS: dict = {}
_DECISIONS: dict = {}


def shared_cost_models() -> dict:
    """The rewrite cost models of this process (device and thread count -> fitted model):
    calibrated once per process and refined by every run in it."""
    return _COST_MODELS


def shared_decisions() -> tuple:
    """The rewrite engine's decision tables of this process (order per layer signature and
    shape bucket; host or device placement): measured once per process, reused by every run
    in it (the tuner's default run, its in-process probes, the real run)."""
    if not _DECISIONS:
        from .host import PlacementPlanner
        from .planner import Planner

        _DECISIONS["orders"], _DECISIONS["placements"] = Planner(), PlacementPlanner()
    return _DECISIONS["orders"], _DECISIONS["placements"]


def export_decisions(path: str | os.PathLike) -> None:
    """Write this process's measured decisions to `path` (JSON) for rank processes."""
    orders, placements = shared_decisions()
    Path(path).write_text(json.dumps({"orders": orders.export(),
                                      "placements": placements.export()}))


def load_decisions(path: str | os.PathLike) -> None:
    """Adopt decisions another process of this machine measured (`export_decisions`); a
    missing or unreadable file is ignored (the buckets are then probed here)."""
    try:
        rows = json.loads(Path(path).read_text())
        orders, placements = shared_decisions()
        orders.load(rows["orders"])
        placements.load(rows["placements"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
