"""gnnorch.place: DGTP's cluster / task model, the OES simulator, IFS, ETP and the baselines.

The bandwidth cases are computed by hand in the comments (1 Gbit/s = 1.25e8 B/s, so a volume
of `GB` bytes takes 1 s at 1 Gbit/s).
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnorch.place import (Assignment, Cluster, PlacementError, Profile, Scorer, TaskDemand,
                           TaskGraph, colocation, evaluate, feasible, initial_placement,
                           plan_placement, random_placement, simulate, usage)
from gnnorch.place.search import Metropolis, SearchConfig

GB = 1.25e8          # bytes that take one second at 1 Gbit/s


def profile(structure, sampler_trainer, batch=None, feature=None, grad=0.0, store_s=0.0,
            sampler_s=0.0, trainer_s=0.0, **demands) -> Profile:
    """A hand-made profile: no spread, given times (the same for every task of a kind)."""
    structure = np.asarray(structure, float)
    p, s = structure.shape
    w = int(max(sampler_trainer)) + 1
    return Profile(sampler_trainer=np.array(sampler_trainer), store_s=np.full(p, store_s),
                   sampler_s=np.full(s, sampler_s), trainer_s=np.full(w, trainer_s),
                   structure_bytes=structure,
                   batch_bytes=np.zeros(s) if batch is None else np.asarray(batch, float),
                   feature_bytes=np.zeros((p, w)) if feature is None else np.asarray(feature),
                   grad_bytes=grad, time_cv=0.0, volume_cv=0.0, **demands)


def nics(out, inn, **kw) -> Cluster:
    n = len(out)
    return Cluster((8,) * n, (64,) * n, (1,) * n, tuple(inn), tuple(out), **kw)


def run(prof, cluster, sampler_node, trainer_node, n_iterations=1, policy="oes"):
    graph = TaskGraph(prof, n_iterations)
    nodes = Assignment(trainer_node, sampler_node).entity_nodes(prof)
    return graph, simulate(graph, nodes, cluster, policy=policy)


def structure_ends(graph, result):
    keep = graph.flow_kind == 0
    return result.flow_end[keep], result.flow_start[keep]


# -- OES bandwidth sharing ------------------------------------------------------------------
def test_one_flow_takes_volume_over_the_bottleneck_nic():
    # store on node 0 (out 4 Gbit/s) -> sampler on node 1 (in 1 Gbit/s): 2 GB at 1 -> 2 s
    prof = profile([[2 * GB]], [0])
    graph, res = run(prof, nics([4, 1], [1, 1]), [1], [1])
    ends, starts = structure_ends(graph, res)
    assert ends.tolist() == pytest.approx([2.0]) and starts.tolist() == [0.0]
    assert res.makespan == pytest.approx(2.0)


def test_two_flows_share_the_sending_nic():
    # one store (out 1) to samplers on nodes 1, 2 (in 1 each): D_out = 2 -> 0.5 each -> 2 s
    prof = profile([[GB, GB]], [0, 1])
    graph, res = run(prof, nics([1, 1, 1], [1, 1, 1]), [1, 2], [1, 2])
    assert structure_ends(graph, res)[0].tolist() == pytest.approx([2.0, 2.0])
    # with out = 2 each flow gets min(2/2, 1/1) = 1 -> 1 s
    graph, res = run(prof, nics([2, 1, 1], [1, 1, 1]), [1, 2], [1, 2])
    assert structure_ends(graph, res)[0].tolist() == pytest.approx([1.0, 1.0])


def test_two_flows_share_the_receiving_nic():
    # stores on nodes 0, 1 (out 1) -> one sampler on node 2 (in 1): D_in = 2 -> 0.5 -> 2 s
    prof = profile([[GB], [GB]], [0])
    graph, res = run(prof, nics([1, 1, 1], [1, 1, 1]), [2], [2])
    assert structure_ends(graph, res)[0].tolist() == pytest.approx([2.0, 2.0])


def test_flows_with_different_bottlenecks():
    # store out 3 -> A (in 1, 1 GB), B (in 5, 3 GB). Until t = 1: A min(3/2, 1) = 1 (done),
    # B min(3/2, 5) = 1.5 (1.5 GB left); then B alone min(3, 5) = 3 -> 0.5 s more: 1.5 s
    prof = profile([[GB, 3 * GB]], [0, 1])
    graph, res = run(prof, nics([3, 1, 5], [1, 1, 5]), [1, 2], [1, 2])
    assert structure_ends(graph, res)[0].tolist() == pytest.approx([1.0, 1.5])


def test_pair_link_caps_and_measured_matrix():
    # NICs 1, but the 0 -> 1 link carries 0.5: 1 GB takes 2 s
    inf = float("inf")
    cluster = nics([1, 1], [1, 1], link_gbps=((inf, 0.5), (inf, inf)))
    graph, res = run(profile([[GB]], [0]), cluster, [1], [1])
    assert structure_ends(graph, res)[0].tolist() == pytest.approx([2.0])
    measured = Cluster.from_bandwidth_matrix((8, 8), (64, 64), (1, 1), [[0, 0.5], [2, 0]])
    graph, res = run(profile([[GB]], [0]), measured, [1], [1])
    assert structure_ends(graph, res)[0].tolist() == pytest.approx([2.0])


def test_fifo_sends_one_flow_at_a_time_per_sender():
    # same two flows as above: FIFO sends one at full rate, then the other: 1 s and 2 s
    prof = profile([[GB, GB]], [0, 1])
    for policy in ("fifo", "mrtf"):
        graph, res = run(prof, nics([1, 1, 1], [1, 1, 1]), [1, 2], [1, 2], policy=policy)
        assert sorted(structure_ends(graph, res)[0].tolist()) == pytest.approx([1.0, 2.0])


def test_inter_iteration_flow_waits_for_its_predecessor():
    # two iterations, zero compute: the second flow on the same pair starts when the first ends
    graph, res = run(profile([[GB]], [0]), nics([1, 1], [1, 1]), [1], [1], n_iterations=2)
    ends, starts = structure_ends(graph, res)
    assert starts.tolist() == pytest.approx([0.0, 1.0])
    assert ends.tolist() == pytest.approx([1.0, 2.0])
    assert res.iteration_s == pytest.approx(1.0)


def test_colocated_flows_take_no_network_time():
    # everything on node 0: the makespan is the chain of compute times 0.1 + 0.2 + 0.3
    prof = profile([[GB]], [0], batch=[GB], feature=[[3 * GB]], store_s=0.1, sampler_s=0.2,
                   trainer_s=0.3)
    graph, res = run(prof, nics([1], [1]), [0], [0])
    assert res.makespan == pytest.approx(0.6)
    assert np.all(res.flow_seconds() == 0) and res.flow_local.all()
    # with a memory-copy bandwidth of 10 Gbit/s the three local flows cost (1+1+3)/10 s
    graph, res = run(prof, nics([1], [1], local_gbps=10), [0], [0])
    assert res.makespan == pytest.approx(0.6 + 0.5)


def test_trainer_starts_when_its_features_arrive():
    # features 2 GB from the store on node 0 to the trainer on node 1 (in 1): trainer at 2 s
    prof = profile([[0.0]], [0], feature=[[2 * GB]], trainer_s=0.5)
    graph, res = run(prof, nics([1, 1], [1, 1]), [1], [1])
    trainer = np.flatnonzero(graph.task_kind == 3)[0]
    assert res.task_start[trainer] == pytest.approx(2.0)
    assert res.makespan == pytest.approx(2.5)
    assert res.flow_seconds("feature", remote_only=True).tolist() == pytest.approx([2.0])


def test_ring_allreduce_volume():
    # 2 trainers on nodes 0, 1: each ring flow carries 2 (W-1)/W * grad = grad: 1 GB -> 1 s
    prof = profile([[0.0, 0.0], [0.0, 0.0]], [0, 1], grad=GB)
    graph, res = run(prof, nics([1, 1], [1, 1]), [0, 1], [0, 1])
    assert res.flow_seconds("allreduce").tolist() == pytest.approx([1.0, 1.0])


# -- models and validation ------------------------------------------------------------------
def test_profile_from_measurements_and_validation():
    rng = np.random.default_rng(0)
    steps = 400
    kw = dict(sampler_trainer=[0, 0, 1], store_s=rng.normal(1, 0.1, (steps, 2)),
              sampler_s=rng.normal(2, 0.2, (steps, 3)), trainer_s=rng.normal(3, 0.3, (steps, 2)),
              structure_bytes=rng.normal(100, 5, (steps, 2, 3)),
              batch_bytes=rng.normal(50, 2.5, (steps, 3)),
              feature_bytes=rng.normal(10, 0.5, (steps, 2, 2)), grad_bytes=4,
              store_demand=TaskDemand(1, 2), sampler_demand=TaskDemand(2, 7),
              trainer_demand=TaskDemand(1, 3, 1))
    prof = Profile.from_measurements(**kw, skip=5)
    assert prof.sampler_s == pytest.approx([2, 2, 2], rel=0.03)
    assert prof.time_cv == pytest.approx(0.1, abs=0.015)
    assert prof.volume_cv == pytest.approx(0.05, abs=0.01)
    with pytest.raises(ValueError):
        profile([[1.0]], [1])                       # trainer 0 has no sampler
    with pytest.raises(ValueError):
        Cluster((1,), (1,), (1,), (0,), (1,))       # zero bandwidth
    with pytest.raises(ValueError):
        run(profile([[GB]], [0]), nics([1, 1], [1, 1]), [1], [1], policy="lifo")
    with pytest.raises(TypeError):
        plan_placement(nics([1, 1], [1, 1]), profile([[GB]], [0]), stepz=3)


# -- IFS (dynamic programming) --------------------------------------------------------------
def _brute_force_feasible(cluster, prof) -> bool:
    free = cluster.capacity.copy()
    free[:prof.n_partitions] -= prof.store_demand.vector()
    ds, dw = prof.sampler_demand.vector(), prof.trainer_demand.vector()
    fits = [[(a, b) for a in range(prof.n_samplers + 1) for b in range(prof.n_trainers + 1)
             if np.all(a * ds + b * dw <= free[m] + 1e-9)] for m in range(cluster.n_nodes)]
    return any(sum(c[0] for c in combo) == prof.n_samplers and
               sum(c[1] for c in combo) == prof.n_trainers for combo in itertools.product(*fits))


def _small_case(rng):
    n, w, k = 3, int(rng.integers(1, 4)), int(rng.integers(1, 3))
    prof = Profile.synthetic(n_partitions=n, n_trainers=w, samplers_per_trainer=k, store_s=0.01,
                             sampler_s=0.01, trainer_s=0.01, structure_bytes=GB / 10,
                             batch_bytes=GB / 20, feature_bytes=GB, grad_bytes=GB / 100,
                             locality=0.5, store_demand=TaskDemand(1, 2, 0),
                             sampler_demand=TaskDemand(2, 7, 0),
                             trainer_demand=TaskDemand(1, 3, 1), seed=int(rng.integers(99)))
    cluster = Cluster(tuple(rng.integers(1, 9, n)), tuple(8.0 * rng.integers(1, 5, n)),
                      tuple(rng.integers(0, 3, n)), (10,) * n, (10,) * n)
    return cluster, prof


def test_ifs_is_feasible_and_complete_against_brute_force():
    rng = np.random.default_rng(1)
    found = missing = 0
    for _ in range(40):
        cluster, prof = _small_case(rng)
        try:
            a = initial_placement(cluster, prof, np.random.default_rng(0))
        except PlacementError:
            assert not _brute_force_feasible(cluster, prof)
            missing += 1
            continue
        found += 1
        assert feasible(cluster, prof, a)
        use = usage(cluster, prof, a)
        assert np.all(use <= cluster.capacity + 1e-9)
        assert all(cluster.gpus[m] >= 1 for m in a.trainer_node)
    assert found and missing                       # both outcomes were exercised


def test_baselines_respect_capacities():
    rng = np.random.default_rng(2)
    for _ in range(20):
        cluster, prof = _small_case(rng)
        try:
            co = colocation(cluster, prof)
        except PlacementError:
            continue
        assert feasible(cluster, prof, co)
        assert feasible(cluster, prof, random_placement(cluster, prof, rng))
    home = Cluster.homogeneous(3, 16, 64, 2, 10)
    _, prof = _small_case(np.random.default_rng(3))
    co = colocation(home, prof)
    assert np.array_equal(co.trainer_node, prof.home_partition())   # room: all at home
    assert np.array_equal(co.sampler_node, co.trainer_node[prof.sampler_trainer])


# -- ETP -----------------------------------------------------------------------------------
def _het_case():
    prof = Profile.synthetic(n_partitions=3, n_trainers=4, samplers_per_trainer=2,
                             store_s=0.01, sampler_s=0.01, trainer_s=0.02,
                             structure_bytes=GB / 10, batch_bytes=GB / 20, feature_bytes=GB,
                             grad_bytes=GB / 100, locality=0.5, spread=0.5,
                             store_demand=TaskDemand(1, 2, 0),
                             sampler_demand=TaskDemand(2, 7, 0),
                             trainer_demand=TaskDemand(1, 3, 1), seed=4)
    cluster = Cluster((8, 16, 12), (32, 64, 48), (1, 3, 2), (10, 50, 20), (10, 50, 20))
    return cluster, prof


def test_metropolis_never_worse_than_its_start_and_deterministic():
    cluster, prof = _het_case()
    results = []
    for start_seed in range(3):
        start = initial_placement(cluster, prof, np.random.default_rng(start_seed))
        runs = []
        for _ in range(2):
            scorer = Scorer(cluster, prof, 2, 0, "oes")
            chain = Metropolis(cluster, prof, scorer, SearchConfig(steps=40),
                               np.random.default_rng(7))
            res = chain.run(start)
            assert res.best_score <= res.start_score
            assert res.best_score == pytest.approx(scorer(res.best))
            assert feasible(cluster, prof, res.best)
            runs.append((res.best.key(), res.best_score, res.accepted))
        assert runs[0] == runs[1]
        results.append(runs[0][1] < Scorer(cluster, prof, 2, 0, "oes")(start))
    assert any(results)                    # the chain does improve some starts


def test_plan_is_deterministic_and_serialisable():
    cluster, prof = _het_case()
    a = plan_placement(cluster, prof, seed=3, steps=30)
    b = plan_placement(cluster, prof, seed=3, steps=30)
    assert a.to_dict() == b.to_dict()
    d = json.loads(json.dumps(a.to_dict()))
    ranks = sorted(r for node in d["nodes"] for r in node["trainer_ranks"])
    assert ranks == list(range(prof.n_trainers))
    assert sum(len(node["samplers"]) for node in d["nodes"]) == prof.n_samplers
    assert [node["partition"] for node in d["nodes"]] == [0, 1, 2]
    assert d["predicted_iteration_s"] == pytest.approx(a.predicted_iteration_s)
    assert a.predicted_iteration_s > 0
    for node in d["nodes"]:
        assert node["sampler_cores"] == 2 * len(node["samplers"])
        assert node["usage"]["gpus"] <= cluster.gpus[node["node"]]


def test_planner_not_worse_than_colocation_on_a_tiny_homogeneous_cluster():
    _, prof = _het_case()
    cluster = Cluster.homogeneous(3, 16, 64, 2, 10)
    plan = plan_placement(cluster, prof, seed=0, steps=40, search_iterations=2)
    co = colocation(cluster, prof)
    scorer = Scorer(cluster, prof, 2, 0, "oes")
    assert scorer(plan.assignment) <= scorer(co) * (1 + 1e-12)
    ours = evaluate(cluster, prof, plan.assignment, "oes", 3, 2, seed=5).mean
    distdgl = evaluate(cluster, prof, co, "fifo", 3, 2, seed=5).mean
    assert ours <= distdgl


def test_bench_placement_quick(tmp_path, monkeypatch, capsys):
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_placement.py"
    spec = importlib.util.spec_from_file_location("bench_placement", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "placement.json"
    monkeypatch.setattr(sys, "argv", ["bench_placement.py", "--quick", "--out", str(out)])
    bench.main()
    table = capsys.readouterr().out
    assert "| products/heterogeneous |" in table and "ETP + OES" in table
    data = json.loads(out.read_text())
    assert set(data["results"]) == {f"{w}/{s}" for w in ("products", "papers100M")
                                    for s in ("homogeneous", "heterogeneous")}
    for res in data["results"].values():
        assert set(res["methods"]) == set(bench.METHODS)
        assert all(v["mean_ms"] > 0 for v in res["methods"].values())
