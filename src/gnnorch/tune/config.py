"""The auto-tuner's knobs (`Runtime(train, tune={...})`), validated once.

Every field has a default chosen for the common case; `TuneConfig.from_option` accepts None, a
dict of overrides or a `TuneConfig`, and rejects unknown keys with the list of valid ones.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any

ESTIMATORS = ("GP", "RF", "ET", "GBRT")
ACQ_FUNCS = ("EI", "PI", "LCB", "gp_hedge")


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """How `Runtime(train, autotune=True)` searches.

    Search (scikit-optimize ask/tell `Optimizer`):
        budget: most probes, the default configuration's included (default 20).
        n_initial_points: points of the seeded random initial design, the default configuration
            included (default 5); always kept below the budget and at most half the space, so
            the model chooses the rest.
        estimator: skopt surrogate, "GP" (default), "RF", "ET" or "GBRT".
        acq_func: skopt acquisition, "EI" (default), "PI", "LCB" or "gp_hedge".
        seed: random state of the initial design and of the model (default 0): with the same
            measurements the trial sequence repeats exactly.
        min_gain: stop when the model's expected improvement over the best measured throughput,
            over every configuration not yet measured, is below this fraction (default 0.01) at
            two successive proposals and the last `patience` probes found nothing better.
        patience: probes without a better throughput before the min_gain rule may stop
            (default 5).
        max_seconds: stop starting probes after this many seconds of tuning (default None).
        confirm_margin: after the search, the plans whose best probe is within this fraction of
            the best probe are the finalists (at most `confirm_finalists`, default 3); each is
            probed once more and the plan with the highest mean throughput over its probes is
            chosen (default 0.15; 0 turns confirmation off). One probe's noise is ±10-20 % on a
            busy or virtual machine, so a single lucky probe must not decide the run.

    Space (besides ``processes * (sampler_cores + threads) <= usable cores``):
        max_processes: upper bound of ranks p (default 8, as ARGO; capped by usable cores).
        max_sampler_cores: upper bound of sampler cores s per rank (default 4).

    Probes (short muted launches of the user's function):
        warmup_batches: training steps excluded before measuring, at least (default 3). The
            default run measures until its step times settle (the two halves of its last
            `probe_batches` steps within 15 %), and probes then skip as many steps as it
            needed; a probe with s sampler workers skips 2*s more (the prefetch queue fills).
        probe_batches: measured training steps per probe (default 8). The first step of every
            epoch is never measured (it includes the loader's start).

    When to tune at all (decided after the default configuration's probe, which runs as the real
    run until then):
        max_overhead: tune only if the projected tuning time is at most this fraction of the
            projected run time (default 0.2); otherwise the default run just continues.
        epochs: number of training epochs of the run, for that projection. Default: read from
            the call's argument named epochs / num_epochs / n_epochs / max_epochs when it is an
            int, else `assumed_epochs`.
        assumed_epochs: epochs assumed when none can be read (default 10).
        launch_seconds: assumed start-up of a multi-rank probe, for the projection (default 5).
        setup_seconds: if the function has built no training (shuffle=True) NeighborLoader
            this long after it started, it is run to its end with the default configuration,
            untuned, and its output is no longer held back (default 30). Once it has built one,
            the runtime waits for the measured steps however slow the first ones are.
    """

    budget: int = 20
    n_initial_points: int = 5
    estimator: str = "GP"
    acq_func: str = "EI"
    seed: int = 0
    min_gain: float = 0.01
    patience: int = 5
    max_seconds: float | None = None
    confirm_margin: float = 0.15
    confirm_finalists: int = 3
    max_processes: int = 8
    max_sampler_cores: int = 4
    warmup_batches: int = 3
    probe_batches: int = 8
    max_overhead: float = 0.2
    epochs: int | None = None
    assumed_epochs: int = 10
    launch_seconds: float = 5.0
    setup_seconds: float = 30.0

    def __post_init__(self) -> None:
        def integer(name: str, low: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ValueError(f"tune[{name!r}] must be an integer >= {low}, got {value!r}")

        def number(name: str, low: float, strict: bool = False, none: bool = False) -> None:
            value = getattr(self, name)
            if none and value is None:
                return
            bad = isinstance(value, bool) or not isinstance(value, numbers.Real)
            if bad or value < low or (strict and value == low):
                op = ">" if strict else ">="
                raise ValueError(f"tune[{name!r}] must be a number {op} {low}"
                                 f"{' or None' if none else ''}, got {value!r}")

        integer("budget", 1)
        integer("n_initial_points", 1)
        integer("seed", 0)
        integer("patience", 0)
        integer("max_processes", 1)
        integer("max_sampler_cores", 0)
        integer("warmup_batches", 0)
        integer("confirm_finalists", 1)
        integer("probe_batches", 1)
        integer("assumed_epochs", 1)
        if self.epochs is not None:
            integer("epochs", 1)
        number("min_gain", 0.0)
        number("max_seconds", 0.0, strict=True, none=True)
        number("max_overhead", 0.0)
        number("confirm_margin", 0.0)
        if self.confirm_margin >= 1:
            raise ValueError(f"tune['confirm_margin'] must be below 1, got {self.confirm_margin!r}")
        number("launch_seconds", 0.0)
        number("setup_seconds", 0.0, strict=True)
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"tune['estimator'] must be one of {ESTIMATORS}, "
                             f"got {self.estimator!r}")
        if self.acq_func not in ACQ_FUNCS:
            raise ValueError(f"tune['acq_func'] must be one of {ACQ_FUNCS}, got {self.acq_func!r}")

    @classmethod
    def from_option(cls, value: Any) -> "TuneConfig":
        """None -> defaults; a dict -> defaults overridden; a TuneConfig -> itself."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"tune must be a dict of tuner settings or a TuneConfig, "
                             f"got {type(value).__name__}")
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(valid))
        if unknown:
            raise TypeError(f"tune got unexpected setting(s) {unknown}; valid settings are: "
                            f"{', '.join(valid)}")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
