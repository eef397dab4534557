"""A guard on ``os.fork`` for rank processes: no fork of the user's returns a child that is
stuck inside CPython's after-fork reinitialisation.

The hazard (CPython gh-112275; `scripts/fork_race.py` hangs about 3 forks in 1000 on 3.11.2 and
3.11.7 and 1 in 2000 on 3.10.13 beside threads entering Python from C, none on 3.12.1 and
3.13.0): a forked child resets the interpreter's thread-state list lock (``HEAD_LOCK``) only
*after* it has taken that lock to delete the other threads' states. A thread of the parent that
held the lock at the instant of the fork leaves it locked for ever in the child, which then
never returns from ``os.fork()``. A C++ thread takes the lock without the GIL when it enters
Python for the first time (``PyThreadState_New``), and torch's collective threads do so after
every collective: gloo's worker thread destroys the finished work, whose tensors' last C++
reference hands their Python objects back under a fresh thread state
(``TensorImpl::decref_pyobject``). A rank that runs collectives while the user's loader forks
its workers (every epoch start of a loader with workers) therefore sometimes gets a worker that
never starts, and torch's DataLoader waits for it without a timeout: a silent hang.

The guard: the child announces, from an after-fork hook that CPython runs only once its
reinitialisation is done, that it got out; the parent waits for that announcement. A child
that has not announced within `ANNOUNCE_SECONDS` is stopped, checked once more, and killed: a
stuck child has run none of the program's code (a merely slow one at most the after-fork hooks
registered before the guard's), so the fork is simply made again, at most `ATTEMPTS` times.

Invariants:
* ``guarded_fork()`` returns 0 in a child and, in the parent, the pid of a child that
  announced or that ended on its own (a child that crashes is the caller's to see, as with
  ``os.fork``); it never returns the pid of a child it killed, and reaps every child it kills;
* forks through the guard are serialised; a child's guard state is fresh (its lock new, no
  pending announcement), so a child may fork through the guard in turn;
* an exception while the parent waits (Ctrl-C) kills and reaps the child before it propagates:
  no child the caller never heard of outlives the call;
* installing twice is one installation; `uninstall` restores ``os.fork`` only if it is still
  the guard's (something that wrapped it afterwards is left alone).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator

from ..errors import ForkStuckError
from .readable import readable

#: How long a child may take to get out of CPython's after-fork reinitialisation. A healthy
#: child of a torch process takes about 5 ms; a stuck one never gets out. Killing a slow
#: child that had not announced only costs a second fork.
ANNOUNCE_SECONDS = 5.0
#: Forks tried before `ForkStuckError` (each try is stuck independently, about 3 in 1000).
ATTEMPTS = 4


def affected(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this CPython may leave a forked child stuck (see the module docstring): every
    version before 3.12 (3.10 and 3.11 reproduced it; older ones are guarded rather than
    trusted)."""
    return version < (3, 12)


@dataclasses.dataclass
class ForkGuardStats:
    """What the guard did in this process: forks made, children found stuck and killed, and
    the seconds the parent spent waiting for announcements."""

    forks: int = 0
    stuck_killed: int = 0
    waited_seconds: float = 0.0

    def since(self, earlier: "ForkGuardStats") -> "ForkGuardStats":
        """What the guard did after `earlier` was taken."""
        return ForkGuardStats(self.forks - earlier.forks,
                              self.stuck_killed - earlier.stuck_killed,
                              self.waited_seconds - earlier.waited_seconds)

    def to_dict(self) -> dict:
        return {"forks": self.forks, "stuck_killed": self.stuck_killed,
                "waited_seconds": round(self.waited_seconds, 4)}


class _Guard:
    """The process's one guard: the original fork, the pending announcement pipe, counters."""

    def __init__(self) -> None:
        self.original: Callable[[], int] | None = None   # os.fork before installation
        self.lock = threading.Lock()
        self.pending: tuple[int, int] | None = None       # (read, write) of the fork in flight
        self.hook_registered = False
        self.stats = ForkGuardStats()


