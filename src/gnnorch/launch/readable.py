"""Waiting for a descriptor to become readable, whatever its number.

``select.select`` refuses descriptors numbered 1024 or above ("filedescriptor out of range"),
and a process that shares many tensors through file descriptors (torch's ``file_descriptor``
sharing strategy: one per tensor) or simply has many files open gets such numbers for the
sockets and pipes opened after them. ``poll`` has no such limit.
"""
from __future__ import annotations

import select

__all__ = ["readable"]


def readable(fd: int, timeout: float | None) -> bool:
    """Whether `fd` (a descriptor number, or an object with ``fileno()``) is readable (data,
    end of file or an error) within `timeout` seconds (None: wait as long as it takes)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000))))
