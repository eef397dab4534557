"""DGTP's planning (Alg. 4): ETP picks the placement, OES schedules it; the public entry point.

``plan_placement(cluster, profile, seed=...)``:

1. starts: IFS (`initial.initial_placement`, DGTP's start) and, when it fits, DistDGL-style
   co-location (`baselines.colocation`) -- a known-good feasible placement whenever it
   exists. The Metropolis chain starts from the one the scorer rates better, so the result
   is never worse (by the scorer) than co-location. (DGTP starts from IFS alone.)
2. score: `Scorer`, the simulated time per iteration of ``search_iterations`` iterations under
   ``policy``, at the profiled means (``search_draws`` = 0, deterministic and cheap) or the
   mean over ``search_draws`` fixed random draws (common random numbers for every candidate,
   as DGTP simulates profiled distributions).
3. search: `search.Metropolis` for ``steps`` proposals (or ``time_budget_s`` seconds).
4. confirm: when the chain's best differs from its start, both are simulated on
   ``confirm_draws`` random draws of ``eval_iterations`` iterations (draws of the planner's
   own, seeded); the start is kept unless the best is faster there too. Scoring at the means
   can prefer a placement by a fraction of a percent that noise then reverses; this keeps the
   search from handing back such a placement (``confirm_draws`` = 0: no check).
5. predict: `evaluate` the chosen placement on ``eval_draws`` fresh draws of
   ``eval_iterations`` iterations (seeded): `Placement.predicted_iteration_s`.

Everything is seeded by ``seed`` (numpy Generators derived from it), so a call is
deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnorch.options import check_choice, check_int, check_keys
from gnnorch.place.assignment import Assignment, usage
from gnnorch.place.baselines import colocation
from gnnorch.place.cluster import RESOURCES, Cluster, PlacementError
from gnnorch.place.initial import initial_placement
from gnnorch.place.oes import POLICIES, simulate
from gnnorch.place.profile import Profile
from gnnorch.place.search import Metropolis, SearchConfig, SearchResult
from gnnorch.place.tasks import TaskGraph

__all__ = ["Scorer", "Evaluation", "evaluate", "Placement", "plan_placement", "PLAN_DEFAULTS"]

PLAN_DEFAULTS = {"steps": 1500, "search_iterations": 2, "search_draws": 0,
                 "eval_iterations": 4, "eval_draws": 3, "policy": "oes", "mu": 1.0,
                 "t_start": 0.005, "t_end": 0.0001, "p_relocate": 0.5, "p_swap": 0.3,
                 "time_budget_s": None, "use_colocation_start": True, "confirm_draws": 2}


class Scorer:
    """Simulated seconds per iteration of a placement on fixed draws (module docstring)."""

    def __init__(self, cluster: Cluster, profile: Profile, n_iterations: int, draws: int,
                 policy: str, rng: np.random.Generator | None = None) -> None:
        check_int("draws", draws, 0)
        check_choice("policy", policy, POLICIES)
        self.cluster, self.profile, self.policy = cluster, profile, policy
        self.graph = TaskGraph(profile, n_iterations)
        if draws == 0:
            self.samples = [self.graph.means()]
        else:
            rng = rng if rng is not None else np.random.default_rng(0)
            self.samples = [self.graph.draw(rng) for _ in range(draws)]

    def runs(self, a: Assignment, policy: str | None = None) -> list[float]:
        nodes = a.entity_nodes(self.profile)
        return [simulate(self.graph, nodes, self.cluster, d, v, policy or self.policy)
                .iteration_s for d, v in self.samples]

    def __call__(self, a: Assignment) -> float:
        return float(np.mean(self.runs(a)))


@dataclass
class Evaluation:
    """Seconds per iteration of one placement under one policy, per draw and their mean."""

    policy: str
    per_draw: list[float]

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_draw))


def evaluate(cluster: Cluster, profile: Profile, a: Assignment, policy: str = "oes",
             n_iterations: int = 4, draws: int = 3, seed: int = 0) -> Evaluation:
    """Simulate `a` on `draws` random draws (seeded: every placement evaluated with the same
    seed sees the same draws) of `n_iterations` iterations."""
    a.validate(cluster, profile)
    scorer = Scorer(cluster, profile, n_iterations, draws, policy, np.random.default_rng(seed))
    return Evaluation(policy, scorer.runs(a))


@dataclass
class Placement:
    """A planned placement: where every task runs, the flow policy, the predicted time."""

    cluster: Cluster
    profile: Profile
    assignment: Assignment
    policy: str
    predicted_iteration_s: float
    start: str
    search: SearchResult
    options: dict = field(default_factory=dict)
    confirmation: dict | None = None
    #: the seed of the prediction's draws: `evaluate` another placement with it (and the same
    #: policy, ``eval_iterations``, ``eval_draws``) to compare on common random numbers
    eval_seed: int = 0

    @property
    def trainer_node(self) -> np.ndarray:
        return self.assignment.trainer_node

    @property
    def sampler_node(self) -> np.ndarray:
        return self.assignment.sampler_node

    def to_dict(self) -> dict:
        """JSON-serialisable: per node its partition, trainer ranks, samplers and their cores,
        resource use; the policy, the prediction and the search's summary."""
        use = usage(self.cluster, self.profile, self.assignment)
        nodes = []
        for m in range(self.cluster.n_nodes):
            samplers = np.flatnonzero(self.sampler_node == m).tolist()
            nodes.append({
                "node": m,
                "partition": m if m < self.profile.n_partitions else None,
                "trainer_ranks": np.flatnonzero(self.trainer_node == m).tolist(),
                "samplers": samplers,
                "sampler_cores": float(len(samplers) * self.profile.sampler_demand.cores),
                "usage": {r: float(use[m, i]) for i, r in enumerate(RESOURCES)},
            })
        s = self.search
        return {"policy": self.policy, "predicted_iteration_s": self.predicted_iteration_s,
                "start": self.start, "confirmation": self.confirmation, "nodes": nodes,
                "search": {"steps": s.steps, "accepted": s.accepted,
                           "evaluations": s.evaluations, "start_score_s": s.start_score,
                           "best_score_s": s.best_score},
                "options": {k: v for k, v in self.options.items()}}


