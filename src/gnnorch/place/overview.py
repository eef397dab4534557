"""What a plan means, for a person: the placement per node, the flow schedule, and the predicted
iteration time against co-location (what ``python -m gnnorch plan`` prints).

`plan_overview(cluster, profile, seed=..., **options)` plans (`plan.plan_placement`) and adds:

* **co-location baselines**: DistDGL-style co-location (`baselines.colocation`) simulated
  with the plan's flow policy and with FIFO sending (DistDGL's own, as DGTP models it), on the
  *same* random draws as the plan's prediction (``Placement.eval_seed``: common random
  numbers, so the difference is the placement's and the schedule's, not the draws');
* **the flow schedule**: the chosen placement simulated at the profiled means for
  ``eval_iterations`` iterations under the plan's policy (`oes.simulate`); every flow with its
  iteration, kind, endpoints (task and node), bytes, start and end. Co-located flows are kept
  and marked ``local`` (they take no time unless the cluster has ``local_gbps``).

Invariant: the overview only reads the plan and simulates; the numbers it prints are the
planner's own (`Placement.predicted_iteration_s`) and `evaluate` results on the same draws.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnorch.place.assignment import Assignment, usage
from gnnorch.place.baselines import colocation
from gnnorch.place.cluster import RESOURCES, Cluster, PlacementError
from gnnorch.place.oes import simulate
from gnnorch.place.plan import Placement, evaluate, plan_placement
from gnnorch.place.profile import Profile
from gnnorch.place.tasks import FLOW_KINDS, TaskGraph

__all__ = ["FlowRecord", "PlanOverview", "plan_overview", "flow_schedule"]

_POLICY_WORDS = {"oes": "OES (fair sharing)", "fifo": "FIFO", "mrtf": "MRTF"}


@dataclass(frozen=True)
class FlowRecord:
    """One simulated flow: iteration (0-based), kind (`tasks.FLOW_KINDS`), source and
    destination task ("store 0", "sampler 3", "trainer 1") and node index, mean bytes, start
    and end (seconds from the start of the simulation), whether both ends share a node."""

    iteration: int
    kind: str
    src: str
    dst: str
    src_node: int
    dst_node: int
    bytes: float
    start_s: float
    end_s: float
    local: bool

    def to_dict(self) -> dict:
        return dict(vars(self))


def _entity_name(profile: Profile, e: int) -> str:
    p, s = profile.n_partitions, profile.n_samplers
    if e < p:
        return f"store {e}"
    if e < p + s:
        return f"sampler {e - p}"
    return f"trainer {e - p - s}"


def flow_schedule(cluster: Cluster, profile: Profile, a: Assignment, policy: str,
                  n_iterations: int) -> list[FlowRecord]:
    """Every flow of `n_iterations` iterations of placement `a` at the profiled means, in start
    order (ties: flow id)."""
    graph = TaskGraph(profile, n_iterations)
    nodes = a.entity_nodes(profile)
    result = simulate(graph, nodes, cluster, policy=policy)
    order = np.lexsort((np.arange(graph.n_flows), result.flow_start))
    flows = []
    for f in order.tolist():
        src, dst = int(graph.flow_src[f]), int(graph.flow_dst[f])
        flows.append(FlowRecord(
            iteration=int(graph.task_iter[graph.flow_gate[f]]),
            kind=FLOW_KINDS[int(graph.flow_kind[f])], src=_entity_name(profile, src),
            dst=_entity_name(profile, dst), src_node=int(nodes[src]), dst_node=int(nodes[dst]),
            bytes=float(graph.flow_mean[f]), start_s=float(result.flow_start[f]),
            end_s=float(result.flow_end[f]), local=bool(result.flow_local[f])))
    return flows


@dataclass
class PlanOverview:
    """A plan with its baselines and flow schedule (module docstring)."""

    placement: Placement
    node_names: list[str]
    colocation_s: dict[str, float]         # policy -> mean seconds per iteration
    colocation_error: str | None
    flows: list[FlowRecord]

    # -- numbers -------------------------------------------------------------------------------
    def gain_pct(self, policy: str) -> float | None:
        """Plan vs co-location under `policy`: (plan / co-location - 1) * 100 (negative:
        the plan is faster), or None when co-location does not fit."""
        base = self.colocation_s.get(policy)
        if not base:
            return None
        return 100.0 * (self.placement.predicted_iteration_s / base - 1.0)

    def kinds(self) -> dict[str, dict]:
        """Per flow kind, per iteration: flows, remote flows, remote MB, mean remote seconds."""
        n = self.placement.options["eval_iterations"]
        out = {}
        for kind in FLOW_KINDS:
            mine = [f for f in self.flows if f.kind == kind]
            remote = [f for f in mine if not f.local]
            out[kind] = {"flows": len(mine) / n, "remote_flows": len(remote) / n,
                         "remote_mb": sum(f.bytes for f in remote) / n / 1e6,
                         "mean_remote_s": (float(np.mean([f.end_s - f.start_s for f in remote]))
                                           if remote else 0.0)}
        return out

    # -- output --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-serialisable: cluster, profile summary, placement, baselines, schedule."""
        plan = self.placement
        placement = plan.to_dict()
        for node in placement["nodes"]:
            node["name"] = self.node_names[node["node"]]
        return {"cluster": {**plan.cluster.to_dict(), "names": list(self.node_names)},
                "profile": plan.profile.to_dict(),
                "placement": placement,
                "predicted_iteration_s": plan.predicted_iteration_s,
                "colocation": {"iteration_s": dict(self.colocation_s),
                               "gain_pct": {p: self.gain_pct(p) for p in self.colocation_s},
                               "error": self.colocation_error},
                "schedule": {"policy": plan.policy,
                             "iterations": plan.options["eval_iterations"],
                             "at": "profiled means", "by_kind": self.kinds(),
                             "flows": [f.to_dict() for f in self.flows]}}

    def text(self, max_flows: int = 12) -> str:
        """The overview as a few aligned tables (``max_flows`` remote flows of the first
        iteration; 0: all of them)."""
        plan, prof, names = self.placement, self.placement.profile, self.node_names
        cl = plan.cluster
        lines = [f"gnnorch plan: {cl.n_nodes} nodes; profile {prof.name or '(unnamed)'}: "
                 f"{prof.n_partitions} graph stores, {prof.n_samplers} samplers, "
                 f"{prof.n_trainers} trainers; flows: {_POLICY_WORDS[plan.policy]}", "",
                 "placement (store g runs on node g)"]
        use = usage(cl, prof, plan.assignment)
        rows = [("node", "partition", "trainers", "samplers", "cores", "memory GB", "GPUs")]
        for m in range(cl.n_nodes):
            cap = cl.capacity[m]
            rows.append((names[m], str(m) if m < prof.n_partitions else "-",
                         _ids(plan.trainer_node == m), _ids(plan.sampler_node == m),
                         *(f"{use[m, i]:g}/{cap[i]:g}" for i in range(len(RESOURCES)))))
        lines += _table(rows)
        lines += ["", f"predicted iteration time (simulated: {plan.options['eval_draws']} "
                      f"draws x {plan.options['eval_iterations']} iterations, makespan / "
                      f"iterations)"]
        rows = [(f"plan: this placement, {_POLICY_WORDS[plan.policy]} flows",
                 _ms(plan.predicted_iteration_s), "")]
        for policy, seconds in self.colocation_s.items():
            label = f"co-location, {_POLICY_WORDS[policy]} flows"
            if policy == "fifo":
                label += " (DistDGL)"
            rows.append((label, _ms(seconds), f"plan {self.gain_pct(policy):+.1f} %"))
        lines += _table(rows, header=False)
        if self.colocation_error:
            lines.append(f"  co-location does not fit: {self.colocation_error}")
        s = plan.search
        kept = {None: "nothing better than the start found",
                "start": "its best lost on fresh draws: start kept",
                "search": "its best, confirmed on fresh draws"}[
            plan.confirmation and plan.confirmation["kept"]]
        lines.append(f"  search: from {plan.start}, {s.steps} steps, {s.accepted} accepted, "
                     f"{s.evaluations} placements simulated; {kept}")
        lines += ["", f"flow schedule ({_POLICY_WORDS[plan.policy]}, at the profiled means; "
                      f"per iteration)"]
        rows = [("kind", "flows", "remote", "remote MB", "mean remote ms")]
        for kind, k in self.kinds().items():
            rows.append((kind, f"{k['flows']:g}", f"{k['remote_flows']:g}",
                         f"{k['remote_mb']:.1f}", f"{1e3 * k['mean_remote_s']:.2f}"))
        lines += _table(rows)
        first = [f for f in self.flows if f.iteration == 0 and not f.local]
        shown = first if max_flows <= 0 else first[:max_flows]
        lines += ["", f"remote flows of iteration 1 in start order ({len(first)})"]
        rows = [("start ms", "end ms", "kind", "from", "to", "MB")]
        for f in shown:
            rows.append((f"{1e3 * f.start_s:.2f}", f"{1e3 * f.end_s:.2f}", f.kind,
                         f"{f.src} @ {names[f.src_node]}", f"{f.dst} @ {names[f.dst_node]}",
                         f"{f.bytes / 1e6:.2f}"))
        lines += _table(rows)
        if len(shown) < len(first):
            lines.append(f"  ... {len(first) - len(shown)} more (--flows 0 shows all; --json "
                         f"has every flow of every iteration)")
        return "\n".join(lines)


