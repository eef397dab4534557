"""torch.distributed's private process-group names gnnorch uses, checked once, failing closed.

The default group's store (the launcher's rendezvous store: the watchdog's heartbeats and the
node layout live there), its timeout (a side group gets the same one), and the non-blocking
abort of NCCL groups when another rank failed. Each is looked up on first use; none is touched
at import.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable

import torch

from .registry import CompatError, Missing, Probe

__all__ = ["default_store", "default_group_timeout", "abort_process_group"]


def _c10d() -> Any:
    from torch.distributed import distributed_c10d

    return distributed_c10d


def _callable_of(name: str) -> Callable[[], Callable[..., Any]]:
    def resolve() -> Callable[..., Any]:
        fn = getattr(_c10d(), name)
        if not callable(fn):
            raise Missing(f"torch.distributed.distributed_c10d.{name} is not callable")
        return fn
    return resolve


DEFAULT_STORE = Probe(
    "torch.distributed.distributed_c10d._get_default_store", "execute/world.py",
    "a world of several ranks cannot start: CompatError names the missing function",
    _callable_of("_get_default_store"))

DEFAULT_GROUP = Probe(
    "torch.distributed.distributed_c10d._get_default_group (._get_backend(cpu)"
    ".options._timeout)", "intercept/exchange.py",
    "the feature exchange's gloo group gets torch's default timeout, not the run's "
    "collective_timeout", _callable_of("_get_default_group"))

ABORT = Probe(
    "torch.distributed.distributed_c10d._abort_process_group", "execute/watchdog.py",
    "a rank stopped because another failed is not aborted out of a blocked NCCL call; it "
    "leaves through the watchdog's grace-period exit instead", _callable_of(
        "_abort_process_group"))


def default_store() -> Any:
    """The default process group's store; raises `CompatError` when torch hides it."""
    get = DEFAULT_STORE.get()
    if get is None:
        raise CompatError(f"gnnorch needs the default process group's store to coordinate "
                          f"ranks; {DEFAULT_STORE.name} is unavailable ({DEFAULT_STORE.reason})")
    return get()


def default_group_timeout() -> datetime.timedelta | None:
    """The default group's timeout; None where torch does not expose it (reason recorded)."""
    get = DEFAULT_GROUP.get()
    if get is None or not torch.distributed.is_initialized():
        return None
    try:
        timeout = get()._get_backend(torch.device("cpu")).options._timeout
    except Exception as error:  # noqa: BLE001 - a private attribute chain: record and skip
        DEFAULT_GROUP.mark_missing(f"reading the default group's timeout failed: "
                                   f"{type(error).__name__}: {error}")
        return None
    if not isinstance(timeout, datetime.timedelta):
        DEFAULT_GROUP.mark_missing(f"the default group's options._timeout is a "
                                   f"{type(timeout).__name__}, not a timedelta")
        return None
    return timeout


def abort_process_group() -> bool:
    """Abort the default group's pending NCCL work (best effort); whether it was tried."""
    abort = ABORT.get()
    if abort is None:
        return False
    abort()
    return True
