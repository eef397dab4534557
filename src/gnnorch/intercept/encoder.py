"""Trimming at an encoder: a model whose output has no row per vertex (a link decoder's scores).

PyG's link-prediction programs put a GNN encoder and a decoder in one model:

    def forward(self, x, edge_index, edge_label_index):
        z = self.encoder(x, edge_index)             # a row per batch vertex
        return self.decoder(z, edge_label_index)    # a score per supervision edge

The model's output has no rows hop-aware trimming can vouch for, but its encoder's has, and a
link decoder reads only the rows at ``edge_label_index``: the seed rows of a link batch
(`intercept.announce.link_seeds`). So such a model is trimmed at its encoder E.

Invariant. A model is trimmed at a sub-module E only when
1. in an untrimmed forward of the model (the one-off check's), E is the outermost sub-module
   call that makes every one of the forward's layer calls on the batch graph (none before it
   starts, none after it ends), E is called once, and E returns a row per batch vertex (one
   tensor, or a dict of such tensors by node type: `gnnorch.trim.verify.rows_per_vertex`);
2. the one-off check finds E's seed rows *and the model's whole output* equal between the
   trimmed and the untrimmed forward: the rest of the model read nothing but E's seed rows on
   that batch;
3. in every trimmed forward, E ends after exactly the model's K layer calls, and none follows:
   E's output is handed on padded and prefix-exact (`gnnorch.trim.exact_output`: a read of any
   other row recomputes E untrimmed), or as it is when it holds only the seed rows, and a
   forward that breaks this is recomputed untrimmed.
So no value the user can observe is a placeholder, as for a model trimmed at its output.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
from typing import Any, Callable, Iterator

import torch
from torch.utils.hooks import RemovableHandle

from ..trim.hetero import SampledGraph
from ..trim.verify import rows_per_vertex, seed_rows_only

__all__ = ["EncoderCall", "EncoderWatch", "find_encoder", "NO_ENCODER"]

NO_ENCODER = ("no sub-module makes every layer call and returns a row per vertex (or the "
              "seed rows)")

# (module, args, kwargs, output) -> the output the rest of the model gets
OnEncoderExit = Callable[[torch.nn.Module, tuple, dict, Any], Any]


@dataclasses.dataclass
class EncoderCall:
    """One sub-module call of a forward: where it sits and what it did."""

    name: str                  # qualified name in the model (`named_modules`)
    depth: int                 # nesting below the model (1: a child)
    order: int                 # when it started, among the forward's sub-module calls
    calls_before: int          # layer calls on the batch graph made before it started
    calls_after: int           # ... when it ended
    output: Any = None


def _candidates(model: torch.nn.Module) -> dict[torch.nn.Module, str]:
    """The model's sub-modules that may be an encoder, by module: every one except layers
    (`MessagePassing`) and what lies inside them, and TorchScript modules (no hooks)."""
    from torch_geometric.nn import MessagePassing

    layers: list[str] = []
    found: dict[torch.nn.Module, str] = {}
    for name, module in model.named_modules():
        if not name or any(name.startswith(layer + ".") for layer in layers):
            continue
        if isinstance(module, MessagePassing):
            layers.append(name)
        elif not isinstance(module, torch.jit.ScriptModule):
            found[module] = name
    return found


@contextlib.contextmanager
def _recorded(modules: dict[torch.nn.Module, str], made: Callable[[], int],
              calls: list[EncoderCall]) -> Iterator[None]:
    """Every call of `modules` during the block appended to `calls` as it ends, with the layer
    calls `made()` counts at its start and end."""
    open_calls: list[EncoderCall] = []
    handles: list[RemovableHandle] = []
    started = iter(range(1 << 62))

    def pre(module: torch.nn.Module, args: tuple) -> None:
        open_calls.append(EncoderCall(modules[module], len(open_calls) + 1, next(started),
                                      made(), made()))

    def post(module: torch.nn.Module, args: tuple, output: Any) -> None:
        call = open_calls.pop()
        call.calls_after = made()
        if call.calls_before == 0 and call.calls_after > 0:   # may span every layer call:
            call.output = output                               # only those outputs kept
        calls.append(call)

    try:
        for module in modules:
            try:
                pre_handle = module.register_forward_pre_hook(pre)
            except (RuntimeError, TypeError, NotImplementedError):   # refuses hooks: unseen
                continue
            handles += [pre_handle, module.register_forward_hook(post)]
        yield
    finally:
        for handle in handles:
            handle.remove()


def find_encoder(model: torch.nn.Module, forward: Callable[[], Any], made: Callable[[], int],
                 batch: SampledGraph) -> tuple[Any, EncoderCall | None]:
    """(the model's output, its encoder call or None): runs `forward()`, an untrimmed forward
    of `model` on `batch`, recording its sub-module calls; `made()` counts the layer calls on
    the batch graph so far. The encoder is the outermost (then earliest) sub-module called
    once that spans all of them (the module docstring's condition 1)."""
    calls: list[EncoderCall] = []
    with _recorded({model: "", **_candidates(model)}, made, calls):
        output = forward()
    # the model's own call ends (its hook runs) before the seam's exit hook ends the forward
    total = max((call.calls_after for call in calls if not call.name), default=0)
    times = collections.Counter(call.name for call in calls)
    fits = [call for call in calls
            if call.name and total and call.calls_before == 0 and call.calls_after == total
            and times[call.name] == 1 and (rows_per_vertex(call.output, batch)
                                           or seed_rows_only(call.output, batch))]
    return output, min(fits, key=lambda call: (call.depth, call.order), default=None)


class EncoderWatch:
    """The hook that hands on an encoder's output in a forward trimmed at it: armed on the
    encoder at the model's entry, it runs once, at the encoder's next return (`on_exit`
    replaces the output), and is removed at the model's exit or when the forward is cleared."""

    def __init__(self) -> None:
        self._handle: RemovableHandle | None = None
        self.ran = False

    def arm(self, model: torch.nn.Module, name: str, on_exit: OnEncoderExit) -> bool:
        """Watch `model`'s sub-module `name`; False when the model has none by that name."""
        self.disarm()
        try:
            encoder = model.get_submodule(name)
        except AttributeError:
            return False

        def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
            if self.ran:       # a second call: left alone (its layer calls are counted)
                return None
            self.ran = True
            return on_exit(module, args, kwargs, output)

        self._handle = encoder.register_forward_hook(hook, with_kwargs=True)
        return True

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self.ran = False
