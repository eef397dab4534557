"""Who holds the GIL while a training epoch runs: py-spy's GIL-holding samples, per thread.

The GPU data path runs three kinds of Python threads in one interpreter: the trainer (the
user's loop), the pipeline's producer (``gnnorch-device-path``: sampling and gathering on
the device) and, with ``cache=True``, the cache's background refresher
(``gnnorch-cache-refresh``). Every torch operation they issue is launched from Python, and
only the thread holding the GIL can launch. When the threads' GIL shares add up to about 1,
the epoch is bound by the host's launches under the GIL, whatever the GPU's kernels take; the
next lever is fewer operations per batch, not more overlap.

`GilProbe` attaches ``py-spy record --gil --threads --nonblocking`` to this process for the
duration of a ``with`` block (py-spy samples at `rate` Hz and keeps only the samples of the
thread holding the GIL, named); `summarise` turns its raw output into, per thread: the GIL
seconds (samples / rate), the share of the window, and the functions holding it (self: the
innermost frame; inclusive: gnnorch, PyG and benchmark frames on the stack). The share is an
estimate at the nominal rate: py-spy's ``--nonblocking`` mode reads the process without
pausing it, so it keeps that rate unless the machine is saturated.

    with GilProbe(Path("epoch.txt")) as probe:
        ...                      # one epoch
    print(probe.summary)         # None when py-spy is missing or failed (probe.error says why)

py-spy is not a dependency of gnnorch: `device_session.sh prepare` carries its wheel to the GPU
machine, and `find_pyspy` looks for it on the PATH and beside the interpreter's site dirs.
"""
from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# frames whose functions are worth naming in the inclusive view (the rest is the stdlib's)
OWN_FRAMES = ("gnnorch", "torch_geometric", "bench_", "torch/optim", "torch/nn/modules")


def find_pyspy() -> str | None:
    """The py-spy executable: $PYSPY, the PATH, or ``bin/py-spy`` beside a ``sys.path``
    entry (a ``pip install --target DIR`` puts it in ``DIR/bin``)."""
    found = os.environ.get("PYSPY") or shutil.which("py-spy")
    if found:
        return found
    for entry in sys.path:
        candidate = Path(entry or ".") / "bin" / "py-spy"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class GilProbe:
    """py-spy on this process for a ``with`` block; `summary` after it (see the module).

    py-spy needs a moment to attach (it reads the interpreter's memory maps): the probe
    sleeps `attach_wait_s` before the window starts, so that the window's first samples are
    taken (a sleeping thread holds no GIL: what py-spy sees during the wait adds nothing
    but stray samples of other threads)."""

    def __init__(self, raw_path: Path, rate: int = 250, attach_wait_s: float = 1.0) -> None:
        self.raw_path, self.rate, self.attach_wait_s = Path(raw_path), rate, attach_wait_s
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self._proc: subprocess.Popen | None = None
        self._log: Any = None
        self._start = 0.0

    def __enter__(self) -> "GilProbe":
        exe = find_pyspy()
        if exe is None:
            self.error = "py-spy not found (PATH, $PYSPY, sys.path's bin/)"
            return self
        self.raw_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [exe, "record", "--pid", str(os.getpid()), "--gil", "--threads", "--nonblocking",
             "--rate", str(self.rate), "--format", "raw", "-o", str(self.raw_path)],
            stdout=self._log, stderr=subprocess.STDOUT)
        time.sleep(self.attach_wait_s)
        if self._proc.poll() is not None:
            self.error = f"py-spy ended at once ({self._proc.returncode}): {self._output()}"
            self._proc = None
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        window = time.perf_counter() - self._start
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)   # py-spy writes its file on Ctrl-C
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        try:
            self.summary = summarise(self.raw_path.read_text(), window, self.rate)
        except OSError as err:
            self.error = f"py-spy wrote no output ({err}): {self._output()}"

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-500:]


def parse_raw(text: str) -> list[tuple[str, list[str], int]]:
    """py-spy's raw format with ``--threads``, one stack per line:
    ``thread (TID): NAME;outer frame;...;inner frame COUNT`` (NAME may be missing) ->
    [(thread name, frames outer first, samples)]."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        head, *frames = stack.split(";")
        name = head.split(": ", 1)[1] if ": " in head else head
        out.append((name, frames, int(count)))
    return out


def _function(frame: str) -> str:
    """``name (file.py:12)`` -> ``name (file.py)``: the function, its lines merged."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/src/", "/scripts/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})" if where else name


def thread_role(name: str) -> str:
    """A thread's role from its name: the pipeline's producer, the cache's refresher, the
    trainer (the main thread, where the user's loop runs), else the name itself (pin-memory
    threads, loader result threads)."""
    if name.startswith(("gnnorch-device-path", "gnnorch-prefetch")):
        return "producer (gnnorch-device-path)"
    if name.startswith("gnnorch-cache-refresh"):
        return "cache refresh (gnnorch-cache-refresh)"
    if name == "MainThread":
        return "trainer (MainThread)"
    return name


def summarise(raw: str, window_s: float, rate: int, top: int = 8) -> dict[str, Any]:
    """Per thread role: GIL seconds (samples / `rate`), share of `window_s`, and the top
    functions holding the GIL (self and inclusive, as shares of that thread's samples)."""
    per: dict[str, dict[str, Any]] = {}
    for name, frames, count in parse_raw(raw):
        role = thread_role(name)
        entry = per.setdefault(role, {"samples": 0, "self": collections.Counter(),
                                      "inclusive": collections.Counter()})
        entry["samples"] += count
        if frames:
            entry["self"][_function(frames[-1])] += count
        for function in {_function(f) for f in frames if any(m in f for m in OWN_FRAMES)}:
            entry["inclusive"][function] += count
    threads = []
    for role, entry in sorted(per.items(), key=lambda kv: -kv[1]["samples"]):
        samples = entry["samples"]
        threads.append({
            "thread": role, "samples": samples, "gil_s": samples / rate,
            "share": samples / rate / window_s if window_s > 0 else None,
            "top_self": [[f, n / samples] for f, n in entry["self"].most_common(top)],
            "top_inclusive": [[f, n / samples] for f, n in entry["inclusive"].most_common(top)]})
    total = sum(t["samples"] for t in threads) / rate
    return {"window_s": window_s, "rate": rate, "gil_s": total,
            "gil_share": total / window_s if window_s > 0 else None, "threads": threads}


def format_summary(summary: dict[str, Any]) -> str:
    """A few lines for a benchmark's log."""
    lines = [f"GIL held {summary['gil_s']:.2f} s of a {summary['window_s']:.2f} s window "
             f"({summary['gil_share']:.0%}) at {summary['rate']} Hz"]
    for t in summary["threads"]:
        lines.append(f"  {t['thread']:<40} {t['gil_s']:6.2f} s ({t['share']:.0%}); self: "
                     + ", ".join(f"{f} {s:.0%}" for f, s in t["top_self"][:3]))
    return "\n".join(lines)
