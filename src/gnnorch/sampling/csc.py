"""One CSC per graph while any sampler holds it.

PyG's ``NeighborSampler`` converts the loader's graph to CSC (``colptr``, ``row`` and the edge
permutation ``perm``) in its constructor: a sort of every edge. At products scale (2.45M nodes,
124M edges) that is 12 s on 2 cores and about 2 GB. A script's loaders over one graph
(training, validation, test, a subgraph loader for layer-wise inference) each pay it.

`SharedCSC.wrap(to_csc)` returns a ``to_csc`` that hands every call for the same graph the
same three tensors. "The same graph" means all of these:
* the same ``edge_index`` object, at the same in-place version (`gnnorch.compat.torch.
  tensor_version`);
* the same node counts;
* the same ``share_memory`` / ``is_sorted`` / ``to_transpose``;
* no time attributes, on the CPU, and no ``adj`` / ``adj_t``.
Any other call converts as PyG does. A graph without version counters is never shared: fail
closed.

Invariants:
* An entry holds its ``edge_index`` and its tensors by weak reference. It lives while the
  user's graph and at least one sampler holding the CSC do, so sharing never keeps alive
  memory that a run without it would have freed.
* Samplers never write their CSC in place: PyG's and gnnorch's sampling only read it, and
  `FastNeighborSampler.move_to` replaces it. So sharing cannot change a draw.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import torch
from torch import Tensor

from ..compat.torch import tensor_version

__all__ = ["SharedCSC", "SHARED_CSC"]

_Key = tuple[int, tuple[int, ...], bool, bool, bool]
_CSC = tuple[Tensor, Tensor, "Tensor | None"]


def _dead() -> None:
    return None


class SharedCSC:
    """The shared conversions (see the module docstring); ``hits`` counts the reuses."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, _Key, tuple[Callable[[], Any], ...]]] = {}
        self._lock = threading.Lock()
        self.hits = 0

    def wrap(self, to_csc: Callable[..., _CSC]) -> Callable[..., _CSC]:
        """`to_csc` (PyG's signature) sharing its result per graph."""

        def shared(data: Any, device: Any = None, share_memory: bool = False,
                   is_sorted: bool = False, src_node_time: Tensor | None = None,
                   edge_time: Tensor | None = None, to_transpose: bool = False,
                   **kwargs: Any) -> _CSC:
            key = _key(data, device, share_memory, is_sorted, src_node_time, edge_time,
                       to_transpose, kwargs)
            found = None if key is None else self._find(data.edge_index, key)
            if found is not None:
                return found
            out = to_csc(data, device, share_memory, is_sorted, src_node_time, edge_time,
                         to_transpose=to_transpose, **kwargs)
            if key is not None:
                self._keep(data.edge_index, key, out)
            return out

        return shared

    def _find(self, edge_index: Tensor, key: _Key) -> _CSC | None:
        with self._lock:
            entry = self._entries.get(id(edge_index))
            if entry is None or entry[0]() is not edge_index or entry[1] != key:
                return None
            colptr, row, perm = (ref() for ref in entry[2])
            if colptr is None or row is None or (perm is None and entry[2][2] is not _dead):
                return None   # every sampler holding it is gone: it was freed
            self.hits += 1
            return colptr, row, perm

    def _keep(self, edge_index: Tensor, key: _Key, out: _CSC) -> None:
        entries, slot = self._entries, id(edge_index)

        def forget(ref: weakref.ref) -> None:   # the graph is gone: so is its entry
            # no lock: a weakref callback runs wherever the collector does, possibly inside
            # `_find` / `_keep` holding it. Worst case of the race: an entry dropped early
            # (a later sampler converts again; `_find` checks identity either way)
            if entries.get(slot, (None,))[0] is ref:
                entries.pop(slot, None)

        refs = tuple(_dead if t is None else weakref.ref(t) for t in out)
        with self._lock:
            entries[slot] = (weakref.ref(edge_index, forget), key, refs)


def _key(data: Any, device: Any, share_memory: bool, is_sorted: bool,
         src_node_time: Tensor | None, edge_time: Tensor | None, to_transpose: bool,
         kwargs: dict) -> _Key | None:
    """The sharing key of one conversion, or None when it must not be shared."""
    if kwargs or src_node_time is not None or edge_time is not None:
        return None
    if device is not None and torch.device(device).type != "cpu":
        return None
    if "adj" in data or "adj_t" in data:
        return None
    edge_index = getattr(data, "edge_index", None)
    version = tensor_version(edge_index) if isinstance(edge_index, Tensor) else None
    if version is None:
        return None
    return (version, tuple(int(n) for n in data.size()), bool(share_memory), bool(is_sorted),
            bool(to_transpose))


#: the process's shared conversions (`gnnorch.sampling.neighbor.FastNeighborSampler` uses it)
SHARED_CSC = SharedCSC()
