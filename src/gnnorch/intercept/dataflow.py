"""Layer depths from data flow: for models whose layers do not all call the same edge types.

Hop-aware trimming needs, for every layer call, its depth D: how many hops from the seeds its
output rows must be exact. For a stack of K layers that each call every edge type once, the
k-th call of an edge type is layer k and D = K-1-k (`gnnorch.trim.hetero`). Models whose
encoders have different depths (PyG's `bipartite_sage_unsup` and `taobao` examples: a 2-layer
item encoder and a 3-call user encoder over the same edge types) or whose layers use different
edge types (MAG240M's) break that counting. Their depths follow from the data flow instead.

Rule (R(t): the hops within which tensor t's rows must be exact; the model's output: R = 0):
* a layer call at depth D = R(its output) needs its source input within D + 1 hops and its
  destination input (a bipartite pair's second part) within D hops: R(src) >= D + 1,
  R(dst) >= D;
* any other operation passes its outputs' need to its inputs: R(input) >= R(output) (row-local
  code keeps rows; anything else the one-off check catches, as for every trimmed model);
* a layer call whose output the model's output does not use, as far as the recording sees
  (a type `to_hetero` computes and the next layer ignores, or a flow through Python values),
  runs untrimmed, and so do the calls its inputs come from: untrimmed is exact whatever reads
  it.
One untrimmed forward (the one-off check's reference forward: eval mode, no gradients, the RNG
untouched) is recorded with a `torch.overrides.TorchFunctionMode`: every torch operation
outside layer calls, and every layer call on the batch graph as one step (inputs -> output).
The plan is then the depth of each layer call in forward order, computed backwards from the
output. A trimmed forward must make the same calls (edge type by edge type) in the same order,
or it is recomputed untrimmed; the one-off check decides whether trimming is exact.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Hashable, Iterator

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

__all__ = ["DataflowRecorder", "layer_plan", "Plan"]

# per layer call in forward order: (edge key, layer index l of K = max depth + 1, or None:
# untrimmed)
Plan = tuple[tuple[Hashable, "int | None"], ...]
UNTRIMMED = 1 << 30     # R of the inputs of an untrimmed call: every row

_MUTATING = frozenset([Tensor.__setitem__])


def _tensors(value: Any) -> Iterator[Tensor]:
    """The tensors in `value` (nested lists, tuples and dicts)."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


@dataclasses.dataclass
class _Step:
    """One recorded step: tensors in, tensors out; a layer call has its key and parts."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    key: Hashable = None
    src: Tensor | None = None      # a layer call's source input
    dst: Tensor | None = None      # its destination input (a bipartite pair's second part)
    layer: bool = False


class DataflowRecorder(TorchFunctionMode):
    """Records a forward's data flow (module docstring); `layer(...)` runs one layer call on
    the batch graph as a single step. Tensors are kept alive until the recorder is dropped,
    so their identities stay unique."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[_Step] = []
        self._inside = 0          # > 0 while a layer call runs: its own operations unrecorded

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self._inside:
            return out
        outputs = tuple(_tensors(out))
        name = getattr(func, "__name__", "")
        if args and isinstance(args[0], Tensor) and (func in _MUTATING or (
                name.endswith("_") and not name.endswith("__"))):
            outputs += (args[0],)          # in place: the written tensor depends on the rest
        if outputs:
            inputs = tuple(_tensors(args)) + tuple(_tensors(kwargs))
            self.steps.append(_Step(inputs, outputs))
        return out

    def layer(self, key: Hashable, x: Any, run: Callable[[], Any]) -> Any:
        """Layer call `run()` on the batch graph (edge key `key`, input `x`: a tensor or a
        bipartite pair) recorded as one step."""
        self._inside += 1
        try:
            out = run()
        finally:
            self._inside -= 1
        src, dst = (x[0], x[1]) if isinstance(x, tuple) and len(x) == 2 else (x, None)
        self.steps.append(_Step((), tuple(_tensors(out)), key,
                                src if isinstance(src, Tensor) else None,
                                dst if isinstance(dst, Tensor) else None, layer=True))
        return out


def layer_plan(steps: list[_Step], output: Any) -> tuple[Plan | None, str | None]:
    """(plan, None) from a recorded forward whose model returned `output`, or (None, why):
    each layer call's depth D (module docstring's rule) as its layer index l = K-1-D of
    K = max D + 1 (None: untrimmed)."""
    need: dict[int, int] = {id(t): 0 for t in _tensors(output)}
    depths: list[tuple[Hashable, int]] = []

    def require(tensor: Tensor | None, hops: int) -> None:
        if tensor is not None and need.get(id(tensor), -1) < hops:
            need[id(tensor)] = min(hops, UNTRIMMED)

    for step in reversed(steps):
        reached = [need[id(t)] for t in step.outputs if id(t) in need]
        if step.layer:
            depth = max(reached, default=UNTRIMMED)
            depths.append((step.key, depth))
            require(step.src, depth + 1)
            require(step.dst, depth)
        elif reached:
            for tensor in step.inputs:
                require(tensor, max(reached))
    trimmed = [depth for _, depth in depths if depth < UNTRIMMED]
    if not trimmed:
        return None, "no layer call reaches the model's output"
    layers = max(trimmed) + 1
    return tuple((key, layers - 1 - depth if depth < UNTRIMMED else None)
                 for key, depth in reversed(depths)), None
