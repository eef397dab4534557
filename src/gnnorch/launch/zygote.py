"""Warm rank starts, the caller's side: one pre-imported interpreter (the *zygote*) per
caller's process forks the rank processes of every launch, so a rank starts in milliseconds
instead of paying the import of torch, PyG and gnnorch (about 6 s of one core each here; every
rank of every launch paid it). The zygote's own side is `gnnorch.launch.zygote_server`.

Why a separate interpreter and not a fork of the caller: the caller has run torch, so it has an
OpenMP pool and other threads, and a child forked from it can hang (`gnnorch.launch.fork_guard`).
The zygote is started fresh (``python -c`` `ZYGOTE_COMMAND`, ``OMP_NUM_THREADS=1`` so that
importing torch starts no OpenMP worker), imports what a rank imports, runs nothing, and forks
only while it is provably a safe parent. A rank still gets its plan's threads: the worker calls
``torch.set_num_threads(t)`` before the user's code, and every later thread of the rank takes
that count up at its first parallel region (torch's lazy per-thread initialisation), as in a
fresh interpreter started with ``OMP_NUM_THREADS=t``.

Invariants:
* **Fail closed.** The zygote forks only while `zygote_server.fork_hazards` finds nothing:
  one thread, the CUDA driver not loaded, torch's default generator untouched. Otherwise it
  says why at its hello and every launch starts fresh interpreters
  (`gnnorch.launch.start.RankStarter` gives the reason, reported in ``stats[r]["launch"]``).
  CUDA launches (nccl, one GPU per rank) always start fresh.
* **A child is a rank as a fresh interpreter would be:** its own session, stdin/stdout/stderr
  the fds the supervisor gave, the caller's current environment (the rank's keys included),
  ``sys.argv`` of a fresh one (`WORKER_ARGV`), its generators seeded as a fresh
  interpreter's are; then `gnnorch.launch.worker.main`, which never returns.
* **What the zygote imported must be what a fresh rank would import:** it is reused only while
  the interpreter, the working directory and the environment (less the keys a launch sets per
  rank, `PER_RANK_KEYS`) are those it started with; otherwise it is replaced before the launch
  (the old one *retired*: it forks nothing more and ends once no rank of it runs). A zygote that
  leaves a fork request unanswered is retired too: a late answer is never taken for a later
  request's.
* **No orphan.** The zygote exits when its connection to the caller closes (the caller exited or
  died); its children (ranks, in their own sessions) die with it (``PR_SET_PDEATHSIG``, set by
  the worker). Every child is reaped by the zygote, which reports its exit status
  (`subprocess` style: minus the signal) to the caller's `ForkedProcess`.

Protocol (a ``SOCK_SEQPACKET`` socket pair, one pickled message per packet): the zygote sends
``("hello", pid, hazards)``; the caller sends ``("fork", env)`` with three fds (stdin, stdout,
stderr) and receives ``("forked", pid)`` or ``("refused", reason)``; the zygote sends
``("exit", pid, code)`` whenever a child ends.
"""
from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time

import psutil

from .readable import readable
from .zygote_server import recv, send

