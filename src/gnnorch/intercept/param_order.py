"""An order of the run's parameters that is the same on every rank.

The gradient seam's collectives (the broadcast of a new optimizer's parameters, a step's
average, a ``clip_grad_norm_`` round) pair the k-th tensor of one rank's list with the k-th of
another's. An optimizer lists its parameters in the order it was given them, and a ``set`` of
parameters iterates by memory address, which differs between ranks: PyG's ``examples/tgn.py``
builds ``Adam(set(memory.parameters()) | set(gnn.parameters()) | ...)``. Paired by that order,
one rank's weight is averaged with another layer's weight of the same shape -- no error, wrong
updates, and ranks that drift apart.

Invariant: each parameter gets a number the first time this rank
* finds it in the run's arguments when the run starts (`note_arguments`: argument order, then
  each module's tree; a model built before the run reaches the ranks pickled, and
  ``Adam(list(set(model.parameters())))`` hides the set behind a list), or else
* registers it on a module (``register_module_parameter_registration_hook``: the order in
  which the program builds its modules, the same on every rank), or else
* sees it in a root module's first forward (``module.parameters()``: the module tree's order;
  e.g. a model built before the run, which reaches the ranks pickled), or else
* sorts it in an optimizer's list given as an ordered collection (that list's order);
and the collectives take an optimizer's parameters sorted by number (`sorted`). Parameters
still without a number when an optimizer built from an unordered collection is sorted (free
tensors that no module holds) are numbered by (dtype, shape); two of the same dtype and shape
cannot be told apart there, and raise rather than pair the wrong tensors.

Numbers are kept by object identity (a weak reference each: a freed parameter's number goes
with it, and a later tensor at the same address is a new one).
"""
from __future__ import annotations

import collections.abc
import contextlib
import weakref
from typing import Any, Iterable, Iterator

import torch
from torch.nn.modules.module import register_module_parameter_registration_hook

__all__ = ["ParameterOrder", "parameters_in", "unordered"]

_WALK_DEPTH = 4        # containers and plain objects within arguments: a model in a config
_WALK_OBJECTS = 10_000  # objects visited at most: a list of 100K graphs is not walked whole


def parameters_in(objects: Iterable[Any]) -> Iterator[torch.Tensor]:
    """The parameters `objects` hold, in an order that depends only on their structure (the
    same on every rank, whose arguments are copies of the caller's): each module's
    ``parameters()``; a free tensor that requires a gradient; the items of a list or tuple and
    a dict's values, in order; a plain object's attributes, in definition order, down to
    `_WALK_DEPTH` levels and `_WALK_OBJECTS` objects (the same on every rank: the same
    structure). Unordered collections (sets) are skipped: their order is not the same on every
    rank."""
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> Iterator[torch.Tensor]:
        if id(obj) in seen or depth > _WALK_DEPTH or len(seen) >= _WALK_OBJECTS:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            yield from obj.parameters()
        elif isinstance(obj, torch.Tensor):
            if obj.requires_grad and obj.is_leaf:
                yield obj
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                yield from walk(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                yield from walk(item, depth + 1)
        elif isinstance(getattr(obj, "__dict__", None), dict) and not isinstance(obj, type):
            for item in vars(obj).values():
                yield from walk(item, depth + 1)

    for obj in objects:
        yield from walk(obj, 0)


def unordered(args: tuple, kwargs: dict) -> bool:
    """Whether an optimizer's constructor arguments (without the optimizer itself) give its
    parameters as an unordered collection (a ``set``, ``frozenset``, a dict's keys): torch
    refuses a set inside a param group, but takes one as the whole ``params``."""
    params = args[0] if args else kwargs.get("params")
    return isinstance(params, collections.abc.Set)


class ParameterOrder:
    """Numbers parameters in an order that is the same on every rank (module docstring)."""

    def __init__(self) -> None:
        self._numbers: dict[int, tuple[weakref.ref, int]] = {}
        self._next = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator["ParameterOrder"]:
        """Number every parameter a module registers while the block runs."""
        handle = register_module_parameter_registration_hook(self._registered)
        try:
            yield self
        finally:
            handle.remove()

    def _registered(self, module: torch.nn.Module, name: str, param: Any) -> None:
        if param is not None:
            self.note([param])

    def note_arguments(self, args: tuple, kwargs: dict) -> None:
        """Number the parameters of the run's arguments (`parameters_in`), before the
        function builds anything. An argument whose attributes cannot be read leaves the
        walk as it got: what it missed is numbered as before (registration, forward, list)."""
        found = []
        try:
            for param in parameters_in([args, kwargs]):
                found.append(param)
        except Exception:   # e.g. a property that raises: the same on every rank, as the walk
            pass
        self.note(found)

    def number(self, param: torch.Tensor) -> int | None:
        entry = self._numbers.get(id(param))
        return entry[1] if entry is not None and entry[0]() is param else None

    def note(self, params: Iterable[torch.Tensor]) -> None:
        """Number those of `params` without a number, in the given order."""
        for param in params:
            if self.number(param) is None:
                key = id(param)
                ref = weakref.ref(param, lambda _, key=key: self._numbers.pop(key, None))
                self._numbers[key] = (ref, self._next)
                self._next += 1

    def sorted(self, params: list[torch.Tensor], unordered: bool) -> list[torch.Tensor]:
        """`params` by number; those without one are numbered first, in their list order, or
        by (dtype, shape) when the list came from an `unordered` collection."""
        loose = [p for p in params if self.number(p) is None]
        if loose and unordered:
            loose.sort(key=_kind)
            for a, b in zip(loose, loose[1:]):
                if _kind(a) == _kind(b):
                    raise NotImplementedError(
                        f"an optimizer built from a set of parameters holds tensors that no "
                        f"module holds, two of them of dtype {a.dtype} and shape "
                        f"{tuple(a.shape)}: a set's order differs between ranks, and these "
                        f"cannot be told apart to average each with its own kind. Build the "
                        f"optimizer from a list, or use processes=1.")
        self.note(loose)
        return sorted(params, key=self.number)


def _kind(param: torch.Tensor) -> tuple[str, tuple[int, ...]]:
    return str(param.dtype), tuple(param.shape)
