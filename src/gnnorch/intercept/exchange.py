"""The feature exchange between ranks: rounds of all-to-all collectives on a process group of
their own, issued by one background thread in submission order.

One *round* (`GroupExchange.round`) is three `all_to_all_single` calls on the group (gloo on
CPU; gloo implements all-to-all with split sizes):

1. a header, 4 int64 per peer: how many ids this rank asks of the peer, whether this rank is
   *done* with the current epoch, the epoch's *tag* (store and epoch number), and how many
   ids this rank asks in all (so every rank knows when nobody asks anything: then the round
   ends here, on every rank);
2. the ids asked, grouped by owner (split sizes from the header);
3. the answers: each owner's rows for the ids it received, as raw bytes.

Invariants:
* every rank issues the same rounds in the same order: all rounds of a run go through one
  `SerialWorker` thread per rank, in the order the rank's main thread submitted them, and
  the main threads of all ranks run the same code over the same loaders (sharded training
  epochs have equal batch counts; evaluation epochs run every seed on every rank);
* a rank whose epoch ended keeps taking part in rounds, marked done and asking for nothing,
  serving the others, until a round in which every rank is done (`drain`): ranks with
  unequal batch counts in one epoch finish instead of hanging;
* a round whose tags differ between ranks (ranks iterating different loaders or epochs)
  raises `RuntimeError` in the rank that sees it instead of mixing up rows;
* the group is used by the worker thread only, so its collectives never interleave with the
  main thread's (gradient averaging on the default group).
"""
from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from ..compat import distributed as compat_distributed


class SerialWorker:
    """One daemon thread running submitted calls in submission order (a stuck collective
    never blocks the interpreter's exit)."""

    def __init__(self, name: str = "gnnorch-feature-fetch") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self.busy_seconds = 0.0

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            start = time.perf_counter()
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)
            finally:
                self.busy_seconds += time.perf_counter() - start

    def submit(self, fn: Callable, *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((future, fn, args))
        return future

    def close(self, timeout: float = 5.0) -> bool:
        """Stop after the calls already submitted; whether the thread ended in `timeout`."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


class GroupExchange:
    """Rounds of the exchange protocol on `group` (see the module docstring)."""

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group, self.rank, self.world_size = group, rank, world_size

    @classmethod
    def create(cls, rank: int, world_size: int) -> "GroupExchange":
        """A new gloo group over every rank of the default group, with the default group's
        timeout (the run's `collective_timeout`) where torch says it (a collective call:
        every rank creates it at the same point of the same code)."""
        return cls(dist.new_group(backend="gloo", timeout=_default_timeout()), rank, world_size)

    def round(self, tag: int, done: bool, counts: list, ids: Tensor,
              serve: Callable[[Tensor], Tensor], row_bytes: int) -> tuple[Tensor, bool, int]:
        """One round: (fetched rows as ``uint8 [sum(counts), row_bytes]`` in the order of
        `ids`, whether every rank was done, rows this rank served)."""
        header = torch.zeros(self.world_size, 4, dtype=torch.long)
        header[:, 0] = torch.tensor(counts, dtype=torch.long)
        header[:, 1] = int(done)
        header[:, 2] = tag
        header[:, 3] = sum(counts)
        peers = torch.empty_like(header)
        dist.all_to_all_single(peers, header, group=self.group)
        if bool((peers[:, 2] != tag).any()):
            raise RuntimeError(
                f"rank {self.rank}: the ranks fetch features for different loader epochs "
                f"(tags {peers[:, 2].tolist()}, this rank's {tag}): with "
                f"partition_features every rank must iterate the same loaders in the same "
                f"order")
        finished = bool(peers[:, 1].all())
        if int(peers[:, 3].sum()) == 0:   # every rank knows: nobody asks for anything
            return torch.empty(0, row_bytes, dtype=torch.uint8), finished, 0
        asked = peers[:, 0].tolist()
        requests = torch.empty(sum(asked), dtype=torch.long)
        dist.all_to_all_single(requests, ids.long().contiguous(), output_split_sizes=asked,
                               input_split_sizes=list(counts), group=self.group)
        answer = serve(requests).reshape(-1)
        fetched = torch.empty(sum(counts) * row_bytes, dtype=torch.uint8)
        dist.all_to_all_single(fetched, answer, output_split_sizes=[c * row_bytes for c in counts],
                               input_split_sizes=[c * row_bytes for c in asked],
                               group=self.group)
        return fetched.view(-1, row_bytes), finished, len(requests)

    def agree(self, value: Any) -> list:
        """Every rank's `value` (picklable) on this group, in rank order."""
        out: list = [None] * self.world_size
        dist.all_gather_object(out, value, group=self.group)
        return out

    def destroy(self) -> None:
        try:
            dist.destroy_process_group(self.group)
        except Exception:  # noqa: BLE001 - at the end of a run; a dead peer must not raise
            pass


def _default_timeout() -> Any:
    """The default group's timeout (a `timedelta`), None where torch does not expose it."""
    return compat_distributed.default_group_timeout()   # private names: gnnorch.compat
