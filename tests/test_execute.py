"""gnnorch.execute: one way to run the user's function. Both built backends run the same rank
session with the caller's hooks (prepare / finish, a hook's own normal end, muting), return
(value, RunInfo) without touching any Runtime, and the torchrun seam says it is issue 16."""
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
                             RunInfo, backend_for)
from gnnorch.launch.plan import CorePlan

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")


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
    value, info = execute.run(CorePlan(1, 0, 1), Request(shout, (41,), bind=False), [hook])
    assert value == 42 and isinstance(info, RunInfo) and info.log_dir is None
    assert info.plan == CorePlan(1, 0, 1) and info.stats[0]["recorder"] == {"rank": 0}
    assert hook.calls == [("prepare", 0, 1), ("finish", None, True)]
    assert "shouting" in capsys.readouterr().out


def test_a_hooks_own_end_is_a_normal_end_and_other_errors_propagate():
    hook = Recorder()
    value, info = execute.run(CorePlan(1, 0, 1), Request(stop_early, (1,), bind=False), [hook])
    assert value is None and hook.calls[-1] == ("finish", "Stop", True)
    with pytest.raises(ZeroDivisionError):
        execute.run(CorePlan(1, 0, 1), Request(lambda: 1 / 0, bind=False), [Recorder()])


def test_mute_discards_the_output_here(capsys):
    value, _ = execute.run(CorePlan(1, 0, 1), Request(shout, (1,), bind=False), [Mute()])
    assert value == 2 and "shouting" not in capsys.readouterr().out


def test_one_place_chooses_the_backend():
    request = Request(shout)
    assert isinstance(backend_for(CorePlan(1, 0, 1), request), InProcess)
    assert backend_for(CorePlan(1, 0, 1), request).in_caller
    assert isinstance(backend_for(CorePlan(2, 0, 1), request), RankProcesses)
    assert not backend_for(CorePlan(2, 0, 1), request).in_caller


def test_existing_world_is_the_seam_of_issue_16():
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29500"}
    assert ExistingWorld.detected(env) and not ExistingWorld.detected({})
    process = ExistingWorld.process(CorePlan(4, 0, 1), env)
    assert (process.rank, process.world_size) == (1, 4)
    with pytest.raises(NotImplementedError, match="issue 16"):
        ExistingWorld().run(CorePlan(4, 0, 1), Request(shout))


def rank_and_world(x):
    print(f"hello from rank {dist.get_rank()}")
    return x, dist.get_rank(), dist.get_world_size()


@TWO_CORES
def test_rank_processes_get_copies_of_the_hooks_and_muting_sends_rank0_to_its_log(
        capsys, tmp_path):
    hook = Recorder()
    request = Request(rank_and_world, (7,), log_dir=tmp_path, bind=False)
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
