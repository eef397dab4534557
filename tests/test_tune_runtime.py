"""Runtime(train) with the auto-tuner on the bundled Cora: small jobs are not tuned and pay
nothing, a tuned run equals an untuned run of the chosen plan from the start (no epoch lost or
repeated, the caller's random state untouched by probes), probes are muted, multi-rank probes
end cleanly, failed probes are recorded, and bad options get clear errors."""
import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.tune.schema import validate

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
# tuning forced on (the projection would call Cora too small), multi-rank plans left out
FORCE_ONE_RANK = {"max_overhead": 1e9, "max_processes": 1, "probe_batches": 6,
                  "warmup_batches": 2}


def cora_train(data, epochs=3, batch_size=20, report_dir=None, fail_with_ranks=False):
    """Plain PyG training; model initialised from the global RNG (no seeding inside)."""
    if fail_with_ranks and dist.is_initialized():
        raise RuntimeError("this function refuses to run with several ranks")
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=batch_size, shuffle=True)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, seen = [], []
    for epoch in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch} done")
        if report_dir is not None:
            with open(os.path.join(report_dir, "report.json")) as f:
                report = json.load(f)
            seen.append((report["status"], len((report["run"] or {"epochs": []})["epochs"])))
    return losses, seen


def untuned(plan: dict, *args, **kwargs):
    """`cora_train` untuned under `plan` (processes, sampler_cores, threads: any of them)."""
    launch = {k: v for k, v in plan.items() if k != "processes"}
    runtime = gnnorch.Runtime(cora_train, autotune=False, processes=plan.get("processes"),
                              launch=launch)
    return runtime(*args, **kwargs)


def test_autotune_defaults():
    assert gnnorch.Runtime(cora_train).autotune is (not torch.cuda.is_available())
    assert gnnorch.Runtime(cora_train, processes=1).autotune is False
    assert gnnorch.Runtime(cora_train, launch={"threads": 1}, autotune=True).autotune is True
    assert gnnorch.Runtime(cora_train, autotune=False).autotune is False


@pytest.mark.parametrize("kwargs, error, match", [
    ({"processes": 1, "launch": {"sampler_cores": 0, "threads": 1}, "autotune": True},
     ValueError, "nothing is left to tune"),
    ({"autotune": "yes"}, ValueError, "autotune must be True, False or None"),
    ({"tune": {"budjet": 3}}, TypeError, "valid settings are: budget"),
    ({"tune": {"budget": 0}}, ValueError, r"tune\['budget'\] must be an integer >= 1"),
    ({"tune": {"estimator": "XGB"}}, ValueError, "estimator"),
    ({"tune": 5}, ValueError, "tune must be None, a gnnorch.TuneConfig or a dict"),
    ({"verbose": 1}, ValueError, "verbose must be True or False"),
    ({"tune": {"report_dir": 3}}, ValueError, r"tune\['report_dir'\] must be a folder path"),
])
def test_bad_tuning_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        gnnorch.Runtime(cora_train, **kwargs)


def test_function_without_training_loader_runs_once_untuned(capsys):
    calls = []

    def plain(x):
        calls.append(x)
        print("hello from train")
        return x * 2

    runtime = gnnorch.Runtime(plain)
    assert runtime(21) == 42
    assert calls == [21]
    assert capsys.readouterr().out.count("hello from train") == 1
    report = runtime.report
    assert not report.tuned and "NeighborLoader" in report.data["decision"]["reason"]
    assert report.trials == [] and validate(report.data) == []


def test_small_job_is_not_tuned_and_equals_the_untuned_run(capsys, tmp_path):
    data = cora()
    torch.manual_seed(0)
    expected, _ = untuned({}, data, epochs=6)
    capsys.readouterr()
    torch.manual_seed(0)
    runtime = gnnorch.Runtime(cora_train, tune={"report_dir": tmp_path})
    losses, seen = runtime(data, epochs=6, report_dir=str(tmp_path))
    report = runtime.report
    assert not report.tuned and "projected tuning" in report.data["decision"]["reason"]
    assert report.data["overhead"]["probe_seconds"] == 0.0        # the measured run was the run
    assert len(report.trials) == 1 and report.trials[0]["chosen_by"] == "default"
    # nothing lost or repeated; rewrites choose their order by timing, so rounding may differ
    assert len(losses) == len(expected)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-5)
    assert capsys.readouterr().out.count("done") == 6             # held output released once
    assert seen[-1] == ("training", 6)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["status"] == "done" and validate(on_disk) == []
    assert runtime.last_run.plan == runtime.plan and len(runtime.last_run.epochs[0]) == 6


