"""Probes: the user's real function, launched with a candidate plan and ended after a bounded
number of training steps, measured in steady state.

A `ProbeMeter` is a batch callback (`RankContext.batch_callbacks`): it sees every training step
of the rank end (`EpochTimer.batch_ends` / `batch_seeds`), skips ``warmup`` steps and the first
step of every epoch (its interval includes the loader's start and whatever the user did between
epochs), measures the next ``batches`` steps, and then calls ``on_budget`` -- by default
raising `ProbeEnd`, which ends the user's function. Time the rank spends on one-off
measurements inside steps (rewrite probes and calibration, trimming checks:
`RankContext.one_off_seconds`) is taken out of the measured steps: on the 16-core machine
multi-rank probes, whose ranks probe their own batch shapes, measured half of the plans'
full-run throughput without this. Short epochs pay a per-epoch start (the
loader's sampler workers start, the first batch is sampled) that a steady-state rate misses:
when a probe sees an epoch start after its first epoch, `combine` amortises it over the epoch,
``seeds/step * L / (start + (L - 1) * step)`` (measured on the 16-core machine with 6-step
epochs, steady rates overestimated plans with sampler workers by up to 1.7x, beside
run-to-run noise of about 20 %). `ProbeHook` installs the meter in every rank of a run and
tells the runtime that `ProbeEnd` is the normal end of a probe, never a failure. All ranks of a
launch run equal step counts, so all of them stop after the same step (no collective is left
half-done). `EpochReport` is the other hook the tuner adds to a run: it reports every finished
training epoch to the caller while the run goes on.

This module is imported by rank processes: keep it free of heavy imports (no skopt).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ..execute.hooks import Hook

PROBE_STAT = "probe"


class ProbeEnd(BaseException):
    """Ends the user's function after a probe's measured steps (a BaseException, so a user's
    ``except Exception`` does not swallow it)."""


def warmup_for(warmup: int, sampler_cores: int) -> int:
    """Steps excluded before measuring: `warmup` plus the loader's prefetch depth (2 per worker)."""
    return int(warmup) + 2 * int(sampler_cores)