def plan_placement(cluster: Cluster, profile: Profile, seed: int = 0,
                   **options) -> Placement:
    """Plan a placement for `profile` on `cluster` (module docstring).

    Options (defaults in `PLAN_DEFAULTS`): ``steps``, ``time_budget_s``, ``mu``, ``t_start``,
    ``t_end``, ``p_relocate``, ``p_swap`` (the search, `search.SearchConfig`);
    ``search_iterations``, ``search_draws`` (the scorer); ``eval_iterations``, ``eval_draws``
    (the prediction); ``confirm_draws`` (the check of step 4); ``policy`` ("oes", "fifo" or
    "mrtf": the flow schedule the placement is planned for); ``use_colocation_start``.
    """
    check_keys("plan_placement()", options, PLAN_DEFAULTS)
    check_int("seed", seed, 0, lenient=True)
    opt = {**PLAN_DEFAULTS, **options}
    for name in ("search_iterations", "eval_iterations", "eval_draws"):
        check_int(name, opt[name], 1)
    check_int("confirm_draws", opt["confirm_draws"], 0)
    config = SearchConfig(steps=opt["steps"], mu=opt["mu"], t_start=opt["t_start"],
                          t_end=opt["t_end"], p_relocate=opt["p_relocate"],
                          p_swap=opt["p_swap"], time_budget_s=opt["time_budget_s"])
    seeds = np.random.SeedSequence(int(seed)).spawn(5)
    scorer = Scorer(cluster, profile, opt["search_iterations"], opt["search_draws"],
                    opt["policy"], np.random.default_rng(seeds[0]))
    chain = Metropolis(cluster, profile, scorer, config, np.random.default_rng(seeds[1]))
    starts = {"ifs": initial_placement(cluster, profile, np.random.default_rng(seeds[2]))}
    if opt["use_colocation_start"]:
        try:
            starts["colocation"] = colocation(cluster, profile)
        except PlacementError:
            pass
    name = min(starts, key=lambda k: chain.score(starts[k]))
    result = chain.run(starts[name])
    chosen, confirmation = result.best, None
    if opt["confirm_draws"] and result.best.key() != starts[name].key():
        seed_c = int(np.random.default_rng(seeds[4]).integers(2**31))
        times = [evaluate(cluster, profile, a, opt["policy"], opt["eval_iterations"],
                          opt["confirm_draws"], seed_c).mean for a in (result.best, starts[name])]
        if times[0] > times[1]:
            chosen = starts[name]
        confirmation = {"search_s": times[0], "start_s": times[1],
                        "kept": "search" if chosen is result.best else "start"}
    eval_seed = int(np.random.default_rng(seeds[3]).integers(2**31))
    prediction = evaluate(cluster, profile, chosen, opt["policy"], opt["eval_iterations"],
                          opt["eval_draws"], eval_seed)
    return Placement(cluster=cluster, profile=profile, assignment=chosen, policy=opt["policy"],
                     predicted_iteration_s=prediction.mean, start=name, search=result,
                     options=opt, confirmation=confirmation, eval_seed=eval_seed)
