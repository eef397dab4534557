"""`TuningReport`: what the auto-tuner did, as JSON (schema in `gnnorch.tune.schema`), a readable
table (``print(report)``) and a PNG (``report.plot(path)``, needs matplotlib; both drawn by
`gnnorch.tune.render`).

The report is plain data (`report.data`, a dict that validates against the schema). The tuner
builds it through the methods below (`start`, `add_trial`, `decide`, `apply_race`, `begin_run`,
`run_epochs`, `finish_run`, `fail`) and `publish`es it: rewritten atomically (temporary file +
rename) into ``report_dir/report.json`` after every probe and every training epoch, so it can
be read while training goes on; ``python -m gnnorch report PATH`` prints the table from such a
file.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform as _platform
import threading
from pathlib import Path
from typing import Any

from . import render
from .decide import Decision, RaceResult, trial_status
from .render import cfg_text
from .schema import FORMAT, VERSION, validate

REPORT_FILE = "report.json"


class ReportError(ValueError):
    """A file that is not a valid gnnorch tuning report (corrupted, foreign or truncated)."""


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def platform_info(topology: Any, device: str) -> dict[str, Any]:
    """The report's ``platform``: the machine's cores as gnnorch sees them and the versions."""
    import torch
    import torch_geometric

    topo = topology
    return {
        "usable_cores": topo.num_usable, "physical_cores": topo.num_physical,
        "smt": topo.smt, "numa_nodes": [list(n) for n in topo.numa_nodes],
        "usable_cpus": list(topo.usable_cpus), "cpu_quota": topo.cpu_quota,
        "device": device,
        "versions": {"python": _platform.python_version(), "torch": torch.__version__,
                     "torch_geometric": torch_geometric.__version__,
                     "scikit_optimize": _version("scikit-optimize"),
                     "gnnorch": _version("gnnorch")},
        "platform": _platform.platform(),
    }


def point(plan: Any) -> dict[str, int]:
    """A core plan as the report's configuration."""
    return {"processes": plan.processes, "sampler_cores": plan.sampler_cores,
            "threads": plan.threads}


