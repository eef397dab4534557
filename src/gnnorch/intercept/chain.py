"""The vocabulary of the layer seam's hook chain, and the tracing test every seam starts with.

One layer call of a traced model on the batch's own edge_index runs down
    hooks[0] -> ... -> hooks[-1] -> trim -> rewrite -> the unpatched call
Each outer hook (`LayerHook`; today the historical-embedding cache) gets a `HookedCall` whose
`run()` proceeds down the chain and whose `unpatched` runs a layer past the seam.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Hashable, Iterator, Protocol

import torch
from torch import Tensor

from ..compat.torch import FX_TRACING
from ..trim.batch import BatchGraph
from ..trim.state import Mode, ModelState

__all__ = ["tracing", "LayerCall", "LayerHook", "HookedCall", "Trace", "entry_copy",
           "run_chain", "patched_call"]

_MODULE_CALL = torch.nn.Module.__call__

LayerCall = Callable[..., Any]


def tracing() -> bool:
    """Whether the current call is being traced (torch.compile / dynamo, torch.fx symbolic
    tracing, TorchScript) rather than run: the seams then step aside entirely, so compiled and
    traced programs see PyG's own modules (no graph breaks, fx records its call_module nodes).
    fx tracers (torch's, and PyG's own in `to_hetero`, which does not set torch's flag) patch
    `torch.nn.Module.__call__` while they trace: that is detected too."""
    if torch.compiler.is_compiling():
        return True
    # (FX_TRACING's reader, a C-level read of torch's flag, called directly: two Python frames
    # fewer than `is_fx_tracing()`, at every module call of a run)
    return (torch.nn.Module.__call__ is not _MODULE_CALL
            or FX_TRACING.get()() or torch.jit.is_scripting())


def entry_copy(args: tuple) -> tuple:
    """A model call's positional arguments with their dicts and lists copied (one level), so
    that a forward replacing an entry of one (``x_dict['user'] = self.user_emb(...)``, PyG's
    `bipartite_sage_unsup`) can be run again as it was entered: by the one-off check, or to
    recompute it untrimmed."""
    return tuple(dict(a) if type(a) is dict else list(a) if type(a) is list else a
                 for a in args)


@dataclasses.dataclass
class Trace:
    """One forward of a model on the current batch."""

    model: torch.nn.Module
    state: ModelState
    mode: Mode
    problem: str | None = None     # why this forward could not be trimmed as planned
    rng: Tensor | None = None      # SPECULATE: the CPU random state the forward began with
    args: tuple | None = None      # its positional arguments as entered (`entry_copy`)
    # layer calls on the batch's graph so far, by edge key (`BatchGraph.edge_key`: one key
    # for a Data batch, its edge type for a HeteroData batch)
    counts: dict[Hashable, int] = dataclasses.field(default_factory=dict)
    # the edge keys of the layer calls so far, in order
    order: list[Hashable] = dataclasses.field(default_factory=list)
    # trimmed at an encoder (`intercept.encoder`): the layer calls made when it last returned,
    # and how often it returned
    served: int | None = None
    returns: int = 0

    def count(self, key: Hashable) -> int:
        """Count one more layer call of edge key `key`; its index among that key's calls (its
        layer, 0: the bottom one)."""
        index = self.counts.get(key, 0)
        self.counts[key] = index + 1
        self.order.append(key)
        return index

    def layer_of(self, key: Hashable) -> int | None:
        """Count one more layer call of edge key `key`; its layer: its index among that key's
        calls, or for a model with a data-flow plan (`intercept.dataflow`) the plan's layer
        at this position of the forward (None: untrimmed; a call off the plan notes the
        problem)."""
        position, index = self.made, self.count(key)
        plan = self.state.plan
        if plan is None:
            return index
        if position < len(plan) and plan[position][0] == key:
            return plan[position][1]
        self.problem = self.problem or (
            f"its layer calls left its data-flow plan at call {position + 1} ({key})")
        return None    # untrimmed: the forward is recomputed untrimmed at its end

    @property
    def made(self) -> int:
        """Layer calls on the batch's graph so far, of every edge key."""
        return sum(self.counts.values())

    @property
    def calls(self) -> int:
        """Layer calls per edge key so far (the most of any key): the forward's layer count
        (with a data-flow plan: the plan's K; `uneven` checks the calls against the plan)."""
        if self.state.plan is not None:
            return self.state.layers or 0
        return max(self.counts.values(), default=0)

    def uneven(self) -> str | None:
        """Why the edge types were not all called equally often, or (with a data-flow plan)
        why the forward made another number of layer calls than planned (None: neither)."""
        plan = self.state.plan
        if plan is not None:
            return None if self.made == len(plan) else (
                f"it made {self.made} layer calls where its data-flow plan has {len(plan)}")
        if len(set(self.counts.values())) <= 1:
            return None
        return ("its edge types were not called by every layer: "
                + ", ".join(f"{key} {n}x" for key, n in self.counts.items()))


@dataclasses.dataclass
class HookedCall:
    """A layer call of a traced model on the batch's edge_index, as a layer hook sees it;
    `run()` computes it the way the seam would without the hook (trimmed when it can)."""

    model: torch.nn.Module
    state: ModelState
    mode: Mode
    index: int                     # l: the call's position in the forward (0: bottom layer)
    layer: Any
    x: Any
    edge_index: Tensor
    args: tuple
    kwargs: dict
    batch: BatchGraph
    run: Callable[[], Any]
    unpatched: LayerCall           # unpatched(layer, *args, **kwargs): past gnnorch's seam


class LayerHook(Protocol):
    """An outer link of the layer seam's chain (today: the historical-embedding cache)."""

    def on_layer(self, call: HookedCall) -> Any:
        """The layer call's output; `call.run()` proceeds down the chain."""

    def on_forward_end(self, model: torch.nn.Module, state: ModelState, calls: int,
                       batch: BatchGraph) -> None:
        """A traced forward of `model` on `batch` finished after `calls` layer calls."""


def run_chain(hooks: list, make_call: Callable[..., HookedCall], run: Callable[[], Any],
              unpatched: LayerCall) -> Any:
    """One layer call down hooks[0] -> ... -> hooks[-1] -> `run`; `make_call(run, unpatched)`
    builds the `HookedCall` each hook receives (its `run` is the rest of the chain)."""
    for hook in reversed(hooks[1:]):
        run = functools.partial(hook.on_layer, make_call(run, unpatched))
    return hooks[0].on_layer(make_call(run, unpatched))


@contextlib.contextmanager
def patched_call(cls: type, on_layer: Callable[[Any, LayerCall, tuple, dict], Any]
                 ) -> Iterator[None]:
    """`cls.__call__` replaced by `on_layer(layer, original_call, args, kwargs)` while inside;
    traced calls (`tracing()`) go to the original call untouched. Restored on exit, also
    when `cls` had no `__call__` of its own."""
    had_call = "__call__" in cls.__dict__
    original = cls.__call__

    def __call__(layer: Any, *args: Any, **kwargs: Any) -> Any:
        if tracing():  # dynamo / fx see PyG's own call (fx patches Module.__call__ itself)
            call = original if had_call else torch.nn.Module.__call__
            return call(layer, *args, **kwargs)
        return on_layer(layer, original, args, kwargs)

    cls.__call__ = __call__
    try:
        yield
    finally:
        if had_call:
            cls.__call__ = original
        else:
            del cls.__call__
