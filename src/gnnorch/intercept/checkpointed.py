"""Layer calls under activation checkpointing (``torch.utils.checkpoint``, e.g. PyG's
``DeepGCNLayer(ckpt_grad=True)``): the rule of the layer seam (`intercept.layers`).

The backward pass recomputes a checkpointed region and needs every saved tensor back with the
shape it had. So a layer call made under checkpointing runs past the seam (no hook, trimming or
rewrite) in the forward and in the recomputation alike, and its model is never trimmed
(`CHECKPOINTED`). Inside a trimmed forward, whose inputs may be compact, the call runs as
planned, and the problem has that forward redone untrimmed (`trim.state.forward_end`:
RECOMPUTE or REPLAY_RELEARN).
"""
from __future__ import annotations

from ..trim.hetero import SampledGraph
from ..trim.state import CHECKPOINTED, Mode, ModelState
from .chain import Trace

__all__ = ["runs_past_seam"]


def runs_past_seam(trace: Trace | None, batch: SampledGraph | None, in_forward: bool,
                   untraced: ModelState | None, args: tuple, kwargs: dict) -> bool:
    """Whether a layer call made under activation checkpointing runs past the seam (see the
    module docstring). `in_forward`: the call is inside a module call the seam saw enter;
    `untraced`: the state of a model entered under checkpointing, whose calls are counted."""
    edge_index = args[1] if len(args) > 1 else kwargs.get("edge_index")
    key = None if batch is None else batch.edge_key(
        edge_index, trace.counts if trace is not None else {})
    if key is None:
        return True
    if trace is None or not in_forward:  # checkpoint(model), or a layer's recomputation
        if untraced is not None:
            untraced.checkpointed_calls += 1
        return True
    trace.state.checkpointed_calls += 1
    trace.problem = trace.problem or CHECKPOINTED
    if trace.mode.untrimmed or trace.mode is Mode.CALIBRATE:
        trace.count(key)
        return True
    return False
