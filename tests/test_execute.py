"""gnnorch.execute: one way to run the user's function. The backends run the same rank session
with the caller's hooks (prepare / finish, a hook's own normal end, muting) and return
(value, RunInfo) without touching any Runtime; inside a torch.distributed world (torchrun's
environment) the backend is always `ExistingWorld` (its runs: tests/test_torchrun.py)."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch import execute
from gnnorch.execute import (ExistingWorld, Hook, InProcess, Mute, RankProcesses, Request,
                             RunInfo, backend_for, world)
from gnnorch.execute.world_run import local_cores
from gnnorch.launch.config import LaunchConfig
from gnnorch.launch.plan import CorePlan
from gnnorch.launch.topology import Topology

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
UNBOUND = LaunchConfig(bind=False)


class Stop(BaseException):
    """A hook's own way to end the user's function early."""


class Recorder(Hook):
    """Records what it sees; ends the run with `Stop` as its normal end."""

    def __init__(self):
        self.calls = []

    def prepare(self, ctx):
        self.calls.append(("prepare", ctx.rank, ctx.world_size))
        ctx.stats["recorder"] = {"rank": ctx.rank}

    def finish(self, ctx, exc):
        self.calls.append(("finish", type(exc).__name__ if exc else None,
                           "recorder" in ctx.stats))
        return isinstance(exc, Stop)


def shout(x):
    print("shouting from the user's function")
    return x + 1


def stop_early(x):
    raise Stop()


def test_one_rank_runs_here_with_hooks_around_the_function(capsys):
    hook = Recorder()
    value, info = execute.run(CorePlan(1, 0, 1), Request(shout, (41,), launch=UNBOUND), [hook])
    assert value == 42 and isinstance(info, RunInfo) and info.log_dir is None
    assert info.plan == CorePlan(1, 0, 1) and info.stats[0]["recorder"] == {"rank": 0}
    assert hook.calls == [("prepare", 0, 1), ("finish", None, True)]
    assert "shouting" in capsys.readouterr().out


def test_a_hooks_own_end_is_a_normal_end_and_other_errors_propagate():
    hook = Recorder()
    value, info = execute.run(CorePlan(1, 0, 1), Request(stop_early, (1,), launch=UNBOUND), [hook])
    assert value is None and hook.calls[-1] == ("finish", "Stop", True)
    with pytest.raises(ZeroDivisionError):
        execute.run(CorePlan(1, 0, 1), Request(lambda: 1 / 0, launch=UNBOUND), [Recorder()])


def test_mute_discards_the_output_here(capsys):
    value, _ = execute.run(CorePlan(1, 0, 1), Request(shout, (1,), launch=UNBOUND), [Mute()])
    assert value == 2 and "shouting" not in capsys.readouterr().out


def test_one_place_chooses_the_backend():
    request = Request(shout)
    assert isinstance(backend_for(CorePlan(1, 0, 1), request), InProcess)
    assert backend_for(CorePlan(1, 0, 1), request).in_caller
    assert isinstance(backend_for(CorePlan(2, 0, 1), request), RankProcesses)
    assert not backend_for(CorePlan(2, 0, 1), request).in_caller


TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_a_torchrun_world_is_detected_from_its_environment_without_communicating():
    env = dict(TORCHRUN_ENV)
    assert world.present(env) and not world.present({})
    assert not world.present({k: v for k, v in env.items() if k != "WORLD_SIZE"})
    found = world.detect(env)
    assert (found.rank, found.size, found.local_rank, found.local_size) == (1, 4, 1, 2)
    assert not found.initialised and not dist.is_initialized()
    del env["LOCAL_WORLD_SIZE"]                 # found through the group's store, later
    assert world.detect(env).local_size is None
    with pytest.raises(ValueError, match="RANK=4 must be below WORLD_SIZE=4"):
        world.detect(dict(env, RANK="4"))
    assert world.detect({}) is None


def test_inside_a_world_the_backend_is_always_existing_world(monkeypatch):
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    request = Request(shout)
    for processes in (1, 4):
        backend = backend_for(CorePlan(processes, 0, 1), request)
        assert isinstance(backend, ExistingWorld) and backend.in_caller
    with pytest.raises(ValueError, match="processes=3 but this process is rank 1 of 4 in a torchrun world"):
        ExistingWorld().run(CorePlan(3, 0, 1), request)   # before joining anything
    assert not dist.is_initialized()


def test_local_ranks_of_a_node_get_disjoint_shares_of_its_cores():
    cpus = tuple(range(8))
    topology = Topology(cpus, None, tuple((c,) for c in cpus), (cpus,))
    request = Request(shout, topology=topology)
    plan = CorePlan(6, 1, 2)                    # 6 ranks in the world, 2 on this node
    shares = [local_cores(plan, rank, local, 2, request)
              for rank, local in ((4, 0), (5, 1))]
    assert [c.rank for c in shares] == [4, 5]
    assert all(len(c.trainer_cpus) == 2 and len(c.sampler_cpus) == 1 for c in shares)
    assert not set(shares[0].cpus) & set(shares[1].cpus)
    assert local_cores(plan, 4, 0, 2, Request(shout, topology=topology, launch=UNBOUND)) is None
    with pytest.raises(ValueError, match="plan needs 9 cores"):
        local_cores(plan, 4, 0, 3, request)


def rank_and_world(x):
    print(f"hello from rank {dist.get_rank()}")
    return x, dist.get_rank(), dist.get_world_size()


@TWO_CORES
def test_rank_processes_get_copies_of_the_hooks_and_muting_sends_rank0_to_its_log(
        capsys, tmp_path):
    hook = Recorder()
    request = Request(rank_and_world, (7,), launch=LaunchConfig(log_dir=tmp_path, bind=False))
    value, info = execute.run(CorePlan(2, 0, 1), request, [hook, Mute()])
    assert value == (7, 0, 2) and info.log_dir == tmp_path
    assert info.stats[0]["recorder"] == {"rank": 0} and info.stats[1]["recorder"] == {"rank": 1}
    assert hook.calls == []                          # the ranks had copies
    assert "hello from rank 0" not in capsys.readouterr().out
    assert "hello from rank 0" in (tmp_path / "rank0.log").read_text()


def sage_train(data):
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=70, shuffle=True)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()


def test_rewrite_report_names_layers_by_their_place_in_the_model():
    runtime = gnnorch.Runtime(sage_train, processes=1, autotune=False, rewrite="report")
    runtime(cora())
    names = [layer["name"] for layer in runtime.last_run.stats[0]["rewrite"]["layers"]]
    assert names == ["convs.0", "convs.1"]
