"""NeighborLoader under the runtime: training loaders sharded, evaluation loaders whole."""
import json
import os

import pytest
import torch
import torch.distributed as dist
from torch_geometric.loader import NeighborLoader

import gnnorch

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def record_seeds(data, out_dir, epochs=2):
    rank = dist.get_rank() if dist.is_initialized() else 0
    train_loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask,
                                  batch_size=10, shuffle=True)
    eval_loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.test_mask,
                                 batch_size=301)
    # a training function's optimizer: with no model seen yet, epochs that start after one was
    # built are training epochs (`gnnorch.intercept.epoch_role`)
    torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
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
        assert seen["eval_batch_size"] == 301           # untouched
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
    train, evaluation = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert "uneven_batch" not in train
    # were its epochs sharded (it trains), the ranks would take 151 and 150 of each batch
    assert evaluation["uneven_batch"] == ("batch size 301 is not a multiple of the 2 ranks: "
                                          "sharded epochs deal each batch out as 151/150 "
                                          "seeds, gradients weighted by each rank's seeds")


def imbalanced_epochs(data, epochs=3):
    """PyG's ImbalancedSampler over an imbalanced seed set (every node outside the test
    mask); each epoch's seeds with their labels, as this rank trained them."""
    import torch.nn.functional as F
    from torch_geometric.loader import ImbalancedSampler
    from torch_geometric.nn import GraphSAGE

    seeds = (~data.test_mask).nonzero().view(-1)
    loader = NeighborLoader(data, num_neighbors=[3], input_nodes=seeds, batch_size=64,
                            sampler=ImbalancedSampler(data, input_nodes=seeds))
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 8, num_layers=1, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    seen = []
    for _ in range(epochs):
        model.train()
        labels = []
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            labels += batch.y[:batch.batch_size].tolist()
        seen.append(labels)
    return seen


