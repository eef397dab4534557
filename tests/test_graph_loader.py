"""PyG's graph-level `DataLoader` under the runtime: training epochs sharded by graph over
ranks (p ranks train what one process trains on the same global batches), evaluation epochs
whole in every rank, epochs timed for the tuner, and, on the device path, PyG's batches copied
and drawn ahead where nothing random is drawn while they are collated."""
from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, GraphMultisetTransformer, global_mean_pool

import gnnorch
from gnnorch.errors import GnnorchWarning

pytestmark = pytest.mark.usefixtures("no_leftover_children")

SEED = 4321


def graphs(n: int = 96, seed: int = 0) -> FakeDataset:
    """`n` random graphs (8 features, 3 classes), the same for a given seed."""
    torch.manual_seed(seed)
    return FakeDataset(num_graphs=n, avg_num_nodes=12, num_channels=8, num_classes=3,
                       task="graph")


class Gin(torch.nn.Module):
    """Two GIN layers, mean pooling (or, `gmt`, PyG's Graph Multiset Transformer: attention
    over each graph's nodes padded to the batch's largest graph and masked), no dropout; with
    `norm`, a BatchNorm in the first layer's MLP (statistics over the whole batch). Without
    it, a step on b graphs averaged over p ranks equals one step on the b graphs."""

    def __init__(self, norm: bool = False, gmt: bool = False) -> None:
        super().__init__()
        self.pool = GraphMultisetTransformer(16, k=4, heads=2) if gmt else global_mean_pool
        self.conv1 = GINConv(torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16) if norm else torch.nn.Identity(),
            torch.nn.ReLU(), torch.nn.Linear(16, 16)))
        self.conv2 = GINConv(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                                 torch.nn.Linear(16, 16)))
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x, edge_index, batch):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        return self.head(self.pool(x, batch))


def step(model, optimizer, batch) -> float:
    """One training step of `model` on a graph-level `batch`; its loss."""
    optimizer.zero_grad()
    loss = F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y)
    loss.backward()
    optimizer.step()
    return loss.item()


def gin_setup(dataset, batch_size, shuffle=True, norm=False, num_workers=0, gmt=False,
              persistent=False):
    """`DataLoader(dataset, batch_size, shuffle)` (the batch size and shuffle given by
    position, as PyG's ``mutag_gin.py`` passes them), a `Gin` and its SGD."""
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size, shuffle, num_workers=num_workers,
                        persistent_workers=persistent)
    model = Gin(norm, gmt)
    return loader, model, torch.optim.SGD(model.parameters(), lr=0.05)


def train_epochs(loader, model, optimizer, epochs, leave_first=False):
    """`epochs` epochs of steps (the first left after its first batch if `leave_first`); the
    graphs of each batch."""
    sizes = []
    for epoch in range(epochs):
        for batch in loader:
            step(model, optimizer, batch)
            sizes.append(batch.num_graphs)
            if leave_first and epoch == 0:
                break
    return sizes


def gin_epochs(dataset, batch_size, epochs, shuffle=True, norm=False, gmt=False):
    """`epochs` epochs of SGD over `gin_setup`'s loader; the parameters."""
    loader, model, optimizer = gin_setup(dataset, batch_size, shuffle, norm, gmt=gmt)
    train_epochs(loader, model, optimizer, epochs)
    return model.state_dict()


@pytest.mark.parametrize("norm, gmt", [(False, False), (True, False), (False, True)])
def test_two_ranks_equal_one_process_over_two_epochs(norm, gmt):
    # the first epoch's first batch runs whole (no forward has shown the model yet), the rest
    # of the run sharded, unless the model holds a BatchNorm: then whole. Either way the plain
    # call trains the same model: the epochs deal the permutations it draws
    dataset = graphs()
    runtime = gnnorch.Runtime(gin_epochs, processes=2, seed=SEED, verbose=False)
    got = runtime(dataset, 16, 2, True, norm, gmt)
    want = gin_epochs(dataset, 16, 2, True, norm, gmt)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    batches = [e["batches"] for e in runtime.last_run.epochs[0]]
    assert batches == [6, 6]   # global batches of 16 either way
    # a rank counts its share of what the run trained: half of every batch both ranks ran
    # whole, its own shard of a sharded one; the ranks' counts add up to the 96 graphs
    for rank in (0, 1):
        assert [e["seeds"] for e in runtime.last_run.epochs[rank]] == [48, 48]
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert ("batch statistics" in record["kept_whole"]) if norm else record["kept_whole"] is None


