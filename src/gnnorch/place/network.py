"""Bandwidth sharing between the started network flows of a simulation (used by `oes`).

Both classes keep the bytes left of every started network flow and answer two questions
between events: how long until the next flow completes at the current rates
(`next_finish`), and which flows complete after moving time on by dt (`advance`). Rates are
constant between events.

`FairShare` (DGTP's OES rule): every started flow is active; a flow m -> m' gets

    r = min(B_out[m] / D_out[m], B_in[m'] / D_in[m'] [, L[m, m'] / D[m, m']])

with D the active-flow counts of the sending NIC, the receiving NIC (and the pair). The active
flows live in compact arrays (swap-remove on completion) with the counts updated
incrementally, so an event costs a handful of vector operations on the active flows only.

`Queued` (FIFO / MRTF): each sending node transmits one of its started flows at a time -- the
oldest (FIFO) or the one with the least remaining time, remaining / min(B_out, B_in) (MRTF,
re-chosen at every event); the transmitting flow gets min(B_out[m], B_in[m'] / D_in[m']
[, L / D]) with D counting transmitting flows only.

A flow completes when its remaining bytes reach zero; flows within a relative 1e-9 of the
earliest completion complete in the same event (equal flows finish together).
"""
from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["FairShare", "Queued"]

_TOL = 1e-9


class FairShare:
    """DGTP's rate rule over the active flows (module docstring)."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, bout: np.ndarray, bin_: np.ndarray,
                 m: int, pair: np.ndarray | None = None, link: np.ndarray | None = None):
        n = src.size
        self.f_src, self.f_dst, self.f_out, self.f_in = src.tolist(), dst.tolist(), bout, bin_
        self.f_pair, self.f_link, self.m = pair, link, m
        self.ids = np.empty(n, np.int64)
        self.rem, self.out, self.inn = np.empty(n), np.empty(n), np.empty(n)
        self.src, self.dst = np.empty(n, np.int64), np.empty(n, np.int64)
        self.pos = [-1] * n
        self.n = 0
        self.dout, self.din = np.zeros(m), np.zeros(m)
        if link is not None:
            self.pair, self.lnk, self.dpair = np.empty(n, np.int64), np.empty(n), np.zeros(m * m)
        self._rate = self._left = None

    @property
    def busy(self) -> bool:
        return self.n > 0

    def add(self, f: int, volume: float) -> None:
        i = self.n
        s, d = self.f_src[f], self.f_dst[f]
        self.ids[i], self.rem[i], self.src[i], self.dst[i] = f, volume, s, d
        self.out[i], self.inn[i] = self.f_out[f], self.f_in[f]
        self.dout[s] += 1
        self.din[d] += 1
        if self.f_link is not None:
            self.pair[i], self.lnk[i] = self.f_pair[f], self.f_link[f]
            self.dpair[self.f_pair[f]] += 1
        self.pos[f] = i
        self.n += 1

    def _remove_at(self, i: int) -> None:
        f, last = int(self.ids[i]), self.n - 1
        self.dout[self.src[i]] -= 1
        self.din[self.dst[i]] -= 1
        if self.f_link is not None:
            self.dpair[self.pair[i]] -= 1
        arrays = [self.ids, self.rem, self.out, self.inn, self.src, self.dst]
        if self.f_link is not None:
            arrays += [self.pair, self.lnk]
        if i != last:
            for arr in arrays:
                arr[i] = arr[last]
            self.pos[int(self.ids[i])] = i
        self.pos[f] = -1
        self.n = last

    def next_finish(self) -> float:
        """Seconds until the earliest completion at the current rates (inf when idle)."""
        n = self.n
        if n == 0:
            return np.inf
        src, dst = self.src[:n], self.dst[:n]
        rate = self.inn[:n] / self.din[dst]
        np.minimum(rate, self.out[:n] / self.dout[src], out=rate)
        if self.f_link is not None:
            np.minimum(rate, self.lnk[:n] / self.dpair[self.pair[:n]], out=rate)
        self._rate = rate
        self._left = self.rem[:n] / rate
        return float(self._left.min())

    def advance(self, dt: float) -> list[int]:
        """Move time on by dt (<= next_finish()); return the flows that completed."""
        n = self.n
        if n == 0:
            return []
        self.rem[:n] -= self._rate * dt
        done = np.flatnonzero(self._left <= dt * (1 + _TOL) + 1e-15)
        finished = [int(f) for f in self.ids[done]]
        for f in finished:
            self._remove_at(self.pos[f])
        return finished


class Queued:
    """One transmitting flow per sender, FIFO or MRTF (module docstring)."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, bout: np.ndarray, bin_: np.ndarray,
                 m: int, pair: np.ndarray | None = None, link: np.ndarray | None = None,
                 order: str = "fifo"):
        self.src, self.dst, self.bout, self.bin, self.m = src, dst, bout, bin_, m
        self.src_l = src.tolist()
        self.pair, self.link, self.order = pair, link, order
        self.rem = np.zeros(src.size)
        self.queues: list[deque] = [deque() for _ in range(m)]
        self.queued = np.zeros(src.size, bool)
        self.count = 0
        self._active = self._rate = self._left = None

    @property
    def busy(self) -> bool:
        return self.count > 0

    def add(self, f: int, volume: float) -> None:
        self.rem[f] = volume
        self.count += 1
        if self.order == "fifo":
            self.queues[self.src_l[f]].append(f)
        else:
            self.queued[f] = True

    def _heads(self) -> np.ndarray:
        if self.order == "fifo":
            return np.array([q[0] for q in self.queues if q], dtype=np.int64)
        cand = np.flatnonzero(self.queued)
        key = self.rem[cand] / np.minimum(self.bout[cand], self.bin[cand])
        order = np.lexsort((key, self.src[cand]))
        senders = self.src[cand][order]
        first = np.ones(order.size, bool)
        first[1:] = senders[1:] != senders[:-1]
        return cand[order[first]]

    def next_finish(self) -> float:
        if self.count == 0:
            return np.inf
        a = self._heads()
        d = self.dst[a]
        rate = np.minimum(self.bout[a], self.bin[a] / np.bincount(d, minlength=self.m)[d])
        if self.link is not None:
            p = self.pair[a]
            rate = np.minimum(rate, self.link[a] / np.bincount(p, minlength=self.m ** 2)[p])
        self._active, self._rate = a, rate
        self._left = self.rem[a] / rate
        return float(self._left.min())

    def advance(self, dt: float) -> list[int]:
        if self.count == 0:
            return []
        a = self._active
        self.rem[a] -= self._rate * dt
        finished = [int(f) for f in a[self._left <= dt * (1 + _TOL) + 1e-15]]
        for f in finished:
            self.rem[f] = 0.0
            self.count -= 1
            if self.order == "fifo":
                self.queues[self.src_l[f]].popleft()
            else:
                self.queued[f] = False
        return finished
