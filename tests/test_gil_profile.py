"""`scripts/gil_profile.py`: py-spy's raw GIL samples summarised per thread (the diagnosis the
lent GPU's `gil` unit runs: is an epoch bound by the host's launches under the GIL?)."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import gil_profile  # noqa: E402

RAW = """\
thread (101): MainThread;train (/x/scripts/bench_gpu.py:150);train_step (/x/scripts/bench_gpu.py:120);forward (/v/site-packages/torch_geometric/nn/models/basic_gnn.py:250) 300
thread (101): MainThread;train (/x/scripts/bench_gpu.py:150);step (/v/site-packages/torch/optim/adam.py:200) 100
thread (202): gnnorch-device-path;_produce (/r/src/gnnorch/device/pipeline.py:90);sample (/r/src/gnnorch/sampling/uniform.py:150) 150
thread (202): gnnorch-device-path;_produce (/r/src/gnnorch/device/pipeline.py:90);sample (/r/src/gnnorch/sampling/uniform.py:151) 50
thread (303): gnnorch-cache-refresh_0;_background (/r/src/gnnorch/cache/background.py:170) 25
not a sample line
"""


def test_parse_raw_reads_thread_names_frames_and_counts():
    rows = gil_profile.parse_raw(RAW)
    assert [(name, count) for name, _, count in rows] == [
        ("MainThread", 300), ("MainThread", 100), ("gnnorch-device-path", 150),
        ("gnnorch-device-path", 50), ("gnnorch-cache-refresh_0", 25)]
    assert rows[0][1][-1].startswith("forward (")


def test_summary_gives_each_threads_gil_seconds_share_and_functions():
    summary = gil_profile.summarise(RAW, window_s=4.0, rate=200)
    assert summary["gil_s"] == pytest.approx(625 / 200)
    assert summary["gil_share"] == pytest.approx(625 / 200 / 4.0)
    by_role = {t["thread"]: t for t in summary["threads"]}
    assert list(by_role) == ["trainer (MainThread)", "producer (gnnorch-device-path)",
                             "cache refresh (gnnorch-cache-refresh)"]   # most samples first
    trainer = by_role["trainer (MainThread)"]
    assert trainer["gil_s"] == pytest.approx(2.0) and trainer["share"] == pytest.approx(0.5)
    assert trainer["top_self"][0] == ["forward (torch_geometric/nn/models/basic_gnn.py)", 0.75]
    producer = by_role["producer (gnnorch-device-path)"]
    # lines of one function are merged; the inclusive view names own frames once per stack
    assert producer["top_self"] == [["sample (gnnorch/sampling/uniform.py)", 1.0]]
    assert ["_produce (gnnorch/device/pipeline.py)", 1.0] in producer["top_inclusive"]
    assert "GIL held 3.12 s of a 4.00 s window (78%)" in gil_profile.format_summary(summary)


def test_probe_without_pyspy_reports_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PYSPY", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with gil_profile.GilProbe(tmp_path / "raw.txt") as probe:
        pass
    assert probe.summary is None and "py-spy not found" in probe.error


@pytest.mark.skipif(gil_profile.find_pyspy() is None, reason="py-spy is not installed")
def test_probe_sees_the_thread_that_holds_the_gil(tmp_path):
    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    with gil_profile.GilProbe(tmp_path / "raw.txt", rate=100) as probe:
        worker = threading.Thread(target=spin, args=(1.0,), name="gnnorch-device-path")
        worker.start()
        time.sleep(1.2)        # the main thread waits without the GIL
        worker.join()
    if probe.summary is None:
        pytest.skip(f"py-spy could not attach here: {probe.error}")
    roles = {t["thread"]: t for t in probe.summary["threads"]}
    producer = roles["producer (gnnorch-device-path)"]
    assert producer["gil_s"] > 0.5
    assert roles.get("trainer (MainThread)", {"gil_s": 0.0})["gil_s"] < producer["gil_s"]
