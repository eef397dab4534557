"""Starting one rank process: a fresh interpreter or a fork of the zygote, with its stdin
carrying the launch's key and its output piped to the caller or written to its log.

`RankStarter` decides once per launch how its ranks start (`LaunchSpec.rank_start`, and where
the zygote must step aside: CUDA ranks, a zygote that is unavailable or unsafe) and says why in
`how`, which a run reports as ``stats[r]["launch"]["rank_start"]``. If the zygote fails in the
middle of a launch, that rank and the later ones start fresh: ranks of both kinds join one
launch alike (they differ only in how the interpreter came to be).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Protocol

from . import zygote
from .zygote import WORKER_ARGV, ZygoteUnavailable


class RankHandle(Protocol):
    """A rank's process as the supervisor watches it: `subprocess.Popen` (a fresh interpreter)
    or `zygote.ForkedProcess` (forked by the zygote)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class RankStarter:
    """How the ranks of one launch start: `start` gives each its process."""

    def __init__(self, rank_start: str, cuda: bool, start_timeout: float) -> None:
        self._zygote: zygote.Zygote | None = None
        if rank_start == "fresh":
            self.how = "fresh (launch.rank_start='fresh')"
        elif cuda:
            self.how = ("fresh: CUDA ranks start fresh interpreters (ranks forked from the zygote "
                        "are not yet tested on a GPU)")
        else:
            try:
                self._zygote = zygote.warm_zygote(dict(os.environ), start_timeout)
                self.how = f"warm (forked by the zygote, pid {self._zygote.pid})"
            except ZygoteUnavailable as exc:
                self.how = f"fresh: {exc}"

    def start(self, env: dict[str, str], authkey: bytes, log_path: Path | None
              ) -> tuple[RankHandle, IO[bytes] | None, IO[bytes] | None]:
        """A rank process with `env`, `authkey` on its stdin, and its stdout and stderr written
        to `log_path`, or (None) piped back: then the pipes' read ends come with it."""
        stdin_read, stdin_write = os.pipe()
        ours: list[int] = [stdin_write]      # this process's ends
        theirs: list[int] = [stdin_read]     # the child's ends: closed here once it has them
        try:
            if log_path is None:
                out_read, out_write = os.pipe()
                err_read, err_write = os.pipe()
                ours += [out_read, err_read]
                theirs += [out_write, err_write]
                stdio = (stdin_read, out_write, err_write)
            else:
                log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                theirs.append(log_fd)
                stdio = (stdin_read, log_fd, log_fd)
            proc = self._process(env, stdio)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        with os.fdopen(stdin_write, "wb") as stdin:
            stdin.write(authkey.hex().encode() + b"\n")
        if log_path is not None:
            return proc, None, None
        return proc, os.fdopen(ours[1], "rb"), os.fdopen(ours[2], "rb")

    def _process(self, env: dict[str, str], stdio: tuple[int, int, int]) -> RankHandle:
        if self._zygote is not None:
            try:
                return self._zygote.fork(env, stdio)
            except ZygoteUnavailable as exc:
                self._zygote = None
                self.how = f"fresh: {exc}"
        return subprocess.Popen([sys.executable, *WORKER_ARGV], stdin=stdio[0], stdout=stdio[1],
                                stderr=stdio[2], env=env, start_new_session=True)
