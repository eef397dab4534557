"""One run's failure detector in one rank of an existing world (torchrun), through the store
of the world's default group (the launcher's rendezvous store under torchrun).

Invariants, for the run it watches:
* a rank whose run raises posts ``failed`` (``"rank r: what"``) before it re-raises; the first
  post wins (compare-and-set), so every rank names the same failing rank;
* every rank beats (a counter, every `interval` s, from a daemon thread) and watches its
  successor's beat: a successor silent for `dead_after` s is posted as the failure, and a
  store that stays unreachable that long stops this rank;
* a rank that sees another rank's failure posted is stopped: `RankStopped` is raised in its
  main thread at the next Python instruction (a simulated `STOP_SIGNAL` whose handler is
  installed for the run only, never while the main thread handles a failure already), the
  process group is aborted where torch can (nccl), and if the run has not ended `grace` s
  later (the main thread is blocked in a collective of a live peer) the process exits with
  status 1 after saying why, so no rank waits on a dead world past the collective timeout;
* after a communication error, `cause` looks for the rank that failed first: one that posted,
  or one whose beat stopped (a killed process) within `SETTLE` s;
* every beat also publishes where this rank's gradient seam is (`intercept.join.PROGRESS`), so
  a rank whose collective waited past the run's bound names the ranks that did not arrive and
  where each was (`whereabouts`) and reports it (`report`): every other rank is then stopped,
  the named one included.
`ExistingWorld` ranks run it with `stops=True`; our own rank processes (`RankProcesses`, through
`execute.watched`) with `stops=False`: there the supervisor stops the ranks. A world of one
rank has no watchdog.
"""
from __future__ import annotations

import _thread
import datetime
import os
import signal
import sys
import threading
import time
from typing import Any

import torch.distributed as dist

from ..intercept.join import PROGRESS

INTERVAL = 0.5      # seconds between beats and checks
SETTLE = 4.0        # seconds a failing rank looks for the rank that failed first
GRACE = 10.0        # seconds between stopping the main thread and leaving the process
STORE_TIMEOUT = 10  # seconds one store operation of the watchdog may take
SILENT = "died or stopped responding"
# only simulated (`_thread.interrupt_main`), never sent; None where the platform has none
STOP_SIGNAL = getattr(signal, "SIGUSR2", None)


def failure_key(token: str) -> str:
    """The store key (from the store's root) where the run `token`'s failure is posted."""
    return f"gnnorch/watchdog/{token}/failed"


class RankStopped(Exception):
    """Raised in a rank's main thread when another rank's failure was posted."""


def own_client(store: dist.Store) -> dist.Store:
    """A client of its own on the world's TCP store (so a slow operation never blocks the
    group's), else the store itself (a FileStore / HashStore is local)."""
    base = store
    while isinstance(base, dist.PrefixStore):
        base = base.underlying_store
    if isinstance(base, dist.TCPStore):
        return dist.TCPStore(base.host, base.port, is_master=False,
                             timeout=datetime.timedelta(seconds=STORE_TIMEOUT))
    return store


