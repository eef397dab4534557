"""The rewrite engine: the one object the layer seam calls for every layer call.

``engine.forward(layer, original_forward, args, kwargs)`` returns what
``original_forward(*args, **kwargs)`` returns (same values up to rounding, same gradients
for inputs and parameters), running either PyG's order or the exact rewritten one:

1. ``rule_for(layer)`` / ``rule.static_reason`` / ``rule.bind`` -- or the call goes to PyG,
   with the reason counted for the report. A layer whose rewrite does at least as much work
   at every shape, by its widths (``rule.never_pays``, e.g. a GIN whose first Linear widens),
   goes to PyG at once, unbound;
2. the call's :class:`~gnnorch.rewrite.shapes.LayerShape` picks a bucket. A bucket where the
   rewrite does at least as much work of every kind (``costmodel.dominated``) runs PyG's order
   at once; any other call must pass ``rule.dynamic_reason`` (hooks, explain mode, autocast)
   or goes to PyG with the reason counted (so the report's reasons count the calls that
   could have been rewritten). The
   :class:`~gnnorch.rewrite.planner.Planner` chooses an order from measurements, and
   before a bucket is measured: the rewrite where it does at most as much work of every
   kind and less of one (``costmodel.dominates``), else the cost model's prediction
   (``model_decides``) or PyG's order (the runtime);
3. calls of a bucket (once it has run the planner's ``probe_after`` calls, and every
   ``reprobe_every``-th) are *probed*: both orders
   run forward + backward on detached copies of the inputs, via ``torch.autograd.grad``
   (no ``.grad`` is touched), each run inside ``torch.random.fork_rng`` (both orders draw
   the same dropout masks; the user's random stream is untouched) and with the layer's
   buffers restored afterwards (BatchNorm statistics are untouched). Each time is first
   predicted, then fed to the cost model (online refinement, prequential error);
4. every probe also compares the two orders' outputs: should a rewrite ever disagree with
   PyG (e.g. under a PyG version whose layer code changed), the layer is left to PyG
   from then on, with a ``RuntimeWarning`` and the reason in the report.

5. a call whose input rows are still on the host (:mod:`gnnorch.rewrite.host`: features in
   host memory, model on a GPU) may take its transform on the host and copy the narrower
   product (DAHA's pre-transformation); the first calls of each bucket time both placements
   (the device side including the copy of the full-width rows), and the faster one is kept.

Modes: ``True`` rewrites where it pays, ``"report"`` decides and reports but always runs
PyG's order, ``False`` passes every call straight through.
"""
from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import Module

from .calibrate import calibrate
from .costmodel import CostModel, dominated, dominates
from .host import deferred_input, materialised
from .planner import ORIGINAL, REWRITTEN, BucketState, Planner
from .rules import Rule, rule_for
from .rules.base import Call
from .entries import LayerEntry, decision_key, device_key, model_key, signature
from .placement import HostTransformChoice, PlacementPlanner
from .probing import outputs_differ, time_orders
from .report import engine_report
from .shapes import LayerShape

__all__ = ["RewriteEngine", "VALID_MODES"]

VALID_MODES = (True, False, "report")


