"""Sending the user's function and arguments to rank processes, and results back.

Payloads (function, args, kwargs) are pickled with cloudpickle, so functions and classes defined in
`__main__`, inside other functions, or as lambdas travel by value (no `__main__` import in the
ranks, hence no `if __name__ == "__main__":` guard needed), combined with torch's multiprocessing
reductions, so CPU tensor storages move to shared memory once and every rank maps the same pages
instead of receiving a copy -- except what the ranks change in place as they train: the
parameters and buffers of modules, the state of optimizers, tensors that require a gradient.
Those reach rank 0 shared like the rest, so that it trains the caller's own model as one
process would, and every other rank by value, a copy of its own (`_PrivateStatePickler`):
shared, every rank's optimizer step would land in the same memory, p updates a step.
Results travel back by value (plain cloudpickle): the caller must own them after the ranks
exit. cloudpickle's class tracking maps a `__main__` class sent to a rank and returned from it
back to the caller's original class, so `isinstance` still holds.

What stays shared, the function must not change in place: every rank would make the change
in the same memory (``data.x /= 2`` halving it p times). Ranks other than 0 keep the tensors
they received through shared memory (weakly) with their version counters on arrival;
`changed_in_place` names those whose counter moved, for the caller to warn.
"""
from __future__ import annotations

import contextlib
import io
import pickle
import weakref
from collections import ChainMap
from typing import Any

import cloudpickle
import torch

from ..compat import processes as compat_processes
from ..compat.torch import tensor_version
from ..errors import SerializationError


class _SharedMemoryPickler(cloudpickle.Pickler):
    # The C pickler reads `dispatch_table` when constructed, so it must be a class attribute.
    # ForkingPickler's table holds torch's reducers (tensor -> shared-memory file descriptor);
    # `gnnorch.compat` finds it (without it tensors travel by value: copied, not shared).
    dispatch_table = ChainMap(compat_processes.forking_reducers(), cloudpickle.Pickler.dispatch_table)


class _PrivateStatePickler(_SharedMemoryPickler):
    """A rank's payload whose modules' parameters and buffers and optimizers' state tensors
    travel by value; every other tensor through shared memory. A module or optimizer is met
    before the tensors it holds (they are in its pickled state), so marking them there finds
    them; a parameter met first (an optimizer's ``param_groups`` before its model), or a
    tensor trained without a module (``torch.randn(n, d, requires_grad=True)``), is one
    because it requires a gradient."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        super().__init__(file, protocol=protocol)
        self._private: dict[int, torch.Tensor] = {}   # id -> tensor (alive while pickling)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.nn.Module):
            for _, t in (*obj.named_parameters(recurse=False),
                         *obj.named_buffers(recurse=False)):
                self._private[id(t)] = t
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for t in state.values():
                    if isinstance(t, torch.Tensor):
                        self._private[id(t)] = t
        elif isinstance(obj, torch.Tensor) and (obj.requires_grad   # a parameter, or one
                                                or self._private.get(id(obj)) is obj):
            buf = io.BytesIO()
            torch.save(obj, buf)
            return _tensor_from_bytes, (buf.getvalue(), )
        elif isinstance(obj, torch.Tensor) and type(obj) in self.dispatch_table:
            rebuild, args = self.dispatch_table[type(obj)](obj)[:2]
            return _received_shared, (rebuild, args)
        return super().reducer_override(obj)


def _tensor_from_bytes(data: bytes) -> torch.Tensor:
    return torch.load(io.BytesIO(data), weights_only=False)


#: the tensors this rank received through shared memory, and their versions on arrival
_RECEIVED: list[tuple[weakref.ref, int | None]] = []


def _received_shared(rebuild: Any, args: tuple) -> torch.Tensor:
    tensor = rebuild(*args)
    _RECEIVED.append((weakref.ref(tensor), tensor_version(tensor)))
    return tensor


def changed_in_place() -> list[str]:
    """The tensors this rank received through shared memory (a rank other than 0) that were
    changed in place since, still alive: ``"float32 [2708, 1433]"`` each."""
    changed = []
    for ref, version in _RECEIVED:
        tensor = ref()
        if tensor is not None and version is not None and tensor_version(tensor) != version:
            changed.append(f"{str(tensor.dtype).replace('torch.', '')} {list(tensor.shape)}")
    return changed


_FIX_HINT = (
    "gnnorch sends `train` and its arguments to each rank process with cloudpickle. Fix: pass "
    "large or unpicklable objects (open files, sockets, locks, generators, database handles) "
    "as things the function can rebuild (paths, configs), or create them inside `train`; "
    "or run with processes=1, which calls `train` in this process and sends nothing."
)


#: payloads with more tensors than this share them by name, not by file descriptor
MANY_TENSORS = 256


class _TensorCounter(cloudpickle.Pickler):
    """Walks a payload as pickling it would and counts its tensors (none of them shared or
    copied: each is pickled as an empty tuple)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors = 0

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            self.tensors += 1
            return tuple, ()
        return super().reducer_override(obj)


