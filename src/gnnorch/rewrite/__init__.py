"""Exact re-ordering of linear transform and linear aggregation per GNN layer (DAHA, WiseGraph).

Modules: ``rules`` (one exact alternative order per PyG layer type, with the conditions
under which it is exact), ``shapes`` (the sizes of a layer call and their log2 buckets),
``costmodel`` (least-squares model of forward + backward time per operation and device),
``calibrate`` (bounded micro-benchmarks, on request), ``timing`` (side-effect-free fwd+bwd
timing), ``probing`` (both orders on the same inputs, compared), ``planner`` (per layer and
bucket: measure once it pays, then decide), ``entries`` (per-layer bookkeeping, decision
keys), ``engine`` (:class:`RewriteEngine`, what the layer seam's
``intercept.layer_calls`` calls below trimming), ``report``, ``host`` (the host transform),
``placement`` (whether a call with rows on the host takes its transform there, measured)
and ``decisions`` (the process-wide and on-disk decision tables).
"""
from .costmodel import CostModel, Op
from .engine import VALID_MODES, RewriteEngine
from .planner import Planner
from .rules import RULES, rule_for
from .shapes import LayerShape

__all__ = ["RewriteEngine", "VALID_MODES", "CostModel", "Op", "Planner", "RULES", "rule_for",
           "LayerShape"]
