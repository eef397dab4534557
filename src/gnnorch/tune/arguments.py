"""What a run of the user's function changed in the arguments it was given.

The tuner runs the function more than once in one call: the default run in the caller's
process (cut short when tuning pays), probes, then the real run. Each must start from the
arguments the caller passed. Runs in rank processes get forked copies; a run in the caller's
process shares the caller's objects. A function that changes them in place would hand the next
run different arguments: it deletes an attribute of its ``data`` (PyG's
``examples/multi_gpu/mag240m_graphsage.py`` deletes the masks it has read), replaces a tensor
or changes one in place, or trains a model or an optimizer it was handed.

`Fingerprint.of(args, kwargs)` records the identity of every tensor reachable from the
arguments. It walks containers (tuple, list, dict), PyG data (`Data`, `HeteroData`, `Batch`:
every store's attributes), PyG in-memory datasets (their collated data), loaders (their
``data`` or ``dataset``), modules (parameters and buffers) and optimizers (their state). A
tensor's identity is its storage pointer, dtype, device, shape, stride and offset, and its
version counter (`compat.torch.tensor_version`: every in-place operation bumps it; where
torch has none, in-place changes go unseen). Other attribute values are compared by identity
(``id``), scalars by value.

`Fingerprint.changes(later)` names what differs: an attribute deleted, a tensor replaced by
another, a tensor changed in place, an optimizer's state that grew. One move is not a change:
a tensor whose storage went to shared memory (same object, same version, same values, a new
pointer). torch's multiprocessing pickler does that to the caller's tensors in place when a
run sends the arguments to rank processes (the zygote's warm ranks, a probe with p > 1),
so a later run in the caller sees them there. An attribute *added* is
not a change: a re-run assigns it again. Objects of other classes are not walked. The walk
stops after `MAX_ENTRIES` entries, so a list of a million graphs costs a bounded time; what
lies beyond is not checked.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch.nn.parameter import is_lazy

from ..compat.torch import tensor_version

__all__ = ["Fingerprint", "MAX_ENTRIES", "listed"]

#: Entries (tensors and attribute values) a fingerprint records at most.
MAX_ENTRIES = 20_000


def _tensor_identity(t: torch.Tensor) -> tuple:
    """(what makes it the same tensor, its version): equal identities with different
    versions mean the tensor was changed in place. The identity's first item is the storage
    pointer (`_moved_to_shared_memory` reads it)."""
    if is_lazy(t):
        return ("uninitialised", id(t)), 0
    try:
        where = (t.data_ptr(), t.dtype, t.device, tuple(t.shape), t.stride(),
                 t.storage_offset())
    except (RuntimeError, ValueError, NotImplementedError):   # sparse layouts, subclasses
        where = (id(t), t.dtype, tuple(t.shape))
    try:
        version = tensor_version(t)
    except (RuntimeError, AttributeError, ValueError):
        version = None
    return where, version


@dataclass
class Fingerprint:
    """Path -> identity of everything recorded (see the module docstring)."""

    entries: dict[str, tuple] = field(default_factory=dict)
    # path -> the tensor recorded there (weakly) and whether its storage was shared memory
    tensors: dict[str, tuple[weakref.ref, bool]] = field(default_factory=dict)

    @classmethod
    def of(cls, args: tuple, kwargs: dict) -> Fingerprint:
        walk = _Walk()
        for i, value in enumerate(args):
            walk.visit(f"args[{i}]", value)
        for key, value in kwargs.items():
            walk.visit(f"kwargs[{key!r}]", value)
        return cls(walk.entries, walk.tensors)

    def changes(self, later: Fingerprint) -> list[str]:
        """What changed from this fingerprint to `later`, one phrase per path."""
        out = []
        for path, (kind, ident, version) in self.entries.items():
            now = later.entries.get(path)
            if now is None:
                out.append(f"{path} deleted")
            elif kind != now[0] or (ident != now[1]
                                    and not self._moved_to_shared_memory(path, later)):
                out.append(f"{path} replaced")
            elif version != now[2]:
                out.append(f"{path} changed in place")
        return out

    def _moved_to_shared_memory(self, path: str, later: Fingerprint) -> bool:
        """Whether the tensor at `path` is the very object recorded, its storage moved into
        shared memory since, and nothing else about it different but the pointer."""
        before, after = self.tensors.get(path), later.tensors.get(path)
        if before is None or after is None:
            return False
        (ref, was_shared), (ref_now, shared_now) = before, after
        tensor = ref()
        return (tensor is not None and tensor is ref_now() and not was_shared and shared_now
                and self.entries[path][1][1:] == later.entries[path][1][1:])


def listed(changes: list[str], most: int = 4) -> str:
    """The first `most` changes, comma-separated, and how many more there are."""
    more = f" and {len(changes) - most} more" if len(changes) > most else ""
    return ", ".join(changes[:most]) + more


class _Walk:
    """One traversal: records entries, visits each object once, stops at `MAX_ENTRIES`."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple] = {}
        self.tensors: dict[str, tuple[weakref.ref, bool]] = {}
        self.seen: set[int] = set()

    def record(self, path: str, entry: tuple) -> None:
        if len(self.entries) < MAX_ENTRIES:
            self.entries[path] = entry

    def visit(self, path: str, value: Any) -> None:
        if len(self.entries) >= MAX_ENTRIES:
            return
        if isinstance(value, torch.Tensor):
            where, version = _tensor_identity(value)
            self.record(path, ("tensor", where, version))
            if path in self.entries and not is_lazy(value):
                self.tensors[path] = (weakref.ref(value), _shared(value))
            return
        if not isinstance(value, (tuple, list, dict)) and not _walkable(value):
            self.record(path, ("value", _value_identity(value), 0))
            return
        if id(value) in self.seen:
            return
        self.seen.add(id(value))
        for sub, child in _children(path, value):
            self.visit(sub, child)


