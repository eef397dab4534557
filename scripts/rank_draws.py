"""How often two ranks draw the same neighbour (issue 21, session 8: `intercept.rank_streams`).

A star forest (256 seeds, 100 leaves each), one neighbour drawn per seed, a shuffled training
NeighborLoader of batch 64 under ``gnnorch.Runtime(..., processes=2)``: counts the paired draws
(rank 0's and rank 1's k-th batch, i-th seed) that picked the same leaf position. Independent
draws agree 1 time in 100 (1.28 of 128 expected); ranks drawing one shared random stream agree
far more often. In process and with one loader worker.

    .venv/bin/python scripts/rank_draws.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    from test_unshuffled_training import _both_ranks

    print("| loader workers | equal paired draws | pairs | expected if independent |")
    print("|---|---|---|---|")
    for workers in (0, 1):
        ranks = _both_ranks(Path(tempfile.mkdtemp()), num_workers=workers)
        pairs = [(a, b) for x, y in zip(*ranks) for a, b in zip(x, y)]
        equal = sum(a == b for a, b in pairs)
        print(f"| {workers} | {equal} | {len(pairs)} | {len(pairs) / 100:.2f} |", flush=True)


if __name__ == "__main__":
    main()
