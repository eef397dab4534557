"""Tune, then train: what `Runtime.__call__` does when autotune is on (`Autotune.run`).

A small state machine over the report's life (`Phase`):

1. **DEFAULT: the default configuration runs first, as the real run** when its one rank runs
   in the caller's process (`runs.DefaultRun`: output held back, a meter watching its steps),
   else as a probe. From its measurement `decide.tuning_pays` decides whether tuning pays: the
   projected tuning time (remaining probes x (set-up + probe steps) + rank start-up) must be
   at most ``max_overhead`` of the projected run (set-up + epochs x steps per epoch x step
   time). If it does not pay, the run simply goes on (or, after a probe, runs): nothing is
   lost or repeated; tiny jobs pay nothing for tuning. If the function ends first, or builds
   no training `NeighborLoader`, that run was the run. The default's measurement also
   calibrates the probes' warm-up: it measures until its step times settle (`CONVERGE`),
   because the first steps carry one-off costs (sampler set-up, layer-rewrite calibration and
   probing: ~25 s on the first epoch of the products-like bench here).
2. **SEARCH: probes.** The tuner (`Tuner`: skopt ask/tell) proposes feasible configurations;
   each is measured by a probe (`runs.run_probe`): the user's function run with that plan,
   muted, ended after warm-up + measured steps (`decide.probe_warmup`, plus 2 per sampler
   core), so all ranks stop after the same step. A probe that raises is recorded as failed.
3. **RACE: the finalists** within `confirm_margin` of the best probe are probed once more and
   the best mean wins (`decide.finalists`, `decide.race`).
4. **TRAIN: the real run** with the chosen configuration runs the user's function from its
   start: no model state moves between runs, no epoch is lost or repeated. The report is
   rewritten after every epoch (`probe.EpochReport`); a progress bar follows the epochs.

Trade-off: a probe relaunches the user's function (its set-up, and about 4.5 s of rank
start-up on this machine for p > 1) instead of switching configurations inside one launch at
epoch boundaries (as ARGO does): switching is epoch-granular, so measuring k
configurations in one launch would cost k epochs -- ARGO's cost -- while a probe costs a bounded
number of steps, independent of the epoch length.

The driver returns (value, RunInfo); it never touches the `Runtime` that called it.
"""
from __future__ import annotations

import enum
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import execute
from ..errors import ArgumentsChangedError
from ..execute import Request, RunInfo
from ..launch.plan import CorePlan
from ..launch.topology import current_topology
from .arguments import Fingerprint, listed
from .config import TuneConfig
from .decide import Decision, epochs_hint, finalists, probe_warmup, race, tuning_pays
from .probe import EpochReport, combine_stats, warmup_for
from .report import REPORT_FILE, TuningReport, platform_info, point
from .runs import DefaultRun, ProbeOutcome, run_probe
from .space import SearchSpace


class Phase(enum.Enum):
    DEFAULT = "default"    # the default plan runs (as the real run, or as a probe)
    SEARCH = "search"      # Bayesian optimisation over probes
    RACE = "race"          # the finalists are probed again
    TRAIN = "train"        # the real run with the chosen plan
    DONE = "done"


def _fresh_dir(prefix: str) -> Path:
    """A new folder name under the temporary folder, made only when something is written."""
    return Path(tempfile.gettempdir()) / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"


