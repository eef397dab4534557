"""The rewrite engine's report: per layer its rule or the reasons it was left alone, per
bucket predicted vs measured times and the choice; per device the cost model.

``mape_prequential``: every probe's time against the prediction made just before it
(held-out by construction); ``mape_prequential_warm``: the same without each bucket's first
probe, i.e. once the model has seen the layer at that size.
"""
from __future__ import annotations

from typing import Any

from .costmodel import CostModel
from .entries import LayerEntry, of_entry
from .placement import PlacementPlanner
from .planner import Planner

__all__ = ["engine_report"]


def engine_report(mode: Any, entries: list[LayerEntry], planner: Planner,
                  placements: PlacementPlanner, models: dict[str, CostModel]) -> dict[str, Any]:
    """JSON-serialisable report of one engine (see the module docstring)."""
    layers = []
    for entry in entries:
        buckets = [state.as_dict() for (layer_key, _), state in planner.buckets.items()
                   if of_entry(layer_key, entry)]
        layers.append({
            "name": entry.name,
            "type": entry.type_name,
            "original_order": entry.rule.original_order if entry.rule else None,
            "rewritten_order": entry.rule.rewritten_order if entry.rule else None,
            "calls": entry.calls,
            "rewritten_calls": entry.rewritten_calls,
            "probe_s": entry.probe_s,
            "left_alone": dict(entry.reasons),
            "buckets": buckets,
            "host_transform": {
                "reason_not": entry.host_broken or entry.host_reason,
                "buckets": [st.as_dict() for (layer_key, _), st
                            in placements.buckets.items()
                            if of_entry(layer_key, entry)],
            },
        })
    states = planner.buckets.values()
    pairs = [pair for state in states for pair in state.errors]
    warm = [pair for state in states for pair in state.errors[2:]]  # after a first probe
    return {
        "mode": mode,
        "mape_prequential": CostModel.mape_of(pairs),
        "mape_prequential_warm": CostModel.mape_of(warm),
        "cost_models": {key: model.summary() for key, model in models.items()},
        "layers": layers,
    }
