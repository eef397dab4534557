"""DGTP task placement and flow scheduling for distributed GNN training (issue 16, part 3).

A pure ground-floor component (numpy and the standard library; nothing of processes, seams or
the tuner), after Luo, Bao and Wu, "Optimizing Task Placement and Online Scheduling for
Distributed GNN Training Acceleration" (docs/placement.md):

* `Cluster` -- nodes with cores, memory, GPUs and NIC (or pairwise) bandwidth;
* `Profile` -- one iteration's tasks (graph stores, samplers, trainers) with per-task times and
  per-flow volumes, measured (`Profile.from_measurements`) or synthetic (`Profile.synthetic`);
* `simulate` (OES) -- event simulation of N iterations with DGTP's bandwidth sharing, or FIFO /
  MRTF sending; `TaskGraph` is what it simulates;
* `initial_placement` (IFS, a DP over counts), `Metropolis` (ETP), `colocation` (DistDGL),
  `random_placement`;
* `plan_placement(cluster, profile, seed=...) -> Placement` and `evaluate`;
* `plan_overview` -- a plan with its co-location baselines and flow schedule, as text or JSON
  (``python -m gnnorch plan CLUSTER.json PROFILE.json``); `load_cluster` / `load_profile`
  read the two files (`files`: their schemas).
"""
from __future__ import annotations

from gnnorch.place.assignment import Assignment, feasible, overload, usage
from gnnorch.place.baselines import colocation, random_placement
from gnnorch.place.cluster import GBPS, RESOURCES, Cluster, PlacementError
from gnnorch.place.files import PlanFileError, load_cluster, load_profile
from gnnorch.place.initial import initial_placement
from gnnorch.place.oes import POLICIES, SimResult, simulate
from gnnorch.place.overview import FlowRecord, PlanOverview, plan_overview
from gnnorch.place.plan import (PLAN_DEFAULTS, Evaluation, Placement, Scorer, evaluate,
                                plan_placement)
from gnnorch.place.profile import Profile, TaskDemand
from gnnorch.place.search import Metropolis, SearchConfig, SearchResult
from gnnorch.place.tasks import FLOW_KINDS, TASK_KINDS, TaskGraph

__all__ = [
    "Assignment", "feasible", "overload", "usage",
    "colocation", "random_placement",
    "GBPS", "RESOURCES", "Cluster", "PlacementError",
    "PlanFileError", "load_cluster", "load_profile",
    "FlowRecord", "PlanOverview", "plan_overview",
    "initial_placement",
    "POLICIES", "SimResult", "simulate",
    "PLAN_DEFAULTS", "Evaluation", "Placement", "Scorer", "evaluate", "plan_placement",
    "Profile", "TaskDemand",
    "Metropolis", "SearchConfig", "SearchResult",
    "FLOW_KINDS", "TASK_KINDS", "TaskGraph",
]
