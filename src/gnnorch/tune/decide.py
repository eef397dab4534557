"""The tuner's decisions as pure functions of measurements and settings (no I/O, no runs):
does tuning pay, how long probes warm up, what a probe's status is, which plans are finalists
and which of them wins the race.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from .config import TuneConfig
from .probe import warmup_for

EPOCH_ARGUMENTS = ("epochs", "num_epochs", "n_epochs", "max_epochs")
# the default run measures until the two halves of its last `probe_batches` steps agree within
# 15 % (per-seed step time), at most 24 steps more: its warm-up then sets the probes' warm-up
CONVERGE = 0.15


def config_key(config: dict) -> tuple:
    """A trial configuration as a hashable key."""
    return tuple(sorted(config.items()))


# --------------------------------------------------------------------------- does tuning pay


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether to tune, why, and the projection behind it (the report's ``decision``)."""

    tuned: bool
    reason: str
    projected_tuning_seconds: float | None = None
    projected_run_seconds: float | None = None
    epochs: int | None = None
    epochs_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def epochs_hint(fn: Callable, args: tuple, kwargs: dict, cfg: TuneConfig) -> tuple[int, str]:
    """Training epochs of the run and where the number came from: ``tune['epochs']``, else
    the call's argument named epochs / num_epochs / n_epochs / max_epochs (a positive int),
    else ``tune['assumed_epochs']``."""
    if cfg.epochs is not None:
        return cfg.epochs, "tune['epochs']"
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
        bound.apply_defaults()
        for name in EPOCH_ARGUMENTS:
            value = bound.arguments.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"argument {name!r}"
    except (TypeError, ValueError):
        pass
    return cfg.assumed_epochs, "assumed (no epochs argument found)"


def tuning_pays(m: dict, cfg: TuneConfig, points: list[dict], default: dict, epochs: int,
                source: str) -> Decision:
    """Whether tuning pays, from the default plan's measurement `m` (`probe.combine`).

    Projected run: set-up + epochs x steps per epoch x step time. Projected tuning: the probes
    still to come (the budget less the default's, plus the finalists' second probes) x the mean
    cost of one probe over the feasible `points` (set-up + warm-up and measured steps, plus
    rank start-up for several ranks). Tuning pays when it is at most ``max_overhead`` of the
    run. `default` is the default plan's point, used when `points` is not enumerable.
    """
    if not m.get("batches"):
        return Decision(False, "no steady-state step could be measured")
    if not m.get("seeds"):
        return Decision(False, "the measured steps' batches counted no seeds: plans cannot be "
                               "compared by seeds per second")
    tau = m["seconds"] / m["batches"]
    sigma = float(m.get("first_step_at") or 0.0)
    length = max(1, int(m.get("epoch_length") or 1))
    exact = bool(m.get("epoch_length_exact"))
    run = sigma + epochs * length * tau
    trials = min(cfg.budget, len(points) or cfg.budget) - 1
    if cfg.confirm_margin > 0 and cfg.confirm_finalists > 1:
        trials += min(cfg.confirm_finalists, len(points) or cfg.confirm_finalists)
    costs = []
    warmup = max(cfg.warmup_batches, int(m.get("warmup") or 0))
    for pt in points or [default]:
        steps = warmup_for(warmup, pt["sampler_cores"]) + cfg.probe_batches
        steps += steps // length        # the first step of each epoch is not measured
        costs.append(sigma + steps * tau + (cfg.launch_seconds if pt["processes"] > 1 else 0))
    tuning = trials * sum(costs) / len(costs)
    tune = tuning <= cfg.max_overhead * run
    epoch_text = f"{length}{'' if exact else '+'} steps/epoch"
    reason = (f"projected tuning {tuning:.1f} s for {trials} more probes "
              f"{'<=' if tune else '>'} {cfg.max_overhead:.0%} of the projected run "
              f"{run:.1f} s ({epochs} epochs [{source}] x {epoch_text} x "
              f"{tau * 1000:.1f} ms/step + {sigma:.2f} s set-up)")
    if not tune:
        reason += ": ran untuned with the default configuration"
    return Decision(tune, reason, projected_tuning_seconds=tuning, projected_run_seconds=run,
                    epochs=epochs, epochs_source=source)


