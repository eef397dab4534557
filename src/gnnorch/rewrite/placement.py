"""Where a layer call whose input rows are deferred on the host takes its transform.

A call whose ``x`` is a :class:`~gnnorch.rewrite.host.DeferredFeatures` (features in host
memory, model on a GPU) may multiply by its weight on the host and copy the narrower product
(DAHA's pre-transformation), or copy the full-width rows and run PyG's call on the device.
Which is faster depends on the CPU's matmul speed against the copy bandwidth and the device,
so :class:`HostTransformChoice` times both placements on the first calls of each (layer,
bucket) -- forward and backward, the device side including the copy, on freshly copied rows,
with the layer's buffers restored -- and :class:`PlacementPlanner` keeps the faster median,
the host only by more than ``margin``. A host transform whose output differs from PyG's call
is switched off for that layer, with a ``RuntimeWarning`` and the reason in the report.
"""
from __future__ import annotations

import statistics
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import Module

from .entries import LayerEntry, decision_key
from .host import DEVICE, HOST, materialised
from .probing import buffers_restored, outputs_differ, time_alternating
from .rules.base import Call
from .shapes import LayerShape

__all__ = ["PlacementState", "PlacementPlanner", "HostTransformChoice"]


@dataclass
class PlacementState:
    """Measured forward(+backward) seconds of one (layer, bucket) on each placement."""

    probes: int = 0
    calls: int = 0
    host_calls: int = 0
    measured: dict[str, deque] = field(
        default_factory=lambda: {HOST: deque(maxlen=8), DEVICE: deque(maxlen=8)})
    choice: str = DEVICE

    def median(self, where: str) -> float | None:
        samples = self.measured[where]
        return statistics.median(samples) if samples else None

    def as_dict(self) -> dict[str, Any]:
        host, device = self.median(HOST), self.median(DEVICE)
        return {"calls": self.calls, "host_calls": self.host_calls, "probes": self.probes,
                "choice": self.choice, "measured_s": {HOST: host, DEVICE: device},
                "speedup_measured": device / host if host and device else None}


@dataclass
class PlacementPlanner:
    """Host or device transform, per (layer, bucket): the first ``probes_per_bucket`` calls
    time both (the device side including the copy of the full-width rows); then the faster
    median wins, the host only by more than ``margin``."""

    probes_per_bucket: int = 2
    margin: float = 0.03
    buckets: dict[tuple, PlacementState] = field(default_factory=dict)

    def state(self, key: tuple) -> PlacementState:
        if key not in self.buckets:
            self.buckets[key] = PlacementState()
        return self.buckets[key]

    def needs_probe(self, state: PlacementState) -> bool:
        return state.probes < self.probes_per_bucket

    def export(self) -> list[dict]:
        """Measured buckets as JSON rows (see :meth:`load`)."""
        return [{"key": key[0], "bucket": list(key[1]),
                 "measured": {w: list(st.measured[w]) for w in (HOST, DEVICE)}}
                for key, st in self.buckets.items() if st.probes > 0]

    def load(self, rows: list[dict]) -> int:
        """Adopt buckets measured by another process of this machine; returns how many."""
        adopted = 0
        for row in rows:
            key = (row["key"], tuple(row["bucket"]))
            if key in self.buckets:
                continue
            state = self.state(key)
            for w in (HOST, DEVICE):
                state.measured[w].extend(float(v) for v in row["measured"][w])
            state.probes = self.probes_per_bucket
            state.choice = self._choice(state)
            adopted += 1
        return adopted

    def _choice(self, state: PlacementState) -> str:
        return (HOST if state.median(HOST) < (1.0 - self.margin) * state.median(DEVICE)
                else DEVICE)

    def record(self, state: PlacementState, host: float, device: float) -> None:
        state.measured[HOST].append(host)
        state.measured[DEVICE].append(device)
        state.probes += 1
        state.choice = self._choice(state)


class HostTransformChoice:
    """Decides, per call with deferred input rows, whether it takes its transform on the host.

    ``placements``: the decision table (shared between the engines of one process);
    ``enabled``: False answers "device" for every call; ``repeats``: timings per placement in
    one probe. ``overhead_s``: seconds spent probing rather than training.
    """

    def __init__(self, placements: PlacementPlanner, enabled: bool, repeats: int) -> None:
        self.placements, self.enabled, self.repeats = placements, enabled, repeats
        self.overhead_s = 0.0

    def on_host(self, entry: LayerEntry, layer: Module, original_forward: Callable[..., Any],
                args: tuple, kwargs: dict, call: Call, shape: LayerShape,
                device: torch.device, apply: bool) -> bool:
        """Whether this call takes its transform on the host (measured per bucket; only when
        ``apply``: the engine's ``"report"`` mode measures and reports but never moves it);
        False sends it to the device path."""
        reason = (None if self.enabled else "host transform is off") \
            or entry.host_broken or entry.rule.host_reason(layer, call)
        if reason is not None:
            entry.host_reason = reason
            return False
        state = self.placements.state((decision_key(entry, device), shape.bucket()))
        state.calls += 1
        if self.placements.needs_probe(state):
            self._probe(entry, layer, original_forward, args, kwargs, call, shape, state,
                        device)
        if apply and state.choice == HOST and entry.host_broken is None:
            state.host_calls += 1
            return True
        return False

    def _probe(self, entry: LayerEntry, layer: Module, original_forward: Callable[..., Any],
               args: tuple, kwargs: dict, call: Call, shape: LayerShape,
               state: PlacementState, device: torch.device) -> None:
        """Time the host transform against PyG's call on freshly copied rows, fwd(+bwd)."""
        rule = entry.rule
        start = time.perf_counter()
        wrt = [p for p in entry.params if p.requires_grad]
        runs: dict[str, Callable[[], Any]] = {
            HOST: lambda: rule.forward_host(layer, call),
            DEVICE: lambda: original_forward(*materialised(args, fresh=True),
                                             **materialised(kwargs, fresh=True)),
        }
        with buffers_restored(layer):
            times, outputs = time_alternating(runs, wrt, shape.backward, device, self.repeats)
        mismatch = outputs_differ(outputs[DEVICE], outputs[HOST])
        if mismatch is not None:
            entry.host_broken = f"host transform disabled: its output differs ({mismatch})"
            warnings.warn(f"gnnorch: {entry.name}: {entry.host_broken}", RuntimeWarning,
                          stacklevel=4)
        self.placements.record(state, min(times[HOST]), min(times[DEVICE]))
        entry.probe_s += time.perf_counter() - start
        self.overhead_s += time.perf_counter() - start
