"""Holding back what the user's code writes in this process (muted runs, the tuner's default
run until it knows whether that run is the real one)."""
from __future__ import annotations

import io
import sys
import threading
from typing import Any


class OutputCapture:
    """Holds back what the user's code writes to sys.stdout / sys.stderr (in order) until
    `release` (write it out, then let output through) or `discard` (also on leaving a
    ``with`` block)."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, str]] = []
        self.lock = threading.Lock()
        self.real = (sys.stdout, sys.stderr)
        self.active = False

    def __enter__(self) -> "OutputCapture":
        self.real = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = _Held(self, 0), _Held(self, 1)
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.discard()

    def _restore(self) -> None:
        if self.active:
            sys.stdout, sys.stderr = self.real
            self.active = False

    def release(self) -> None:
        with self.lock:
            if not self.active:
                return
            self._restore()
            for stream, text in self.chunks:
                self.real[stream].write(text)
            self.chunks.clear()
            for s in self.real:
                s.flush()

    def discard(self) -> str:
        with self.lock:
            self._restore()
            text = "".join(t for _, t in self.chunks)
            self.chunks.clear()
            return text


class _Held(io.TextIOBase):
    def __init__(self, capture: OutputCapture, stream: int) -> None:
        self.capture, self.stream = capture, stream

    def write(self, text: str) -> int:
        with self.capture.lock:
            if self.capture.active:
                self.capture.chunks.append((self.stream, text))
                return len(text)
        return self.capture.real[self.stream].write(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.capture.real[self.stream], "encoding", "utf-8")