# --------------------------------------------------------------------------- probes


def probe_warmup(trials: list[dict], cfg: TuneConfig) -> int:
    """Warm-up steps of a probe: at least `warmup_batches`, and at least what the default
    run needed to settle (one-off costs of the first steps: sampler set-up, layer-rewrite
    probing, ...), less the default's own sampler prefetch allowance."""
    observed = 0
    if trials and trials[0]["chosen_by"] == "default":
        s = trials[0]["config"]["sampler_cores"]
        observed = trials[0]["warmup_batches"] - 2 * s
    return max(cfg.warmup_batches, observed)


def trial_status(m: dict | None, error: str | None) -> str:
    """"failed" (the probe raised), "ok" (all its steps measured) or "short" (the run ended
    first)."""
    if error is not None:
        return "failed"
    return "ok" if m and m["complete"] else "short"


# --------------------------------------------------------------------------- racing


@dataclasses.dataclass
class Finalist:
    """A plan in the race and every throughput measured for it, in trial order."""

    config: dict
    throughputs: list[float]

    @property
    def mean(self) -> float:
        return sum(self.throughputs) / len(self.throughputs)


def measured(trials: list[dict]) -> dict[tuple, Finalist]:
    """Every measured plan (first seen first) with all its throughputs."""
    seen: dict[tuple, Finalist] = {}
    for t in trials:
        if t["throughput"]:
            seen.setdefault(config_key(t["config"]), Finalist(t["config"], [])) \
                .throughputs.append(t["throughput"])
    return seen


def finalists(trials: list[dict], margin: float, limit: int) -> list[dict]:
    """The plans to probe once more, best probe first: every plan whose best probe is within
    `margin` of the best probe, at most `limit` of them; none when racing is off (margin 0 or
    limit < 2) or fewer than two qualify."""
    if margin <= 0 or limit < 2:
        return []
    seen = measured(trials)
    if not seen:
        return []
    top = max(max(f.throughputs) for f in seen.values())
    ranked = sorted(seen.values(), key=lambda f: max(f.throughputs), reverse=True)
    chosen = [f.config for f in ranked if max(f.throughputs) >= (1 - margin) * top][:limit]
    return chosen if len(chosen) >= 2 else []


@dataclasses.dataclass(frozen=True)
class RaceResult:
    """The winner of a race (the report's ``best`` and ``confirmation``) and its speedup over
    the default plan's mean (None when the default was never measured)."""

    best: dict
    confirmation: dict
    speedup: float | None


def race(trials: list[dict], configs: list[dict], default: dict,
         margin: float) -> RaceResult:
    """The finalist (`configs`, best probe first) with the highest mean throughput over all its
    probes in `trials` wins (on a tie, the better single probe). One probe's noise (±10-20 %
    measured on a 16-core VM) is as large as the gaps between the top plans, so the maximum of
    single probes is biased towards a lucky one."""
    seen = measured(trials)
    field = [seen[config_key(c)] for c in configs]
    winner = max(field, key=lambda f: f.mean)
    key = config_key(winner.config)
    last = max(t["index"] for t in trials if config_key(t["config"]) == key and t["throughput"])
    base = seen.get(config_key(default))
    return RaceResult(
        best={"config": winner.config, "throughput": winner.mean, "trial": last},
        confirmation={"margin": margin, "chosen": winner.config,
                      "finalists": [{"config": f.config, "throughputs": f.throughputs,
                                     "mean": f.mean} for f in field]},
        speedup=winner.mean / base.mean if base is not None else None)