class ProbeMeter:
    """Batch callback measuring steady-state training throughput of one rank.

    Its live summary is kept in ``stats`` (the rank context's ``stats["probe"]``), so it reaches
    the caller with the rank's summary however the function ends.
    """

    def __init__(self, warmup: int, batches: int,
                 on_budget: Callable[["ProbeMeter"], None] | None = None,
                 stats: dict | None = None, converge: float | None = None,
                 max_extra: int = 24) -> None:
        self.warmup, self.batches = int(warmup), int(batches)
        self.on_budget = on_budget
        # converge: measure until the last `batches` steps' two halves agree within this
        # fraction (per-seed time) or `max_extra` more steps were taken; the window is then
        # the last `batches` steps and the warm-up everything before. One process only: ranks
        # must all stop after the same step, so multi-rank probes use a fixed warm-up.
        self.converge, self.max_extra = converge, int(max_extra)
        self._eligible: list[tuple[int, float, int]] = []     # (step, seconds, seeds)
        self._epoch_starts: list[float] = []
        self._one_off = 0.0            # the context's one-off seconds at the previous step
        self.active = True
        self.start = time.perf_counter()
        self.steps = 0
        self._prev: tuple | None = None        # (epoch key, stamp)
        self._epoch_steps: dict[tuple, int] = {}
        self._epoch_total: dict[tuple, int | None] = {}
        self.stats = stats if stats is not None else {}
        self.stats.update({
            "warmup": self.warmup, "target_batches": self.batches, "batches": 0, "seeds": 0,
            "seconds": 0.0, "steps": 0, "first_step_at": None, "batch_size": None,
            "epoch_length": None, "epoch_length_exact": False, "epochs_seen": 0,
            "epoch_start_seconds": None, "complete": False,
        })

    def __call__(self, timer: Any) -> None:
        if not self.active or not timer.batch_ends:
            return
        key = (timer.loader, timer.epoch)
        raw, seeds = timer.batch_ends[-1], timer.batch_seeds[-1]
        # time spent in one-off measurements (rewrite probes, calibration, trimming checks) is
        # not part of a step: measured intervals use stamps shifted back by it
        one_off_fn = getattr(getattr(timer, "ctx", None), "one_off_seconds", None)
        one_off = one_off_fn() if callable(one_off_fn) else 0.0
        stamp = raw - one_off
        since_last, self._one_off = one_off - self._one_off, one_off
        st = self.stats
        if key not in self._epoch_steps:
            self._epoch_steps[key] = 0
            self._epoch_total[key] = _epoch_length(timer)
            st["epochs_seen"] = len(self._epoch_steps)
        self._epoch_steps[key] += 1
        if self._epoch_steps[key] == 1 and len(self._epoch_steps) > 1 \
                and isinstance(getattr(timer, "start", None), float) and not st["complete"]:
            # an epoch's start after the first (the first carries one-off set-up): starting
            # the loader (its sampler workers) plus the first step, paid once per epoch
            self._epoch_starts.append(max(0.0, raw - timer.start - since_last))
            st["epoch_start_seconds"] = statistics.median(self._epoch_starts)
        self.steps += 1
        st["steps"] = self.steps
        if st["first_step_at"] is None:
            st["first_step_at"] = raw - self.start
            st["batch_size"] = int(seeds)
        if self._prev is not None and self._prev[0] == key and self.steps > self.warmup \
                and not st["complete"]:
            if self.converge is None:
                st["batches"] += 1
                st["seeds"] += int(seeds)
                st["seconds"] += stamp - self._prev[1]
            else:
                self._eligible.append((self.steps, stamp - self._prev[1], int(seeds)))
                self._window()
        self._prev = (key, stamp)
        self._update_epoch_length(key)
        if not st["complete"] and st["batches"] >= self.batches and self._settled():
            st["complete"] = True
            if self.on_budget is None:
                raise ProbeEnd()
            self.on_budget(self)

    def _window(self) -> None:
        """Converge mode: the measurement is the last `batches` eligible steps."""
        window = self._eligible[-self.batches:]
        st = self.stats
        st["batches"] = len(window)
        st["seeds"] = sum(w[2] for w in window)
        st["seconds"] = sum(w[1] for w in window)
        st["warmup"] = window[0][0] - 1

    def _settled(self) -> bool:
        if self.converge is None:
            return True
        if len(self._eligible) >= self.batches + self.max_extra:
            return True
        window = self._eligible[-self.batches:]
        half = len(window) // 2
        if half == 0:
            return True
        older, newer = window[:half], window[half:]
        rate_old = sum(w[1] for w in older) / max(1, sum(w[2] for w in older))
        rate_new = sum(w[1] for w in newer) / max(1, sum(w[2] for w in newer))
        return abs(rate_old - rate_new) <= self.converge * rate_new

    def _update_epoch_length(self, current: tuple) -> None:
        """Steps per epoch of the first training loader: exact once an epoch of it ended or
        its length is known, else the steps seen so far (a lower bound)."""
        keys = [k for k in self._epoch_steps if k[0] == current[0]]
        exact = self._epoch_total.get(current)
        finished = [self._epoch_steps[k] for k in keys if k != current]
        if exact:
            length, is_exact = exact, True
        elif finished:
            length, is_exact = max(finished), True
        else:
            length, is_exact = self._epoch_steps[current], False
        self.stats["epoch_length"], self.stats["epoch_length_exact"] = length, is_exact

    def summary(self) -> dict:
        return dict(self.stats)


def _epoch_length(timer: Any) -> int | None:
    """Batches in the timer's epoch, when the loader told (`EpochTimer.total`)."""
    total = getattr(timer, "total", None)
    return total if isinstance(total, int) and total > 0 else None


def combine(summaries: dict[int, dict]) -> dict:
    """One probe's measurement from its ranks' summaries: seeds summed over ranks, divided by
    the slowest rank's measured seconds."""
    probes = {r: s.get("stats", {}).get(PROBE_STAT) for r, s in summaries.items()}
    probes = {r: p for r, p in probes.items() if p}
    if not probes:
        return {"batches": 0, "seeds": 0, "seconds": 0.0, "throughput": None, "steps": 0,
                "batch_size_per_rank": [], "complete": False}
    seconds = max(p["seconds"] for p in probes.values())
    seeds = sum(p["seeds"] for p in probes.values())
    first = probes[min(probes)]
    batches = min(p["batches"] for p in probes.values())
    # no seed counted (batches the meter cannot count seeds of): unmeasured, never a rate of
    # 0, which the tuner's log objective cannot take
    steady = seeds / seconds if seconds > 0 and seeds > 0 else None
    starts = [p.get("epoch_start_seconds") for p in probes.values()]
    length = first["epoch_length"]
    throughput, epoch_start = steady, None
    if steady and batches and all(x is not None for x in starts) \
            and first["epoch_length_exact"] and length:
        # short epochs: the per-epoch start (sampler workers, first step) is part of the cost
        epoch_start = max(starts)
        step = seconds / batches
        throughput = (seeds / batches) * length / (epoch_start + (length - 1) * step)
    return {
        "batches": batches,
        "seeds": seeds,
        "seconds": seconds,
        "throughput": throughput,
        "steady_throughput": steady,
        "epoch_start_seconds": epoch_start,
        "steps": first["steps"],
        "warmup": first["warmup"],
        "first_step_at": first["first_step_at"],
        "epoch_length": first["epoch_length"],
        "epoch_length_exact": first["epoch_length_exact"],
        "batch_size_per_rank": [probes[r]["batch_size"] for r in sorted(probes)],
        "complete": all(p["complete"] for p in probes.values()),
    }


