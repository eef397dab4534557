"""Tune, then train: what `Runtime.__call__` does when autotune is on.

1. **The default configuration runs first, as the real run** (in this process when it has one
   rank, which it has unless the user fixed `processes`), with its output held back and a
   `ProbeMeter` watching its training steps. When the meter has measured its steps, the
   runtime decides whether tuning pays (`_decide`): the projected tuning time (remaining probes
   x (set-up + probe steps) + rank start-up) must be at most ``max_overhead`` of the projected
   run (set-up + epochs x steps per epoch x step time).

   * If it does not pay, the run simply goes on: held-back output is released and nothing is
     lost or repeated. If the function ends before the meter is done (a small job) or builds no
     training `NeighborLoader`, that run was the run. Tiny jobs pay nothing for tuning.
   * If it pays, the default run is ended (`ProbeEnd`), its output discarded and the caller's
     random states restored; its measurement is trial 0.

   The default run's measurement also calibrates the warm-up: it measures until the two
   halves of its last `probe_batches` steps agree within 15 % (per-seed step time; at most 24
   steps more), because the first steps carry one-off costs (sampler set-up, layer-rewrite
   calibration and probing: ~25 s on the first epoch of the products-like bench here).

2. **Probes.** The tuner (`Tuner`: skopt ask/tell) proposes feasible configurations; each is
   measured by a probe: the user's function launched with that plan (in this process for one
   rank, else in fresh rank processes), muted, ended after warm-up + measured steps. The
   warm-up is fixed per probe (the default run's settling length, at least `warmup_batches`,
   plus 2 per sampler core), so all ranks stop after the same step. A probe that raises is
   recorded as failed and excluded.

3. **The real run** with the best configuration runs the user's function from its start: no
   model state moves between launches, no epoch is lost or repeated, no user code changes. The
   report is rewritten after every epoch; a progress bar follows the epochs.

Trade-off: a probe relaunches the user's function (its set-up, and about 4.5 s of rank
start-up on this machine for p > 1) instead of switching configurations inside one launch at
epoch boundaries (`RankContext.reconfigure`): switching is epoch-granular, so measuring k
configurations in one launch would cost k epochs -- ARGO's cost -- while a probe costs a bounded
number of steps, independent of the epoch length.
"""
from __future__ import annotations

import gc
import importlib.metadata
import inspect
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from ..launch.inprocess import run_in_process
from ..launch.plan import CorePlan, RankCores, assign_cores
from ..launch.supervisor import LaunchSpec, RankGroup
from .config import TuneConfig
from .probe import (EpochFeed, OutputCapture, ProbeEnd, ProbeMeter, RngState, combine,
                    warmup_for)
from .report import REPORT_FILE, TuningReport, now_iso
from .schema import FORMAT, VERSION
from .space import PLAN_DIMS, SearchSpace

EPOCH_ARGUMENTS = ("epochs", "num_epochs", "n_epochs", "max_epochs")
# the default run measures until the two halves of its last `probe_batches` steps agree within
# 15 % (per-seed step time), at most 24 steps more: its warm-up then sets the probes' warm-up
CONVERGE = 0.15


def run_autotuned(runtime: Any, args: tuple, kwargs: dict) -> Any:
    """Tune (when it pays), then run `runtime.train(*args, **kwargs)` with the best plan."""
    return _Session(runtime, args, kwargs).run()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _first(cores: list[RankCores] | None) -> RankCores | None:
    return cores[0] if cores else None


def _key(config: dict) -> tuple:
    """A trial configuration as a hashable key."""
    return tuple(sorted(config.items()))


def _point(plan: CorePlan) -> dict:
    return {"processes": plan.processes, "sampler_cores": plan.sampler_cores,
            "threads": plan.threads}