class Ledger:
    """The report of one tuned call and the clocks behind its overhead figures. Timers and
    epoch feeds write to it from other threads: every change holds the report's lock."""

    def __init__(self, report: TuningReport, verbose: bool) -> None:
        self.report = report
        self.start = time.perf_counter()
        self.probe_seconds = 0.0
        self.tuning_seconds = 0.0
        self.tuner: Any = None               # the Tuner, once the search started
        self.epoch_bar: Any = None
        self.verbose = bool(verbose)
        self.err = sys.stderr

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def save(self) -> None:
        with self.report.lock:
            self.report.set_overhead(self.tuner.bo_seconds if self.tuner is not None else 0.0,
                                     self.probe_seconds, self.tuning_seconds)
            self.report.publish()

    def untuned(self, reason: str) -> None:
        self.report.decide(Decision(False, reason))

    def begin_run(self, plan: CorePlan, cores: list | None) -> None:
        # untuned, the default's measurement was part of the real run: only probes cost
        self.tuning_seconds = self.elapsed() if self.report.tuned else self.probe_seconds
        with self.report.lock:
            self.report.begin_run(point(plan), cores)
        self.save()

    def on_epochs(self, records: list[dict], world: int, only_if_running: bool = False) -> None:
        with self.report.lock:
            if not self.report.run_epochs(records, world, only_if_running):
                return
        self.save()
        if self.epoch_bar is not None:
            self.epoch_bar.n = len(records)
            self.epoch_bar.refresh()

    def finish(self, info: RunInfo) -> None:
        if self.report.data["run"] is None:
            self.begin_run(info.plan, info.cores)
        for stats in info.stats.values():            # the default run's meter is not a stat
            stats.pop("probe", None)
        with self.report.lock:
            self.report.finish_run(info.epochs, info.wall_seconds)
        self.save()

    def fail(self) -> None:
        self.report.fail()
        self.save()

    def bar(self, quiet: bool = False, **kwargs: Any) -> Any:
        from tqdm import tqdm

        return tqdm(file=self.err, disable=quiet or not self.verbose, dynamic_ncols=True,
                    **kwargs)

    def tuned_line(self) -> str:
        d, best = self.report.data, self.report.best
        speed = d["speedup_over_default"]
        return (f"gnnorch: tuned in {self.tuning_seconds:.1f} s ({len(d['trials'])} probes; "
                f"{d['stop_reason']}): {SearchSpace.plan(best['config'])} at "
                f"{best['throughput']:,.0f} seeds/s"
                + (f", {speed:.2f}x the default" if speed else ""))


