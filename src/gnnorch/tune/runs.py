"""The runs the tuner makes of the user's function besides the real one, through
`gnnorch.execute` with the tuner's hooks: a probe (`run_probe`), and the default plan run in
the caller's process as the real run until it is known whether tuning pays (`DefaultRun`).
"""
from __future__ import annotations

import dataclasses
import gc
import threading
import time
from typing import Any, Callable

from .. import execute
from ..execute import Hook, Mute, OutputCapture, Request, RunInfo
from ..launch.plan import CorePlan
from .arguments import Fingerprint, listed
from .config import TuneConfig
from .decide import CONVERGE
from .probe import (PROBE_STAT, EpochFeed, ProbeEnd, ProbeHook, ProbeMeter, RngState,
                    combine_stats, warmup_for)


@dataclasses.dataclass
class ProbeOutcome:
    """One probe: wall seconds (start-up included), what the run did (None when it raised),
    its measurement (`probe.combine`), its value when the function ended on its own, and the
    error (a one-line text and the exception) when it raised or measured nothing."""

    seconds: float
    info: RunInfo | None = None
    m: dict | None = None
    value: Any = None
    error: str | None = None
    exception: BaseException | None = None

    @property
    def finished(self) -> bool:
        """The function ran to its end within the probe (that run is a complete run)."""
        return self.error is None and self.m is not None and not self.m["complete"]


def run_probe(request: Request, plan: CorePlan, warmup: int, batches: int) -> ProbeOutcome:
    """Measure `plan`: the user's function, muted, ended after `warmup` + `batches` measured
    steps; the caller's random states are restored afterwards. A probe that raises is an
    outcome, not an error."""
    start = time.perf_counter()
    rng = RngState()
    outcome = ProbeOutcome(seconds=0.0)
    try:
        outcome.value, outcome.info = execute.run(plan, request,
                                                  [ProbeHook(warmup, batches), Mute()])
        outcome.m = combine_stats(outcome.info.stats)
    except Exception as exc:  # noqa: BLE001 - a failed probe is recorded, not fatal
        outcome.exception = exc
        first = (str(exc).strip().splitlines() or [""])[0]
        outcome.error = f"{type(exc).__name__}: {first}"[:300]
    finally:
        rng.restore()
        gc.collect()
    outcome.seconds = time.perf_counter() - start
    if outcome.m is not None and not outcome.m["batches"] and outcome.error is None:
        outcome.error = "no training step could be measured"
    return outcome


def changed_reason(changed: list[str], steps: int) -> str:
    """The report's reason for a run left untuned because its arguments changed."""
    return (f"the function changed its arguments in place within its first {steps} "
            f"training steps ({listed(changed)}): the tuner's probes and tuned run would start from "
            f"the changed arguments, so this run went on as the real run, untuned with the "
            f"default configuration (to tune, leave the arguments unchanged: build the model "
            f"inside the function, or change a copy of data)")


class DefaultRun(Hook):
    """The default plan, run in the caller's process as the real run until a `ProbeMeter`
    has measured its steps (until they settle: `CONVERGE`), with its output held back.

    Then `decide(m)` says whether tuning pays. If it does, the meter ends the function
    (`ProbeEnd`): its output is discarded, the caller's random states restored, and its
    measurement becomes the default's trial. If it does not, the run just goes on as the real
    run: held output is released, nothing is lost or repeated. If no training loader exists
    `setup_seconds` after the start, or the function ends before the meter is done, that run
    is the run, untuned. So it is, too, when the function has changed the arguments it shares
    with the caller (`arguments.Fingerprint`): later runs would start from changed arguments.

    `ledger` is the tuned call's report keeper (`gnnorch.tune.driver.Ledger`): the run starts
    there (``begin_run``) when it turns out to be the real one, and feeds it its epochs.
    """

    def __init__(self, decide: Callable[[dict], bool], ledger: Any, request: Request,
                 plan: CorePlan, cfg: TuneConfig, arguments: Fingerprint) -> None:
        self.decide, self.ledger, self.arguments = decide, ledger, arguments
        self.request, self.plan, self.cfg = request, plan, cfg
        self.cores = request.cores(plan)
        self.capture = OutputCapture()
        self.ctx: Any = None
        self.meter: ProbeMeter | None = None
        self.verdict: bool | str | None = None   # True / False: decided; "ended": run ended
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.ended_by_probe = False

    # -- hook -----------------------------------------------------------------------------
    def prepare(self, ctx: Any) -> None:
        self.ctx = ctx
        self.meter = ProbeMeter(warmup_for(self.cfg.warmup_batches, self.plan.sampler_cores),
                                self.cfg.probe_batches, self._on_budget,
                                stats=ctx.stats.setdefault(PROBE_STAT, {}), converge=CONVERGE)
        ctx.batch_callbacks.append(self.meter)
        ctx.epochs = EpochFeed(lambda records: self.ledger.on_epochs(records, 1,
                                                                      only_if_running=True))

    def finish(self, ctx: Any, exc: BaseException | None) -> bool:
        self.ended_by_probe = isinstance(exc, ProbeEnd)
        return self.ended_by_probe

    # -- the run --------------------------------------------------------------------------
    def run(self) -> tuple[bool, Any, RunInfo | None, float]:
        """(finished, value, info, seconds): finished means this run was the real run."""
        rng = RngState()
        start = time.perf_counter()
        self.capture.__enter__()
        self._arm()
        try:
            value, info = execute.run(self.plan, self.request, [self])
        except BaseException:
            self.capture.release()
            raise
        finally:
            with self.lock:
                self.verdict = self.verdict if self.verdict is not None else "ended"
                if self.timer is not None:
                    self.timer.cancel()
        elapsed = time.perf_counter() - start
        if self.ended_by_probe:                       # tuning pays: this was a probe
            self.capture.discard()
            rng.restore()
            gc.collect()
            return False, None, info, time.perf_counter() - start
        self.capture.release()
        return True, value, info, elapsed

    def _on_budget(self, meter: ProbeMeter) -> None:
        with self.lock:
            if self.verdict is not None:              # the set-up timer decided already
                meter.active = False
                return
            self.verdict = self.decide(meter.summary())
            if self.verdict:
                changed = self.changed_arguments()
                if changed:
                    self.verdict = False
                    self.ledger.untuned(changed_reason(changed, meter.steps))
        if self.verdict:
            raise ProbeEnd()
        meter.active = False
        self.capture.release()
        self.ledger.begin_run(self.plan, self.cores)
        self.ledger.on_epochs([r.to_dict() for r in self.ctx.epochs], 1)

    def changed_arguments(self) -> list[str]:
        """What the function changed so far in the arguments it shares with the caller."""
        return self.arguments.changes(Fingerprint.of(self.request.args, self.request.kwargs))

    def _arm(self) -> None:
        self.timer = threading.Timer(self.cfg.setup_seconds, self._setup_timeout)
        self.timer.daemon = True
        self.timer.start()

    def _setup_timeout(self) -> None:
        with self.lock:
            meter, ctx = self.meter, self.ctx
            if self.verdict is not None or (meter is not None and meter.steps > 0):
                return
            if ctx is not None and ctx.loaders_built > 0:
                # a training loader exists: a slow first step (one-off set-up of the sampler,
                # layer rewrites, ...) is still a step to come; keep waiting
                self._arm()
                return
            self.verdict = False
            if meter is not None:
                meter.active = False
        self.ledger.untuned(f"no training NeighborLoader built within "
                           f"{self.cfg.setup_seconds:g} s of the start: ran untuned with the "
                           f"default configuration")
        self.capture.release()
        self.ledger.begin_run(self.plan, self.cores)
