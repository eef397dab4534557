"""Core plans (p ranks, s sampler cores and t trainer threads per rank) and core assignment.

A plan (p, s, t) runs p data-parallel rank processes; each rank owns t trainer cores and s
sampler cores (s = 0: sampling runs in the trainer process). Ranks get disjoint cores, so a
plan is feasible exactly when p * (s + t) <= Topology.num_usable.
"""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass

from gnnorch.launch.topology import Topology

__all__ = [
    "CorePlan",
    "RankCores",
    "enumerate_plans",
    "assign_cores",
    "default_plan",
]

_MINIMUM = {"processes": 1, "sampler_cores": 0, "threads": 1}


def _check_count(name: str, value: object) -> int:
    """Return `value` as an int, or raise ValueError naming `name` and its allowed range."""
    minimum = _MINIMUM[name]
    ok_type = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok_type:
        raise ValueError(
            f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})"
        )
    number = operator.index(value)  # type: ignore[arg-type]
    if number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {number}")
    return number


@dataclass(frozen=True)
class CorePlan:
    """A plan (p, s, t); invariant: processes >= 1, sampler_cores >= 0, threads >= 1, all ints.

    Integral values such as numpy integers are accepted and stored as plain ints.
    """

    processes: int
    sampler_cores: int
    threads: int

    def __post_init__(self) -> None:
        for name in ("processes", "sampler_cores", "threads"):
            object.__setattr__(self, name, _check_count(name, getattr(self, name)))

    @property
    def cores_needed(self) -> int:
        """CPUs the plan occupies: processes * (sampler_cores + threads)."""
        return self.processes * (self.sampler_cores + self.threads)

    def check(self, topology: Topology) -> None:
        """Raise ValueError unless cores_needed <= topology.num_usable."""
        usable = topology.num_usable
        if self.cores_needed <= usable:
            return
        where = f"CPUs {list(topology.usable_cpus)}"
        if topology.cpu_quota is not None:
            where += f", cgroup CPU quota {topology.cpu_quota:g}"
        verb = "is" if usable == 1 else "are"
        raise ValueError(
            f"plan needs {self.cores_needed} cores (processes={self.processes} x "
            f"(sampler_cores={self.sampler_cores} + threads={self.threads})) but only {usable} "
            f"{verb} usable ({where}); allowed: processes*(sampler_cores+threads) <= {usable}"
        )

    def as_tuple(self) -> tuple[int, int, int]:
        """(processes, sampler_cores, threads)."""
        return (self.processes, self.sampler_cores, self.threads)

    def to_dict(self) -> dict:
        """JSON-ready description including cores_needed."""
        return {
            "processes": self.processes,
            "sampler_cores": self.sampler_cores,
            "threads": self.threads,
            "cores_needed": self.cores_needed,
        }

    def __str__(self) -> str:
        return f"p={self.processes} s={self.sampler_cores} t={self.threads}"


@dataclass(frozen=True)
class RankCores:
    """The disjoint CPUs of one rank: t trainer CPUs, then s sampler CPUs."""

    rank: int
    trainer_cpus: tuple[int, ...]
    sampler_cpus: tuple[int, ...]

    @property
    def cpus(self) -> tuple[int, ...]:
        """All of the rank's CPUs, trainer CPUs first."""
        return self.trainer_cpus + self.sampler_cpus

    def to_dict(self) -> dict:
        """JSON-ready description (lists, not tuples)."""
        return {
            "rank": self.rank,
            "trainer_cpus": list(self.trainer_cpus),
            "sampler_cpus": list(self.sampler_cpus),
        }


def enumerate_plans(topology: Topology) -> list[CorePlan]:
    """Every feasible plan (p * (s + t) <= num_usable), sorted by (p, s, t)."""
    n = topology.num_usable
    plans = []
    for p in range(1, n + 1):
        per_rank = n // p
        for s in range(0, per_rank):
            for t in range(1, per_rank - s + 1):
                plans.append(CorePlan(p, s, t))
    return plans


def default_plan(topology: Topology) -> CorePlan:
    """What vanilla PyTorch does: one process, in-process sampling, num_usable threads."""
    return CorePlan(1, 0, topology.num_usable)


# --------------------------------------------------------------------------- assignment


def _node_order(node: tuple[int, ...], cores: tuple[tuple[int, ...], ...]) -> list[int]:
    """The node's CPUs in preference order: one CPU per physical core, then SMT siblings.

    Level k lists the k-th logical CPU of every core (cores in order of their lowest CPU);
    CPUs that no core group names count as cores of their own.
    """
    members = set(node)
    groups = [tuple(c for c in core if c in members) for core in cores]
    groups = [g for g in groups if g]
    grouped = {c for g in groups for c in g}
    groups += [(c,) for c in node if c not in grouped]
    groups.sort()
    depth = max((len(g) for g in groups), default=0)
    return [g[k] for k in range(depth) for g in groups if k < len(g)]


def _take(free: list[list[int]], rank: int, need: int) -> list[int]:
    """Remove and return `need` CPUs for `rank` from the per-node free lists.

    Nodes are tried from rank mod n_nodes onwards; the first node that fits the whole rank
    supplies it. If none fits, the rank fills up from its preferred node and spills over.
    """
    n = len(free)
    order = [(rank + i) % n for i in range(n)]
    for node in order:
        if len(free[node]) >= need:
            taken = free[node][:need]
            del free[node][:need]
            return taken
    spilled: list[int] = []
    for node in order:
        grab = min(need - len(spilled), len(free[node]))
        spilled += free[node][:grab]
        del free[node][:grab]
    return spilled


def assign_cores(plan: CorePlan, topology: Topology) -> list[RankCores]:
    """Give each of the plan's ranks its own disjoint CPUs (plan.check runs first).

    Policy, deterministic:
      * ranks spread over NUMA nodes: rank r prefers node r mod n_nodes, and a rank's CPUs
        stay within one node when it fits there (the next node that fits is used otherwise;
        only when no node fits does a rank span nodes);
      * within a node, CPUs are handed out one logical CPU per physical core first, and SMT
        siblings only once the node's physical cores run out;
      * a rank takes its CPUs in that order, trainer CPUs first, then sampler CPUs.
    """
    plan.check(topology)
    free = [_node_order(node, topology.cores) for node in topology.numa_nodes]
    need = plan.sampler_cores + plan.threads
    ranks = []
    for rank in range(plan.processes):
        cpus = _take(free, rank, need)
        ranks.append(
            RankCores(
                rank=rank,
                trainer_cpus=tuple(cpus[: plan.threads]),
                sampler_cpus=tuple(cpus[plan.threads :]),
            )
        )
    return ranks
