"""ETP: DGTP's exploratory task placement, a Metropolis search over placements (Alg. 3).

State: an `Assignment` (stores stay pinned). Score: T(Y), the simulated time of placement Y
(`plan.Scorer`: OES on profiled draws), and DGTP's cost (21)

    cost(Y) = T(Y) * (1 + overload(Y))        overload: `assignment.overload`

Moves (proposal Y' from Y_z), each kept within the relaxed capacity U <= (1 + mu) C of DGTP
(22), so that infeasible placements can be crossed but are paid for by the penalty:

* relocate (probability ``p_relocate``): a uniformly random sampler or trainer to a uniformly
  random other node with room (DGTP's only move);
* swap (``p_swap``): two random tasks on different nodes exchange nodes;
* group (the rest): a random trainer moves together with all its samplers.

Acceptance (Metropolis): Y' is taken when cost(Y') <= cost(Y_z), otherwise with probability

    exp(-(cost(Y') - cost(Y_z)) / (tau_k * cost(Y_0)))

DGTP uses exp(beta (cost(Y_z) - cost(Y'))) with a fixed beta = 0.1 on costs in seconds, which
depends on the job's time scale. We measure the difference relative to the start cost and
anneal the temperature geometrically, tau_k = t_start * (t_end / t_start) ** (k / (steps - 1)):
with the defaults (0.005 -> 0.0001) a placement 0.5 % worse than the current one is accepted
with probability 1/e at the start, one 0.01 % worse at the end. (On the benchmark's clusters a
hotter start, 0.03, wandered off and found less in a few hundred steps.) Invariant: the result
is the best *feasible* (U <= C) placement visited, the start included, so it is never worse
(by the scorer) than the start, and for a given rng seed the search is deterministic. Scores
are memoised per placement.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gnnorch.options import check_int, check_number
from gnnorch.place.assignment import Assignment, demands, overload, usage
from gnnorch.place.cluster import Cluster
from gnnorch.place.profile import Profile

__all__ = ["SearchConfig", "SearchResult", "Metropolis"]


@dataclass(frozen=True)
class SearchConfig:
    """Metropolis settings (module docstring): steps, relaxation mu, temperatures, moves."""

    steps: int = 1500
    mu: float = 1.0
    t_start: float = 0.005
    t_end: float = 0.0001
    p_relocate: float = 0.5
    p_swap: float = 0.3
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 0)
        check_number("mu", self.mu, low=0.0, lenient=True)
        check_number("t_start", self.t_start, low=0.0, low_open=True, lenient=True)
        check_number("t_end", self.t_end, low=0.0, low_open=True, lenient=True)
        check_number("p_relocate", self.p_relocate, 0.0, 1.0, lenient=True)
        check_number("p_swap", self.p_swap, 0.0, 1.0 - self.p_relocate, lenient=True)
        check_number("time_budget_s", self.time_budget_s, low=0.0, low_open=True,
                     allow_none=True, lenient=True)

    def temperature(self, k: int) -> float:
        if self.steps <= 1:
            return self.t_end
        return self.t_start * (self.t_end / self.t_start) ** (k / (self.steps - 1))


@dataclass
class SearchResult:
    """The best feasible placement found, its score, the start's, and how the chain went."""

    best: Assignment
    best_score: float
    start_score: float
    steps: int
    accepted: int
    evaluations: int
    improvements: list[tuple[int, float]] = field(default_factory=list)


