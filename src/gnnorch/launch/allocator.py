"""glibc malloc settings for training processes (``Runtime(launch={"allocator": "tuned"})``).

glibc serves every allocation above its mmap threshold with fresh ``mmap`` pages, so a large
tensor pays one page fault per 4 KiB touched, and returns them to the kernel when freed. A
training step re-allocates the same large tensors (gathered features, layer activations and
their gradients) every step, so it pays those faults every step. glibc raises the threshold
by itself only after such a chunk is freed, and never above 32 MiB.

`tune_allocator` sets ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` to 1 GiB, so tensors up to
1 GiB are reused from the heap. Measured here (`scripts/bench_allocator.py`: 2 cores,
60K-node products-like, 3-layer SAGE, batch 1024, median of 2 fresh runs each): later epochs
1.24 s instead of 2.08 s, first epoch 5.49 s instead of 8.27 s. The price is that freed heap
memory is kept for reuse instead of being returned to the system: resident memory stays near
its peak. The settings are process-wide; in a run with
one process (the caller's) they stay in force after the run.

Its memory cost is reported with every run (`heap_usage`, in ``stats["allocator"]``): the heap's
size and how much of it is free but retained at the end of the run. Measured with
`scripts/bench_fastpath.py --baselines` (peak PSS against vanilla PyG): see BENCHMARKS.md.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

from ..run_options import ALLOCATORS  # noqa: F401 - the option's values live with the features

__all__ = ["tune_allocator", "heap_usage", "ALLOCATORS"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30
_applied = False


def tune_allocator() -> bool:
    """Apply the settings once per process; True when they are in force (glibc only)."""
    global _applied
    if _applied:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, _THRESHOLD) == 1
              and libc.mallopt(_M_TRIM_THRESHOLD, _THRESHOLD) == 1)
    except (OSError, AttributeError):
        return False
    _applied = ok
    return ok


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap_usage() -> dict | None:
    """glibc's view of this process's malloc heap (`mallinfo2`, glibc >= 2.33), in MiB:
    ``heap_mb`` (main-arena heap plus mmapped chunks), ``in_use_mb`` and ``free_retained_mb``
    (freed memory kept for reuse: the tuned allocator's price). None where unavailable."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    mib = 1 << 20
    return {"heap_mb": round((info.arena + info.hblkhd) / mib, 1),
            "in_use_mb": round((info.uordblks + info.hblkhd) / mib, 1),
            "free_retained_mb": round(info.fordblks / mib, 1)}