class ScriptableGin(torch.nn.Module):
    """`Gin` with its BatchNorm, written so that ``torch.jit.script`` compiles it (PyG's
    ``jit/gin.py``): scripted, its submodules are ``RecursiveScriptModule``s, not
    ``BatchNorm1d``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = GINConv(torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
            torch.nn.Linear(16, 16)))
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x, edge_index, batch):
        return self.head(global_mean_pool(self.conv1(x, edge_index).relu(), batch))


def scripted_epochs(dataset, batch_size, epochs, shuffle=True):
    """`gin_epochs` of a scripted `ScriptableGin`; the parameters."""
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size, shuffle)
    model = torch.jit.script(ScriptableGin())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train_epochs(loader, model, optimizer, epochs)
    return {key: value.clone() for key, value in model.state_dict().items()}


def test_a_scripted_models_batchnorm_keeps_epochs_whole():
    # TorchScript hides the BatchNorm's class behind RecursiveScriptModule: it is found by the
    # class it was scripted from, so the epochs run whole and the run is one process's
    dataset = graphs()
    runtime = gnnorch.Runtime(scripted_epochs, processes=2, seed=SEED, verbose=False)
    got = runtime(dataset, 16, 2)
    want = scripted_epochs(dataset, 16, 2)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert "conv1.nn.1 (BatchNorm1d)" in record["kept_whole"]


class NodeGin(torch.nn.Module):
    """A node-level model on batches of whole graphs (PyG's ``ppi.py``: one row per node,
    multi-label targets per node)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = GINConv(torch.nn.Linear(8, 16))
        self.conv2 = GINConv(torch.nn.Linear(16, 3))

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def node_level_epochs(dataset, batch_size, epochs):
    """`epochs` epochs of a node-level loss (binary cross-entropy averaged over the batch's
    nodes) on graph batches; the parameters and the graphs of each batch."""
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    model = NodeGin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    sizes = []
    for _ in range(epochs):
        for batch in loader:
            node_step(model, optimizer, batch)
            sizes.append(batch.num_graphs)
    return model.state_dict(), sizes


def node_step(model, optimizer, batch) -> None:
    """One step of a node-level loss: each node's graph label one-hot as 3 binary targets."""
    optimizer.zero_grad()
    target = F.one_hot(batch.y[batch.batch], 3).float()
    F.binary_cross_entropy_with_logits(model(batch.x, batch.edge_index), target).backward()
    optimizer.step()


def test_a_loss_over_nodes_of_graph_batches_keeps_epochs_whole():
    # graphs of different sizes: a shard's mean over its nodes, averaged over two ranks, is
    # not the batch's mean over its nodes, so the first batch's step shows one row per node
    # and every rank runs every graph; the run is the plain call's
    dataset = graphs(n=48)
    runtime = gnnorch.Runtime(node_level_epochs, processes=2, seed=SEED, verbose=False)
    got, sizes = runtime(dataset, 8, 2)
    want, _ = node_level_epochs(dataset, 8, 2)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    assert sizes == [8] * 12
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert record["outputs"].startswith("the model returned one row per node (")
    assert "not one row per graph" in record["kept_whole"]
    assert ("sampler: train collate [num_workers 0 (PyG's default)] (whole in every rank: "
            "the model returned one row per node (") in runtime.summary()


