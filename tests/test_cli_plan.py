"""``python -m gnnorch plan CLUSTER.json PROFILE.json``: the placement planner as a tool.

The files' schemas (`gnnorch.place.files`), the overview it prints
(`gnnorch.place.overview`) and the command line, on the example files of examples/placement/
(documented in docs/placement.md) and on broken copies of them.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnorch.cli import main
from gnnorch.place import (Assignment, Cluster, PlanFileError, Profile, TaskDemand,
                           colocation, evaluate, load_cluster, load_profile,
                           plan_overview)
from gnnorch.place.files import cluster_from_dict, profile_from_dict
from gnnorch.place.overview import flow_schedule

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "placement"
CLUSTER = EXAMPLES / "cluster.json"
PROFILES = sorted(EXAMPLES.glob("profile_*.json"))
FAST = ["--steps", "40"]


def plan(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# -- the example files ---------------------------------------------------------------------
def test_the_examples_exist_and_cover_the_profile_kinds():
    kinds = {json.loads(p.read_text()).get("kind", "means") for p in PROFILES}
    assert CLUSTER.is_file() and {"means", "synthetic"} <= kinds


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_plan_prints_placement_schedule_and_prediction_against_colocation(capsys, profile):
    code, out, err = plan(capsys, CLUSTER, profile, *FAST)
    assert code == 0 and err == ""
    for heading in ("placement", "predicted iteration time", "co-location, FIFO flows",
                    "flow schedule", "remote flows of iteration 1"):
        assert heading in out
    names = [n["name"] for n in json.loads(CLUSTER.read_text())["nodes"]]
    table = out.split("placement (store g runs on node g)")[1].split("predicted")[0]
    assert [line.split()[0] for line in table.strip().splitlines()[2:]] == names


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_json_output_agrees_with_the_library(capsys, profile):
    code, out, _ = plan(capsys, CLUSTER, profile, *FAST, "--json", "--seed", "3")
    assert code == 0
    got = json.loads(out)
    cluster, names = load_cluster(CLUSTER)
    prof = load_profile(profile)
    # every task placed once, within capacities, stores pinned
    nodes = got["placement"]["nodes"]
    assert [n["name"] for n in nodes] == names
    assert sorted(r for n in nodes for r in n["trainer_ranks"]) == list(range(prof.n_trainers))
    assert sorted(s for n in nodes for s in n["samplers"]) == list(range(prof.n_samplers))
    for n, cap in zip(nodes, cluster.capacity):
        assert n["usage"]["cores"] <= cap[0] and n["usage"]["gpus"] <= cap[2]
    # co-location is simulated on the same draws as the prediction
    coloc = colocation(cluster, prof)
    ev = evaluate(cluster, prof, coloc, "fifo", 4, 3, seed=_eval_seed(cluster, prof, 3))
    assert got["colocation"]["iteration_s"]["fifo"] == pytest.approx(ev.mean, rel=1e-12)
    gain = 100 * (got["predicted_iteration_s"] / got["colocation"]["iteration_s"]["oes"] - 1)
    assert got["colocation"]["gain_pct"]["oes"] == pytest.approx(gain)
    # the schedule holds every flow of the simulated iterations, each after its start
    flows = got["schedule"]["flows"]
    assert got["schedule"]["iterations"] == 4
    assert {f["iteration"] for f in flows} == {0, 1, 2, 3}
    assert all(f["end_s"] >= f["start_s"] >= 0 for f in flows)
    assert all(f["local"] == (f["src_node"] == f["dst_node"]) for f in flows)
    assert [f["start_s"] for f in flows] == sorted(f["start_s"] for f in flows)


def _eval_seed(cluster: Cluster, prof: Profile, seed: int) -> int:
    return plan_overview(cluster, prof, seed=seed, steps=40).placement.eval_seed


def test_the_same_seed_gives_the_same_plan(capsys):
    runs = [plan(capsys, CLUSTER, PROFILES[0], *FAST, "--json")[1] for _ in range(2)]
    assert runs[0] == runs[1]


def test_the_flow_schedule_is_the_simulation_by_hand():
    # one store on node 0 (out 1 Gbit/s) -> a sampler and its trainer on node 1 (in 1 Gbit/s):
    # 1.25e8 B of structure take 1 s; the batch flow is local (no time); the trainer runs 0.5 s
    prof = Profile(sampler_trainer=np.array([0]), store_s=np.array([0.0]),
                   sampler_s=np.array([0.0]), trainer_s=np.array([0.5]),
                   structure_bytes=np.array([[1.25e8]]), batch_bytes=np.array([1e6]),
                   feature_bytes=np.array([[2.5e8]]), time_cv=0.0, volume_cv=0.0)
    cluster = Cluster((4, 4), (8, 8), (1, 1), (1, 1), (1, 1))
    flows = flow_schedule(cluster, prof, Assignment([1], [1]), "oes", 1)
    got = {f.kind: (f.start_s, f.end_s, f.local) for f in flows}
    assert got["structure"] == pytest.approx((0.0, 1.0, False))
    assert got["batch"] == (1.0, 1.0, True)
    assert got["feature"] == pytest.approx((1.0, 3.0, False))   # 2.5e8 B at 1 Gbit/s: 2 s
    assert [f.src for f in flows] == ["store 0", "sampler 0", "store 0"]


def test_a_colocation_that_does_not_fit_is_reported_not_fatal(monkeypatch):
    from gnnorch.place import overview as module
    from gnnorch.place.cluster import PlacementError

    def refuse(cluster, profile):
        raise PlacementError("co-location: no node has room for trainer 1")

    monkeypatch.setattr(module, "colocation", refuse)
    cluster, names = load_cluster(CLUSTER)
    result = module.plan_overview(cluster, load_profile(PROFILES[0]), names, steps=20)
    assert result.colocation_s == {} and result.gain_pct("oes") is None
    assert "co-location does not fit: co-location: no node has room" in result.text()
    assert result.to_dict()["colocation"]["error"].startswith("co-location")


def test_module_entry_point_runs_the_plan_command():
    done = subprocess.run([sys.executable, "-m", "gnnorch", "plan", str(CLUSTER),
                           str(PROFILES[0]), *FAST, "--flows", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "... " not in done.stdout and "predicted iteration time" in done.stdout


# -- the schemas -----------------------------------------------------------------------------
def test_cluster_file_builds_the_cluster_it_describes():
    cluster, names = cluster_from_dict({
        "nodes": [{"name": "a", "cores": 8, "memory_gb": 32, "gpus": 1, "nic_gbps": 10},
                  {"cores": 4, "memory_gb": 16, "gpus": 0, "nic_in_gbps": 20,
                   "nic_out_gbps": 5}],
        "links": [{"from": "a", "to": 1, "gbps": 2}], "local_gbps": 100})
    inf = float("inf")
    assert names == ["a", "1"]
    assert cluster == Cluster((8, 4), (32, 16), (1, 0), (10, 20), (10, 5),
                              link_gbps=((inf, 2.0), (inf, inf)), local_gbps=100)


def test_the_three_profile_kinds_build_the_profiles_they_describe():
    demand = {"cores": 2, "memory_gb": 7}
    means = profile_from_dict({
        "sampler_trainer": [0, 1], "store_s": [0.1], "sampler_s": [0.2, 0.3],
        "trainer_s": [0.4, 0.5], "structure_bytes": [[1, 2]], "batch_bytes": [3, 4],
        "feature_bytes": [[5, 6]], "grad_bytes": 7, "time_cv": 0.0, "sampler_demand": demand})
    assert means.sampler_s.tolist() == [0.2, 0.3] and means.feature_bytes.shape == (1, 2)
    assert means.sampler_demand == TaskDemand(2, 7, 0) and means.time_cv == 0.0
    steps = profile_from_dict({
        "kind": "steps", "skip": 1, "sampler_trainer": [0], "grad_bytes": 1,
        "store_s": [[9], [1], [3]], "sampler_s": [[9], [2], [2]], "trainer_s": [[9], [4], [6]],
        "structure_bytes": [[[9]], [[10]], [[30]]], "batch_bytes": [[9], [1], [1]],
        "feature_bytes": [[[9]], [[5]], [[5]]]})
    assert steps.store_s.tolist() == [2.0] and steps.trainer_s.tolist() == [5.0]
    assert steps.structure_bytes.tolist() == [[20.0]] and steps.volume_cv > 0
    synthetic = dict(n_partitions=2, n_trainers=3, samplers_per_trainer=2, store_s=0.1,
                     sampler_s=0.1, trainer_s=0.2, structure_bytes=1e6, batch_bytes=1e5,
                     feature_bytes=1e7, grad_bytes=1e5, locality=0.6, seed=4)
    built = profile_from_dict({"kind": "synthetic", **synthetic})
    direct = Profile.synthetic(**synthetic)
    assert np.array_equal(built.feature_bytes, direct.feature_bytes)
    assert built.n_samplers == 6


GOOD_CLUSTER = json.loads(CLUSTER.read_text())
GOOD_PROFILE = json.loads((EXAMPLES / "profile_means.json").read_text())


def _mutate(data: dict, path: tuple, value) -> dict:
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


BAD_CLUSTERS = [
    (("nodes", 1, "cores"), -1, "nodes[1].cores: must be a finite number >= 0"),
    (("nodes", 1, "gpus"), True, "nodes[1].gpus: must be a finite number"),
    (("nodes", 0, "memory_gb"), "64", "nodes[0].memory_gb: must be a finite number"),
    (("nodes", 0, "memory_gb"), KeyError, "nodes[0]: missing key(s) ['memory_gb']"),
    (("nodes", 0, "nic_gbps"), KeyError, "nodes[0]: needs nic_gbps"),
    (("nodes", 0, "nic_gbps"), 0, "nodes[0].nic_gbps: must be a finite number > 0"),
    (("nodes", 0, "nic_in_gbps"), 3, "give nic_gbps or nic_in_gbps / nic_out_gbps"),
    (("nodes", 0, "gpu"), 2, "nodes[0]: unknown key(s) ['gpu']"),
    (("nodes", 1, "name"), "gpu-a", "nodes[1].name: 'gpu-a' names two nodes"),
    (("nodes",), [], "nodes: must be a non-empty list"),
    (("links", 0, "to"), "nowhere", "links[0].to: 'nowhere' is not a node"),
    (("links", 0, "to"), "gpu-c", "a link joins two different nodes"),
    (("links", 1), {"from": "gpu-c", "to": 0, "gbps": 1}, "a second cap for gpu-c -> gpu-a"),
    (("links", 0, "gbps"), -5, "links[0].gbps: must be a finite number > 0"),
    (("local_gbps",), 0, "local_gbps: must be a finite number > 0"),
    (("switch",), 1, "unknown key(s) ['switch']"),
]
BAD_PROFILES = [
    (("kind",), "measured", "kind: must be one of means, steps, synthetic"),
    (("store_s",), [0.02], "not a valid profile: store_s must have shape (2,), got (1,)"),
    (("store_s",), [0.02, "x"], "store_s: holds 'x' where a number belongs"),
    (("structure_bytes",), [[1, 2, 3, 4], [1]], "structure_bytes: rows of different lengths"),
    (("feature_bytes",), [1, 2], "feature_bytes: must be a 2-dimensional list"),
    (("sampler_trainer",), [0, 0, 1, 1.5], "sampler_trainer: must be a non-empty list"),
    (("sampler_trainer",), [0, 0, 0, 0], "not a valid profile: sampler_trainer must map"),
    (("grad_bytes",), KeyError, "missing key(s) ['grad_bytes']"),
    (("trainer_demand", "gpu"), 1, "trainer_demand: unknown key(s) ['gpu']"),
    (("time_cv",), -0.1, "time_cv: must be a finite number >= 0"),
    (("skip",), 1, "unknown key(s) ['skip']"),      # a "steps" key in a "means" file
]


@pytest.mark.parametrize("path, value, message", BAD_CLUSTERS, ids=lambda x: str(x)[:40])
def test_a_bad_cluster_file_is_one_line_naming_file_and_field(tmp_path, capsys, path, value,
                                                               message):
    bad = write(tmp_path, "cluster.json", _mutate(GOOD_CLUSTER, path, value))
    code, out, err = plan(capsys, bad, PROFILES[0], *FAST)
    assert code == 2 and out == ""
    assert err.startswith(f"gnnorch plan: error: {bad}: ") and err.count("\n") == 1
    assert message in err
    with pytest.raises(PlanFileError):
        load_cluster(bad)


@pytest.mark.parametrize("path, value, message", BAD_PROFILES, ids=lambda x: str(x)[:40])
def test_a_bad_profile_file_is_one_line_naming_file_and_field(tmp_path, capsys, path, value,
                                                               message):
    bad = write(tmp_path, "profile.json", _mutate(GOOD_PROFILE, path, value))
    code, out, err = plan(capsys, CLUSTER, bad, *FAST)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"gnnorch plan: error: {bad}: ") and message in err


@pytest.mark.parametrize("text, message", [
    (None, "cannot read the profile file (No such file or directory)"),
    ("{\"kind\": ", "the profile file is not JSON (Expecting value at line 1, column 10)"),
    ("[1, 2]", "a profile file holds one JSON object, got list"),
])
def test_unreadable_files(tmp_path, capsys, text, message):
    path = tmp_path / "profile.json"
    if text is not None:
        path.write_text(text)
    code, _, err = plan(capsys, CLUSTER, path, *FAST)
    assert code == 2 and err == f"gnnorch plan: error: {path}: {message}\n"


def test_a_job_that_fits_no_placement_and_bad_options(tmp_path, capsys):
    small = write(tmp_path, "small.json", {"nodes": [
        {"cores": 2, "memory_gb": 64, "gpus": 1, "nic_gbps": 10}] * 2})
    code, _, err = plan(capsys, small, EXAMPLES / "profile_means.json", *FAST)
    assert code == 2 and "fits the cluster's capacities" in err
    code, _, err = plan(capsys, CLUSTER, PROFILES[0], "--steps", "-1")
    assert code == 2 and "steps must be an integer >= 0" in err
