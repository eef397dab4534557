"""`LaunchConfig`: how a run's ranks are laid out and started (``Runtime(launch=...)``).

Ground floor: plain validated data (validation by `gnnorch.options`), like `launch.plan` and
`launch.topology`; the processes themselves are started above (`launch.supervisor`,
`execute.backends`). A config round-trips through `to_dict` / `from_dict` (JSON); an unknown
field is a `TypeError`, a bad value a `ValueError` naming ``launch.<field>``.

`sampler_cores` and `threads` are two of the core plan's three dimensions (p ranks x (s
sampler cores + t trainer threads)); `processes` is the third and stays a `Runtime` argument.
The auto-tuner searches the ones left None and keeps the given ones fixed.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..options import (check_bool, check_choice, check_int, check_keys, check_number, check_path,
                       config_option)

ALLOCATORS = ("tuned", "default")   # glibc malloc settings (gnnorch.launch.allocator)
RANK_STARTS = ("warm", "fresh")     # how rank processes start (gnnorch.launch.zygote)
PLAN_FIELDS = ("sampler_cores", "threads")   # the core-plan dimensions a LaunchConfig holds


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How ranks are laid out on cores and started.

    Attributes:
        sampler_cores: cores per rank for NeighborLoader workers s (None: 0, sample in the
            trainer process; with autotune on: searched).
        threads: torch intra-op threads per rank t (None: the rank's share of usable cores,
            under torchrun of this node's cores shared by its LOCAL_WORLD_SIZE ranks; with
            autotune on: searched).
        bind: pin ranks and loader workers to disjoint cores.
        log_dir: where ranks > 0 write ``rank<r>.log`` (None: a fresh temporary folder when one
            is needed; with autotune, probes log under ``<log_dir>/tuning``).
        start_timeout: seconds for rank processes to start and connect.
        collective_timeout: seconds a rank may wait in one collective before failing.
        allocator: ``"tuned"``: glibc malloc keeps tensors up to 1 GiB in its heap instead of
            fresh mmap pages on every allocation (a training step re-allocates the same large
            tensors: 1.7x faster epochs measured here, scripts/bench_allocator.py); resident
            memory stays near its peak, and with one process the setting stays in force in
            the caller's process after the run. ``"default"``: malloc untouched
            (`gnnorch.launch.allocator`).
        rank_start: ``"warm"``: rank processes on CPU are forked from one pre-imported
            interpreter kept for the caller's process (`gnnorch.launch.zygote`: the first
            launch starts it, later launches start their ranks in milliseconds instead of
            importing torch and PyG in every rank); it steps aside, and ranks start fresh, on
            CUDA or wherever forking it could be unsafe (the reason is in
            ``stats[r]["launch"]``). ``"fresh"``: every rank a new interpreter.
    """

    sampler_cores: int | None = None
    threads: int | None = None
    bind: bool = True
    log_dir: str | os.PathLike | None = None
    start_timeout: float = 120.0
    collective_timeout: float = 1800.0
    allocator: str = "tuned"
    rank_start: str = "warm"

    def __post_init__(self) -> None:
        check_int("launch.sampler_cores", self.sampler_cores, 0, allow_none=True)
        check_int("launch.threads", self.threads, 1, allow_none=True)
        check_bool("launch.bind", self.bind)
        check_path("launch.log_dir", self.log_dir)
        check_number("launch.start_timeout (seconds)", self.start_timeout, low=0,
                     low_open=True)
        check_number("launch.collective_timeout (seconds)", self.collective_timeout, low=0,
                     low_open=True)
        check_choice("launch.allocator", self.allocator, ALLOCATORS)
        check_choice("launch.rank_start", self.rank_start, RANK_STARTS)

    def plan_given(self) -> dict[str, int]:
        """The core-plan dimensions set here (the tuner's fixed values)."""
        return {name: getattr(self, name) for name in PLAN_FIELDS
                if getattr(self, name) is not None}

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["log_dir"] is not None:
            out["log_dir"] = os.fspath(out["log_dir"])
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "LaunchConfig":
        """The config of a dict of its fields (`TypeError` for an unknown name)."""
        check_keys("launch", values, FIELDS, what="setting")
        return cls(**values)

    @classmethod
    def from_option(cls, value: Any) -> "LaunchConfig":
        """``Runtime(launch=...)``: None (defaults), a `LaunchConfig` or a dict of its fields."""
        return config_option("launch", value, cls)


FIELDS = tuple(f.name for f in dataclasses.fields(LaunchConfig))
