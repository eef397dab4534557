"""Tests for gnnorch.launch.plan: validation, enumeration and core assignment."""
from __future__ import annotations

import itertools
import json

import pytest

from gnnorch.launch.plan import (
    CorePlan,
    RankCores,
    assign_cores,
    default_plan,
    enumerate_plans,
)
from gnnorch.launch.topology import Topology

# --------------------------------------------------------------------------- fake topologies


def flat(n: int, quota: float | None = None) -> Topology:
    """n CPUs, each its own physical core, one NUMA node."""
    cpus = tuple(range(n))
    return Topology(cpus, quota, tuple((c,) for c in cpus), (cpus,))


def smt(cores: int, threads: int, nodes: int = 1) -> Topology:
    """Linux-style numbering (core c = CPUs c, c+cores, ...); cores split evenly over nodes."""
    groups = tuple(tuple(c + k * cores for k in range(threads)) for c in range(cores))
    per_node = cores // nodes
    numa = tuple(
        tuple(sorted(cpu for g in groups[i * per_node : (i + 1) * per_node] for cpu in g))
        for i in range(nodes)
    )
    return Topology(tuple(range(cores * threads)), None, groups, numa)


def check_disjoint(ranks: list[RankCores], plan: CorePlan, topo: Topology) -> None:
    assert [r.rank for r in ranks] == list(range(plan.processes))
    everything = [c for r in ranks for c in r.cpus]
    assert len(everything) == len(set(everything)) == plan.cores_needed
    assert set(everything) <= set(topo.usable_cpus)
    for r in ranks:
        assert len(r.trainer_cpus) == plan.threads
        assert len(r.sampler_cpus) == plan.sampler_cores
        assert r.cpus == r.trainer_cpus + r.sampler_cpus


# --------------------------------------------------------------------------- CorePlan


@pytest.mark.parametrize(
    "args, name, bound",
    [
        ((0, 0, 1), "processes", ">= 1"),
        ((-1, 0, 1), "processes", ">= 1"),
        ((1, -1, 1), "sampler_cores", ">= 0"),
        ((1, 0, 0), "threads", ">= 1"),
        ((1.0, 0, 1), "processes", ">= 1"),
        ((True, 0, 1), "processes", ">= 1"),
        ((1, False, 1), "sampler_cores", ">= 0"),
        ((1, 0, "2"), "threads", ">= 1"),
        ((1, 0, None), "threads", ">= 1"),
    ],
)
def test_coreplan_validation_names_argument(args: tuple, name: str, bound: str) -> None:
    with pytest.raises(ValueError) as info:
        CorePlan(*args)
    message = str(info.value)
    assert message.startswith(f"{name} must be an integer {bound}")
    assert "got" in message


def test_coreplan_validation_exact_message() -> None:
    with pytest.raises(ValueError, match=r"^processes must be an integer >= 1, got 0$"):
        CorePlan(0, 0, 1)


def test_coreplan_accepts_numpy_integers() -> None:
    np = pytest.importorskip("numpy")
    plan = CorePlan(np.int64(2), np.int32(0), np.int64(1))
    assert plan.as_tuple() == (2, 0, 1)
    assert all(type(v) is int for v in plan.as_tuple())


def test_coreplan_basics() -> None:
    plan = CorePlan(processes=2, sampler_cores=1, threads=3)
    assert plan.cores_needed == 8
    assert plan.as_tuple() == (2, 1, 3)
    assert str(plan) == "p=2 s=1 t=3"
    assert str(CorePlan(2, 0, 1)) == "p=2 s=0 t=1"
    d = plan.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["processes"] == 2 and d["sampler_cores"] == 1 and d["threads"] == 3
    assert CorePlan(1, 0, 1) == CorePlan(1, 0, 1)
    assert len({CorePlan(1, 0, 1), CorePlan(1, 0, 1)}) == 1


def test_check_message() -> None:
    with pytest.raises(ValueError) as info:
        CorePlan(3, 1, 1).check(flat(2))
    assert str(info.value) == (
        "plan needs 6 cores (processes=3 x (sampler_cores=1 + threads=1)) but only 2 are "
        "usable (CPUs [0, 1]); allowed: processes*(sampler_cores+threads) <= 2"
    )


def test_check_respects_quota() -> None:
    topo = flat(4, quota=1.5)
    CorePlan(1, 0, 1).check(topo)
    with pytest.raises(ValueError, match="quota 1.5"):
        CorePlan(1, 0, 2).check(topo)


def test_check_accepts_exact_fit() -> None:
    CorePlan(2, 1, 1).check(flat(4))


# --------------------------------------------------------------------------- enumerate_plans


def test_enumerate_plans_two_cpus_exact() -> None:
    assert [p.as_tuple() for p in enumerate_plans(flat(2))] == [
        (1, 0, 1),
        (1, 0, 2),
        (1, 1, 1),
        (2, 0, 1),
    ]


def test_enumerate_plans_one_cpu() -> None:
    assert enumerate_plans(flat(1)) == [CorePlan(1, 0, 1)]


