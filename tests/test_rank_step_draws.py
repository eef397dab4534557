"""The README's contract for a training step's own random draws over ranks ("Your training
step's own draws are not made independent"): in a sharded epoch every rank's step draws from
the caller's stream, so paired dropout masks are equal (`scripts/rank_step_draws.py`)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import rank_step_draws  # noqa: E402

import gnnorch  # noqa: E402


def test_sharded_steps_draw_the_callers_stream_in_every_rank(tmp_path: Path) -> None:
    run = gnnorch.Runtime(rank_step_draws.train, processes=2, verbose=False)
    steps = run(rank_step_draws.graphs(), str(tmp_path))
    first, second = (torch.load(tmp_path / f"masks_{r}.pt") for r in (0, 1))
    assert steps == len(first) == len(second) == 1 + 3 + 4   # the head whole, then halves
    assert first[0].size(0) == 160 and {m.size(0) for m in first[1:]} == {80}
    # the epochs were sharded (each rank a different half) and the masks are the same
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    [record] = run.last_run.stats[0]["sampler"]["loaders"]
    assert record["kept_whole"] is None
