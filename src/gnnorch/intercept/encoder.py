"""Trimming at encoders: a model whose output has no row per vertex (a link decoder's scores).

PyG's link-prediction programs put a GNN encoder and a decoder in one model:

    def forward(self, x, edge_index, edge_label_index):
        z = self.encoder(x, edge_index)             # a row per batch vertex
        return self.decoder(z, edge_label_index)    # a score per supervision edge

The model's output has no rows hop-aware trimming can vouch for, but its encoder's has, and a
link decoder reads only the rows at ``edge_label_index``: the seed rows of a link batch
(`intercept.announce.link_seeds`). So such a model is trimmed at its encoder. Some models call
one encoder several times (PyG's `DeepGraphInfomax`: on the batch and on a corruption of it),
or have one encoder per node type (PyG's `bipartite_sage_unsup` and `taobao` examples: an item
encoder, then a user encoder, their rows scored by a decoder): they are trimmed at each call.

Invariant. A model is trimmed at the sub-module calls E_1..E_n only when
1. in an untrimmed forward of the model (the one-off check's), E_1..E_n tile its layer calls
   on the batch graph: E_1 starts before the first, each E_i+1 starts where E_i ended, E_n
   ends after the last, and each is the outermost sub-module call starting there that returns
   a row per batch vertex (one tensor, of its last layer call's destination type on a
   HeteroData batch, or a dict of such tensors by node type:
   `gnnorch.trim.verify.rows_per_vertex`) or only the seed rows (``return x[:batch_size]``:
   `gnnorch.trim.verify.seed_rows_only`); all of one kind;
2. for n > 1, every call's last layer is the top one (depth 0) in the layer plan from the
   model's data flow (`intercept.dataflow`): no encoder output feeds another's layers;
3. the one-off check finds the seed rows of every E_i's output *and the model's whole output*
   equal between the trimmed and the untrimmed forward: the rest of the model read nothing but
   seed rows of them on that batch;
4. in every trimmed forward the same modules return in the same order, each after the same
   layer calls, and no layer call follows the last: each output is handed on padded and
   prefix-exact (`gnnorch.trim.exact_output`: a read of any other row recomputes that call
   untrimmed), or as it is when it holds only the seed rows; a forward that breaks this is
   recomputed untrimmed.
So no value the user can observe is a placeholder, as for a model trimmed at its output.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Hashable, Iterable, Iterator

import torch
from torch.utils.hooks import RemovableHandle

from ..trim.hetero import SampledGraph, typed_view
from ..trim.verify import rows_per_vertex, seed_rows_only

__all__ = ["EncoderCall", "EncoderFound", "EncoderWatch", "find_encoder", "NO_ENCODER"]

NO_ENCODER = ("no sub-module makes every layer call and returns a row per vertex (or the "
              "seed rows)")

# (name, module, args, kwargs, output) -> the output the rest of the model gets
OnEncoderExit = Callable[[str, torch.nn.Module, tuple, dict, Any], Any]
Plan = tuple[tuple[Hashable, int], ...]


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
    """The encoder calls of a model in one untrimmed forward (conditions 1 and 2)."""

    calls: list[EncoderCall]           # E_1..E_n, in order
    keys: tuple[Hashable, ...]         # the forward's layer calls' edge keys, in order

    @property
    def output(self) -> Any:
        return self.calls[0].output

    @property
    def label(self) -> str:
        """The encoders' names, each once, in call order."""
        return " and ".join(dict.fromkeys(call.name for call in self.calls))

    def node_type(self, call: EncoderCall) -> str | None:
        """The node type a one-tensor output of `call` has rows of on a HeteroData batch: its
        last layer call's destination type (None on a Data batch)."""
        key = self.keys[call.calls_after - 1]
        return key[2] if isinstance(key, tuple) and len(key) == 3 else None

    def planned(self) -> tuple[tuple[str, str | None, int], ...]:
        """What a trimmed forward must do, per call: (name, node type, layer calls made when
        it returns)."""
        return tuple((call.name, self.node_type(call), call.calls_after) for call in self.calls)

    def feeds_layers(self, plan: Plan) -> str | None:
        """The first call whose last layer is not the top one in `plan` (condition 2)."""
        top = max(layer for _, layer in plan if layer is not None)
        for call in self.calls:
            if plan[call.calls_after - 1][1] != top:
                return call.name
        return None


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
    """(the model's output, its encoder calls or None): runs `forward()`, an untrimmed forward
    of `model` on `batch`, recording its sub-module calls; `made()` counts the layer calls on
    the batch graph so far, `keys()` lists their edge keys. The encoder calls tile the layer
    calls, each the outermost (then earliest) fitting call where the previous one ended (the
    module docstring's condition 1)."""
    calls: list[EncoderCall] = []
    with _recorded({model: "", **_candidates(model)}, made, keys, calls):
        output = forward()
    # the model's own call ends (its hook runs) before the seam's exit hook ends the forward
    own = [call for call in calls if not call.name]
    total = max((call.calls_after for call in own), default=0)
    found = EncoderFound([], own[-1].keys if own else ())
    if not total or len(found.keys) != total:
        return output, None
    spanning = sorted((call for call in calls if call.name and call.calls_after >
                       call.calls_before), key=lambda call: (call.depth, call.order))
    kinds = set()
    while (end := found.calls[-1].calls_after if found.calls else 0) < total:
        step = None
        for call in spanning:
            view = typed_view(batch, found.node_type(call))
            if call.calls_before == end and (rows_per_vertex(call.output, view)
                                             or seed_rows_only(call.output, view)):
                step = call
                kinds.add(seed_rows_only(call.output, view))
                break
        if step is None:
            return output, None
        found.calls.append(step)
    return output, (found if len(kinds) == 1 else None)


class EncoderWatch:
    """The hooks that hand on the encoders' outputs in a forward trimmed at them: armed on
    each encoder at the model's entry, they run at each of its returns (`on_exit` replaces the
    output), and are removed at the model's exit or when the forward is cleared."""

    def __init__(self) -> None:
        self._handles: list[RemovableHandle] = []

    def arm(self, model: torch.nn.Module, names: Iterable[str], on_exit: OnEncoderExit) -> bool:
        """Watch `model`'s sub-modules `names`; False when the model has one of them not."""
        self.disarm()
        for name in dict.fromkeys(names):
            try:
                encoder = model.get_submodule(name)
            except AttributeError:
                self.disarm()
                return False
            self._handles.append(encoder.register_forward_hook(
                functools.partial(_hook, name, on_exit), with_kwargs=True))
        return True

    def disarm(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _hook(name: str, on_exit: OnEncoderExit, module: torch.nn.Module, args: tuple,
          kwargs: dict, output: Any) -> Any:
    return on_exit(name, module, args, kwargs, output)