@TWO_CORES
def test_tuned_run_equals_untuned_run_of_the_chosen_plan(capsys, tmp_path):
    data = cora()
    torch.manual_seed(1)
    runtime = gnnorch.Runtime(cora_train, tune=dict(FORCE_ONE_RANK, report_dir=tmp_path))
    losses, seen = runtime(data, epochs=6, report_dir=str(tmp_path))
    report = runtime.report
    assert report.tuned and report.status == "done"
    searched = [t for t in report.trials if t["chosen_by"] != "confirm"]
    assert len(searched) == 3                                      # all one-rank plans
    assert [t["chosen_by"] for t in report.trials][0] == "default"
    confirmed = [t for t in report.trials if t["chosen_by"] == "confirm"]
    assert len(confirmed) <= 3 and report.trials[3:] == confirmed  # finalists, after the search
    if confirmed:
        assert report.chosen == report.data["confirmation"]["chosen"]
    captured = capsys.readouterr()
    assert captured.out.count("done") == 6                         # probes were muted
    assert "gnnorch tuning" in captured.err and "autotune: tuned in" in captured.err
    assert captured.err.count("autotune: tuned in") == 1                # one summary
    assert runtime.summary() in captured.err
    assert seen == [("training", k) for k in range(1, 7)]          # rewritten per epoch
    chosen = report.chosen
    plan = {k: chosen[k] for k in ("processes", "sampler_cores", "threads")}
    assert runtime.last_run.plan.as_tuple() == tuple(plan.values())
    torch.manual_seed(1)                                           # probes restored the RNG
    expected, _ = untuned(plan, data, epochs=6)
    assert len(losses) == len(expected) == 42                      # 6 epochs x 7 steps
    assert torch.allclose(torch.tensor(losses), torch.tensor(expected), atol=1e-5)
    assert [e["epoch"] for e in report.data["run"]["epochs"]] == list(range(6))


@TWO_CORES
def test_multi_rank_probe_ends_cleanly_and_reports_per_rank_batches():
    data = cora()
    runtime = gnnorch.Runtime(cora_train, launch={"threads": 1, "sampler_cores": 0},
                              autotune=True,
                              tune={"max_overhead": 1e9, "probe_batches": 4,
                                    "warmup_batches": 1}, verbose=False)
    losses, _ = runtime(data, epochs=6)
    trials = runtime.report.trials
    assert [t["config"]["processes"] for t in trials if t["chosen_by"] != "confirm"] == [1, 2]
    two = trials[1]
    assert two["status"] == "ok" and two["throughput"] > 0
    assert two["batch_size_per_rank"] == [10, 10]
    assert [c["rank"] for c in two["cores"]] == [0, 1]
    assert two["measured_batches"] == 4
    assert len(losses) == 42          # every rank runs all 6 epochs x 7 steps


