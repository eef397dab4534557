"""`Runtime(launch={"allocator": ...})`: glibc malloc keeps large tensors in its heap."""
import platform

import pytest

import gnnorch
from gnnorch.run_options import RunOptions
from gnnorch.launch.allocator import tune_allocator

from helpers import cora

GLIBC = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


@GLIBC
def test_tune_allocator_applies_once_and_reports():
    assert tune_allocator() is True
    assert tune_allocator() is True                     # idempotent


def test_allocator_option_is_validated():
    with pytest.raises(ValueError, match="allocator must be one of"):
        RunOptions(allocator="jemalloc")
    with pytest.raises(ValueError, match="allocator"):
        gnnorch.Runtime(lambda data: None, launch={"allocator": "fast"})


@GLIBC
def test_runtime_reports_the_allocator_setting():
    def train(data):
        return int(data.num_nodes)

    runtime = gnnorch.Runtime(train, processes=1, autotune=False)
    assert runtime(cora()) == 2708
    report = runtime.last_run.stats[0]["allocator"]
    assert report["tuned"] is True
    # its memory cost: the heap and what of it is free but kept for reuse (mallinfo2)
    assert report["heap_mb"] >= report["in_use_mb"] > 0 and report["free_retained_mb"] >= 0
    off = gnnorch.Runtime(train, processes=1, autotune=False,
                          launch={"allocator": "default"})
    off(cora())
    assert off.last_run.stats[0]["allocator"]["tuned"] is False
