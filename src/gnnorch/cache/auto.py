"""`hot_ratio="auto"`: a hill-climb over a geometric grid of hot ratios on measured step time.

Each candidate ratio runs for a window of training steps (the first step after a switch, which
pays for filling the new rows, is not timed); its score is the median step time (sampling,
forward, backward, optimizer step and refreshes: the whole cost the ratio changes). The search
starts in the middle of the grid, walks up while the step time falls, else down, and stops at
the first candidate slower than its predecessor, keeping the fastest ratio measured. Step time
as a function of the ratio is U-shaped (more pruning and reuse vs more rows to refresh), which is
what a hill-climb needs. The grid starts at 0 (no hot vertex: the exact fast path, nothing cached
or pruned), so where the cache does not pay the search falls back to exact training. It does
not pay where the bottom layer is a small share of the step: on a 16-core machine the 500K-node
SAGE bench stepped in 100 ms exactly, and in 112 ms at ratio 0.3 with no refresh at all (the
cache's own gathers and scatters cost more than the 63 % of layer 1 it skipped; 27 ms of the
step were layer 1). The accuracy guard is the grid's upper end `max_hot_ratio`: ratios up to
it were measured within 0.5 pt of exact training (src/gnnorch/cache/README.md); the search never
goes above it. NeutronOrch binary-searches the ratio on GPU idle time, which balances a CPU
refresh against a GPU trainer; on one CPU everything shares the cores, so the total step time is
the quantity to minimise.
"""
from __future__ import annotations

import statistics


def ratio_grid(max_ratio: float) -> list[float]:
    """0 (cache off), then the ratios 0.01, 0.03, 0.1, 0.3, 1 up to `max_ratio`, plus
    `max_ratio` itself when it lies well above the last of them."""
    grid = [r for r in (0.01, 0.03, 0.1, 0.3, 1.0) if r <= max_ratio * 1.0001] or [max_ratio]
    if max_ratio > grid[-1] * 1.5:
        grid.append(max_ratio)
    return [0.0] + grid


class RatioSearch:
    """State of the hill-climb; `observe` is fed one step time after each training step."""

    def __init__(self, grid: list[float], window: int = 6) -> None:
        self.grid = grid
        self.window = max(2, window)
        self.index = (len(grid) - 1) // 2
        self.scores: dict[int, float] = {}
        self.direction = +1
        self.done = False
        self.trace: list[dict] = []
        self._times: list[float] = []

    @property
    def ratio(self) -> float:
        return self.grid[self.index]

    def observe(self, seconds: float) -> float | None:
        """Record one step's seconds; returns the ratio to switch to, or None to stay."""
        if self.done:
            return None
        self._times.append(seconds)
        if len(self._times) < self.window + 1:
            return None
        score = statistics.median(self._times[1:])  # the first step after a switch fills rows
        self._times = []
        self.scores[self.index] = score
        self.trace.append({"hot_ratio": self.ratio, "step_seconds": score})
        nxt = self._next()
        if nxt is None:
            self.done = True
            best = min(self.scores, key=self.scores.get)
            changed = best != self.index
            self.index = best
            return self.ratio if changed else None
        self.index = nxt
        return self.ratio

    def _next(self) -> int | None:
        """The next candidate, or None when the climb is over."""
        cur, last = self.index, len(self.grid) - 1
        if self.direction == +1:
            if len(self.scores) == 1:  # only the start is measured: try one step up
                if cur < last:
                    return cur + 1
                self.direction = -1
                return cur - 1 if cur > 0 else None
            if self.scores[cur] < self.scores[cur - 1]:  # still improving upwards
                return cur + 1 if cur < last else None
            if len(self.scores) == 2:  # the first step up was worse: go down from the start
                self.direction = -1
                return cur - 2 if cur - 2 >= 0 else None
            return None
        if self.scores[cur] < self.scores[cur + 1]:  # still improving downwards
            return cur - 1 if cur > 0 else None
        return None
