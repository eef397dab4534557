"""A bounded producer thread in front of a batch iterator: batch k+1 is drawn (sampled,
gathered) and handed to `transfer` (e.g. copied to the GPU on a side stream) while the consumer
trains on batch k.

Invariants:
* order is kept: the consumer receives exactly the source's batches, in order, each once;
* at most ``depth`` batches are produced ahead of the consumer (memory is bounded);
* an exception in the source or in `transfer` reaches the consumer at the position where it
  happened (after the batches produced before it), with its traceback;
* `close()` (also called when the consumer breaks out of its loop and the generator is
  closed, or at the end of the source) stops the producer after the batch it is drawing,
  drops what was produced ahead and joins the thread: nothing keeps running afterwards, and the
  source iterator is only ever advanced from one thread at a time;
* with `ready` given, each batch is passed through it in the consumer's thread before it is
  returned (e.g. making the current CUDA stream wait for the copy's event);
* with `produce_in` given, the producer thread runs its whole loop inside the context it makes
  (e.g. the training device and a side CUDA stream: the thread's own current stream, so the
  source's kernels and copies never queue behind the trainer's);
* `wait_s` is the time the consumer spent blocked waiting for a batch (the part of the
  producer's work that did not overlap the consumer's), `produced` the batches produced;
* `drawn_ahead()` lists, from any thread, the batches produced and not yet taken, in the order
  the consumer will take them (a cache refreshes the rows they will read before they arrive).

What overlaps: everything the source does in `__next__` (sampling in the trainer process,
feature gathering, collation) and `transfer`, with the consumer's work between two `next`
calls. Torch releases the GIL inside its operators, so on CPU the overlap is real where the
two sides spend their time in torch ops; Python-heavy producers contend for the GIL.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any, Callable, ContextManager, Iterable, Iterator

__all__ = ["Prefetcher"]

_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Prefetcher:
    """Iterate `source` through a producer thread (see the module docstring)."""

    def __init__(self, source: Iterable[Any], transfer: Callable[[Any], Any] | None = None,
                 depth: int = 2, ready: Callable[[Any], Any] | None = None,
                 name: str = "gnnorch-prefetch",
                 produce_in: Callable[[], ContextManager[Any]] | None = None) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._source = iter(source)
        self._transfer = transfer
        self._ready = ready
        self._produce_in = produce_in
        self.wait_s = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self.produced = 0
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        """Hand `item` to the consumer unless stopped; False once stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            with self._produce_in() if self._produce_in is not None else contextlib.nullcontext():
                self._produce_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self._put(_Failure(exc))
            return
        self._put(_DONE)

    def _produce_all(self) -> None:
        """Draw, transfer and queue every batch (until the source ends or a stop)."""
        for batch in self._source:
            if self._stop.is_set():
                return
            if self._transfer is not None:
                batch = self._transfer(batch)
            self.produced += 1
            if not self._put(batch):
                return

    def drawn_ahead(self) -> list[Any]:
        """The batches (after `transfer`, before `ready`) waiting for the consumer, next
        first: a snapshot taken under the queue's own lock (``queue.Queue.mutex``, the lock
        its ``put`` and ``get`` hold: a copy kept beside the queue could miss a batch the
        consumer takes between the producer's ``put`` and the copy's update); the end marker
        and failures are not batches."""
        with self._queue.mutex:
            items = list(self._queue.queue)
        return [item for item in items if item is not _DONE and not isinstance(item, _Failure)]

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        start = time.perf_counter()
        item = self._queue.get()
        self.wait_s += time.perf_counter() - start
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        return self._ready(item) if self._ready is not None else item

    def close(self, timeout: float = 60.0) -> None:
        """Stop the producer, drop batches produced ahead, join the thread."""
        if self._finished:
            return
        self._finished = True
        self._stop.set()
        while self._thread.is_alive():
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)
            timeout -= 0.05
            if timeout <= 0:
                break

    def __del__(self) -> None:
        try:
            self.close(timeout=1.0)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
