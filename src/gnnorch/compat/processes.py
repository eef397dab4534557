"""torch's private names about processes, each resolved once and checked, failing closed.

The multiprocessing reducers that share tensors with a rank process (`launch/serialize.py`)
and the worker processes a `persistent_workers=True` DataLoader keeps between epochs
(`intercept/loader.py`; whether its next epoch reuses them, `intercept/epoch_order.py`), and
torch's print options, which a rank process takes over from the caller's
(`execute/caller_state.py`). Every accessor returns something safe when its name is missing,
with the reason in `gnnorch.compat.unavailable`.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from .registry import Missing, Probe
from .torch import _callable

__all__ = ["forking_reducers", "reuses_iterator", "stop_persistent_workers",
           "storages_shared_by_name", "tensor_print_options"]


# -- multiprocessing reducers --------------------------------------------------------------

def _reducers() -> Any:
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's shared-memory reducers)

    table = ForkingPickler._extra_reducers
    if not hasattr(table, "get") or table.get(Tensor) is None:
        raise Missing("ForkingPickler._extra_reducers holds no reducer for torch tensors")
    return table


def _reducers_fallback() -> Any:
    import io
    from multiprocessing.reduction import ForkingPickler

    try:   # a pickler instance's table: copyreg's plus the registered reducers (a snapshot)
        return dict(ForkingPickler(io.BytesIO()).dispatch_table)
    except Exception:  # noqa: BLE001
        return {}


REDUCERS = Probe(
    "multiprocessing.reduction.ForkingPickler._extra_reducers", "launch/serialize.py",
    "a ForkingPickler's own dispatch table is read instead (a snapshot); failing that, tensors "
    "are sent by value (copied, not shared)", _reducers)


def forking_reducers() -> Any:
    """torch's shared-memory reducers as a pickler dispatch table (a live mapping when torch's
    registry is reachable, else a snapshot, else empty)."""
    table = REDUCERS.get()
    return table if table is not None else _reducers_fallback()


@contextlib.contextmanager
def storages_shared_by_name() -> Iterator[None]:
    """torch's ``file_system`` sharing strategy (public: ``torch.multiprocessing``) while
    a payload of many tensors is pickled for rank processes (`launch.serialize`), the previous
    strategy back afterwards.

    Under the default ``file_descriptor`` strategy every shared storage holds an open
    descriptor in the sender, plus one more per receiving process until it is received:
    thousands of small tensors (a Python list of graphs, one SparseTensor each) exhaust the
    process's descriptors (EMFILE) and push the launch's sockets above ``select``'s 1024.
    Shared by name, a storage holds no descriptor; torch starts its ``torch_shm_manager``
    daemon (a child of this process until it exits), which frees the memory when the last
    process using it is gone. Where the strategy is unavailable the current one is kept."""
    import torch.multiprocessing as mp

    before = mp.get_sharing_strategy()
    if before == "file_system" or "file_system" not in mp.get_all_sharing_strategies():
        yield
        return
    mp.set_sharing_strategy("file_system")
    try:
        yield
    finally:
        mp.set_sharing_strategy(before)


# -- DataLoader worker processes -------------------------------------------------------------

def _worker_stopper() -> Callable[[Any], None]:
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    if getattr(DataLoader([0]), "_iterator", False) is not None:
        raise Missing("a new DataLoader has no `_iterator` slot set to None")
    shutdown = _callable(_MultiProcessingDataLoaderIter._shutdown_workers,
                         "_MultiProcessingDataLoaderIter._shutdown_workers")

    def stop(loader: Any) -> None:
        iterator = loader._iterator
        inner = getattr(iterator, "iterator", iterator)   # PyG's DataLoaderIterator wraps it
        if isinstance(inner, _MultiProcessingDataLoaderIter):
            shutdown(inner)
        loader._iterator = None       # the next epoch starts new workers, as the first did

    return stop


WORKER_STOPPER = Probe(
    "torch.utils.data.DataLoader._iterator, _MultiProcessingDataLoaderIter._shutdown_workers",
    "intercept/loader.py",
    "persistent loader workers outlive the run until garbage collection stops them",
    _worker_stopper)


def stop_persistent_workers(loader: Any) -> bool:
    """Stop the worker processes that a `persistent_workers=True` loader keeps between epochs
    (its next epoch starts new ones). False when it keeps none, or torch's names are missing."""
    stop = WORKER_STOPPER.get()
    if stop is None or getattr(loader, "_iterator", None) is None:
        return False
    stop(loader)
    return True


def _iterator_slot() -> str:
    from torch.utils.data import DataLoader

    if getattr(DataLoader([0]), "_iterator", False) is not None:
        raise Missing("a new DataLoader has no `_iterator` slot set to None")
    return "_iterator"


PERSISTENT_ITERATOR = Probe(
    "torch.utils.data.DataLoader._iterator (reused by __iter__ with persistent workers)",
    "intercept/epoch_order.py",
    "a sharded loader with persistent workers deals the run seed's permutation, not PyG's",
    _iterator_slot)


def reuses_iterator(loader: Any) -> bool | None:
    """Whether ``iter(loader)`` reuses the iterator of an earlier epoch (``persistent_workers``
    with workers that have started), which draws no new base seed for its workers; None when
    torch's ``_iterator`` slot is missing (it cannot be told)."""
    if not (getattr(loader, "persistent_workers", False)
            and int(getattr(loader, "num_workers", 0) or 0) > 0):
        return False
    slot = PERSISTENT_ITERATOR.get()
    if slot is None:
        return None
    return getattr(loader, slot, None) is not None


# -- print options ------------------------------------------------------------------------

_PRINT_OPTIONS = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


def _print_options() -> Callable[[], dict[str, Any]]:
    get = _callable(torch._tensor_str.get_printoptions, "torch._tensor_str.get_printoptions")
    options = get()
    if not (isinstance(options, dict) and set(options) == set(_PRINT_OPTIONS)):
        raise Missing(f"get_printoptions() gives {options!r}, not the keywords "
                      f"{sorted(_PRINT_OPTIONS)} of torch.set_printoptions")
    return get


PRINT_OPTIONS = Probe("torch._tensor_str.get_printoptions", "execute/caller_state.py",
                      "rank processes print tensors with torch's default options, not the "
                      "caller's torch.set_printoptions", _print_options)


def tensor_print_options() -> dict[str, Any] | None:
    """torch's print options now (the keywords of ``torch.set_printoptions``: precision,
    threshold, edgeitems, linewidth, sci_mode); None when they cannot be read."""
    get = PRINT_OPTIONS.get()
    return None if get is None else dict(get())