class Metropolis:
    """One Metropolis chain of ETP over a cluster and a profile, scored by `scorer`."""

    def __init__(self, cluster: Cluster, profile: Profile,
                 scorer: Callable[[Assignment], float], config: SearchConfig,
                 rng: np.random.Generator) -> None:
        self.cluster, self.profile, self.scorer = cluster, profile, scorer
        self.config, self.rng = config, rng
        _, ds, dw = demands(profile)
        self.n_trainers = profile.n_trainers
        self.demand = np.vstack([np.repeat(dw[None], profile.n_trainers, 0),
                                 np.repeat(ds[None], profile.n_samplers, 0)])
        self.relaxed = cluster.capacity * (1.0 + config.mu) + 1e-9
        self.groups = [np.concatenate([[w], profile.n_trainers + profile.samplers_of(w)])
                       for w in range(profile.n_trainers)]
        self._memo: dict[bytes, float] = {}
        self.evaluations = 0

    # -- helpers ---------------------------------------------------------------------------------
    def score(self, a: Assignment) -> float:
        key = a.key()
        if key not in self._memo:
            self._memo[key] = float(self.scorer(a))
            self.evaluations += 1
        return self._memo[key]

    @staticmethod
    def _nodes(a: Assignment) -> np.ndarray:
        return np.concatenate([a.trainer_node, a.sampler_node])

    def _assignment(self, nodes: np.ndarray) -> Assignment:
        return Assignment(nodes[:self.n_trainers], nodes[self.n_trainers:])

    def _room(self, use: np.ndarray, need: np.ndarray) -> np.ndarray:
        return np.all(use + need <= self.relaxed, axis=1)

    # -- moves ------------------------------------------------------------------------------------
    def propose(self, nodes: np.ndarray, use: np.ndarray) -> np.ndarray | None:
        """New task -> node vector (or None when the drawn move has no legal target)."""
        rng, cfg = self.rng, self.config
        u = rng.random()
        new = nodes.copy()
        if u < cfg.p_relocate:
            t = int(rng.integers(nodes.size))
            ok = self._room(use, self.demand[t])
            ok[nodes[t]] = False
            if not ok.any():
                return None
            new[t] = rng.choice(np.flatnonzero(ok))
        elif u < cfg.p_relocate + cfg.p_swap:
            a, b = (int(x) for x in rng.integers(nodes.size, size=2))
            na, nb = nodes[a], nodes[b]
            if na == nb:
                return None
            diff = self.demand[b] - self.demand[a]
            if np.any(use[na] + diff > self.relaxed[na]) or \
                    np.any(use[nb] - diff > self.relaxed[nb]):
                return None
            new[a], new[b] = nb, na
        else:
            group = self.groups[int(rng.integers(len(self.groups)))]
            home = nodes[group[0]]
            ok = np.zeros(self.cluster.n_nodes, bool)
            for m in range(self.cluster.n_nodes):
                if m != home:
                    moving = group[nodes[group] != m]
                    ok[m] = np.all(use[m] + self.demand[moving].sum(0) <= self.relaxed[m])
            if not ok.any():
                return None
            new[group] = rng.choice(np.flatnonzero(ok))
        return new

    # -- the chain ----------------------------------------------------------------------------
    def run(self, start: Assignment) -> SearchResult:
        cfg, rng = self.config, self.rng
        began = time.perf_counter()
        cur = self._nodes(start)
        cur_use = usage(self.cluster, self.profile, start)
        cur_t = self.score(start)
        cur_cost = cur_t * (1.0 + overload(self.cluster, cur_use))
        ref = cur_cost if cur_cost > 0 else 1.0
        start_feasible = overload(self.cluster, cur_use) == 0.0
        best, best_t = start.copy(), (cur_t if start_feasible else math.inf)
        improvements: list[tuple[int, float]] = []
        accepted = steps = 0
        for k in range(cfg.steps):
            if cfg.time_budget_s is not None and time.perf_counter() - began > cfg.time_budget_s:
                break
            steps = k + 1
            new = self.propose(cur, cur_use)
            if new is None:
                continue
            cand = self._assignment(new)
            use = usage(self.cluster, self.profile, cand)
            over = overload(self.cluster, use)
            t = self.score(cand)
            cost = t * (1.0 + over)
            delta = cost - cur_cost
            if delta <= 0 or rng.random() < math.exp(-delta / (cfg.temperature(k) * ref)):
                cur, cur_use, cur_cost = new, use, cost
                accepted += 1
                if over == 0.0 and t < best_t:
                    best, best_t = cand, t
                    improvements.append((k, t))
        return SearchResult(best=best, best_score=best_t, start_score=self.score(start),
                            steps=steps,
                            accepted=accepted, evaluations=self.evaluations,
                            improvements=improvements)