class Watchdog:
    """Beats, watches and stops one rank of one run (see the module docstring). Use as a
    context manager around the run; when the run raised, set `handling` first, then `cause`."""

    def __init__(self, store: dist.Store, token: str, rank: int, size: int, dead_after: float,
                 interval: float = INTERVAL, grace: float = GRACE, stops: bool = True) -> None:
        self.store = dist.PrefixStore(f"gnnorch/watchdog/{token}", store)   # keys: <prefix>/k
        self.rank, self.size = rank, size
        self.stops = stops                  # stop this rank when another's failure is posted
        self.reported = False               # this rank's main thread posted the failure
        self.dead_after, self.interval, self.grace = dead_after, interval, grace
        self.successor = (rank + 1) % size
        self.stopping: str | None = None    # another rank's failure that stopped this rank
        self.handling = False               # the main thread handles the run's failure
        self._stop = threading.Event()
        self._ended = threading.Event()     # the run (and its failure handling) is over
        self._lock = threading.Lock()       # orders a stop against the run's end
        self._thread: threading.Thread | None = None
        self._previous: Any = None          # STOP_SIGNAL's handler before the run
        self._installed = False

    # -- the run ------------------------------------------------------------------------
    def __enter__(self) -> "Watchdog":
        if (self.stops and STOP_SIGNAL is not None
                and threading.current_thread() is threading.main_thread()):
            self._previous = signal.signal(STOP_SIGNAL, self._on_stop_signal)
            self._installed = True
        self._beat()
        self._thread = threading.Thread(target=self._loop, name="gnnorch-watchdog",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        with self._lock:
            self._ended.set()
        if exc_type is None:    # a rank that ended well is not watched any more
            try:
                self.store.set(f"done/{self.rank}", "1")
            except Exception:  # noqa: BLE001 - the world may be gone already
                pass
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0 if exc_type else STORE_TIMEOUT + 1)
        if self._installed:
            signal.signal(STOP_SIGNAL, self._previous)
            self._installed = False

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        if self.stopping is not None and not self.handling and not self._ended.is_set():
            raise RankStopped(self.stopping)
        if self.stopping is None:   # a real STOP_SIGNAL, not ours: what it did before
            previous = self._previous
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

    # -- the thread ---------------------------------------------------------------------
    def _beat(self) -> None:
        self.store.add(f"beat/{self.rank}", 1)
        self.store.set(f"at/{self.rank}", PROGRESS.describe())

    def _loop(self) -> None:
        seen, since, unreachable = -1, time.monotonic(), None
        while not self._stop.wait(self.interval):
            try:
                self._beat()
                posted = self.posted()
                beat = self.store.add(f"beat/{self.successor}", 0)
                done = self.store.check([f"done/{self.successor}"])
                unreachable = None
            except Exception as exc:  # noqa: BLE001 - the store's host is gone or slow
                unreachable = unreachable or time.monotonic()
                if time.monotonic() - unreachable > self.dead_after:
                    self._stop_rank(f"the world's store is unreachable ({exc})")
                    return
                continue
            # another rank's failure, or this rank named by another (silent, or absent from
            # a collective): stop; never for what this rank's main thread posted itself
            if posted is not None and self.stops and not self.handling and not self.reported:
                self._stop_rank(posted)
                return
            now = time.monotonic()
            if beat != seen or done or self.successor == self.rank:
                seen, since = beat, now
            elif now - since > self.dead_after:
                self.post(self._silent(self.successor, now - since))

    @staticmethod
    def _silent(rank: int, seconds: float) -> str:
        return (f"rank {rank}: {SILENT} (no heartbeat for {seconds:.1f} s: a killed process, "
                f"or its node is gone)")

    def _stop_rank(self, why: str) -> None:
        """Another rank failed: stop this rank's run; leave if it does not end."""
        if not self.stops:
            return
        with self._lock:
            if self._ended.is_set():
                return
            self.stopping = why
            if self._installed:
                _thread.interrupt_main(STOP_SIGNAL)
        try:
            if dist.is_initialized() and dist.get_backend() == "nccl":
                from ..compat.distributed import abort_process_group

                abort_process_group()   # False where torch lacks it: the exit below then
        except Exception:  # noqa: BLE001 - best effort; the exit below is the guarantee
            pass
        if self._ended.wait(self.grace):
            return
        sys.stderr.write(f"[gnnorch] rank {self.rank} of {self.size}: stopping this process: "
                         f"{why}; the run did not end within {self.grace:g} s of being "
                         f"stopped\n")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(1)

    # -- failures -----------------------------------------------------------------------
    def posted(self) -> str | None:
        """The failure posted in this run, or None."""
        if not self.store.check(["failed"]):
            return None
        return self.store.get("failed").decode(errors="replace")

    def post(self, text: str) -> str:
        """Post a failure (``"rank r: ..."``) unless one was posted first; returns the one
        that stands."""
        return self.store.compare_set("failed", "", text).decode(errors="replace")

    def report(self, text: str) -> str:
        """Post a failure this rank's main thread found and raises itself (a collective that
        waited past the bound: `text` names the rank that did not arrive); the other ranks'
        watchdogs stop them, the named rank's included. Returns the failure that stands."""
        self.reported = True
        return self.post(text)

    def whereabouts(self) -> dict[int, str]:
        """Where each rank's gradient seam was at its latest beat (rank -> description)."""
        found = {}
        for rank in range(self.size):
            if self.store.check([f"at/{rank}"]):
                found[rank] = self.store.get(f"at/{rank}").decode(errors="replace")
        return found

    def cause(self, own: str, communication: bool) -> str:
        """The failure that stands, after this rank's run raised (`own`: its description,
        ``"rank r: ..."``). This rank's own error is posted at once. A communication error is
        another rank's doing: wait up to `SETTLE` s for that rank's post, or name the first
        rank whose beat stopped (a killed process) over 2 intervals; else post `own`."""
        try:
            if not communication:
                return self.post(own)
            start = time.monotonic()
            first = self._beats()
            while True:
                posted = self.posted()
                if posted is not None:
                    return posted
                now = time.monotonic()
                if now - start >= 2 * self.interval:
                    beats = self._beats()
                    stopped = [r for r in range(self.size) if r != self.rank
                               and beats[r] == first[r] and not self._done(r)]
                    if stopped:
                        return self.post(self._silent(stopped[0], now - start))
                if now - start > SETTLE:
                    return self.post(own)
                time.sleep(self.interval)
        except Exception:  # noqa: BLE001 - the store is gone: this rank's view is all there is
            return own

    def _beats(self) -> list[int]:
        return [self.store.add(f"beat/{r}", 0) for r in range(self.size)]

    def _done(self, rank: int) -> bool:
        return self.store.check([f"done/{rank}"])