def _ids(mask: np.ndarray) -> str:
    ids = np.flatnonzero(mask).tolist()
    return ", ".join(map(str, ids)) if ids else "-"


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


def _table(rows: list[tuple[str, ...]], header: bool = True) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if header:
        out.insert(1, "  " + "  ".join("-" * w for w in widths))
    return out


def plan_overview(cluster: Cluster, profile: Profile, node_names: list[str] | None = None,
             seed: int = 0, **options) -> PlanOverview:
    """Plan `profile` on `cluster` (`plan_placement` options) and explain it (module
    docstring); `PlacementError` when no placement fits."""
    names = list(node_names) if node_names is not None else \
        [str(m) for m in range(cluster.n_nodes)]
    if len(names) != cluster.n_nodes:
        raise ValueError(f"node_names must name the {cluster.n_nodes} nodes, got {len(names)}")
    plan = plan_placement(cluster, profile, seed=seed, **options)
    iterations, draws = plan.options["eval_iterations"], plan.options["eval_draws"]
    baselines: dict[str, float] = {}
    error = None
    try:
        coloc = colocation(cluster, profile)
    except PlacementError as exc:
        error = str(exc)
    else:
        for policy in dict.fromkeys((plan.policy, "fifo")):
            baselines[policy] = evaluate(cluster, profile, coloc, policy, iterations, draws,
                                         plan.eval_seed).mean
    flows = flow_schedule(cluster, profile, plan.assignment, plan.policy, iterations)
    return PlanOverview(plan, names, baselines, error, flows)