class TuningReport:
    """A tuning report; `data` is its JSON content."""

    def __init__(self, data: dict[str, Any], path: str | os.PathLike | None = None) -> None:
        self.data = data
        self.path = Path(path) if path is not None else None
        self.lock = threading.RLock()    # the tuner writes from timers and epoch feeds too

    # -- access ---------------------------------------------------------------------------
    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def trials(self) -> list[dict]:
        return self.data["trials"]

    @property
    def tuned(self) -> bool:
        return bool(self.data["decision"]["tuned"])

    @property
    def best(self) -> dict:
        return self.data["best"]

    @property
    def default(self) -> dict:
        return self.data["default"]

    @property
    def speedup(self) -> float | None:
        return self.data["speedup_over_default"]

    @property
    def chosen(self) -> dict:
        """The configuration the real run used (the best one when tuned)."""
        run = self.data.get("run")
        return run["config"] if run else self.data["best"]["config"]

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))

    def to_json(self) -> str:
        return json.dumps(self.data, indent=1)

    def errors(self) -> list[str]:
        return validate(self.data)

    # -- files ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike | None = None) -> Path | None:
        """Write atomically to `path` (default: where it was saved or loaded last)."""
        from .probe import write_json_atomic

        target = Path(path) if path is not None else self.path
        if target is None:
            return None
        if target.is_dir():
            target = target / REPORT_FILE
        self.data["updated"] = now_iso()
        write_json_atomic(target, self.data)
        self.path = target
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TuningReport":
        """Read and validate a report; raises ReportError with a one-line reason."""
        path = Path(path)
        if path.is_dir():
            path = path / REPORT_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ReportError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ReportError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReportError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, "
                              f"column {exc.colno})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReportError(f"{path}: not a gnnorch tuning report (no "
                              f"'format': '{FORMAT}' field)")
        if data.get("version") != VERSION:
            raise ReportError(f"{path}: report version {data.get('version')!r} is not "
                              f"supported (expected {VERSION})")
        errors = validate(data)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise ReportError(f"{path}: invalid report: {errors[0]}{more}")
        return cls(data, path)

    # -- building (what the tuner writes) --------------------------------------------------
    @classmethod
    def start(cls, platform: dict, space: dict, tuner: dict, default: dict,
              path: str | os.PathLike | None = None) -> "TuningReport":
        """A fresh report, status "tuning", before any measurement: `default` is the default
        configuration, `tuner` the tuner's settings (`TuneConfig.to_dict()`)."""
        return cls({
            "format": FORMAT, "version": VERSION, "status": "tuning",
            "created": now_iso(), "updated": now_iso(),
            "platform": platform, "space": space,
            "tuner": dict(tuner, n_initial_points_used=None),
            "decision": {"tuned": False, "reason": "deciding", "projected_tuning_seconds": None,
                         "projected_run_seconds": None, "epochs": None, "epochs_source": None},
            "trials": [], "best_so_far": [], "stop_reason": None,
            "default": {"config": dict(default), "throughput": None},
            "best": {"config": dict(default), "throughput": None, "trial": None},
            "speedup_over_default": None, "confirmation": None,
            "overhead": {"bo_seconds": 0.0, "probe_seconds": 0.0, "tuning_seconds": 0.0},
            "run": None, "notes": [],
        }, path)

    def publish(self) -> None:
        """Write the report where it lives (if anywhere) and stamp ``updated``."""
        with self.lock:
            if self.path is not None:
                self.save()
            else:
                self.data["updated"] = now_iso()

    def set_overhead(self, bo_seconds: float, probe_seconds: float,
                     tuning_seconds: float) -> None:
        self.data["overhead"] = {"bo_seconds": bo_seconds, "probe_seconds": probe_seconds,
                                 "tuning_seconds": tuning_seconds}

    def decide(self, decision: Decision) -> None:
        """Record whether tuning runs and why."""
        self.data["decision"].update(
            {k: v for k, v in decision.to_dict().items()
             if v is not None or k in ("tuned", "reason")})

    def add_trial(self, config: dict, cores: list | None, m: dict | None, seconds: float,
                  chosen_by: str, predicted: dict | None = None,
                  error: str | None = None) -> dict:
        """Record one probe (`m`: its measurement, `probe.combine`) and update the best so
        far, the default's throughput and the speedup; returns the trial."""
        d = self.data
        throughput = m["throughput"] if m and error is None else None
        previous = [t["throughput"] for t in d["trials"] if t["throughput"] is not None]
        best = max(previous + ([throughput] if throughput is not None else []), default=None)
        trial = {
            "index": len(d["trials"]), "config": dict(config),
            "cores": [c.to_dict() for c in cores] if cores else None,
            "batch_size_per_rank": list(m["batch_size_per_rank"]) if m else [],
            "throughput": throughput, "status": trial_status(m, error), "error": error,
            "seconds": seconds, "measured_seconds": float(m["seconds"]) if m else 0.0,
            "measured_batches": int(m["batches"]) if m else 0,
            "warmup_batches": int(m.get("warmup") or 0) if m else 0,
            "chosen_by": chosen_by, "predicted": predicted, "best_so_far": best,
            "steady_throughput": m.get("steady_throughput") if m and error is None else None,
            "epoch_start_seconds": m.get("epoch_start_seconds") if m and error is None else None,
        }
        d["trials"].append(trial)
        d["best_so_far"].append(best)
        if throughput is not None and (d["best"]["throughput"] is None
                                       or throughput > d["best"]["throughput"]):
            d["best"] = {"config": dict(config), "throughput": throughput,
                         "trial": trial["index"]}
        if chosen_by == "default":
            d["default"] = {"config": dict(config), "throughput": throughput}
        if d["default"]["throughput"] and d["best"]["throughput"]:
            d["speedup_over_default"] = d["best"]["throughput"] / d["default"]["throughput"]
        return trial

    def apply_race(self, result: RaceResult) -> None:
        """The race's winner becomes `best` (`decide.race`)."""
        self.data["best"] = result.best
        self.data["confirmation"] = result.confirmation
        if result.speedup is not None:
            self.data["speedup_over_default"] = result.speedup

    def begin_run(self, config: dict, cores: list | None) -> None:
        """The real run starts (status "training")."""
        self.data["status"] = "training"
        self.data["run"] = {"config": dict(config),
                            "cores": [c.to_dict() for c in cores] if cores else None,
                            "epochs": [], "wall_seconds": None}

    def run_epochs(self, records: list[dict], world: int,
                   only_if_running: bool = False) -> bool:
        """Rank 0's epoch records so far (its seeds x `world` ranks); False when ignored (no
        run yet, or `only_if_running` and the run is not training)."""
        d = self.data
        if d["run"] is None or (only_if_running and d["status"] != "training"):
            return False
        d["run"]["epochs"] = [dict(r, throughput=(r["seeds"] * world / r["seconds"]
                                                  if r["seconds"] > 0 else None))
                              for r in records]
        return True

    def finish_run(self, epochs: dict[int, list[dict]], wall: float) -> None:
        """The real run ended: every rank's epochs (seeds summed, the slowest rank's seconds)
        and its wall seconds (status "done")."""
        merged = []
        ranks = list(epochs.values())
        for i, rec in enumerate(epochs.get(0, [])):
            seeds = sum(e[i]["seeds"] for e in ranks if i < len(e))
            secs = max(e[i]["seconds"] for e in ranks if i < len(e))
            merged.append(dict(rec, seeds=seeds, seconds=secs,
                               throughput=seeds / secs if secs > 0 else None))
        self.data["run"]["epochs"] = merged
        self.data["run"]["wall_seconds"] = wall
        self.data["status"] = "done"

    def fail(self) -> None:
        self.data["status"] = "failed"

    # -- text -----------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"TuningReport(status={self.status!r}, trials={len(self.trials)}, "
                f"chosen={cfg_text(self.chosen)!r}, speedup={self.speedup})")

    def table(self) -> str:
        return render.table(self.data)

    def plot(self, path: str | os.PathLike) -> Path:
        """Write a PNG: measured throughput per trial (by who chose it), the best-so-far curve
        and the default's throughput. Needs matplotlib (``pip install gnnorch[plot]``)."""
        return render.plot(self, path)