def test_a_loaders_own_sampler_is_sharded_over_ranks_once_it_trains():
    """sampler=ImbalancedSampler: the first epoch (no model seen in training mode yet, as for
    a loader built with shuffle=False) runs the whole draw on every rank; from the second on,
    the ranks stride one common draw (before: every rank ran every batch of its own draw)."""
    data = cora()
    runtime = gnnorch.Runtime(imbalanced_epochs, processes=2)
    seen = runtime(data)
    n = int((~data.test_mask).sum())
    assert [len(labels) for labels in seen] == [n, -(-n // 2), -(-n // 2)]
    counts = torch.bincount(torch.tensor(seen[1] + seen[2]), minlength=7).float()
    assert counts.min() / counts.max() > 0.6       # still class-balanced (uniform: ~0.23)
    assert [e["seeds"] for e in runtime.last_run.epochs[1]] == [-(-n // 2)] * 2


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
    runtime = gnnorch.Runtime(record_worker_affinity, processes=1,
                              launch={"sampler_cores": 1, "threads": 1})
    batches, workers, trainer_cpus, threads = runtime(cora(), str(path))
    cores = runtime.last_run.cores[0]
    assert batches == 2 and workers == 1 and threads == 1
    assert trainer_cpus == list(cores.trainer_cpus)
    assert json.loads(path.read_text()) == list(cores.sampler_cpus)
    assert not set(cores.sampler_cpus) & set(cores.trainer_cpus)
    assert sorted(os.sched_getaffinity(0)) != [] and torch.get_num_threads() >= 1


def loader_state_kept_by_the_seam(data):
    import gc
    import weakref

    from gnnorch.intercept.session import active

    loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask, batch_size=70,
                            shuffle=True)
    states = active().loader.states
    batches = sum(1 for _ in loader)
    seen = (set(vars(loader)) - set(vars(NeighborLoader(data, num_neighbors=[2]))),
            loader in states, states[loader].epochs, batches)
    gone = weakref.ref(loader)
    del loader
    gc.collect()
    return seen + (gone() is None, len(states))


def test_loader_state_lives_in_the_seam_not_on_the_users_loader():
    extra, held, epochs, batches, collected, left = gnnorch.Runtime(
        loader_state_kept_by_the_seam, processes=1)(cora())
    assert extra == set() and held and epochs == 1 and batches == 2
    assert collected and left == 0   # (the one built for comparison went first)


def test_loader_untouched_outside_runtime():
    original = NeighborLoader.__init__
    gnnorch.Runtime(lambda: None)()
    assert NeighborLoader.__init__ is original
    loader = NeighborLoader(cora(), num_neighbors=[2], batch_size=8, shuffle=True)
    assert not hasattr(loader, "_gnnorch_state") and loader.batch_size == 8


def test_a_device_path_plugs_into_the_loader_seam():
    """The device path (`intercept.feeds.DevicePathHook`) sees every loader at the end of its
    __init__, hears of each epoch before its iterator is made, and wraps each epoch's batches before the layer seam hears of them; a loader it
    samples on the device runs without workers, whatever the plan says; its decision is in
    the loader's stats."""
    from gnnorch.intercept.session import active, session
    from gnnorch.launch.context import RankContext
    from gnnorch.launch.plan import CorePlan
    from gnnorch.run_options import RunOptions

    calls, announced = [], []

    class Decision:
        samples_on_device = True

        def to_dict(self):
            return {"served": "in this test"}

    class Path:
        def adopt(self, loader, state):
            calls.append(("adopt", state.role, loader.num_workers))
            state.device = Decision()

        def epoch_start(self, loader, state):
            calls.append(("epoch_start", loader.num_workers))

        def feed(self, iterator, loader, state, training):
            calls.append(("feed", loader.num_workers, training))
            for batch in iterator:
                batch.fed = True
                yield batch

        def close(self):
            calls.append(("close",))

    data = cora()
    ctx = RankContext(rank=0, world_size=1, plan=CorePlan(1, 1, 1), cores=None, seed=0,
                      options=RunOptions(rewrite=False))
    with session(ctx, device_path=lambda c: Path()):
        seam = active().layer_seam
        set_batch = seam.set_batch
        seam.set_batch = lambda graph: (announced.append(graph), set_batch(graph))[1]
        loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask,
                                batch_size=70, shuffle=True)
        batches = list(loader)
    assert calls == [("adopt", "train", 1), ("epoch_start", 0), ("feed", 0, True), ("close",)]
    assert len(batches) == 2 and all(batch.fed for batch in batches)
    assert [g is not None for g in announced] == [True, True, False]
    record = ctx.stats["sampler"]["loaders"][0]
    assert record["device"] == {"served": "in this test"}
    assert record["num_workers"] == "0 (sampled on the device)"


def _train_on_merged_graphs(graphs, epochs=2):
    """Node classification on graphs merged by ``Batch.from_data_list``: the loader's batches
    are `Batch` objects, whose ``batch_size`` property is ``num_graphs``; the seed count is
    ``batch["batch_size"]`` (what PyG's NodeLoader stored)."""
    import torch.nn.functional as F
    from torch_geometric.data import Batch
    from torch_geometric.nn import GraphSAGE

    data = Batch.from_data_list(graphs)
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[4, 3], batch_size=64, shuffle=True)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            assert batch.batch_size == len(graphs)          # PyG's alias, as without gnnorch
            seeds = batch["batch_size"]
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:seeds]
            loss = F.cross_entropy(out, batch.y[:seeds])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def test_node_batches_of_merged_graphs_are_trimmed_to_their_seeds():
    # rewrites decided but never taken ("report"): the per-bucket order decisions are timed,
    # so the two runs could take different ones, and Adam over 170 steps amplifies their
    # last-bit differences
    graphs = [cora()] * 2
    runs = {}
    for trim in (False, True):
        runtime = gnnorch.Runtime(_train_on_merged_graphs, processes=1, autotune=False,
                                  trim=trim, rewrite="report")
        torch.manual_seed(1)
        runs[trim] = runtime(graphs)
        stats, epochs = runtime.last_run.stats[0], runtime.last_run.epochs[0]
    (model,) = stats["trim"]["models"]
    assert model["trimmed"] and model["materialized"] == 0, model
    assert model["trimmed_forwards"] == len(runs[True])
    assert [e["seeds"] for e in epochs] == [2 * int(graphs[0].num_nodes)] * 2
    torch.testing.assert_close(torch.tensor(runs[True]), torch.tensor(runs[False]),
                               rtol=1e-4, atol=1e-5)