def test_enumerate_plans_sixteen_cpus_complete_and_sorted() -> None:
    n = 16
    plans = [p.as_tuple() for p in enumerate_plans(smt(8, 2))]
    brute = [
        (p, s, t)
        for p, s, t in itertools.product(range(1, n + 1), range(0, n + 1), range(1, n + 1))
        if p * (s + t) <= n
    ]
    assert plans == sorted(brute)
    assert len(plans) == len(set(plans))
    assert all(p * (s + t) <= n for p, s, t in plans)


def test_enumerate_plans_uses_quota() -> None:
    assert [p.as_tuple() for p in enumerate_plans(flat(8, quota=2.0))] == [
        (1, 0, 1),
        (1, 0, 2),
        (1, 1, 1),
        (2, 0, 1),
    ]


def test_default_plan() -> None:
    assert default_plan(flat(6)) == CorePlan(1, 0, 6)
    assert default_plan(flat(6, quota=2.5)) == CorePlan(1, 0, 2)


# --------------------------------------------------------------------------- assign_cores


def test_assign_every_plan_disjoint_and_sized() -> None:
    for topo in (flat(2), flat(5), smt(4, 2), smt(4, 2, nodes=2), smt(6, 2, nodes=3)):
        for plan in enumerate_plans(topo):
            check_disjoint(assign_cores(plan, topo), plan, topo)


def test_assign_two_cpus() -> None:
    ranks = assign_cores(CorePlan(2, 0, 1), flat(2))
    assert [r.cpus for r in ranks] == [(0,), (1,)]
    (only,) = assign_cores(CorePlan(1, 1, 1), flat(2))
    assert only.trainer_cpus == (0,) and only.sampler_cpus == (1,)


def test_assign_prefers_physical_cores_before_siblings() -> None:
    topo = smt(4, 2)  # cores (0,4) (1,5) (2,6) (3,7)
    (rank,) = assign_cores(CorePlan(1, 0, 4), topo)
    assert rank.trainer_cpus == (0, 1, 2, 3)  # one CPU on every physical core
    (rank,) = assign_cores(CorePlan(1, 2, 4), topo)
    assert rank.trainer_cpus == (0, 1, 2, 3)
    assert rank.sampler_cpus == (4, 5)  # siblings only after the physical cores ran out
    ranks = assign_cores(CorePlan(2, 0, 2), topo)
    assert [r.cpus for r in ranks] == [(0, 1), (2, 3)]


def test_assign_spreads_ranks_over_numa_nodes() -> None:
    topo = smt(4, 2, nodes=2)  # node0: cores (0,4) (1,5); node1: cores (2,6) (3,7)
    assert topo.numa_nodes == ((0, 1, 4, 5), (2, 3, 6, 7))
    ranks = assign_cores(CorePlan(2, 0, 2), topo)
    assert [r.cpus for r in ranks] == [(0, 1), (2, 3)]
    for rank, node in zip(ranks, topo.numa_nodes):
        assert set(rank.cpus) <= set(node)
    ranks = assign_cores(CorePlan(2, 1, 2), topo)
    assert [(r.trainer_cpus, r.sampler_cpus) for r in ranks] == [((0, 1), (4,)), ((2, 3), (6,))]


def test_assign_keeps_rank_within_one_node_when_it_fits() -> None:
    topo = smt(4, 2, nodes=2)
    (rank,) = assign_cores(CorePlan(1, 0, 4), topo)
    assert set(rank.cpus) == {0, 1, 4, 5}  # fits node 0, even using siblings
    ranks = assign_cores(CorePlan(4, 0, 2), topo)
    for rank in ranks:
        assert any(set(rank.cpus) <= set(node) for node in topo.numa_nodes)


def test_assign_spills_over_nodes_when_rank_is_too_big() -> None:
    topo = smt(4, 2, nodes=2)
    (rank,) = assign_cores(CorePlan(1, 0, 6), topo)
    assert rank.cpus == (0, 1, 4, 5, 2, 3)


def test_assign_is_deterministic() -> None:
    topo = smt(6, 2, nodes=3)
    plan = CorePlan(3, 1, 2)
    assert assign_cores(plan, topo) == assign_cores(plan, topo)


def test_assign_respects_quota() -> None:
    ranks = assign_cores(CorePlan(2, 0, 1), flat(8, quota=2.0))
    assert [r.cpus for r in ranks] == [(0,), (1,)]


def test_assign_infeasible_raises() -> None:
    with pytest.raises(ValueError, match="plan needs 6 cores"):
        assign_cores(CorePlan(3, 1, 1), flat(2))


def test_rank_cores_to_dict() -> None:
    rank = RankCores(rank=1, trainer_cpus=(2, 3), sampler_cpus=(6,))
    assert rank.cpus == (2, 3, 6)
    d = rank.to_dict()
    assert d == {"rank": 1, "trainer_cpus": [2, 3], "sampler_cpus": [6]}
    assert json.loads(json.dumps(d)) == d