class Autotune:
    """One tuned call: `request` under the best plan found around `default_plan`.

    `fixed` holds the plan dimensions the user gave (not searched); `report_dir` is where
    ``report.json`` is written (None: in memory only, `report`); `log_dir` is the user's log
    folder (None: temporary folders).
    """

    def __init__(self, request: Request, default_plan: CorePlan, cfg: TuneConfig, *,
                 fixed: dict | None = None, report_dir: Any = None, log_dir: Any = None,
                 verbose: bool = True) -> None:
        self.request, self.default_plan, self.cfg = request, default_plan, cfg
        topology = request.topology or current_topology()
        self.space = SearchSpace.from_topology(topology, max_processes=cfg.max_processes,
                                               max_sampler_cores=cfg.max_sampler_cores,
                                               fixed=fixed or {})
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.bar: Any = None
        self._log_root: Path | None = None
        path = Path(report_dir) / REPORT_FILE if report_dir is not None else None
        self.report = TuningReport.start(platform_info(topology, request.device),
                                         self.space.to_dict(), cfg.to_dict(),
                                         point(default_plan), path)
        self.ledger = Ledger(self.report, verbose)
        self.arguments = Fingerprint.of(request.args, request.kwargs)   # as the caller passed

    # ------------------------------------------------------------------ the state machine
    def run(self) -> tuple[Any, RunInfo]:
        """Tune when it pays, then run; returns (the function's value, what the run did)."""
        self.ledger.save()
        steps = {Phase.DEFAULT: self._default, Phase.SEARCH: self._search,
                 Phase.RACE: self._race, Phase.TRAIN: self._train}
        phase, plan = Phase.DEFAULT, self.default_plan
        if self.space.size == 1:
            self.ledger.untuned(f"the search space has a single point "
                         f"({SearchSpace.plan(self.space.points()[0])}): nothing to tune")
            phase = Phase.TRAIN
        result: tuple[Any, RunInfo] | None = None
        while phase is not Phase.DONE:
            phase, plan, result = steps[phase](plan)
        assert result is not None
        return result

    def _default(self, plan: CorePlan) -> tuple[Phase, CorePlan, Any]:
        if execute.backend_for(plan, self.request).in_caller:
            finished, value, info = self._default_in_caller(plan)
        else:
            finished, value, info = self._default_probe(plan)
        if finished:
            return Phase.DONE, plan, (value, info)
        return (Phase.SEARCH if self.report.tuned else Phase.TRAIN), plan, None

    def _search(self, plan: CorePlan) -> tuple[Phase, CorePlan, Any]:
        from .tuner import Tuner

        cfg, d = self.cfg, self.report.data
        default = self.report.trials[0]
        tuner = self.ledger.tuner = Tuner(
            self.space, budget=cfg.budget, n_initial_points=cfg.n_initial_points,
            estimator=cfg.estimator, acq_func=cfg.acq_func, seed=cfg.seed,
            min_gain=cfg.min_gain, patience=cfg.patience)
        d["tuner"]["n_initial_points_used"] = tuner.n_initial
        tuner.observe(default["config"], default["throughput"], "default")
        self.bar = self.ledger.bar(total=min(cfg.budget, self.space.size or cfg.budget),
                                   desc="gnnorch tuning", unit="probe")
        self.bar.update(1)
        self.ledger.save()
        while True:
            if self._out_of_time():
                d["stop_reason"] = f"time limit of {cfg.max_seconds:g} s reached"
                break
            suggestion = tuner.suggest()
            if suggestion is None:
                d["stop_reason"] = tuner.stop_reason
                break
            trial, _ = self._probe(SearchSpace.plan(suggestion.point), suggestion.chosen_by,
                                   suggestion.predicted)
            tuner.observe(suggestion.point, trial["throughput"], suggestion.chosen_by,
                               suggestion.predicted)
            self._probed()
            best = self.report.best
            self.bar.set_postfix_str(f"best {SearchSpace.plan(best['config'])} "
                                     f"{best['throughput']:,.0f} seeds/s")
        return Phase.RACE, plan, None

    def _race(self, plan: CorePlan) -> tuple[Phase, CorePlan, Any]:
        cfg = self.cfg
        configs = finalists(self.report.trials, cfg.confirm_margin, cfg.confirm_finalists)
        if configs:
            self.bar.total = (self.bar.total or 0) + len(configs)
            for config in configs:
                if self._out_of_time():
                    break
                self._probe(SearchSpace.plan(config), "confirm")
                self._probed()
            self.report.apply_race(race(self.report.trials, configs,
                                        self.report.default["config"], cfg.confirm_margin))
        self.bar.close()
        self.ledger.tuning_seconds = self.ledger.elapsed()   # tuned_line: in the call's summary
        self.ledger.save()
        return Phase.TRAIN, SearchSpace.plan(self.report.best["config"]), None

    def _train(self, plan: CorePlan) -> tuple[Phase, CorePlan, Any]:
        request = self.request.replace(log_dir=self.log_dir or _fresh_dir("gnnorch-"))
        ledger = self.ledger
        ledger.begin_run(plan, request.cores(plan))
        epochs, source = epochs_hint(self.request.fn, self.request.args, self.request.kwargs,
                                     self.cfg)
        ledger.epoch_bar = ledger.bar(total=None if source.startswith("assumed") else epochs,
                                      desc="gnnorch training", unit="epoch",
                                      quiet=not self.report.tuned)
        feed = EpochReport(lambda records: ledger.on_epochs(records, plan.processes),
                           path=Path(request.log_dir) / "epochs.json")
        try:
            with feed.watching():
                value, info = execute.run(plan, request, [feed])
            ledger.finish(info)
            return Phase.DONE, plan, (value, info)
        except BaseException:
            ledger.fail()
            raise
        finally:
            ledger.epoch_bar.close()
            ledger.epoch_bar = None

    # ------------------------------------------------------------------ the default plan
    def _default_in_caller(self, plan: CorePlan) -> tuple[bool, Any, RunInfo | None]:
        """The default plan runs here as the real run until the decision (`DefaultRun`)."""
        run = DefaultRun(self.decide, self.ledger, self.request, plan, self.cfg,
                         self.arguments)
        try:
            finished, value, info, seconds = run.run()
        except BaseException:
            self.ledger.fail()
            raise
        m = combine_stats(info.stats)
        if not finished:                          # tuning pays: that run was trial 0
            self.ledger.probe_seconds += seconds
            self.report.add_trial(point(plan), info.cores, m, seconds, "default")
            return False, None, None
        if run.verdict == "ended":                # ended before the meter was done
            if m["steps"] == 0:
                reason = ("the function ran no training step on a NeighborLoader's batches "
                          "(an epoch with gradients on and the model in training mode): "
                          "nothing to tune; that run is the result")
                if any(s.get("sampler", {}).get("built_before_run")
                       for s in info.stats.values()):
                    reason += (" (a NeighborLoader built before the call runs as PyG runs "
                               "it: build it inside the function to tune)")
            else:
                reason = (f"the whole run ({m['steps']} training steps, "
                          f"{info.wall_seconds:.2f} s) finished before one probe was "
                          f"measured; that run is the result")
            self.ledger.untuned(reason)
            self.ledger.begin_run(plan, info.cores)
        if m["batches"] > 0:
            self.report.add_trial(point(plan), info.cores, m, 0.0, "default")
        self.ledger.finish(info)
        return True, value, info

    def _default_probe(self, plan: CorePlan) -> tuple[bool, Any, RunInfo | None]:
        """The default plan has several ranks (fixed by the user): a normal probe first."""
        trial, outcome = self._probe(plan, "default")
        if trial["status"] == "failed":      # the real run would fail the same way
            self.ledger.fail()
            if outcome.exception is not None:
                raise outcome.exception
            raise RuntimeError(f"the default configuration {plan} failed in its probe: "
                               f"{trial['error']}")
        if outcome.finished:
            self.ledger.untuned(f"the whole run finished within the first probe "
                                f"({trial['seconds']:.2f} s); that run is the result")
            self.ledger.finish(outcome.info)
            log = outcome.info.log_dir / "rank0.log" if outcome.info.log_dir else None
            if log is not None and log.exists():         # its muted output, now shown
                sys.stdout.write(log.read_text(errors="replace"))
            return True, outcome.value, outcome.info
        self.decide(outcome.m)
        return False, None, None

    # ------------------------------------------------------------------ probes
    def _probe(self, plan: CorePlan, chosen_by: str,
               predicted: dict | None = None) -> tuple[dict, ProbeOutcome]:
        """Measure `plan` and record the trial."""
        warmup = warmup_for(probe_warmup(self.report.trials, self.cfg), plan.sampler_cores)
        request = self.request.replace(
            log_dir=self._logs() / f"probe-{len(self.report.trials)}")
        outcome = run_probe(request, plan, warmup, self.cfg.probe_batches)
        self.ledger.probe_seconds += outcome.seconds
        if execute.backend_for(plan, request).in_caller:
            self._check_arguments(f"probe {len(self.report.trials)} ({plan})")
        trial = self.report.add_trial(point(plan), request.cores(plan), outcome.m,
                                      outcome.seconds, chosen_by, predicted, outcome.error)
        return trial, outcome

    def _check_arguments(self, run: str) -> None:
        """A run in the caller's process shares the caller's arguments: if it changed them,
        the real run would not start from what was passed (`arguments`). The default run
        checks at its decision and goes on untuned; a later probe can only stop the call."""
        changed = self.arguments.changes(Fingerprint.of(self.request.args,
                                                        self.request.kwargs))
        if changed:
            self.ledger.fail()
            name = getattr(self.request.fn, "__name__", "the function")
            raise ArgumentsChangedError(
                f"gnnorch's tuner: {run} of {name} changed its arguments in place "
                f"({listed(changed)}), where the default run had not by its decision; the "
                f"real run would start from the changed arguments. Pass autotune=False, or "
                f"leave the arguments unchanged (build the model inside the function, change "
                f"a copy of the data)")

    def _probed(self) -> None:
        self.ledger.tuning_seconds = self.ledger.elapsed()
        self.ledger.save()
        self.bar.update(1)

    def _out_of_time(self) -> bool:
        limit = self.cfg.max_seconds
        return limit is not None and self.ledger.elapsed() > limit

    def _logs(self) -> Path:
        if self._log_root is None:
            self._log_root = (self.log_dir / "tuning" if self.log_dir is not None
                              else _fresh_dir("gnnorch-tune-"))
        return self._log_root

    # ------------------------------------------------------------------ the decision
    def decide(self, m: dict) -> bool:
        """Whether tuning pays, from the default's measurement; recorded in the report."""
        epochs, source = epochs_hint(self.request.fn, self.request.args, self.request.kwargs,
                                     self.cfg)
        decision = tuning_pays(m, self.cfg, self.space.points() or [],
                               point(self.default_plan), epochs, source)
        self.report.decide(decision)
        self.ledger.save()
        return decision.tuned
