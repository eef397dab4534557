"""The rewrite decisions of this process, shared by every run in it and handed to its ranks.

Measuring which order (and, on a GPU, which placement) is faster for a layer and shape bucket
costs training steps, so it is done once per process: the cost models and the decision tables
live here for the life of the process (the tuner's default run, its in-process probes and the
real run all reuse them), and a process that starts rank processes writes them to a file
(`export_decisions`) that each rank adopts (`load_decisions`) before its session starts.

Across processes, measured order decisions are also kept on disk (`load_disk_decisions`,
`save_disk_decisions`): one JSON file per machine fingerprint (CPU model, torch / PyG / gnnorch
versions) and torch thread count, under ``$GNNORCH_CACHE_DIR`` (default ``~/.cache/gnnorch``),
holding rows keyed by layer signature and shape bucket on the device type. A later run adopts
them as measured and does not probe those buckets again (until ``reprobe_every`` calls).
``GNNORCH_DECISION_CACHE=0`` switches the disk cache off. Files are replaced atomically; an
unreadable file is ignored.

The runtime's planner probes a bucket only once probing pays for itself
(`RUNTIME_MAX_OVERHEAD`, `gnnorch.rewrite.planner.probe_after_for`).

Ground floor: plain data and files, nothing of processes or seams.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path

#: most of a bucket's time that the runtime's probes of it may cost (see planner.py)
RUNTIME_MAX_OVERHEAD = 0.05
#: timings per order in one probe (RewriteEngine's `repeats`)
RUNTIME_REPEATS = 2

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
        from .placement import PlacementPlanner
        from .planner import Planner, probe_after_for

        _DECISIONS["orders"] = Planner(
            probe_after=probe_after_for(RUNTIME_REPEATS, RUNTIME_MAX_OVERHEAD))
        _DECISIONS["placements"] = PlacementPlanner()
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


_LOADED_FROM_DISK: set[str] = set()


def _machine_fingerprint(threads: int) -> str:
    from importlib import metadata

    import torch
    import torch_geometric

    try:
        version = metadata.version("gnnorch")
    except metadata.PackageNotFoundError:
        version = "unknown"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = "|".join((cpu, platform.machine(), torch.__version__, torch_geometric.__version__,
                     version, f"{threads}t"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decision_cache_path(threads: int) -> Path | None:
    """The on-disk decision file for this machine at `threads` torch threads (None: off)."""
    if os.environ.get("GNNORCH_DECISION_CACHE", "1") in ("0", "false", "False", ""):
        return None
    root = Path(os.environ.get("GNNORCH_CACHE_DIR") or Path.home() / ".cache" / "gnnorch")
    return root / "rewrite-decisions" / f"{_machine_fingerprint(threads)}.json"


def load_disk_decisions(threads: int) -> int:
    """Adopt the order decisions measured by earlier runs on this machine at `threads`
    threads (once per process and file); returns the number of buckets adopted."""
    path = decision_cache_path(threads)
    if path is None or str(path) in _LOADED_FROM_DISK:
        return 0
    _LOADED_FROM_DISK.add(str(path))
    try:
        rows = json.loads(path.read_text())["orders"]
        return shared_decisions()[0].load(rows)
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def save_disk_decisions(threads: int) -> Path | None:
    """Write this process's measured order decisions (with those adopted from the file) to the
    disk cache for `threads` threads; returns the path written (None: off or nothing new)."""
    path = decision_cache_path(threads)
    rows = shared_decisions()[0].export()
    if path is None or not rows:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                         suffix=".tmp") as handle:
            json.dump({"orders": rows}, handle)
        os.replace(handle.name, path)
    except OSError:
        return None
    return path