def _shared(t: torch.Tensor) -> bool:
    try:
        return bool(t.is_shared())
    except (RuntimeError, NotImplementedError):   # sparse layouts, subclasses
        return False


def _value_identity(value: Any) -> Any:
    """A plain attribute's identity: scalars by value (``num_classes = 10`` set again is the
    same), anything else by object."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    return id(value)


def _walkable(value: Any) -> bool:
    from torch_geometric.data.data import BaseData

    return isinstance(value, (BaseData, torch.nn.Module, torch.optim.Optimizer)) or \
        _pyg_dataset(value) or _loader(value)


def _pyg_dataset(value: Any) -> bool:
    from torch_geometric.data import InMemoryDataset

    return isinstance(value, InMemoryDataset)


def _loader(value: Any) -> bool:
    return isinstance(value, torch.utils.data.DataLoader)


def _children(path: str, value: Any) -> Iterator[tuple[str, Any]]:
    """The (path, value) pairs `value` holds, for the classes the walk knows."""
    from torch_geometric.data.data import BaseData

    if isinstance(value, (tuple, list)):
        yield from ((f"{path}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, dict):
        yield from ((f"{path}[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, BaseData):
        for store in value.stores:
            key = getattr(store, "_key", None)
            prefix = path if key is None else f"{path}[{key!r}]"
            yield from ((f"{prefix}.{k}", v) for k, v in store.items())
    elif isinstance(value, torch.nn.Module):
        yield from ((f"{path}.{n}", t) for n, t in value.named_parameters())
        yield from ((f"{path}.{n}", t) for n, t in value.named_buffers())
    elif isinstance(value, torch.optim.Optimizer):
        yield f"{path}.state", _OptimizerState(value)
    elif _pyg_dataset(value):
        yield f"{path}._data", getattr(value, "_data", None)
        indices = getattr(value, "_indices", None)
        if indices is not None:
            yield f"{path}._indices", indices
    elif _loader(value):
        inner = getattr(value, "data", None)
        yield (f"{path}.data", inner) if inner is not None else (f"{path}.dataset",
                                                                 value.dataset)


class _OptimizerState(dict):
    """An optimizer's per-parameter state as a dict the walk visits: its size, and each
    state tensor (``exp_avg``, ``step``, ...) by parameter position and name."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        position = {id(p): i for i, p in enumerate(params)}
        super().__init__({"size": len(optimizer.state)})
        for p, state in optimizer.state.items():
            for name, value in state.items():
                self[f"{position.get(id(p), '?')}.{name}"] = value