@TWO_CORES
def test_failed_probe_is_recorded_and_skipped(capsys):
    runtime = gnnorch.Runtime(cora_train, launch={"threads": 1, "sampler_cores": 0},
                              autotune=True,
                              tune={"max_overhead": 1e9}, verbose=False)
    losses, _ = runtime(cora(), epochs=8, fail_with_ranks=True)
    assert "gnnorch" not in capsys.readouterr().err               # verbose=False: silent
    failed = [t for t in runtime.report.trials if t["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["config"]["processes"] == 2
    assert "refuses to run with several ranks" in failed[0]["error"]
    assert failed[0]["throughput"] is None
    assert runtime.last_run.plan.processes == 1 and len(losses) == 56


def test_user_error_in_the_default_run_propagates(tmp_path):
    def broken(data):
        loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask,
                                batch_size=20, shuffle=True)
        for _ in loader:
            raise KeyError("user bug")

    runtime = gnnorch.Runtime(broken, tune={"report_dir": tmp_path})
    with pytest.raises(KeyError, match="user bug"):
        runtime(cora())
    assert runtime.report.status == "failed"
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "failed"


def test_slow_setup_releases_output_and_runs_untuned(capsys):
    import time

    def slow_start(data):
        print("loading")
        time.sleep(0.6)
        return cora_train(data, epochs=1)

    runtime = gnnorch.Runtime(slow_start, tune={"setup_seconds": 0.2})
    losses, _ = runtime(cora())
    assert len(losses) == 7
    assert "no training NeighborLoader built within 0.2 s" in \
        runtime.report.data["decision"]["reason"]
    assert capsys.readouterr().out.count("loading") == 1


def sleepy_train(data, report_dir, epochs=2):
    """Reads the report a moment after each epoch: the caller rewrites it from rank 0's feed."""
    import time

    losses, seen = cora_train(data, epochs=1)
    for _ in range(epochs - 1):
        more, _ = cora_train(data, epochs=1)
        losses += more
    time.sleep(1.5)
    with open(os.path.join(report_dir, "report.json")) as f:
        report = json.load(f)
    return losses, len(report["run"]["epochs"])


@TWO_CORES
def test_single_point_space_runs_untuned_with_live_report_from_ranks(tmp_path):
    runtime = gnnorch.Runtime(sleepy_train, processes=2, autotune=True,
                              tune={"report_dir": tmp_path})
    losses, epochs_seen = runtime(cora(), str(tmp_path))
    report = runtime.report
    assert not report.tuned and "single point" in report.data["decision"]["reason"]
    assert report.trials == [] and runtime.last_run.plan.processes == 2
    assert epochs_seen == 2                     # written while rank 0 was still running
    run = report.data["run"]
    assert [e["epoch"] for e in run["epochs"]] == [0, 0] and run["wall_seconds"] > 0
    assert run["epochs"][0]["seeds"] == 140     # both ranks' seeds once done
    assert validate(json.loads((tmp_path / "report.json").read_text())) == []


@pytest.mark.slow
@TWO_CORES
def test_fixed_processes_tunes_the_rest_with_a_multi_rank_default_probe(capsys):
    from gnnorch.launch.topology import Topology

    runtime = gnnorch.Runtime(cora_train, processes=2, autotune=True, launch={"bind": False},
                              tune={"max_overhead": 1e9, "probe_batches": 4,
                                    "warmup_batches": 1})
    four = tuple(range(4))                      # pretend 4 cores (unbound, so it can run)
    runtime.topology = Topology(usable_cpus=four, cpu_quota=None,
                                cores=tuple((c,) for c in four), numa_nodes=(four,))
    losses, _ = runtime(cora(), epochs=6)
    trials = runtime.report.trials
    assert trials[0]["chosen_by"] == "default" and trials[0]["config"]["processes"] == 2
    assert all(t["config"]["processes"] == 2 and t["status"] == "ok" for t in trials)
    searched = [t for t in trials if t["chosen_by"] != "confirm"]
    assert len(searched) == 3 and runtime.report.data["space"]["fixed"] == {"processes": 2}
    assert capsys.readouterr().out.count("done") == 6          # rank 0's probe output muted
    assert len(losses) == 42 and runtime.last_run.plan.processes == 2


def test_slow_first_step_is_waited_for(capsys):
    import time

    def slow_first_step(data):
        loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask,
                                batch_size=10, shuffle=True)
        print("built")
        steps = 0
        for epoch in range(4):
            for _ in loader:
                if steps == 0:
                    time.sleep(0.5)         # e.g. one-off set-up inside the first step
                steps += 1
        return steps

    runtime = gnnorch.Runtime(slow_first_step, tune={"setup_seconds": 0.2})
    assert runtime(cora()) == 56
    assert "projected tuning" in runtime.report.data["decision"]["reason"]
    assert len(runtime.report.trials) == 1
    assert capsys.readouterr().out.count("built") == 1