#: The environment keys a launch sets per rank (`launch.supervisor`): they may differ from the
#: zygote's start without making its imports stale. ``PYTEST_CURRENT_TEST`` changes with every
#: test and is read by no import that matters to a rank.
PER_RANK_KEYS = frozenset({"GNNORCH_RANK_SPEC", "PYTHONUNBUFFERED", "OMP_NUM_THREADS",
                           "GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "PYTEST_CURRENT_TEST"})
#: Run first by the zygote and by a fresh rank (``python -c``): drop the entry the interpreter
#: put first on ``sys.path`` for ``-c`` (``''``, the working directory), unless it put none
#: (``-P`` / ``PYTHONSAFEPATH``, Python 3.11+). A rank imports torch and gnnorch as the caller
#: did, from its environment's paths: a file of the working directory named as a module they
#: import (PyG's benchmark folders hold a ``statistics.py``) is not taken for it. The rank takes
#: the caller's ``sys.path`` afterwards, for the user's code (`gnnorch.launch.worker`).
SAFE_PATH = "import sys; getattr(sys.flags, 'safe_path', False) or sys.path.pop(0); "
WORKER_ARGV = ["-c", SAFE_PATH + "from gnnorch.launch import worker; worker.main()"]
#: How the zygote starts (``-c``, not ``-m``: the package's __init__ imports this module, which
#: runpy would then execute a second time as ``__main__``).
ZYGOTE_COMMAND = SAFE_PATH + "from gnnorch.launch import zygote_server; zygote_server.main()"


class ForkedProcess:
    """A rank forked by the zygote, with the part of `subprocess.Popen` the supervisor uses
    (``pid``, ``poll``, ``wait``). Its exit status comes from the zygote, which reaps it; if
    the zygote itself is gone the rank died with it (killed: ``-SIGKILL``) once it is no
    longer found."""

    def __init__(self, pid: int, zygote: "Zygote") -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()
        self._zygote = zygote

    def _end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and self._zygote.lost and not _exists(self.pid):
            self._end(-9)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(WORKER_ARGV, timeout)
            self._ended.wait(0.1 if left is None else min(left, 0.1))
        assert self.returncode is not None
        return self.returncode


def _exists(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class ZygoteUnavailable(RuntimeError):
    """The zygote could not start or will not fork: its message says why."""


class Zygote:
    """The caller's handle on one zygote process (see the module docstring).

    One reader thread receives every message: it makes the `ForkedProcess` of a ``forked``
    reply and hands it to the waiting `fork`, and ends children on ``exit`` reports. The zygote
    sends a child's ``forked`` before it can reap it, so a child is always known before its
    exit is reported."""

    def __init__(self, env: dict[str, str], timeout: float) -> None:
        self.key = compatibility_key(env)
        self.lost = False
        self._retired = False
        self._lock = threading.Lock()
        self._replies: queue.Queue = queue.Queue()
        self._children: dict[int, ForkedProcess] = {}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        child_env = {k: v for k, v in env.items() if k not in PER_RANK_KEYS}
        child_env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                         GNNORCH_ZYGOTE_FD=str(theirs.fileno()))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE_COMMAND], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=None, env=child_env,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        self.pid = self._hello(timeout)
        threading.Thread(target=self._read, name="gnnorch-zygote", daemon=True).start()

    def _hello(self, timeout: float) -> int:
        """The zygote's pid once it has imported and found no fork hazard."""
        ready = readable(self._sock.fileno(), timeout)
        message = recv(self._sock)[0] if ready else None
        if message is not None and message[0] == "hello" and not message[2]:
            return int(message[1])
        self.close()
        if message is not None:
            why = "it would fork unsafely: " + "; ".join(message[2])
        elif not ready:
            why = f"it did not start within {timeout:.0f} s"
        else:
            why = (f"it exited while starting (code {self.proc.returncode}; its error, if any, "
                   "is above on stderr)")
        raise ZygoteUnavailable(why)

    def _read(self) -> None:
        while True:
            try:
                message, _ = recv(self._sock)
            except OSError:
                message = None
            if message is None:
                self.lost = True
                self._replies.put(None)
                return
            if message[0] == "exit":
                child = self._children.pop(message[1], None)
                if child is not None:
                    child._end(message[2])
                if self._retired and not self._children:
                    with contextlib.suppress(OSError):   # already closed by `retire`
                        self._sock.shutdown(socket.SHUT_RDWR)   # the zygote sees EOF: it ends
            elif message[0] == "forked":
                child = self._children[message[1]] = ForkedProcess(message[1], self)
                self._replies.put(child)
            else:
                self._replies.put(message)

    def alive(self) -> bool:
        """Whether it runs and may be asked to fork (not retired)."""
        return not self.lost and not self._retired and self.proc.poll() is None

    def retire(self) -> None:
        """Fork nothing more; end the zygote now if no child of it runs (or it is gone: its
        children went with it), else once the last has ended (they are not disturbed)."""
        self._retired = True
        if self.lost or not self._children:
            self.close()

    def running(self) -> bool:
        """Whether a child it forked has not yet been reported ended."""
        return bool(self._children)

    def fork(self, env: dict[str, str], stdio: tuple[int, int, int],
             timeout: float = 30.0) -> ForkedProcess:
        """A rank process with `env` and `stdio` (stdin, stdout, stderr: the caller keeps and
        closes its own copies). Raises `ZygoteUnavailable` if the zygote refuses or is gone."""
        with self._lock:
            if not self.alive():
                raise ZygoteUnavailable("the zygote has exited")
            try:
                send(self._sock, ("fork", env), stdio)
                reply = self._replies.get(timeout=timeout)
            except (OSError, queue.Empty):
                reply = None
            if isinstance(reply, ForkedProcess):
                return reply
            if reply is None:   # a late answer must not be taken for a later request's
                self.retire()
            why = reply[1] if reply is not None else f"no answer within {timeout:g} s"
            raise ZygoteUnavailable(f"the zygote did not fork: {why}")

    def close(self) -> None:
        """End the zygote (children still running die with it)."""
        self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_current: Zygote | None = None
_refused: dict[tuple, str] = {}    # compatibility key -> why its zygote is not used
_current_lock = threading.Lock()


def warm_zygote(env: dict[str, str], timeout: float) -> Zygote:
    """This process's zygote for `env`: the running one if it is alive and was started with
    the same interpreter, directory and environment (`compatibility_key`), else a new one (the
    old one retired: it ends once the ranks it still runs have ended). Raises
    `ZygoteUnavailable` with the reason when there is none to use: it could not start or found
    a hazard (remembered for this key: not retried)."""
    global _current
    key = compatibility_key(env)
    with _current_lock:
        if key in _refused:
            raise ZygoteUnavailable(_refused[key])
        if _current is not None and (_current.key != key or not _current.alive()):
            _current.retire()   # ends now, or after the ranks it still runs
            _current = None
        if _current is None:
            try:
                _current = Zygote(env, timeout)
            except ZygoteUnavailable as exc:
                _refused[key] = str(exc)
                raise
        return _current


def current_pid() -> int | None:
    """The pid of this process's zygote, if one runs."""
    zygote = _current
    return zygote.pid if zygote is not None and zygote.alive() else None


def compatibility_key(env: dict[str, str]) -> tuple:
    """What a zygote's imports depend on: the interpreter, the working directory and the
    environment less `PER_RANK_KEYS`."""
    return (sys.executable, os.getcwd(),
            tuple(sorted((k, v) for k, v in env.items() if k not in PER_RANK_KEYS)))

