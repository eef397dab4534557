"""Starting p rank processes from the caller's process and watching them until they finish.

Invariants: on return or on any exception (a rank's error, a rank's death, Ctrl-C, a start
time-out), no rank process and none of its DataLoader workers is left behind: each rank leads its
own process group, which is terminated, then killed. A rank's death is noticed within a poll
interval (0.2 s); a failure the ranks' watchdogs post in the launch's store (`failure_key`: a
rank silent past its heartbeat bound, e.g. frozen) fails the launch 3 s later if no rank has
reported an error by then (every gnnorch collective is bounded as well: docs/reliability.md). Rank 0's stdout/stderr are forwarded live to the caller's `sys.stdout` /
`sys.stderr` (or, with `LaunchSpec.rank0_log`, written to `<log_dir>/rank0.log`); other ranks
write to `<log_dir>/rank<r>.log`. Rank 0's log records and warnings, when its output is the
caller's, are handled by the caller's own handlers and ``warnings.showwarning`` (`relay`); every
rank takes over the caller's logging layout.

What each rank runs is a picklable *runner* (`gnnorch.launch.worker`): this module starts,
feeds and watches processes and knows nothing of what they compute.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from multiprocessing.connection import Connection, Listener, wait
from pathlib import Path
from typing import IO, Any, Callable

from ..errors import RankDiedError, RankFailedError, RankStartError, RemoteTraceback
from . import relay, serialize
from .plan import CorePlan, RankCores
from .start import RankHandle, RankStarter

POLL_SECONDS = 0.2
POSTED_GRACE_SECONDS = 3.0   # a posted failure waits this long for the rank's own error
TERMINATE_GRACE_SECONDS = 3.0
#: what ``inspect`` says when it cannot read a class's or a function's source
_SOURCE_LOST = re.compile(r"source code|class definition|get source for|source access")
SOURCE_HINT = (
    "[gnnorch] a class or function defined in the script you ran (its __main__) reaches "
    "the rank processes by value, without its source file, so `torch.jit.script` and "
    "`inspect.getsource` cannot read it there. Define it in a module your script imports, "
    "or run with processes=1 (one process keeps your __main__).")


@dataclasses.dataclass
class LaunchSpec:
    """How to run one multi-rank launch."""

    plan: CorePlan
    cores: list[RankCores] | None     # None: no binding
    log_dir: Path
    backend: str = "gloo"
    gpus: list[int] | None = None     # one visible GPU per rank (nccl)
    start_timeout: float = 120.0
    collective_timeout: float = 1800.0
    rank0_log: bool = False           # rank 0's output to <log_dir>/rank0.log, not the caller
    # a key of the launch's store where a rank's watchdog posts the run's failure ("rank r:
    # why", e.g. a rank silent past its heartbeat bound: frozen, not dead); None: not watched
    failure_key: str | None = None
    # "warm": ranks forked by this process's pre-imported zygote where it is safe
    # (`launch.zygote`); "fresh": every rank a new interpreter
    rank_start: str = "warm"


@dataclasses.dataclass
class LaunchResult:
    value: Any
    summaries: dict[int, Any]         # rank -> the summary its runner returned
    wall_seconds: float
    rank_start: str = ""              # warm (forked by the zygote) or fresh, and why


class _Rank:
    def __init__(self, rank: int, proc: RankHandle, log_path: Path | None) -> None:
        self.rank, self.proc, self.log_path = rank, proc, log_path
        self.conn: Connection | None = None
        self.final: tuple | None = None      # the rank's final message
        self.pumps: list[threading.Thread] = []

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)


def _pump(src: IO[bytes], write: Callable[[str], Any], flush: Callable[[], Any]) -> None:
    for line in iter(src.readline, b""):
        write(line.decode(errors="replace"))
        flush()
    src.close()


def _receive_final(conn: Connection) -> tuple | None:
    """A rank's final message, or None once the relayed messages (`relay.RELAYED`) that had
    arrived, or that arrive within a poll interval, are handled: a rank that logs without
    pause is read at its pace, and deaths are still checked every interval."""
    deadline = time.monotonic() + POLL_SECONDS
    while True:
        message = conn.recv()
        if message[0] not in relay.RELAYED:
            return message
        relay.deliver(message)
        if time.monotonic() > deadline or not conn.poll():
            return None


class RankGroup:
    """One launch of `spec.plan.processes` rank processes, each running
    ``runner(process, fn, *args, **kwargs)`` -> (value, summary) (see `gnnorch.launch.worker`)."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.ranks: list[_Rank] = []
        self._starter: RankStarter | None = None

    def run(self, runner: Callable, fn: Callable, args: tuple, kwargs: dict) -> LaunchResult:
        """Rank 0's value, every rank's summary and the wall seconds. `runner` travels by
        value (cloudpickle); `fn`, `args`, `kwargs` as the user's payload (tensors through
        shared memory, but a model's and an optimizer's state a copy in ranks other than 0:
        `serialize.dumps_payloads`)."""
        import torch.distributed as dist

        start = time.perf_counter()
        spec = self.spec
        spec.log_dir.mkdir(parents=True, exist_ok=True)
        # The caller's own key: torch's shared-memory handles are served by multiprocessing's
        # resource sharer, which authenticates with it.
        authkey = bytes(multiprocessing.current_process().authkey)
        address = str(spec.log_dir / f"gnnorch-{os.getpid()}-{secrets.token_hex(4)}.sock")
        store = dist.TCPStore("127.0.0.1", 0, None, True,
                              timeout=timedelta(seconds=spec.start_timeout),
                              wait_for_workers=False)
        listener = Listener(address, family="AF_UNIX", authkey=authkey)
        try:
            payloads = serialize.dumps_payloads(fn, args, kwargs, spec.plan.processes)
            runner_bytes = serialize.dumps_runner(runner)
            layout_bytes = serialize.dumps_runner(relay.LoggingLayout.capture())
            cuda = spec.backend == "nccl" or spec.gpus is not None
            self._starter = RankStarter(spec.rank_start, cuda, spec.start_timeout)
            for rank in range(spec.plan.processes):
                self._start(rank, address, authkey, store.port)
            self._accept(listener)
            for r in self.ranks:
                assert r.conn is not None
                try:
                    r.conn.send((list(sys.path), os.getcwd(), layout_bytes))
                    r.conn.send_bytes(runner_bytes)
                    r.conn.send_bytes(payloads[r.rank])
                except OSError:
                    self._wait_exit(r, timeout=5)
                    raise self._death(r) from None
            del payloads
            value = self._watch(store)
            summaries = {r.rank: (r.final[2] if r.rank == 0 else r.final[1]) for r in self.ranks}
            return LaunchResult(value, summaries, time.perf_counter() - start,
                                self._starter.how)
        finally:
            self._stop_all()
            listener.close()
            try:
                os.unlink(address)
            except OSError:
                pass
            del store

    # -- start ----------------------------------------------------------------------------
    def _start(self, rank: int, address: str, authkey: bytes, store_port: int) -> None:
        spec = self.spec
        cores = spec.cores[rank] if spec.cores is not None else None
        rank_spec = {
            "rank": rank, "world_size": spec.plan.processes, "address": address,
            "plan": list(spec.plan.as_tuple()), "cores": cores.to_dict() if cores else None,
            "backend": spec.backend, "store_port": store_port,
            "start_timeout": spec.start_timeout, "collective_timeout": spec.collective_timeout,
            "relay": rank == 0 and not spec.rank0_log,   # its output is the caller's (`relay`)
        }
        env = dict(os.environ)
        env.update(GNNORCH_RANK_SPEC=json.dumps(rank_spec), PYTHONUNBUFFERED="1",
                   OMP_NUM_THREADS=str(spec.plan.threads))
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if spec.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(spec.gpus[rank])
        log_path = None if rank == 0 and not spec.rank0_log else spec.log_dir / f"rank{rank}.log"
        assert self._starter is not None
        proc, out, err = self._starter.start(env, authkey, log_path)
        r = _Rank(rank, proc, log_path)
        if out is not None and err is not None:
            r.pumps = [
                threading.Thread(target=_pump, args=(out, sys.stdout.write, sys.stdout.flush),
                                 daemon=True),
                threading.Thread(target=_pump, args=(err, sys.stderr.write, sys.stderr.flush),
                                 daemon=True),
            ]
            for t in r.pumps:
                t.start()
        self.ranks.append(r)

    def _accept(self, listener: Listener) -> None:
        """Accept one authenticated connection per rank, failing fast if a rank dies first."""
        accepted: queue.Queue = queue.Queue()

        def accept_all() -> None:
            for _ in self.ranks:
                try:
                    accepted.put(listener.accept())
                except OSError as exc:  # listener closed after a failure
                    accepted.put(exc)
                    return

        threading.Thread(target=accept_all, name="gnnorch-accept", daemon=True).start()
        deadline = time.monotonic() + self.spec.start_timeout
        pending = {r.rank for r in self.ranks}
        while pending:
            try:
                conn = accepted.get(timeout=POLL_SECONDS)
            except queue.Empty:
                self._check_deaths()
                if time.monotonic() > deadline:
                    raise RankStartError(
                        f"ranks {sorted(pending)} did not connect within "
                        f"{self.spec.start_timeout:.0f} s (logs: {self.spec.log_dir})") from None
                continue
            if isinstance(conn, BaseException):
                raise RankStartError(f"accepting rank connections failed: {conn}")
            _, rank, _pid = conn.recv()
            self.ranks[rank].conn = conn
            pending.discard(rank)

    # -- watch ----------------------------------------------------------------------------
    def _watch(self, store: Any = None) -> Any:
        """Receive each rank's final message; raise at the first error or death, or when a
        failure posted at `spec.failure_key` is not followed by a rank's error within
        `POSTED_GRACE_SECONDS` (the rank it names may be frozen: it reports nothing)."""
        waiting = {r.conn: r for r in self.ranks if r.conn is not None}
        posted_at: float | None = None
        while waiting:
            for conn in wait(list(waiting), timeout=POLL_SECONDS):
                r = waiting.pop(conn)
                try:
                    message = _receive_final(conn)
                except (EOFError, OSError):
                    r.final = None
                    self._wait_exit(r)
                    raise self._death(r) from None
                if message is None:   # only rank 0's log records or warnings, handled
                    waiting[conn] = r
                    continue
                r.final = message
                if r.final[0] == "error":
                    raise self._remote_error(r)
            self._check_deaths(exclude_finished=True)
            posted_at = self._check_posted(store, posted_at)
        for r in self.ranks:
            self._wait_exit(r)
        for r in self.ranks:
            for t in r.pumps:
                t.join(timeout=5)
        value_bytes = self.ranks[0].final[1]
        return serialize.loads(value_bytes)

    def _check_posted(self, store: Any, posted_at: float | None) -> float | None:
        key = self.spec.failure_key
        if key is None or store is None:
            return None
        try:
            if not store.check([key]):
                return None
            posted = store.get(key).decode(errors="replace")
        except Exception:  # noqa: BLE001 - the store is this process's own: never expected
            return posted_at
        now = time.monotonic()
        if posted_at is None:
            return now
        if now - posted_at > POSTED_GRACE_SECONDS:
            raise RankFailedError(f"{posted} (posted by the ranks' watchdog; no rank reported an "
                                  f"error within {POSTED_GRACE_SECONDS:g} s); the other ranks "
                                  f"were stopped")
        return posted_at

    def _check_deaths(self, exclude_finished: bool = False) -> None:
        for r in self.ranks:
            if exclude_finished and r.final is not None:
                continue
            if r.proc.poll() is not None:
                # a final message may still be in flight: give it a moment
                if r.conn is not None and r.conn.poll(0.5):
                    continue
                raise self._death(r)

    def _wait_exit(self, r: _Rank, timeout: float = 30.0) -> None:
        try:
            r.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    def _death(self, r: _Rank) -> RankDiedError:
        code = r.proc.poll()
        if code is None:
            how = "closed its connection without reporting"
        elif code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code} without reporting"
        tail = r.log_tail()
        where = f"; last lines of {r.log_path}:\n{tail}" if tail else ""
        return RankDiedError(f"rank {r.rank} of {len(self.ranks)} (pid {r.proc.pid}) {how}; "
                             f"the other ranks were stopped{where}")

    def _remote_error(self, r: _Rank) -> BaseException:
        _, exc_bytes, type_name, message, text = r.final
        exc: BaseException | None = None
        if exc_bytes is not None:
            try:
                exc = serialize.loads(exc_bytes)
            except Exception:  # noqa: BLE001
                exc = None
        if not isinstance(exc, BaseException):
            exc = RankFailedError(f"rank {r.rank} raised {type_name}: {message}")
        note = f"[gnnorch] raised in rank {r.rank} of {len(self.ranks)}; the other ranks were stopped"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
            if isinstance(exc, OSError) and _SOURCE_LOST.search(message):
                exc.add_note(SOURCE_HINT)
        exc.__cause__ = RemoteTraceback(f"traceback in rank {r.rank}:\n{text}")
        return exc

    # -- stop -----------------------------------------------------------------------------
    def _stop_all(self) -> None:
        """Terminate, then kill, every rank's process group that is still alive."""
        alive = [r for r in self.ranks if r.proc.poll() is None]
        for r in self.ranks:
            _signal_group(r.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        for r in alive:
            try:
                r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for r in self.ranks:
            _signal_group(r.proc.pid, signal.SIGKILL)
            try:
                r.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if r.conn is not None:
                r.conn.close()
        for r in self.ranks:
            for t in r.pumps:
                t.join(timeout=2)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
