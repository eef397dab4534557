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
   whose calls make every one of the forward's layer calls on the batch graph (none before its
   first call starts, none between its calls, none after its last call ends), and E returns a
   row per batch vertex (one tensor, or a dict of such tensors by node type:
   `gnnorch.trim.verify.rows_per_vertex`) or only the seed rows (``return x[:batch_size]``:
   `gnnorch.trim.verify.seed_rows_only`). E is called once, or n times with the same layer
   calls each time (PyG's `DeepGraphInfomax` runs its encoder on the batch and on a
   corruption of it): the calls of each pass are then layers 0..K-1 again (`EncoderFound.plan`);
2. the one-off check finds each call's seed rows of E *and the model's whole output* equal
   between the trimmed and the untrimmed forward: the rest of the model read nothing but E's
   seed rows on that batch;
3. in every trimmed forward, each call of E ends after exactly its share of the model's layer
   calls, E is called as often as in the check, and no layer call follows: each output of E is
   handed on padded and prefix-exact (`gnnorch.trim.exact_output`: a read of any other row
   recomputes that call of E untrimmed), or as it is when it holds only the seed rows, and a
   forward that breaks this is recomputed untrimmed.
So no value the user can observe is a placeholder, as for a model trimmed at its output.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Hashable, Iterator

import torch
from torch.utils.hooks import RemovableHandle

from ..trim.hetero import SampledGraph
from ..trim.verify import rows_per_vertex, seed_rows_only

__all__ = ["EncoderCall", "EncoderFound", "EncoderWatch", "find_encoder", "NO_ENCODER"]

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
    keys: tuple[Hashable, ...] = ()   # the model's own call: its layer calls' edge keys


@dataclasses.dataclass
class EncoderFound:
    """The encoder of a model: its calls in one untrimmed forward (condition 1)."""

    name: str
    outputs: list[Any]                 # what each call returned, in call order
    keys: tuple[Hashable, ...]         # the forward's layer calls' edge keys, in order

    @property
    def output(self) -> Any:
        return self.outputs[0]

    @property
    def times(self) -> int:
        return len(self.outputs)

    def plan(self) -> tuple[tuple[Hashable, int], ...] | None:
        """For an encoder called n > 1 times: each layer call's (edge key, layer), the calls of
        every pass numbered 0..K-1 per edge key again, when every pass makes the same calls
        and calls each edge key K times (else None). None for an encoder called once."""
        n, total = self.times, len(self.keys)
        if n == 1 or total % n:
            return None
        span = total // n
        passes = [self.keys[i * span:(i + 1) * span] for i in range(n)]
        if any(p != passes[0] for p in passes):
            return None
        seen: dict[Hashable, int] = {}
        one = []
        for key in passes[0]:
            one.append((key, seen.get(key, 0)))
            seen[key] = seen.get(key, 0) + 1
        if len(set(seen.values())) != 1:
            return None
        return tuple(one) * n


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
              keys: Callable[[], tuple], calls: list[EncoderCall]) -> Iterator[None]:
    """Every call of `modules` during the block appended to `calls` as it ends, with the layer
    calls `made()` counts at its start and end (and, for the model's own call, named "", the
    edge keys `keys()` lists)."""
    open_calls: list[EncoderCall] = []
    handles: list[RemovableHandle] = []
    started = iter(range(1 << 62))

    def pre(module: torch.nn.Module, args: tuple) -> None:
        open_calls.append(EncoderCall(modules[module], len(open_calls) + 1, next(started),
                                      made(), made()))

    def post(module: torch.nn.Module, args: tuple, output: Any) -> None:
        call = open_calls.pop()
        call.calls_after = made()
        if call.calls_after > call.calls_before:   # may be (one call of) the encoder: only
            call.output = output                   # those outputs kept
        if not call.name:
            call.keys = tuple(keys())
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
                 batch: SampledGraph, keys: Callable[[], tuple] = tuple
                 ) -> tuple[Any, EncoderFound | None]:
    """(the model's output, its encoder or None): runs `forward()`, an untrimmed forward of
    `model` on `batch`, recording its sub-module calls; `made()` counts the layer calls on the
    batch graph so far, `keys()` lists their edge keys. The encoder is the outermost (then
    earliest) sub-module whose calls tile all of them (the module docstring's condition 1)."""
    calls: list[EncoderCall] = []
    with _recorded({model: "", **_candidates(model)}, made, keys, calls):
        output = forward()
    # the model's own call ends (its hook runs) before the seam's exit hook ends the forward
    own = [call for call in calls if not call.name]
    total = max((call.calls_after for call in own), default=0)
    by_name: dict[str, list[EncoderCall]] = {}
    for call in sorted(calls, key=lambda call: call.order):
        if call.name:
            by_name.setdefault(call.name, []).append(call)
    fits = [found for found in by_name.values()
            if total and _tiles(found, total) and all(
                rows_per_vertex(call.output, batch) or seed_rows_only(call.output, batch)
                for call in found)]
    if not fits:
        return output, None
    best = min(fits, key=lambda found: (found[0].depth, found[0].order))
    encoder = EncoderFound(best[0].name, [call.output for call in best],
                           own[-1].keys if own else ())
    if encoder.times > 1 and encoder.plan() is None:
        return output, None
    return output, encoder


def _tiles(calls: list[EncoderCall], total: int) -> bool:
    """Whether a sub-module's calls (in order) make all `total` layer calls, the same number
    each, one after the other: none before the first, between two or after the last."""
    span = calls[0].calls_after - calls[0].calls_before
    return span > 0 and calls[0].calls_before == 0 and calls[-1].calls_after == total and all(
        call.calls_after - call.calls_before == span for call in calls) and all(
        a.calls_after == b.calls_before for a, b in zip(calls, calls[1:]))


class EncoderWatch:
    """The hook that hands on an encoder's outputs in a forward trimmed at it: armed on the
    encoder at the model's entry, it runs at each of the encoder's returns (`on_exit` replaces
    the output), and is removed at the model's exit or when the forward is cleared."""

    def __init__(self) -> None:
        self._handle: RemovableHandle | None = None

    def arm(self, model: torch.nn.Module, name: str, on_exit: OnEncoderExit) -> bool:
        """Watch `model`'s sub-module `name`; False when the model has none by that name."""
        self.disarm()
        try:
            encoder = model.get_submodule(name)
        except AttributeError:
            return False

        def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
            return on_exit(module, args, kwargs, output)

        self._handle = encoder.register_forward_hook(hook, with_kwargs=True)
        return True

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
