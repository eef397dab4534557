"""The search space and the skopt tuner, against deterministic objectives: every point it asks
for is feasible, no point is measured twice, a fixed seed repeats the trial sequence, the model
(not only the initial design) chooses points, and the stopping rules hold."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from gnnorch.launch.plan import enumerate_plans
from gnnorch.launch.topology import Topology
from gnnorch.tune.space import Dimension, SearchSpace
from gnnorch.tune.tuner import Tuner


def fake_topology(n: int) -> Topology:
    cpus = tuple(range(n))
    return Topology(usable_cpus=cpus, cpu_quota=None, cores=tuple((c,) for c in cpus),
                    numa_nodes=(cpus,))


def objective(point: dict) -> float:
    """A throughput landscape where one sampler core helps and more hurt (best: p=1, s=1,
    t=15 on 16 cores; p=2, s=1, t=7 within 6 %)."""
    p, s, t = point["processes"], point["sampler_cores"], point["threads"]
    return (p ** 0.8) * (1 + 0.5 * min(s, 1)) * t ** 0.6 / (1 + 0.06 * p * p) / (1 + 0.2 * s * s)


def run(space: SearchSpace, seed: int = 0, budget: int = 15, fn=objective, **kw) -> Tuner:
    usable = space.usable
    tuner = Tuner(space, budget=budget, seed=seed, **kw)
    start = {"processes": 1, "sampler_cores": 0, "threads": usable}
    tuner.observe(start, fn(start), "default")
    while (s := tuner.suggest()) is not None:
        p = s.point
        assert p["processes"] * (p["sampler_cores"] + p["threads"]) <= usable, p
        assert space.feasible(p)
        tuner.observe(p, fn(p), s.chosen_by, s.predicted)
    return tuner


@pytest.mark.parametrize("n", [1, 2, 3, 8, 13])
def test_space_is_exactly_the_feasible_plans(n):
    space = SearchSpace.for_cores(n, max_processes=n, max_sampler_cores=n)
    got = sorted(SearchSpace.plan(p).as_tuple() for p in space.points())
    assert got == [p.as_tuple() for p in enumerate_plans(fake_topology(n))]
    assert space.size == len(got)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), pmax=st.integers(1, 10), smax=st.integers(0, 5))
def test_bounded_space_counts_feasible_points(n, pmax, smax):
    space = SearchSpace.for_cores(n, max_processes=pmax, max_sampler_cores=smax)
    brute = [(p, s, t) for p in range(1, min(n, pmax) + 1) for s in range(0, min(n - 1, smax) + 1)
             for t in range(1, n + 1) if p * (s + t) <= n]
    assert sorted(SearchSpace.plan(p).as_tuple() for p in space.points()) == sorted(brute)


def test_two_core_machine_has_four_plans():
    space = SearchSpace.from_topology(fake_topology(2))
    assert space.size == 4
    assert {SearchSpace.plan(p).as_tuple() for p in space.points()} == {
        (1, 0, 1), (1, 0, 2), (1, 1, 1), (2, 0, 1)}


def test_fixed_dimensions_are_not_searched():
    space = SearchSpace.for_cores(16, fixed={"processes": 2})
    assert space.names == ["sampler_cores", "threads"]
    assert all(p["processes"] == 2 and 2 * (p["sampler_cores"] + p["threads"]) <= 16
               for p in space.points())


def test_skopt_samples_only_feasible_points():
    space = SearchSpace.for_cores(64)
    tuner = Tuner(space, seed=3)
    xs = tuner.opt.space.rvs(n_samples=3000, random_state=1)
    assert all(space.feasible(space.to_point(x)) for x in xs)


@pytest.mark.parametrize("n", [2, 16, 64])
def test_tuner_never_asks_infeasible_or_repeated_points(n):
    tuner = run(SearchSpace.for_cores(n), budget=12)
    keys = [SearchSpace.key(o.point) for o in tuner.history]
    assert len(keys) == len(set(keys))
    assert tuner.measured <= 12
    assert tuner.stop_reason


def test_observing_an_infeasible_point_is_refused():
    tuner = Tuner(SearchSpace.for_cores(4))
    with pytest.raises(ValueError, match="infeasible"):
        tuner.observe({"processes": 2, "sampler_cores": 1, "threads": 2}, 1.0, "initial")


def test_fixed_seed_repeats_the_trial_sequence():
    space = SearchSpace.for_cores(16)
    a = [o.point for o in run(space, seed=7).history]
    b = [o.point for o in run(SearchSpace.for_cores(16), seed=7).history]
    c = [o.point for o in run(SearchSpace.for_cores(16), seed=8).history]
    assert a == b
    assert a != c


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_model_chooses_after_a_small_initial_design(seed):
    tuner = run(SearchSpace.for_cores(16), seed=seed, budget=15, n_initial_points=5,
                min_gain=0.0)
    who = [o.chosen_by for o in tuner.history]
    assert who[0] == "default"
    assert who[1:5] == ["initial"] * 4
    assert "tuner" in who[5:] and "initial" not in who[5:]
    assert all(o.predicted is not None for o in tuner.history if o.chosen_by == "tuner")
    best = max(objective(p) for p in SearchSpace.for_cores(16).points())
    assert tuner.best().throughput >= 0.9 * best


def test_initial_design_is_capped_on_a_tiny_space():
    tuner = Tuner(SearchSpace.for_cores(2), budget=20, n_initial_points=5)
    assert tuner.n_initial == 2            # at most half of the 4 points: the model decides


def test_flat_objective_stops_on_expected_gain():
    tuner = run(SearchSpace.for_cores(32), budget=30, fn=lambda p: 100.0)
    assert "expects < 1% gain" in tuner.stop_reason
    assert "no better throughput in the last" in tuner.stop_reason
    model_points = sum(o.chosen_by == "tuner" for o in tuner.history)
    assert 5 <= model_points and tuner.measured < 30


def test_simulation_replays_the_stopping_rule_exactly():
    import importlib.util
    import pathlib
    import sys

    # the model lives with its benchmark, outside the package (registered before it runs:
    # its dataclasses look their module up)
    sim = sys.modules.get("tuner_simulator")
    if sim is None:
        path = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "tuner_simulator.py"
        spec = importlib.util.spec_from_file_location("tuner_simulator", path)
        sim = sys.modules["tuner_simulator"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sim)

    machine = sim.MACHINES[64]
    model, space = sim.EpochModel(machine), sim.space_for(machine)
    measure = sim.noisy(model, seed=3)
    start = sim.default_point(machine)
    free = sim.run_bo(space, measure, budget=30, seed=3, start=start)
    tuner = Tuner(space, budget=30, seed=3)
    tuner.observe(start, measure(start), "default")
    while (s := tuner.suggest()) is not None:
        tuner.observe(s.point, measure(s.point), s.chosen_by)
    assert tuner.measured == sim.stop_index(free["checks"], len(free["trace"]))
    assert [o.point for o in tuner.history] == free["trace"][:tuner.measured]


def test_budget_and_exhaustion_stop():
    assert "budget" in run(SearchSpace.for_cores(32), budget=6, min_gain=0.0).stop_reason
    tuner = run(SearchSpace.for_cores(2), budget=20, min_gain=0.0)
    assert tuner.measured == 4 and "all 4" in tuner.stop_reason


def test_failed_points_are_not_retried():
    def flaky(point):
        return None if point["processes"] == 2 else objective(point)

    space = SearchSpace.for_cores(2)
    tuner = Tuner(space, budget=20, seed=0, min_gain=0.0)
    start = {"processes": 1, "sampler_cores": 0, "threads": 2}
    tuner.observe(start, flaky(start), "default")
    while (s := tuner.suggest()) is not None:
        tuner.observe(s.point, flaky(s.point), s.chosen_by)
    failed = [o for o in tuner.history if o.throughput is None]
    assert len(failed) == 1 and tuner.measured == 4
    assert tuner.best().point["processes"] == 1


def test_extra_dimension_keeps_room_for_cache_knobs():
    space = SearchSpace.for_cores(8).add(Dimension("hot_ratio", 0.0, 0.5, "real"))
    assert space.points() is None and space.size is None and not space.finite

    def fn(p):
        return objective(p) * (1 + p["hot_ratio"] - p["hot_ratio"] ** 2)

    tuner = Tuner(space, budget=8, seed=0)
    start = {"processes": 1, "sampler_cores": 0, "threads": 8, "hot_ratio": 0.0}
    tuner.observe(start, fn(start), "default")
    while (s := tuner.suggest()) is not None:
        assert space.feasible(s.point) and 0.0 <= s.point["hot_ratio"] <= 0.5
        tuner.observe(s.point, fn(s.point), s.chosen_by)
    assert tuner.measured == 8


def test_throughput_must_be_positive():
    tuner = Tuner(SearchSpace.for_cores(4))
    with pytest.raises(ValueError, match="positive"):
        tuner.observe({"processes": 1, "sampler_cores": 0, "threads": 1}, 0.0, "initial")
    assert math.isfinite(1.0)