def _train_with_batch_transform(data, transform, epochs=2):
    """GraphSAGE on a loader whose batches PyG transforms after sampling; the losses."""
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[4, 3], batch_size=32, shuffle=True,
                            input_nodes=data.train_mask, transform=transform)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name, trimmed", [("AddSelfLoops", True), ("VirtualNode", False)])
def test_batch_transforms_are_trimmed_only_when_they_keep_the_hop_layout(name, trimmed):
    """A transform's edges are not in the sampler's hop counts. Self-loops stay within a hop:
    trimmed, exactly. T.VirtualNode adds a vertex wired to every hop: left untrimmed, with
    the reason (before the fix: an IndexError in the trimmed layer)."""
    import torch_geometric.transforms as T

    runs = {}
    for trim in (False, True):
        runtime = gnnorch.Runtime(_train_with_batch_transform, processes=1, autotune=False,
                                  trim=trim, rewrite=False, sampler="gnnorch")
        torch.manual_seed(1)
        runs[trim] = runtime(cora(), getattr(T, name)())
    stats = runtime.last_run.stats[0]
    (model,) = stats["trim"]["models"]
    assert stats["sampler"]["loaders"][0]["transform"] == f"{name}()"
    if trimmed:
        assert model["trimmed"] and model["trimmed_forwards"] == len(runs[True]), model
    else:
        assert not model["trimmed"] and "VirtualNode() adds vertices" in model["reason"], model
    torch.testing.assert_close(torch.tensor(runs[True]), torch.tensor(runs[False]),
                               rtol=1e-5, atol=1e-6)


def _data_workers() -> list:
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if p.name() == "pt_data_worker"]


def one_epoch_with_persistent_workers(data):
    """A loader with persistent workers, returned to the caller (so it outlives the call)."""
    loader = NeighborLoader(data, num_neighbors=[2], input_nodes=data.train_mask, batch_size=35,
                            shuffle=True, num_workers=2, persistent_workers=True)
    seeds = sum(batch.batch_size for batch in loader)
    return loader, seeds


def test_persistent_workers_stop_when_the_run_ends():
    """The run ends its intercepted loaders' persistent workers (PyG leaves them to garbage
    collection, which can stall for seconds per loader when iterators sit in reference
    cycles); the loader still works afterwards, with new workers."""
    data = cora()
    loader, seeds = gnnorch.Runtime(one_epoch_with_persistent_workers, processes=1)(data)
    assert seeds == 140
    assert _data_workers() == []
    assert sum(batch.batch_size for batch in loader) == 140     # a new epoch, new workers
    assert len(_data_workers()) == 2
    from gnnorch.compat.processes import stop_persistent_workers

    assert stop_persistent_workers(loader)
    assert _data_workers() == []


def test_a_batch_laid_out_by_its_sampler_is_known_grouped_by_hop():
    """`announce.batch_graph`: a directional loader's batch with hop counts and no transform
    has its edges grouped hop by hop (trimming keeps prefixes); a transform's edges are not in
    the counts, so its batches are trimmed with masks; edges recovered without counts are
    grouped when `hops_from_edges` found a layout."""
    from gnnorch.intercept.announce import batch_graph
    from gnnorch.intercept.feeds import LoaderState
    from gnnorch.sampling import FastNeighborSampler
    import torch_geometric.transforms as T

    data = cora()
    loader = NeighborLoader(data, num_neighbors=[4, 3], batch_size=16,
                            neighbor_sampler=FastNeighborSampler(data, [4, 3]))
    batch = next(iter(loader))
    state = LoaderState(role="train", index=0, global_batch_size=16, user_num_workers=None,
                        num_hops=2)
    graph = batch_graph(batch, state)
    assert graph.layout is not None and graph.edges_grouped
    state.transform = "AddSelfLoops()"
    looped = T.AddSelfLoops()(batch.clone())
    graph = batch_graph(looped, state)
    assert graph.layout is not None and not graph.edges_grouped
    state.transform = None
    del batch.num_sampled_nodes, batch.num_sampled_edges   # as torch_sparse's batches
    graph = batch_graph(batch, state)
    assert graph.layout is not None and graph.edges_grouped
