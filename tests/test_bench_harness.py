"""The benchmarks' measuring-child harness (`scripts/baselines.py`): a child that has printed
its row ends with status 0 even while torch's DataLoader workers are alive, so a measured row
is never reported as failed (the vanilla row on the lent H200, session 19: killing the
persistent workers set off the DataLoader's SIGCHLD handler, which raised)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

CHILD = """
import sys
sys.path.insert(0, {scripts!r})
import time
import psutil
import torch
from torch.utils.data import DataLoader
import baselines

# As on the lent H200, where reading /proc for 24 workers made the kill loop slow: a worker
# dies (and its SIGCHLD arrives) while the loop still runs.
_kill = psutil.Process.kill
def slow_kill(self):
    _kill(self)
    time.sleep(0.05)
psutil.Process.kill = slow_kill

loader = DataLoader(list(range(64)), batch_size=4, num_workers=4, persistent_workers=True)
for _ in range(2):
    for batch in loader:
        pass
it = iter(loader)
next(it)   # workers busy prefetching while the child ends
baselines.finish_child({{"row": "measured", "workers": 4}})
"""


def test_child_with_live_loader_workers_ends_cleanly_with_its_row() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD.format(scripts=str(SCRIPTS))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"row": "measured",
                                                                 "workers": 4}


def test_benchmark_models_and_a_misplaced_model_argument() -> None:
    """`bench_fastpath.py --baselines --model`: every configuration builds the named BasicGNN
    (`baselines.build_model`); an unknown name, or ``--model`` without ``--baselines``, says
    what to pass instead of silently measuring GraphSAGE."""
    from torch_geometric.nn import GAT, GCN, GraphSAGE

    sys.path.insert(0, str(SCRIPTS))
    import baselines

    built = {name: baselines.build_model(name, 8, 16, 3, 5) for name in baselines.MODELS}
    assert [type(m) for m in built.values()] == [GraphSAGE, GCN, GAT]
    assert built["gat"].convs[0].heads == 4 and built["gat"].out_channels == 5
    with pytest.raises(ValueError, match="sage, gcn, gat"):
        baselines.build_model("gin", 8, 16, 3, 5)
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_fastpath.py"), "--model", "gcn"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--model applies to --baselines only" in proc.stderr