def combine_stats(stats: dict[int, dict]) -> dict:
    """`combine` from each rank's feature statistics (`RunInfo.stats`)."""
    return combine({r: {"stats": st} for r, st in stats.items()})


class ProbeHook(Hook):
    """A run's hook that makes it a probe: every rank gets a `ProbeMeter` that ends the
    function with `ProbeEnd` after `warmup` + `batches` measured steps (its measurement lands in
    the rank's ``stats["probe"]``), and `ProbeEnd` is the run's normal end."""

    def __init__(self, warmup: int, batches: int) -> None:
        self.warmup, self.batches = int(warmup), int(batches)

    def prepare(self, ctx: Any) -> None:
        meter = ProbeMeter(self.warmup, self.batches,
                           stats=ctx.stats.setdefault(PROBE_STAT, {}))
        ctx.batch_callbacks.append(meter)

    def finish(self, ctx: Any, exc: BaseException | None) -> bool:
        return isinstance(exc, ProbeEnd)


# --------------------------------------------------------------------------- epoch feed


class EpochFeed(list):
    """A rank context's epoch list that calls `hook(records)` whenever an epoch is recorded
    (`EpochTimer.close` appends to `ctx.epochs`)."""

    def __init__(self, hook: Callable[[list[dict]], None]) -> None:
        super().__init__()
        self.hook = hook

    def append(self, record: Any) -> None:  # noqa: D102
        super().append(record)
        try:
            self.hook([r.to_dict() for r in self])
        except Exception:  # noqa: BLE001 - progress must never break training
            pass


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON to a temporary file in the same folder, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # mkstemp makes 0600; a report is for reading
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class EpochReport(Hook):
    """A run's hook that reports rank 0's finished training epochs to the caller while the run
    goes on, as ``callback(records)`` (`EpochRecord.to_dict()` of every epoch so far).

    When the rank runs in the caller's process the callback is called directly, at the end of
    each epoch. Rank processes get a copy of the hook without the callback: their rank 0
    rewrites `path` (JSON, atomically) after every epoch, and the caller's `watching()` block
    polls the file and calls the callback.
    """

    POLL_SECONDS = 0.5

    def __init__(self, callback: Callable[[list[dict]], None],
                 path: str | os.PathLike | None = None) -> None:
        self.callback = callback
        self.path = str(path) if path is not None else None
        self.owner = os.getpid()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["callback"] = None          # the caller's; a rank process reports through `path`
        return state

    def prepare(self, ctx: Any) -> None:
        if os.getpid() == self.owner and self.callback is not None:
            ctx.epochs = EpochFeed(self.callback)
        elif self.path is not None and ctx.rank == 0:
            path = self.path
            ctx.epochs = EpochFeed(lambda records: write_json_atomic(path, {"epochs": records}))

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Caller side: while the block runs, a thread passes what rank processes write to
        `path` on to the callback (nothing is written when the rank runs here)."""
        if self.path is None:
            yield
            return
        stop = threading.Event()
        poller = threading.Thread(target=self._poll, args=(Path(self.path), stop),
                                  name="gnnorch-epoch-feed", daemon=True)
        poller.start()
        try:
            yield
        finally:
            stop.set()
            poller.join(timeout=2)

    def _poll(self, path: Path, stop: threading.Event) -> None:
        last = None
        while not stop.wait(self.POLL_SECONDS):
            try:
                stamp = os.stat(path).st_mtime_ns
                if stamp == last:
                    continue
                records = json.loads(path.read_text())["epochs"]
                last = stamp
            except (OSError, ValueError, KeyError, TypeError):
                continue
            self.callback(records)


class RngState:
    """The caller's global random states (torch CPU, Python, numpy), restored after an aborted
    in-process probe so the real run starts from the same state."""

    def __init__(self) -> None:
        import numpy as np
        import torch

        self.torch = torch.get_rng_state()
        self.python = random.getstate()
        self.numpy = np.random.get_state()

    def restore(self) -> None:
        import numpy as np
        import torch

        torch.set_rng_state(self.torch)
        random.setstate(self.python)
        np.random.set_state(self.numpy)
