"""Exact re-ordering rules, one module per PyG layer type.

``sage`` (transform-first SAGEConv, sum/mean), ``gcn`` (aggregate-first GCNConv), ``gin``
(transform-first GINConv through the first Linear of ``nn``), ``gat`` (aggregate-first
single-head GATConv); ``base`` holds the interface and the exactness checks.
"""
from __future__ import annotations

from torch.nn import Module

from .base import Call, Rule
from .gat import GATRule
from .gcn import GCNRule
from .gin import GINRule
from .sage import SAGERule

__all__ = ["Call", "Rule", "RULES", "rule_for", "GATRule", "GCNRule", "GINRule", "SAGERule"]

#: One rule per supported PyG layer class (matched on the exact class).
RULES: tuple[Rule, ...] = (SAGERule(), GCNRule(), GINRule(), GATRule())


def rule_for(layer: Module) -> Rule | str:
    """The rule that may rewrite ``layer``, or why none does.

    The lookup is by exact class (a subclass gets a reason); the returned rule's
    :meth:`~Rule.applicable` still decides on the layer's configuration.
    """
    for rule in RULES:
        if type(layer) is rule.layer_type:
            return rule
    for rule in RULES:
        if isinstance(layer, rule.layer_type):
            return (f"{type(layer).__name__} subclasses {rule.layer_type.__name__}: not "
                    "rewritten (it may override forward or message)")
    return f"no rewrite rule for {type(layer).__name__} (left as it is)"