@pytest.mark.parametrize("batch_size", [1, 3, 5])
def test_a_batch_size_the_ranks_do_not_divide_is_dealt_out_weighted(batch_size):
    # 3 graphs a batch: 2 + 1 a step, gradients weighted 2:1; 5: 3 + 2, and the last batch's
    # 2 graphs 1 + 1. A batch of 1 graph would leave rank 1 none of any batch: kept whole.
    # Either way the plain call's training
    dataset = graphs(n=12)
    runtime = gnnorch.Runtime(gin_epochs, processes=2, seed=SEED, verbose=False)
    got = runtime(dataset, batch_size, 2)
    want = gin_epochs(dataset, batch_size, 2)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    assert [e["batches"] for e in runtime.last_run.epochs[0]] == [-(-12 // batch_size)] * 2
    assert sum(e["seeds"] for r in (0, 1) for e in runtime.last_run.epochs[r]) == 24
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    if batch_size == 1:
        assert "batch size 1 is smaller than the 2 ranks" in record["kept_whole"]
    else:
        assert record["kept_whole"] is None


def gin_sizes_on_the_device_path(dataset, batch_size, epochs):
    """`gin_epochs` on the device path (the CPU as the device); the parameters and the graphs
    of each batch."""
    loader, model, optimizer = gin_setup(dataset, batch_size)
    return model.state_dict(), train_epochs(loader, model, optimizer, epochs)


def test_the_device_path_draws_a_split_epoch_ahead_once_its_head_is_decided():
    # drawn ahead from the first batch, the rest's first batch would be drawn before the
    # model's first forward (and the epoch kept whole); the path waits for the head's step
    dataset = graphs()
    runtime = gnnorch.Runtime(gin_sizes_on_the_device_path, processes=2, seed=SEED,
                              data_path="device", verbose=False)
    got, sizes = runtime(dataset, 16, 2)
    want = gin_epochs(dataset, 16, 2)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    assert sizes == [16] + [8] * 5 + [8] * 6
    [device] = runtime.last_run.stats[0]["device"]["loaders"]
    assert device["copied"] and device["prefetch"] > 0 and device["prefetch_reason"] == ""


def test_the_watch_judges_root_outputs_by_their_rows():
    from gnnorch.intercept.graph_outputs import OutputWatch, leading_rows

    batch = next(iter(DataLoader(graphs(n=4), batch_size=4)))
    model, loss = Gin(), torch.nn.MSELoss()
    assert leading_rows((torch.zeros(4, 3), torch.zeros(()))) == 4
    assert leading_rows(torch.zeros(())) is None and leading_rows({"a": 1}) is None
    with OutputWatch(batch) as watch:
        out = model(batch.x, batch.edge_index, batch.batch)   # one row per graph
        loss(out, torch.zeros_like(out))   # a root without parameters: not judged
    assert watch.verdict([model, loss]).per_graph
    assert watch.verdict([loss]) is None   # no trained root ran: nothing seen
    node_model = NodeGin()
    with OutputWatch(batch) as watch:
        node_model(batch.x, batch.edge_index)
    assert not watch.verdict([node_model]).per_graph
    with OutputWatch(batch) as watch:
        model(batch.x, batch.edge_index, batch.batch).sum()
        node_model(batch.x, batch.edge_index)
    verdict = watch.verdict([model, node_model])   # every trained root must be per graph
    assert not verdict.per_graph and "one row per node" in verdict.detail
    assert not torch.nn.modules.module._global_forward_hooks   # removed on exit


def gin_leaving_first_epoch(dataset, batch_size, epochs, num_workers=0):
    """`gin_epochs`, except that the first epoch is left after its first batch."""
    loader, model, optimizer = gin_setup(dataset, batch_size, num_workers=num_workers)
    sizes = train_epochs(loader, model, optimizer, epochs, leave_first=True)
    return model.state_dict(), sizes


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_epoch_left_after_its_first_batch_ends_there(num_workers):
    # the first epoch's split is never completed: the next epoch is the permutation's next
    # epoch, sharded (with loader workers too: each pass starts its own)
    dataset = graphs()
    runtime = gnnorch.Runtime(gin_leaving_first_epoch, processes=2, seed=SEED, verbose=False)
    (got, sizes) = runtime(dataset, 16, 3, num_workers)
    want, _ = gin_leaving_first_epoch(dataset, 16, 3, num_workers)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    assert sizes == [16] + [8] * 12
    assert [e["batches"] for e in runtime.last_run.epochs[0]] == [1, 6, 6]


def gin_persistent_workers(dataset, batch_size, epochs):
    """`gin_epochs` on a loader with 2 persistent workers; the parameters and batch sizes."""
    loader, model, optimizer = gin_setup(dataset, batch_size, num_workers=2, persistent=True)
    sizes = train_epochs(loader, model, optimizer, epochs)
    return model.state_dict(), sizes


def test_persistent_workers_serve_both_passes_of_a_split_epoch():
    dataset = graphs()
    runtime = gnnorch.Runtime(gin_persistent_workers, processes=2, seed=SEED, verbose=False)
    got, sizes = runtime(dataset, 16, 2)
    want, _ = gin_persistent_workers(dataset, 16, 2)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    assert sizes == [16] + [8] * 5 + [8] * 6


def gin_after_an_unused_iterator(dataset, batch_size, epochs, sampler_draw=False):
    """`gin_epochs`, after an iterator of the loader that is never used (its epoch would be
    split) and a forward outside the loader (the model is known from then on). With
    `sampler_draw`, the iterator is followed by the draw PyG's shuffle makes at its first batch
    (one int64), which the runtime makes as the iterator is made (`intercept.epoch_order`)."""
    loader, model, optimizer = gin_setup(dataset, batch_size)
    iter(loader)
    if sampler_draw:
        torch.empty((), dtype=torch.int64).random_()
    with torch.no_grad():
        first = next(iter(DataLoader(dataset, 4)))
        model(first.x, first.edge_index, first.batch)
    sizes = train_epochs(loader, model, optimizer, epochs)
    return model.state_dict(), sizes


def test_an_unused_split_epoch_leaves_no_head_behind():
    # the unused iterator's epoch never ran; the first training epoch is split after its first
    # batch as any is until a step has shown what the model returns for the loader's batches
    # (the forward outside the loader showed the model, not that)
    dataset = graphs()
    runtime = gnnorch.Runtime(gin_after_an_unused_iterator, processes=2, seed=SEED,
                              verbose=False)
    got, sizes = runtime(dataset, 16, 2)
    want, _ = gin_after_an_unused_iterator(dataset, 16, 2, sampler_draw=True)
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key
    assert sizes == [16] + [8] * 5 + [8] * 6
    [record, _] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert record["outputs"].startswith("one row per graph (16 rows for a batch of 16 graphs and ")


def sizes_seen(dataset, batch_size, epochs=1):
    """The graphs of each training batch, then the graphs one evaluation epoch saw."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    model = Gin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = []
    for _ in range(epochs):
        for batch in loader:
            step(model, optimizer, batch)
            train.append(batch.num_graphs)
    model.eval()
    with torch.no_grad():
        evaluated = sum(batch.num_graphs for batch in DataLoader(dataset, batch_size=32))
    return train, evaluated


def test_training_epochs_are_sharded_and_evaluation_epochs_whole():
    dataset = graphs(n=90)
    runtime = gnnorch.Runtime(sizes_seen, processes=2, seed=SEED, verbose=False)
    train, evaluated = runtime(dataset, 20, 2)
    # the first epoch's first batch runs whole (before the model's first forward), its other
    # 70 graphs sharded: 35 a rank in batches of 20 / 2 = 10; the second epoch shards
    # all 90 graphs: 45 a rank
    assert train == [20, 10, 10, 10, 5] + [10, 10, 10, 10, 5]
    assert evaluated == 90   # an evaluation epoch runs every graph in every rank
    epochs = runtime.last_run.epochs[0]
    assert [(e["loader"], e["batches"], e["seeds"]) for e in epochs] == [(0, 5, 45),
                                                                            (0, 5, 45)]
    loaders = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert [(r["kind"], r["role"], r["backend"]) for r in loaders] == [
        ("graph", "train", "collate"), ("graph", "eval", "collate")]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_the_tuner_probes_a_graph_level_program_with_sharded_ranks():
    runtime = gnnorch.Runtime(losses, launch={"threads": 1, "sampler_cores": 0},
                              autotune=True, verbose=False,
                              tune={"max_overhead": 1e9, "probe_batches": 4,
                                    "warmup_batches": 1})
    got = runtime(graphs(n=96), 4)
    trials = [t for t in runtime.report.trials if t["chosen_by"] != "confirm"]
    assert [t["config"]["processes"] for t in trials] == [1, 2]
    two = trials[1]
    assert two["status"] == "ok" and two["throughput"] > 0
    # a probe measures the first epoch: its first batch runs whole (no forward yet), each rank
    # counting half of its 16 graphs, and the rest sharded, 8 graphs a rank a step
    assert two["batch_size_per_rank"] == [8, 8] and two["measured_batches"] == 4
    assert len(got) == 4 * 96 // 16   # 6 steps an epoch whatever p: the global batch is 16


class InWorker:
    """A dataset transform: each graph says whether a loader worker collated it."""

    def __call__(self, data):
        data = data.clone()
        data.in_worker = torch.tensor([torch.utils.data.get_worker_info() is not None])
        return data


def collated_where(dataset, inits, num_workers=None):
    """One training epoch over `dataset` (``num_workers`` left out unless given, with a
    ``worker_init_fn`` of the user's); whether each graph was collated in a worker."""
    def users_init(worker_id):
        inits.put(worker_id)

    workers = {} if num_workers is None else {"num_workers": num_workers}
    loader = DataLoader(dataset, batch_size=16, shuffle=True, worker_init_fn=users_init,
                        **workers)
    model = Gin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = set()
    for batch in loader:
        step(model, optimizer, batch)
        seen.update(batch.in_worker.tolist())
    return seen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_a_graph_level_loader_keeps_pygs_workers_under_a_plan_with_sampler_cores():
    # num_workers left out: PyG's none, whatever the plan's sampler cores (a graph-level
    # DataLoader has no enable_cpu_affinity; workers started anew for every pass cost more
    # than collating saves); the user's own workers are kept, with the user's worker_init_fn
    import multiprocessing

    dataset = graphs(n=48)
    dataset.transform = InWorker()
    inits = multiprocessing.get_context("fork").SimpleQueue()
    runtime = gnnorch.Runtime(collated_where, processes=1, autotune=False, verbose=False,
                              launch={"sampler_cores": 1, "threads": 1})
    assert runtime(dataset, inits) == {False} and inits.empty()
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert record["num_workers"] == "0 (PyG's default)"
    assert runtime(dataset, inits, 1) == {True} and inits.get() == 0
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert record["num_workers"] == "user (1)"


def test_one_process_runs_the_loader_as_pyg_does():
    dataset = graphs(n=50)
    torch.manual_seed(3)
    want = sizes_seen(dataset, 16)
    torch.manual_seed(3)
    got = gnnorch.Runtime(sizes_seen, processes=1, autotune=False, verbose=False)(dataset, 16)
    assert got == want == ([16, 16, 16, 2], 50)


def passed_in(loader):
    model = Gin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for batch in loader:
        step(model, optimizer, batch)
        seen += batch.num_graphs
    return seen


def test_a_loader_built_before_the_call_warns_only_with_several_ranks():
    loader = DataLoader(graphs(n=40), batch_size=8, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GnnorchWarning)
        one = gnnorch.Runtime(passed_in, processes=1, autotune=False, verbose=False)
        assert one(loader) == 40
    assert one.last_run.stats[0]["sampler"]["built_before_run"] == 1
    # rank 0's warning reaches the caller's `warnings.showwarning` (`launch.relay`)
    with pytest.warns(GnnorchWarning, match="every rank iterates all of it"):
        assert gnnorch.Runtime(passed_in, processes=2, verbose=False)(loader) == 40


def losses(dataset, epochs, num_workers=0):
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=num_workers)
    model = Gin()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    out = []
    for _ in range(epochs):
        for batch in loader:
            batch = batch.to(torch.device("cpu"))
            out.append(step(model, optimizer, batch))
    return out


def _copied(runtime):
    return [(r["copied"], r["prefetch"], r["prefetch_reason"])
            for r in runtime.last_run.stats[0]["device"]["loaders"]]


def test_device_path_copies_and_draws_ahead_graph_batches_with_the_same_losses():
    dataset = graphs(n=80)
    host = gnnorch.Runtime(losses, processes=1, autotune=False, data_path="host",
                           verbose=False)
    device = gnnorch.Runtime(losses, processes=1, autotune=False, data_path="device",
                             verbose=False)
    assert device(dataset, 2) == host(dataset, 2)
    assert _copied(device) == [(True, 2, "")]
    record = device.last_run.stats[0]["device"]["loaders"][0]
    assert record["batches"] == 10 and "graph-level DataLoader" in record["reason"]


def test_device_path_collates_in_the_trainer_thread_when_the_dataset_draws():
    dataset = graphs(n=48)
    dataset.transform = lambda data: data   # a dataset's transform may draw: not ahead
    device = gnnorch.Runtime(losses, processes=1, autotune=False, data_path="device",
                             verbose=False)
    host = gnnorch.Runtime(losses, processes=1, autotune=False, data_path="host",
                           verbose=False)
    assert device(dataset, 1) == host(dataset, 1)
    [(copied, prefetch, reason)] = _copied(device)
    assert copied and prefetch == 0 and "transform" in reason


def test_an_iterable_dataset_is_not_sharded():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            for i in range(12):
                yield Data(x=torch.ones(3, 8), edge_index=torch.tensor([[0, 1], [1, 2]]),
                           y=torch.tensor([i % 3]))

    def count(dataset):
        model = Gin()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        seen, loader = 0, DataLoader(dataset, batch_size=4)
        for _ in range(2):   # (the second epoch trains: the first ran before any forward)
            for batch in loader:
                step(model, optimizer, batch)
                seen += batch.num_graphs
        return seen

    runtime = gnnorch.Runtime(count, processes=2, verbose=False)
    assert runtime(Stream()) == 24
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert record["kept_whole"].startswith("its dataset (Stream) has no length to deal out")
    # every rank runs the 12 graphs: counted once over the ranks, for the tuner and report
    assert [len(runtime.last_run.epochs[r]) for r in (0, 1)] == [1, 1]
    assert sum(e["seeds"] for r in (0, 1) for e in runtime.last_run.epochs[r]) == 12


def dynamic_batches(dataset, epochs):
    """SGD over PyG's `DynamicBatchSampler` (batches of at most 100 nodes, shuffled, no
    ``num_steps``: the loader has no length); the parameters and the graphs of each batch."""
    from torch_geometric.loader import DynamicBatchSampler

    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_sampler=DynamicBatchSampler(
        dataset, max_num=100, mode="node", shuffle=True))
    model = Gin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return model.state_dict(), train_epochs(loader, model, optimizer, epochs)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_batch_sampler_without_a_length_runs_whole_in_every_rank(processes):
    # the batch sampler makes the batches (by nodes): nothing to deal out, so every rank runs
    # them all, drawn alike from the function's seed: the run is one process's, and the
    # epochs' graphs are counted once (a loader without a length used to fail at len())
    dataset = graphs(n=40)
    want, want_sizes = dynamic_batches(dataset, 2)
    runtime = gnnorch.Runtime(dynamic_batches, processes=processes, verbose=False)
    got, sizes = runtime(dataset, 2)
    assert sizes == want_sizes
    for key, value in want.items():
        assert torch.allclose(got[key], value, atol=1e-6), key
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    timed = [e for r in range(processes) for e in runtime.last_run.epochs[r]]
    assert sum(e["seeds"] for e in timed) == 40 * len(runtime.last_run.epochs[0])
    if processes == 2:
        assert record["kept_whole"].startswith(
            "its batch_sampler= (DynamicBatchSampler) makes the batches")
        assert "(whole in every rank: its batch_sampler= (DynamicBatchSampler)" in \
            runtime.summary()
    else:
        assert "kept_whole" not in record


def cuda_losses(dataset, epochs):
    """`losses` with the model and the batches on the current CUDA device, as a GPU user
    writes it."""
    device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size=16, shuffle=True)
    model = Gin().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    out = []
    for _ in range(epochs):
        for batch in loader:
            batch = batch.to(device)
            out.append(step(model, optimizer, batch))
    return out


