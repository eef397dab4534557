"""NeighborLoader under the runtime: training loaders sharded, evaluation loaders whole."""
import json
import os

import pytest
import torch
import torch.distributed as dist
from torch_geometric.loader import NeighborLoader

import gnnorch
from gnnorch.launch import context
from gnnorch.launch.plan import CorePlan, assign_cores
from gnnorch.launch.topology import current_topology

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def record_seeds(data, out_dir, epochs=2):
    rank = dist.get_rank() if dist.is_initialized() else 0
    train_loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask,
                                  batch_size=10, shuffle=True)
    eval_loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.test_mask,
                                 batch_size=300)
    seen = {"train_batch_size": train_loader.batch_size, "eval_batch_size": eval_loader.batch_size,
            "epochs": [], "eval": []}
    for _ in range(epochs):
        seen["epochs"].append([batch.n_id[:batch.batch_size].tolist() for batch in train_loader])
    seen["eval"] = [i for batch in eval_loader for i in batch.n_id[:batch.batch_size].tolist()]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


def test_training_loader_sharded_evaluation_loader_whole(tmp_path):
    data = cora()
    runtime = gnnorch.Runtime(record_seeds, processes=2)
    runtime(data, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    train_nodes = set(data.train_mask.nonzero().view(-1).tolist())
    test_nodes = data.test_mask.nonzero().view(-1).tolist()
    for seen in ranks:
        assert seen["train_batch_size"] == 5            # ceil(10 / 2)
        assert seen["eval_batch_size"] == 300           # untouched
        assert sorted(seen["eval"]) == sorted(test_nodes)
    for epoch in range(2):
        a = [i for b in ranks[0]["epochs"][epoch] for i in b]
        b = [i for b in ranks[1]["epochs"][epoch] for i in b]
        assert len(ranks[0]["epochs"][epoch]) == len(ranks[1]["epochs"][epoch]) == 14
        assert not set(a) & set(b)                      # disjoint shards
        assert set(a) | set(b) == train_nodes           # 140 seeds, all trained
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]   # reshuffled per epoch
    epochs = runtime.last_run.epochs
    assert [e["batches"] for e in epochs[0]] == [14, 14]
    assert [e["seeds"] for e in epochs[1]] == [70, 70]


def record_worker_affinity(data, path):
    def init(worker_id):
        with open(path, "w") as f:
            json.dump(sorted(os.sched_getaffinity(0)), f)

    loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask, batch_size=70,
                            shuffle=True, worker_init_fn=init)  # workers left to the plan
    batches = sum(1 for _ in loader)
    return batches, loader.num_workers, sorted(os.sched_getaffinity(0)), torch.get_num_threads()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_sampler_worker_pinned_to_sampler_core(tmp_path):
    path = tmp_path / "affinity.json"
    runtime = gnnorch.Runtime(record_worker_affinity, processes=1, sampler_cores=1, threads=1)
    batches, workers, trainer_cpus, threads = runtime(cora(), str(path))
    cores = runtime.last_run.cores[0]
    assert batches == 2 and workers == 1 and threads == 1
    assert trainer_cpus == list(cores.trainer_cpus)
    assert json.loads(path.read_text()) == list(cores.sampler_cpus)
    assert not set(cores.sampler_cpus) & set(cores.trainer_cpus)
    assert sorted(os.sched_getaffinity(0)) != [] and torch.get_num_threads() >= 1


def reconfigure_after_first_epoch(data):
    loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask, batch_size=70,
                            shuffle=True)
    seen = []
    ctx = context.current()
    for epoch in range(2):
        for _ in loader:
            pass
        seen.append((loader.num_workers, torch.get_num_threads()))
        if epoch == 0:
            plan = CorePlan(1, 1, 1)
            ctx.reconfigure(plan, assign_cores(plan, current_topology())[0])
    return seen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_in_rank_knobs_change_between_epochs():
    runtime = gnnorch.Runtime(reconfigure_after_first_epoch, processes=1, sampler_cores=0,
                              threads=2)
    assert runtime(cora()) == [(0, 2), (1, 1)]
    assert len(runtime.last_run.epochs[0]) == 2


def test_loader_untouched_outside_runtime():
    original = NeighborLoader.__init__
    gnnorch.Runtime(lambda: None)()
    assert NeighborLoader.__init__ is original
    loader = NeighborLoader(cora(), num_neighbors=[2], batch_size=8, shuffle=True)
    assert not hasattr(loader, "_gnnorch_state") and loader.batch_size == 8
