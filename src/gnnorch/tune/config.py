"""The auto-tuner's knobs (`Runtime(train, tune={...})`), validated once.

Every field has a default chosen for the common case, written here only; `TuneConfig.from_option`
accepts None, a dict of overrides or a `TuneConfig`, and rejects unknown keys with the list of
valid ones. Everything that acts only when tuning runs lives here (`report_dir` included).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..options import check_choice, check_int, check_number, check_path, config_option

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
        setup_seconds: if the function has built no training NeighborLoader (one built with
            shuffle=True, or an unshuffled one whose epoch has started training)
            this long after it started, it is run to its end with the default configuration,
            untuned, and its output is no longer held back (default 30). Once it has built one,
            the runtime waits for the measured steps however slow the first ones are.

    Output:
        report_dir: folder where the tuning report is written (``report.json``, atomically,
            after every probe and every epoch). Default None: the report is kept in memory
            only (`Runtime.report`).
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
    report_dir: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        def name(field: str) -> str:
            return f"tune[{field!r}]"

        for field, low in (("budget", 1), ("n_initial_points", 1), ("seed", 0),
                           ("patience", 0), ("max_processes", 1), ("max_sampler_cores", 0),
                           ("warmup_batches", 0), ("confirm_finalists", 1),
                           ("probe_batches", 1), ("assumed_epochs", 1)):
            check_int(name(field), getattr(self, field), low, lenient=True)
        check_int(name("epochs"), self.epochs, 1, allow_none=True, lenient=True)
        for field in ("min_gain", "max_overhead", "launch_seconds"):
            check_number(name(field), getattr(self, field), low=0, lenient=True)
        check_number(name("max_seconds"), self.max_seconds, low=0, low_open=True,
                     allow_none=True, lenient=True)
        check_number(name("setup_seconds"), self.setup_seconds, low=0, low_open=True,
                     lenient=True)
        check_number(name("confirm_margin"), self.confirm_margin, low=0, high=1,
                     high_open=True, lenient=True)
        check_choice(name("estimator"), self.estimator, ESTIMATORS)
        check_choice(name("acq_func"), self.acq_func, ACQ_FUNCS)
        check_path(name("report_dir"), self.report_dir)

    @classmethod
    def from_option(cls, value: Any) -> "TuneConfig":
        """None -> defaults; a dict -> defaults overridden; a TuneConfig -> itself."""
        return config_option("tune", value, cls)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["report_dir"] is not None:   # JSON: the report holds its config
            out["report_dir"] = os.fspath(out["report_dir"])
        return out
