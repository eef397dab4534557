"""Per-layer bookkeeping of the rewrite engine and the keys its decision tables use.

A layer's *signature* is what its cost depends on besides the call's shape; layers with equal
signatures share measured decisions (across the runs of one process, and on disk).
"""
from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.nn import Module

from .rules import Rule

__all__ = ["LayerEntry", "signature", "decision_key", "of_entry", "model_key", "device_key"]


@dataclass
class LayerEntry:
    """Per-layer bookkeeping (the layer itself is only weakly referenced)."""

    ref: weakref.ref
    index: int
    signature: str
    name: str
    type_name: str
    rule: Rule | None
    reason: str | None
    params: tuple[torch.nn.Parameter, ...] = ()
    static_ok: bool = False
    never_pays: str | None = None   # `Rule.never_pays`, read when static_ok is first set
    broken: str | None = None
    host_broken: str | None = None
    host_reason: str | None = None
    calls: int = 0
    rewritten_calls: int = 0
    probe_s: float = 0.0
    reasons: Counter = field(default_factory=Counter)
    keys: dict[str, str] = field(default_factory=dict)   # decision_key by device type


def signature(layer: Module) -> str:
    """What a layer's cost depends on besides the call's shape: its class, its printed form
    (widths, aggregation, sub-modules) and its plain configuration attributes. Layers with
    equal signatures share measured decisions (also across runs of one process)."""
    config = sorted((k, v) for k, v in vars(layer).items()
                    if not k.startswith("_") and k != "training"
                    and isinstance(v, (bool, int, float, str)))
    return f"{type(layer).__qualname__}|{layer!r}|{config}"


def decision_key(entry: LayerEntry, device: torch.device) -> str:
    """The planners' key of one layer on one device type. Thread counts are left out: which
    order (or placement) is faster barely depends on them, and leaving them out lets a
    decision measured with t threads serve a probe or rank with other t. Kept on the entry:
    the signature is long, and a new string would be hashed again at every call."""
    key = entry.keys.get(device.type)
    if key is None:
        key = entry.keys[device.type] = f"{entry.signature}|{device.type}"
    return key


def of_entry(layer_key: str, entry: LayerEntry) -> bool:
    return layer_key.startswith(entry.signature + "|")


def model_key(entry: LayerEntry, order: str) -> str:
    """The cost model's key for one layer's order (its learnt correction ratio)."""
    return f"{entry.type_name}#{entry.index}:{order}"


def device_key(device: torch.device) -> str:
    if device.type == "cpu":
        return f"cpu:{torch.get_num_threads()}t"
    return str(device)