class RewriteEngine:
    """Chooses, per layer and shape bucket, PyG's order or the exact rewritten one.

    ``mode``: True, False or ``"report"``. ``device``: device whose cost model is
    calibrated up front (default: each layer's parameter device, calibrated lazily on
    first use). ``calibration_s``: wall-clock budget of the start-up micro-benchmarks per
    device. ``probes_per_bucket`` / ``reprobe_every`` / ``margin``: see
    :class:`~gnnorch.rewrite.planner.Planner`. ``repeats``: timings per order in one probe
    (the minimum is kept). ``cost_models``: a dict of fitted models shared between the engines
    of one process (the runtime passes one, so calibration happens once per process).
    ``host_transform``: let calls whose input rows are deferred on the host take their
    transform there when measured faster (:mod:`gnnorch.rewrite.host`). ``planner`` /
    ``placements``: decision tables shared between the engines of one process (the runtime
    passes them: a bucket measured in one run, e.g. the tuner's default run, is not probed
    again by the next); layers share a decision when their signatures match.
    ``model_decides``: unmeasured buckets are decided by the cost model's prediction, the
    model being calibrated on first use (``calibration_s``); False (the runtime): they keep
    PyG's order until measured, and the model is fitted online from probes only, with no
    start-up calibration (which costs seconds and decides nothing a probe does not).
    """

    def __init__(self, mode: bool | str = True, device: torch.device | str | None = None,
                 calibration_s: float = 2.0, probes_per_bucket: int = 2,
                 reprobe_every: int = 1000, margin: float = 0.03, repeats: int = 2,
                 cost_models: dict[str, CostModel] | None = None,
                 host_transform: bool = True, planner: Planner | None = None,
                 placements: PlacementPlanner | None = None, model_decides: bool = True):
        if mode not in VALID_MODES or isinstance(mode, int) and not isinstance(mode, bool):
            raise ValueError(f"rewrite mode must be True, False or 'report', got {mode!r}")
        if repeats < 1 or probes_per_bucket < 0 or calibration_s < 0:
            raise ValueError("repeats must be >= 1, probes_per_bucket and calibration_s >= 0")
        self.mode = mode
        self.calibration_s = calibration_s
        self.repeats = repeats
        self.model_decides = model_decides
        # decisions: shared with other engines of the process when given (see _signature)
        self.planner = planner if planner is not None else Planner(
            probes_per_bucket=probes_per_bucket, reprobe_every=reprobe_every, margin=margin)
        self.placements = placements if placements is not None else PlacementPlanner(
            probes_per_bucket=max(1, probes_per_bucket), margin=margin)
        self.host_choice = HostTransformChoice(self.placements, host_transform, repeats)
        # shared with other engines of the process when given: calibrated once, refined by all
        self._models: dict[str, CostModel] = {} if cost_models is None else cost_models
        # seconds spent measuring orders rather than training (probes, calibration)
        self._measuring_s = 0.0
        self._entries: list[LayerEntry] = []
        self._by_id: dict[int, LayerEntry] = {}
        self._names: dict[int, str] = {}
        if device is not None and mode is not False:
            self.cost_model(torch.device(device))

    # ------------------------------------------------------------------ public API
    @property
    def overhead_s(self) -> float:
        """Seconds spent measuring rather than training (probes of orders and placements,
        calibration): a step's time less this is what the step costs once decisions are made
        (the tuner's probes use it)."""
        return self._measuring_s + self.host_choice.overhead_s

    def forward(self, layer: Module, original_forward: Callable[..., Any], args: tuple,
                kwargs: dict) -> Any:
        """Run one layer call in the chosen order; returns what ``original_forward`` would."""
        if self.mode is False:
            return original_forward(*args, **kwargs)
        entry = self._entry(layer)
        entry.calls += 1
        reason = self._static_reason(entry, layer)
        if (reason is None and entry.never_pays is not None
                and not deferred_input(args[0] if args else kwargs.get("x"))):
            entry.reasons[entry.never_pays] += 1    # PyG's order, nothing to decide
            return original_forward(*args, **kwargs)
        call = reason or entry.rule.bind(layer, args, kwargs)
        if isinstance(call, str):
            entry.reasons[call] += 1
            return original_forward(*args, **kwargs)
        rule = entry.rule
        params_grad = any(p.requires_grad for p in entry.params)
        shape = rule.shape(layer, call, params_grad)
        device = entry.params[0].device if entry.params else torch.device("cpu")
        deferred = deferred_input(call["x"])
        if not deferred:
            state = self._state(entry, layer, shape, device)
            if state.dominated:   # PyG's order whatever else holds: no admission needed
                self.planner.plan(state, None)
                return original_forward(*args, **kwargs)
        reason = rule.dynamic_reason(layer)
        if reason is not None:
            entry.reasons[reason] += 1
            return original_forward(*args, **kwargs)
        if deferred:
            if self.host_choice.on_host(entry, layer, original_forward, args, kwargs, call,
                                        shape, device, apply=self.mode is True):
                return rule.forward_host(layer, call)
            args, kwargs = materialised(args), materialised(kwargs)
            call = rule.bind(layer, args, kwargs)
            state = self._state(entry, layer, shape, device)
        predicted = None
        if self.model_decides and self.planner.needs_prediction(state):  # (calibrated lazily)
            model = self.cost_model(device)
            predicted = tuple(model.predict(rule.ops(layer, shape, rewritten),
                                            model_key(entry, order))
                              for order, rewritten in ((ORIGINAL, False), (REWRITTEN, True)))
        if self.planner.plan(state, predicted):
            self._probe(entry, layer, original_forward, args, kwargs, shape, state,
                        self.cost_model(device, calibrated=self.model_decides), device)
        # (a probe may just have changed the choice, or found the rewrite broken)
        if self.mode is True and state.rewrite and entry.broken is None:
            entry.rewritten_calls += 1
            return rule.forward(layer, call)
        return original_forward(*args, **kwargs)

    def _state(self, entry: LayerEntry, layer: Module, shape: LayerShape,
               device: torch.device) -> BucketState:
        """The planner's state of the call's bucket; on first sight, whether the rewrite does
        at least as much work of every kind there (``dominated``: never worth running), or at
        most as much and less of one (``dominates``: run before it is measured)."""
        state = self.planner.state(decision_key(entry, device), shape)
        if state.calls == 0 and state.probes == 0:
            rewritten, original = (entry.rule.ops(layer, shape, True),
                                   entry.rule.ops(layer, shape, False))
            state.dominated = dominated(rewritten, original)
            state.dominates = not state.dominated and dominates(rewritten, original)
        return state

    def register_names(self, model: Module, prefix: str = "") -> None:
        """Name the report's layers by their qualified names in ``model``."""
        for name, module in model.named_modules(prefix=prefix):
            self._names[id(module)] = name or type(module).__name__
            entry = self._by_id.get(id(module))
            if entry is not None and entry.ref() is module:
                entry.name = self._names[id(module)]

    def bucket_state(self, layer: Module, shape: LayerShape) -> BucketState | None:
        """The planner's state for ``layer`` at ``shape``'s bucket; None if never seen."""
        entry = self._by_id.get(id(layer))
        if entry is None or entry.ref() is not layer:
            return None
        device = entry.params[0].device if entry.params else torch.device("cpu")
        return self.planner.buckets.get((decision_key(entry, device), shape.bucket()))

    def predict(self, layer: Module, shape: LayerShape) -> dict[str, float]:
        """The cost model's fwd(+bwd) seconds of both orders of ``layer`` at ``shape``
        (with the layer's learnt ratios); the layer must have been seen by :meth:`forward`."""
        entry, model = self._seen(layer)
        return {order: model.predict(entry.rule.ops(layer, shape, order == REWRITTEN),
                                     model_key(entry, order)) for order in (ORIGINAL, REWRITTEN)}

    def observe(self, layer: Module, shape: LayerShape, seconds: dict[str, float]) -> None:
        """Feed measured fwd(+bwd) seconds per order of ``layer`` at ``shape`` to the cost
        model (online refinement from measurements taken outside :meth:`forward`)."""
        entry, model = self._seen(layer)
        for order, measured in seconds.items():
            model.observe(entry.rule.ops(layer, shape, order == REWRITTEN), measured,
                          key=model_key(entry, order))

    def cost_model(self, device: torch.device, calibrated: bool = True) -> CostModel:
        """The cost model of ``device`` at the current thread count (calibrated on first use,
        unless ``calibrated`` is False: then fitted from layer measurements only)."""
        key = device_key(device)
        model = self._models.setdefault(key, CostModel(device=key))
        if calibrated and self.calibration_s > 0 and not model.calibrated:
            start = time.perf_counter()
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                calibrate(model, device, budget_s=self.calibration_s)
            self._measuring_s += time.perf_counter() - start
        return model

    def report(self) -> dict[str, Any]:
        """JSON-serialisable report (:func:`gnnorch.rewrite.report.engine_report`)."""
        return engine_report(self.mode, self._entries, self.planner, self.placements,
                             self._models)

    # ------------------------------------------------------------------ internals
    def _entry(self, layer: Module) -> LayerEntry:
        entry = self._by_id.get(id(layer))
        if entry is None or entry.ref() is not layer:
            found = rule_for(layer)
            index = len(self._entries)
            entry = LayerEntry(ref=weakref.ref(layer), index=index, signature=signature(layer),
                                name=self._names.get(id(layer), f"{type(layer).__name__}#{index}"),
                                type_name=type(layer).__name__,
                                rule=found if isinstance(found, Rule) else None,
                                reason=found if isinstance(found, str) else None)
            self._by_id[id(layer)] = entry
            self._entries.append(entry)
        return entry

    def _seen(self, layer: Module) -> tuple[LayerEntry, CostModel]:
        """The entry and cost model of a layer :meth:`forward` has admitted at least once."""
        entry = self._by_id.get(id(layer))
        if entry is None or entry.ref() is not layer or not entry.static_ok:
            raise ValueError(f"{type(layer).__name__} has not been run through the engine "
                             "with a rewrite rule yet")
        device = entry.params[0].device if entry.params else torch.device("cpu")
        return entry, self.cost_model(device)

    def _static_reason(self, entry: LayerEntry, layer: Module) -> str | None:
        """Why no call of this layer can take the rewrite now, or None.

        The static part of the rule's check (class, aggregation, configuration, lazy
        parameters) is kept once it passes, with `Rule.never_pays`. Hooks, explain mode and
        autocast (``rule.dynamic_reason``) are checked at every call that might take the
        rewrite: all but those of a layer or bucket where it never pays (`forward`).
        """
        rule = entry.rule
        if rule is None:
            return entry.reason or "no rule"
        if entry.broken is not None:
            return entry.broken
        if not entry.static_ok:
            reason = rule.static_reason(layer)
            if reason is not None:
                return reason
            entry.static_ok = True
            entry.params = tuple(layer.parameters())
            entry.never_pays = rule.never_pays(layer)
        return None

    def _probe(self, entry: LayerEntry, layer: Module, original_forward: Callable[..., Any],
               args: tuple, kwargs: dict, shape: LayerShape, state: BucketState,
               model: CostModel, device: torch.device) -> None:
        """Time both orders fwd+bwd on detached inputs; feed model and planner."""
        rule = entry.rule
        start = time.perf_counter()
        times, outputs = time_orders(rule, layer, original_forward, args, kwargs, entry.params,
                                     shape.backward, device, self.repeats)
        mismatch = outputs_differ(outputs[ORIGINAL], outputs[REWRITTEN])
        if mismatch is not None:
            entry.broken = f"rewrite disabled: its output differs from PyG's ({mismatch})"
            warnings.warn(f"gnnorch: {entry.name}: {entry.broken}", RuntimeWarning, stacklevel=3)
        for order, rewritten in ((ORIGINAL, False), (REWRITTEN, True)):
            measured = min(times[order])
            predicted = model.observe(rule.ops(layer, shape, rewritten), measured,
                                      key=model_key(entry, order))
            self.planner.record(state, order, predicted, measured)
        self.planner.finish_probe(state)
        entry.probe_s += time.perf_counter() - start
        self._measuring_s += time.perf_counter() - start