def dumps_payloads(fn: Any, args: tuple, kwargs: dict, ranks: int) -> list[bytes]:
    """(fn, args, kwargs) pickled once for each of `ranks` rank processes, the i-th for rank
    i; tensors go to shared memory, not into the bytes, except that the state training changes
    in place is a copy in every rank but 0 (module docstring).

    One pickle per rank: under torch's default ``file_descriptor`` sharing strategy a pickle
    carries descriptor handles that can be received once, and every shared storage holds a
    descriptor in this process plus one per rank until received. A payload of more than
    `MANY_TENSORS` tensors (a Python list of graphs) would exhaust the process's descriptors
    (EMFILE, or sockets numbered above ``select``'s 1024): its storages are shared by name
    instead (`compat.processes.storages_shared_by_name`), holding no descriptor.
    """
    counter = _TensorCounter()
    try:
        counter.dump((fn, args, kwargs))
    except Exception:  # noqa: BLE001 - the real pickling below says what does not pickle
        pass
    by_name = counter.tensors > MANY_TENSORS
    with compat_processes.storages_shared_by_name() if by_name else contextlib.nullcontext():
        return [dumps_payload(fn, args, kwargs, private_state=rank > 0)
                for rank in range(ranks)]


def dumps_payload(fn: Any, args: tuple, kwargs: dict, private_state: bool = False) -> bytes:
    """Pickle (fn, args, kwargs) for one rank (see `dumps_payloads`); tensors go to shared
    memory under the current sharing strategy, not into the bytes, but with `private_state`
    those of modules and optimizers travel by value (`_PrivateStatePickler`)."""
    buf = io.BytesIO()
    pickler = _PrivateStatePickler if private_state else _SharedMemoryPickler
    try:
        pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump((fn, args, kwargs))
    except Exception as err:  # noqa: BLE001 - any pickling failure gets the same guidance
        raise SerializationError(
            f"cannot send {_culprit(fn, args, kwargs)} to the rank processes: "
            f"{type(err).__name__}: {err}. {_FIX_HINT}") from err
    return buf.getvalue()


def _culprit(fn: Any, args: tuple, kwargs: dict) -> str:
    """Name the first part of a failed payload that does not pickle (error path only)."""
    parts = [(f"train ({getattr(fn, '__qualname__', repr(fn))})", fn)]
    parts += [(f"positional argument {i} ({type(a).__name__})", a) for i, a in enumerate(args)]
    parts += [(f"keyword argument {k!r} ({type(v).__name__})", v) for k, v in kwargs.items()]
    for name, obj in parts:
        try:
            cloudpickle.dumps(obj)
        except Exception:  # noqa: BLE001
            return name
    return "the payload"


def loads(data: bytes) -> Any:
    """Inverse of `dumps_payload` / `dumps_result` (standard unpickling)."""
    return pickle.loads(data)


def dumps_result(obj: Any) -> bytes:
    """Pickle a rank's return value by value (tensors copied), for the caller to own; a value
    that cannot travel raises `SerializationError` naming the part that does not pickle."""
    try:
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - the user's value: said in the user's terms
        raise SerializationError(
            f"the training function's return value cannot be sent back from rank 0 to the "
            f"caller: {_unpicklable_part(obj)} does not pickle ({type(err).__name__}: {err}). "
            f"With more than one process the function runs in rank processes; return "
            f"tensors, state_dicts, models or other picklable values") from err


def _unpicklable_part(obj: Any, where: str = "the value") -> str:
    """`where` narrowed down through dict values and list / tuple items to the first part
    that does not pickle (error path only)."""
    if isinstance(obj, dict):
        items = [(f"{where}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(f"{where}[{i}]", v) for i, v in enumerate(obj)]
    else:
        return f"{where} ({type(obj).__name__})"
    for name, value in items:
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            return _unpicklable_part(value, name)
    return f"{where} ({type(obj).__name__})"


def travels(obj: Any) -> bool:
    """Whether `obj` pickles by value (cloudpickle), as the runner and its parts travel."""
    try:
        cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - whatever stops it, it stays behind
        return False
    return True


def dumps_runner(runner: Any) -> bytes:
    """Pickle what every rank runs around the user's function (`gnnorch.launch.worker`), by
    value; sent once to each rank."""
    try:
        return cloudpickle.dumps(runner, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - gnnorch's own objects: a bug, said plainly
        raise SerializationError(f"cannot send the rank runner {runner!r} to the rank "
                                 f"processes: {type(err).__name__}: {err}") from err


def dumps_exception(exc: BaseException) -> bytes | None:
    """Pickle an exception for re-raising in the caller; None when it cannot be pickled."""
    try:
        data = cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001 - fall back to type name + message
        return None