_GUARD = _Guard()


def _announce_in_child() -> None:
    """After-fork hook (child): say we got out, then forget the parent's guard state."""
    pending = _GUARD.pending
    _GUARD.pending = None
    _GUARD.lock = threading.Lock()      # the parent holds its lock across the fork
    _GUARD.stats = ForkGuardStats()
    if pending is not None:
        read_fd, write_fd = pending
        try:
            os.write(write_fd, b"\x01")
        finally:
            os.close(write_fd)
            os.close(read_fd)


def _wait_announced(read_fd: int, timeout: float) -> bool:
    """Whether the child announced (or ended: end of file) within `timeout` seconds (a rank
    with many open files gets pipe descriptors above select's 1024: `readable`)."""
    return readable(read_fd, timeout)


def _kill_and_reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:   # reaped by someone else already
        pass


def _fork_once(original: Callable[[], int]) -> int | None:
    """One fork: the child's pid once it announced, 0 in the child, None if it was stuck."""
    read_fd, write_fd = os.pipe()
    _GUARD.pending = (read_fd, write_fd)
    try:
        pid = original()
    except BaseException:
        _GUARD.pending = None
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:
        return 0                         # the hook already announced and closed the pipe
    _GUARD.pending = None
    os.close(write_fd)
    start = time.perf_counter()
    try:
        if _wait_announced(read_fd, ANNOUNCE_SECONDS):
            return pid
        os.kill(pid, signal.SIGSTOP)     # not a moment more of running, then look once more
        if _wait_announced(read_fd, 0):
            os.kill(pid, signal.SIGCONT)
            return pid
        _kill_and_reap(pid)
        _GUARD.stats.stuck_killed += 1
        return None
    except BaseException:
        _kill_and_reap(pid)
        raise
    finally:
        _GUARD.stats.waited_seconds += time.perf_counter() - start
        os.close(read_fd)


def guarded_fork() -> int:
    """``os.fork()`` that never returns a child stuck in CPython's after-fork (see above)."""
    original = _GUARD.original
    if original is None:
        raise RuntimeError("gnnorch's fork guard is not installed")
    with _GUARD.lock:
        for _ in range(ATTEMPTS):
            pid = _fork_once(original)
            if pid is not None:
                if pid:
                    _GUARD.stats.forks += 1
                return pid
    raise ForkStuckError(
        f"{ATTEMPTS} forks in a row left a child stuck inside CPython's after-fork "
        f"reinitialisation (CPython gh-112275, Python {sys.version.split()[0]}); each was "
        f"killed. Use Python 3.12 or newer, or a loader with multiprocessing_context='spawn'")


def install() -> bool:
    """Route ``os.fork`` through the guard in this process (on affected CPythons); whether it
    is installed now."""
    if not affected() or not hasattr(os, "register_at_fork"):
        return False
    if _GUARD.original is not None:
        return True
    if not _GUARD.hook_registered:   # hooks cannot be unregistered: once per process
        os.register_at_fork(after_in_child=_announce_in_child)
        _GUARD.hook_registered = True
    _GUARD.original = os.fork
    os.fork = guarded_fork
    return True


def uninstall() -> None:
    """Give ``os.fork`` back as it was (only while it is still the guard's)."""
    if _GUARD.original is None:
        return
    if os.fork is guarded_fork:
        os.fork = _GUARD.original
    _GUARD.original = None


def stats() -> ForkGuardStats:
    """This process's counters (a copy)."""
    return dataclasses.replace(_GUARD.stats)


@contextlib.contextmanager
def guarding(enabled: bool = True) -> Iterator[bool]:
    """The guard for the block when `enabled` (yields whether it is installed); an
    installation made before the block is kept after it."""
    already = _GUARD.original is not None
    installed = install() if enabled else already
    try:
        yield installed
    finally:
        if installed and not already:
            uninstall()