class _Session:
    def __init__(self, runtime: Any, args: tuple, kwargs: dict) -> None:
        self.rt, self.args, self.kwargs = runtime, args, kwargs
        self.cfg: TuneConfig = runtime.tune_config
        self.topology = runtime.topology
        o = runtime.options
        self.seed = o.seed if o.seed is not None else torch.initial_seed() % 2**31
        fixed = {n: getattr(o, n) for n in PLAN_DIMS if getattr(o, n) is not None}
        self.space = SearchSpace.from_topology(self.topology, max_processes=self.cfg.max_processes,
                                               max_sampler_cores=self.cfg.max_sampler_cores,
                                               fixed=fixed)
        self.default_plan: CorePlan = runtime.plan
        self.verbose = bool(o.verbose)
        self.err = sys.stderr
        self.start = time.perf_counter()
        self.probe_seconds = 0.0
        self.tuning_seconds = 0.0
        self.tuner: Any = None
        self.log_root: Path | None = None
        self.lock = threading.Lock()
        self.epoch_bar: Any = None
        path = Path(o.report_dir) / REPORT_FILE if o.report_dir is not None else None
        self.report = TuningReport(self._base(), path)
        runtime.report = self.report

    # ------------------------------------------------------------------ report helpers
    def _base(self) -> dict:
        topo = self.topology
        import torch_geometric

        return {
            "format": FORMAT, "version": VERSION, "status": "tuning",
            "created": now_iso(), "updated": now_iso(),
            "platform": {
                "usable_cores": topo.num_usable, "physical_cores": topo.num_physical,
                "smt": topo.smt, "numa_nodes": [list(n) for n in topo.numa_nodes],
                "usable_cpus": list(topo.usable_cpus), "cpu_quota": topo.cpu_quota,
                "device": self.rt.device,
                "versions": {"python": platform.python_version(), "torch": torch.__version__,
                             "torch_geometric": torch_geometric.__version__,
                             "scikit_optimize": _version("scikit-optimize"),
                             "gnnorch": _version("gnnorch")},
                "platform": platform.platform(),
            },
            "space": self.space.to_dict(),
            "tuner": dict(self.cfg.to_dict(), n_initial_points_used=None),
            "decision": {"tuned": False, "reason": "deciding", "projected_tuning_seconds": None,
                         "projected_run_seconds": None, "epochs": None, "epochs_source": None},
            "trials": [], "best_so_far": [], "stop_reason": None,
            "default": {"config": _point(self.default_plan), "throughput": None},
            "best": {"config": _point(self.default_plan), "throughput": None, "trial": None},
            "speedup_over_default": None, "confirmation": None,
            "overhead": {"bo_seconds": 0.0, "probe_seconds": 0.0, "tuning_seconds": 0.0},
            "run": None, "notes": [],
        }

    def _save(self) -> None:
        with self.lock:
            d = self.report.data
            d["overhead"] = {
                "bo_seconds": self.tuner.bo_seconds if self.tuner is not None else 0.0,
                "probe_seconds": self.probe_seconds, "tuning_seconds": self.tuning_seconds}
            if self.report.path is not None:
                self.report.save()
            else:
                d["updated"] = now_iso()

    def _decision(self, tuned: bool, reason: str, **extra: Any) -> None:
        self.report.data["decision"].update(tuned=tuned, reason=reason, **extra)

    def _add_trial(self, plan: CorePlan, cores: list[RankCores] | None, m: dict | None,
                   seconds: float, chosen_by: str, predicted: dict | None = None,
                   error: str | None = None) -> dict:
        d = self.report.data
        throughput = m["throughput"] if m and error is None else None
        if error is not None:
            status = "failed"
        elif m and m["complete"]:
            status = "ok"
        else:
            status = "short"
        previous = [t["throughput"] for t in d["trials"] if t["throughput"] is not None]
        best = max(previous + ([throughput] if throughput is not None else []), default=None)
        trial = {
            "index": len(d["trials"]), "config": _point(plan),
            "cores": [c.to_dict() for c in cores] if cores else None,
            "batch_size_per_rank": list(m["batch_size_per_rank"]) if m else [],
            "throughput": throughput, "status": status, "error": error,
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
            d["best"] = {"config": _point(plan), "throughput": throughput,
                         "trial": trial["index"]}
        if chosen_by == "default":
            d["default"] = {"config": _point(plan), "throughput": throughput}
        if d["default"]["throughput"] and d["best"]["throughput"]:
            d["speedup_over_default"] = d["best"]["throughput"] / d["default"]["throughput"]
        return trial

    # ------------------------------------------------------------------ the call
    def run(self) -> Any:
        self._save()
        if self.space.size == 1:
            self._decision(False, "the search space has a single point "
                                  f"({SearchSpace.plan(self.space.points()[0])}): nothing to tune")
            return self._real_run(self.default_plan)
        if self.default_plan.processes == 1:
            done, value = self._speculative_default()
            if done:
                return value
        else:
            done, value = self._default_probe()
            if done:
                return value
            if not self.report.data["decision"]["tuned"]:
                return self._real_run(self.default_plan)
        best = self._tune()
        return self._real_run(best)

    # ------------------------------------------------------------------ step 1: default
    def _speculative_default(self) -> tuple[bool, Any]:
        """Run the default plan in this process as the real run, until the decision."""
        rt, cfg, plan = self.rt, self.cfg, self.default_plan
        cores = assign_cores(plan, self.topology) if rt.options.bind else None
        capture, rng = OutputCapture(), RngState()
        state: dict[str, Any] = {"ctx": None, "tune": None, "meter": None, "timer": None}
        decide_lock = threading.Lock()

        def on_budget(meter: ProbeMeter) -> None:
            with decide_lock:
                if state["tune"] is not None:       # the set-up timer decided already
                    meter.active = False
                    return
                state["tune"] = self._decide(meter.summary())
            if state["tune"]:
                raise ProbeEnd()
            meter.active = False
            capture.release()
            self._begin_real(plan, cores)
            self._on_epochs([r.to_dict() for r in state["ctx"].epochs], 1)

        def setup_timeout() -> None:
            with decide_lock:
                meter, ctx = state["meter"], state["ctx"]
                if state["tune"] is not None or (meter is not None and meter.steps > 0):
                    return
                if ctx is not None and ctx._loaders_built > 0:
                    # a training loader exists: a slow first step (one-off set-up of the
                    # sampler, layer rewrites, ...) is still a step to come; keep waiting
                    rearm()
                    return
                state["tune"] = False
                if meter is not None:
                    meter.active = False
            self._decision(False, f"no training NeighborLoader built within "
                                  f"{cfg.setup_seconds:g} s of the start: ran untuned with the "
                                  f"default configuration")
            capture.release()
            self._begin_real(plan, cores)

        def rearm() -> None:
            timer = threading.Timer(cfg.setup_seconds, setup_timeout)
            timer.daemon = True
            state["timer"] = timer
            timer.start()

        def prepare(ctx: Any) -> None:
            state["ctx"] = ctx
            meter = ProbeMeter(warmup_for(cfg.warmup_batches, plan.sampler_cores),
                               cfg.probe_batches, on_budget,
                               stats=ctx.stats.setdefault("probe", {}),
                               converge=CONVERGE)
            state["meter"] = meter
            ctx.batch_callbacks.append(meter)
            ctx.epochs = EpochFeed(lambda records: self._on_epochs(records, 1,
                                                                   only_if_running=True))

        start = time.perf_counter()
        capture.__enter__()
        rearm()
        try:
            value, summary, wall = run_in_process(rt.train, self.args, self.kwargs, plan,
                                                  _first(cores), self.seed, rt.features,
                                                  prepare=prepare)
        except ProbeEnd:
            capture.discard()
            rng.restore()
            gc.collect()
            elapsed = time.perf_counter() - start
            self.probe_seconds += elapsed
            m = combine({0: state["ctx"].summary()})
            self._add_trial(plan, cores, m, elapsed, "default")
            return False, None
        except BaseException:
            capture.release()
            self._fail()
            raise
        finally:
            with decide_lock:
                state["tune"] = state["tune"] if state["tune"] is not None else "ended"
                state["timer"].cancel()
        capture.release()
        m = combine({0: summary})
        if state["tune"] == "ended":   # ended before the meter was done
            if m["steps"] == 0:
                reason = ("the function built no training (shuffle=True) NeighborLoader, or "
                          "ran no step of one: nothing to tune; that run is the result")
            else:
                reason = (f"the whole run ({m['steps']} training steps, {wall:.2f} s) finished "
                          f"before one probe was measured; that run is the result")
            self._decision(False, reason)
            self._begin_real(plan, cores)
        if m["batches"] > 0:
            self._add_trial(plan, cores, m, 0.0, "default")
        self._finish_real(plan, cores, {0: summary}, wall, None)
        return True, value

    def _default_probe(self) -> tuple[bool, Any]:
        """The default plan has several ranks (fixed by the user): a normal probe first."""
        trial, m, finished, value = self._probe(self.default_plan, "default")
        if trial["status"] == "failed":      # the real run would fail the same way
            self._fail()
            if self._probe_error is not None:
                raise self._probe_error
            raise RuntimeError(f"the default configuration {self.default_plan} failed in its "
                               f"probe: {trial['error']}")
        if finished is not None:
            self._decision(False, f"the whole run finished within the first probe "
                                  f"({trial['seconds']:.2f} s); that run is the result")
            self._finish_real(self.default_plan, None, finished, trial["seconds"], None)
            if self._probe_log is not None and self._probe_log.exists():
                sys.stdout.write(self._probe_log.read_text(errors="replace"))
            return True, value
        self._decide(m)
        return False, None

    # ------------------------------------------------------------------ the rule
    def _epochs_hint(self) -> tuple[int, str]:
        if self.cfg.epochs is not None:
            return self.cfg.epochs, "tune['epochs']"
        try:
            bound = inspect.signature(self.rt.train).bind_partial(*self.args, **self.kwargs)
            bound.apply_defaults()
            for name in EPOCH_ARGUMENTS:
                value = bound.arguments.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value, f"argument {name!r}"
        except (TypeError, ValueError):
            pass
        return self.cfg.assumed_epochs, "assumed (no epochs argument found)"

    def _decide(self, m: dict) -> bool:
        """Whether tuning pays, from the default's measurement; recorded in the report."""
        cfg = self.cfg
        if not m.get("batches"):
            self._decision(False, "no steady-state step could be measured")
            return False
        tau = m["seconds"] / m["batches"]
        sigma = float(m.get("first_step_at") or 0.0)
        length = max(1, int(m.get("epoch_length") or 1))
        exact = bool(m.get("epoch_length_exact"))
        epochs, source = self._epochs_hint()
        run = sigma + epochs * length * tau
        points = self.space.points() or []
        trials = min(cfg.budget, len(points) or cfg.budget) - 1
        if cfg.confirm_margin > 0 and cfg.confirm_finalists > 1:
            trials += min(cfg.confirm_finalists, len(points) or cfg.confirm_finalists)
        costs = []
        warmup = max(cfg.warmup_batches, int(m.get("warmup") or 0))
        for pt in points or [_point(self.default_plan)]:
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
        self._decision(tune, reason, projected_tuning_seconds=tuning,
                       projected_run_seconds=run, epochs=epochs, epochs_source=source)
        self._save()
        return tune

    # ------------------------------------------------------------------ step 2: probes
    _probe_log: Path | None = None
    _probe_error: BaseException | None = None

    def _log_dir(self, name: str) -> Path:
        if self.log_root is None:
            if self.rt.options.log_dir is not None:
                self.log_root = Path(self.rt.options.log_dir) / "tuning"
            else:
                self.log_root = Path(tempfile.mkdtemp(prefix="gnnorch-tune-"))
        return self.log_root / name

    def _probe(self, plan: CorePlan, chosen_by: str,
               predicted: dict | None = None) -> tuple[dict, dict | None, dict | None, Any]:
        """Measure `plan`; returns (trial record, measurement, the summaries if the function
        finished on its own else None, its value then)."""
        rt, cfg = self.rt, self.cfg
        cores = assign_cores(plan, self.topology) if rt.options.bind else None
        probe = {"warmup": warmup_for(self._warmup(), plan.sampler_cores),
                 "batches": cfg.probe_batches}
        start = time.perf_counter()
        error, summaries, value, finished = None, None, None, None
        self._probe_log, self._probe_error = None, None
        try:
            if plan.processes == 1:
                holder: dict[str, Any] = {}

                def prepare(ctx: Any) -> None:
                    holder["ctx"] = ctx
                    meter = ProbeMeter(probe["warmup"], probe["batches"],
                                       stats=ctx.stats.setdefault("probe", {}))
                    ctx.batch_callbacks.append(meter)

                rng = RngState()
                try:
                    with OutputCapture():
                        value, summary, _ = run_in_process(
                            rt.train, self.args, self.kwargs, plan, _first(cores), self.seed,
                            rt.features, prepare=prepare)
                    summaries = {0: summary}
                    finished = summaries
                except ProbeEnd:
                    summaries = {0: holder["ctx"].summary()}
                finally:
                    rng.restore()
                    gc.collect()
            else:
                log_dir = self._log_dir(f"probe-{len(self.report.trials)}")
                spec = LaunchSpec(plan=plan, cores=cores, seed=self.seed, log_dir=log_dir,
                                  backend="gloo", start_timeout=rt.options.start_timeout,
                                  collective_timeout=rt.options.collective_timeout,
                                  features=rt.features, probe=probe, mute=True)
                result = RankGroup(spec).run(rt.train, self.args, self.kwargs)
                summaries = result.summaries
                self._probe_log = log_dir / "rank0.log"
                if not combine(summaries)["complete"]:
                    finished, value = summaries, result.value
        except Exception as exc:  # noqa: BLE001 - a failed probe is recorded, not fatal
            self._probe_error = exc
            first = (str(exc).strip().splitlines() or [""])[0]
            error = f"{type(exc).__name__}: {first}"[:300]
        seconds = time.perf_counter() - start
        self.probe_seconds += seconds
        m = combine(summaries) if summaries is not None else None
        if m is not None and not m["batches"] and error is None:
            error = "no training step could be measured"
        trial = self._add_trial(plan, cores, m, seconds, chosen_by, predicted, error)
        return trial, m, finished, value

    def _warmup(self) -> int:
        """Warm-up steps of a probe: at least `warmup_batches`, and at least what the default
        run needed to settle (one-off costs of the first steps: sampler set-up, layer-rewrite
        probing, ...), less the default's own sampler prefetch allowance."""
        observed = 0
        trials = self.report.trials
        if trials and trials[0]["chosen_by"] == "default":
            s = trials[0]["config"]["sampler_cores"]
            observed = trials[0]["warmup_batches"] - 2 * s
        return max(self.cfg.warmup_batches, observed)

    def _tune(self) -> CorePlan:
        from .tuner import Tuner

        cfg = self.cfg
        default = self.report.trials[0]
        self.tuner = Tuner(self.space, budget=cfg.budget, n_initial_points=cfg.n_initial_points,
                           estimator=cfg.estimator, acq_func=cfg.acq_func, seed=cfg.seed,
                           min_gain=cfg.min_gain, patience=cfg.patience)
        self.report.data["tuner"]["n_initial_points_used"] = self.tuner.n_initial
        self.tuner.observe(default["config"], default["throughput"], "default")
        bar = self._bar(total=min(cfg.budget, self.space.size or cfg.budget),
                        desc="gnnorch tuning", unit="probe")
        bar.update(1)
        self._save()
        while True:
            if cfg.max_seconds is not None and time.perf_counter() - self.start > cfg.max_seconds:
                self.report.data["stop_reason"] = f"time limit of {cfg.max_seconds:g} s reached"
                break
            suggestion = self.tuner.suggest()
            if suggestion is None:
                self.report.data["stop_reason"] = self.tuner.stop_reason
                break
            plan = SearchSpace.plan(suggestion.point)
            trial, _, _, _ = self._probe(plan, suggestion.chosen_by, suggestion.predicted)
            self.tuner.observe(suggestion.point, trial["throughput"], suggestion.chosen_by,
                               suggestion.predicted)
            self.tuning_seconds = time.perf_counter() - self.start
            self._save()
            bar.update(1)
            best = self.report.best
            bar.set_postfix_str(f"best {SearchSpace.plan(best['config'])} "
                                f"{best['throughput']:,.0f} seeds/s")
        self._confirm(bar)
        bar.close()
        self.tuning_seconds = time.perf_counter() - self.start
        best = self.report.best
        d = self.report.data
        if self.verbose:
            speed = d["speedup_over_default"]
            print(f"gnnorch: tuned in {self.tuning_seconds:.1f} s ({len(d['trials'])} probes; "
                  f"{d['stop_reason']}): {SearchSpace.plan(best['config'])} at "
                  f"{best['throughput']:,.0f} seeds/s"
                  + (f", {speed:.2f}x the default" if speed else ""), file=self.err, flush=True)
        self._save()
        return SearchSpace.plan(best["config"])

    def _confirm(self, bar: Any) -> None:
        """Race the finalists: every plan whose best probe is within `confirm_margin` of the
        best probe (at most `confirm_finalists`, best first) is probed once more, and the plan
        with the highest mean throughput over all its probes becomes `best`. A single probe's
        noise (±10-20 % measured on a 16-core VM) is as large as the gaps between the top plans,
        so the maximum of single probes is biased towards a lucky one."""
        cfg, d = self.cfg, self.report.data
        if cfg.confirm_margin <= 0 or cfg.confirm_finalists < 2:
            return
        seen: dict[tuple, tuple[dict, list[float]]] = {}
        for t in d["trials"]:
            if t["throughput"]:
                seen.setdefault(_key(t["config"]), (t["config"], []))[1].append(t["throughput"])
        if not seen:
            return
        top = max(max(v) for _, v in seen.values())
        ranked = sorted(seen.items(), key=lambda kv: max(kv[1][1]), reverse=True)
        finalists = [k for k, (_, v) in ranked
                     if max(v) >= (1 - cfg.confirm_margin) * top][:cfg.confirm_finalists]
        if len(finalists) < 2:
            return
        bar.total = (bar.total or 0) + len(finalists)
        for key in finalists:
            if cfg.max_seconds is not None and time.perf_counter() - self.start > cfg.max_seconds:
                break
            trial, _, _, _ = self._probe(SearchSpace.plan(seen[key][0]), "confirm")
            if trial["throughput"]:
                seen[key][1].append(trial["throughput"])
            self.tuning_seconds = time.perf_counter() - self.start
            self._save()
            bar.update(1)
        means = {k: sum(seen[k][1]) / len(seen[k][1]) for k in finalists}
        chosen = max(finalists, key=lambda k: means[k])
        last = max(t["index"] for t in d["trials"]
                   if _key(t["config"]) == chosen and t["throughput"])
        d["best"] = {"config": seen[chosen][0], "throughput": means[chosen], "trial": last}
        d["confirmation"] = {
            "margin": cfg.confirm_margin, "chosen": seen[chosen][0],
            "finalists": [{"config": seen[k][0], "throughputs": seen[k][1], "mean": means[k]}
                          for k in finalists]}
        if _key(d["default"]["config"]) in seen:
            probes = seen[_key(d["default"]["config"])][1]
            d["speedup_over_default"] = means[chosen] / (sum(probes) / len(probes))

    # ------------------------------------------------------------------ step 3: the run
    def _bar(self, quiet: bool = False, **kwargs: Any) -> Any:
        from tqdm import tqdm

        return tqdm(file=self.err, disable=quiet or not self.verbose, dynamic_ncols=True,
                    **kwargs)

    def _begin_real(self, plan: CorePlan, cores: list[RankCores] | None) -> None:
        # untuned, the default's measurement was part of the real run: only probes cost
        self.tuning_seconds = (time.perf_counter() - self.start if self.report.tuned
                               else self.probe_seconds)
        d = self.report.data
        d["status"] = "training"
        d["run"] = {"config": _point(plan), "cores": [c.to_dict() for c in cores] if cores
                    else None, "epochs": [], "wall_seconds": None}
        self._save()

    def _on_epochs(self, records: list[dict], world: int, only_if_running: bool = False) -> None:
        d = self.report.data
        if d["run"] is None or (only_if_running and d["status"] != "training"):
            return
        d["run"]["epochs"] = [dict(r, throughput=(r["seeds"] * world / r["seconds"]
                                                  if r["seconds"] > 0 else None))
                              for r in records]
        self._save()
        if self.epoch_bar is not None:
            self.epoch_bar.n = len(records)
            self.epoch_bar.refresh()

    def _finish_real(self, plan: CorePlan, cores: list[RankCores] | None,
                     summaries: dict[int, dict], wall: float, log_dir: Path | None) -> None:
        from ..runtime import RunInfo

        d = self.report.data
        if d["run"] is None:
            self._begin_real(plan, cores)
        for summary in summaries.values():          # the default run's meter is not a stat
            summary.get("stats", {}).pop("probe", None)
        merged = []
        first = summaries.get(0, {}).get("epochs", [])
        for i, rec in enumerate(first):
            seeds = sum(s["epochs"][i]["seeds"] for s in summaries.values()
                        if i < len(s.get("epochs", [])))
            secs = max(s["epochs"][i]["seconds"] for s in summaries.values()
                       if i < len(s.get("epochs", [])))
            merged.append(dict(rec, seeds=seeds, seconds=secs,
                               throughput=seeds / secs if secs > 0 else None))
        d["run"]["epochs"] = merged
        d["run"]["wall_seconds"] = wall
        d["status"] = "done"
        self._save()
        self.rt.last_run = RunInfo.from_summaries(plan, cores, self.rt.device, log_dir, wall,
                                                  self.rt.features, summaries)

    def _fail(self) -> None:
        self.report.data["status"] = "failed"
        self._save()

    def _real_run(self, plan: CorePlan) -> Any:
        rt = self.rt
        cores = assign_cores(plan, self.topology) if rt.options.bind else None
        self._begin_real(plan, cores)
        epochs, source = self._epochs_hint()
        self.epoch_bar = self._bar(total=None if source.startswith("assumed") else epochs,
                                   desc="gnnorch training", unit="epoch",
                                   quiet=not self.report.tuned)
        try:
            if plan.processes == 1:
                def prepare(ctx: Any) -> None:
                    ctx.epochs = EpochFeed(lambda records: self._on_epochs(records, 1))

                value, summary, wall = run_in_process(rt.train, self.args, self.kwargs, plan,
                                                      _first(cores), self.seed, rt.features,
                                                      prepare=prepare)
                self._finish_real(plan, cores, {0: summary}, wall, None)
                return value
            log_dir = Path(rt.options.log_dir) if rt.options.log_dir is not None else Path(
                tempfile.mkdtemp(prefix="gnnorch-"))
            feed = log_dir / "epochs.json"
            spec = LaunchSpec(plan=plan, cores=cores, seed=self.seed, log_dir=log_dir,
                              backend="gloo", start_timeout=rt.options.start_timeout,
                              collective_timeout=rt.options.collective_timeout,
                              features=rt.features, epoch_feed=str(feed))
            stop = threading.Event()
            poller = threading.Thread(target=self._poll_feed, args=(feed, plan.processes, stop),
                                      daemon=True)
            poller.start()
            try:
                result = RankGroup(spec).run(rt.train, self.args, self.kwargs)
            finally:
                stop.set()
                poller.join(timeout=2)
            self._finish_real(plan, cores, result.summaries, result.wall_seconds, log_dir)
            return result.value
        except BaseException:
            self._fail()
            raise
        finally:
            self.epoch_bar.close()
            self.epoch_bar = None

    def _poll_feed(self, path: Path, world: int, stop: threading.Event) -> None:
        last = None
        while not stop.wait(0.5):
            try:
                stamp = os.stat(path).st_mtime_ns
                if stamp == last:
                    continue
                records = json.loads(path.read_text())["epochs"]
                last = stamp
            except (OSError, ValueError, KeyError, TypeError):
                continue
            self._on_epochs(records, world)