@pytest.mark.gpu
def test_cuda_graph_batches_are_copied_by_the_path_with_the_plain_losses():
    dataset = graphs(n=64)
    torch.manual_seed(0)
    want = cuda_losses(dataset, 2)
    runtime = gnnorch.Runtime(cuda_losses, processes=1, autotune=False, device="cuda",
                              verbose=False)
    got = runtime(dataset, 2)
    assert torch.allclose(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    [record] = runtime.last_run.stats[0]["device"]["loaders"]
    assert record["copied"] and record["prefetch"] > 0 and record["batches"] == 8


def test_watching_a_batch_without_node_attributes_prints_no_pyg_warning():
    """RE-Net's collate builds event batches without a node attribute, where PyG warns when
    `num_nodes` is read; the runtime's watch of a batch's outputs must not make it warn."""
    from gnnorch.intercept.graph_outputs import OutputWatch

    batch = Data(sub=torch.tensor([0, 3]), rel=torch.tensor([1, 1]), t=torch.tensor([5, 5]),
                 h_sub=torch.tensor([2, 4, 4]))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        watch = OutputWatch(batch)
    assert not [w for w in seen if "num_nodes" in str(w.message)], [str(w.message) for w in seen]
    with warnings.catch_warnings(record=True) as seen:   # (the control: PyG's own read warns)
        warnings.simplefilter("always")
        batch.num_nodes
    assert [w for w in seen if "num_nodes" in str(w.message)]
    assert watch.graphs is None
