"""The device data path (issue 21) with the CPU as the device: placement, sampling on the
"device" CSC with the path's own generator, gathering, the prefetch thread, the identity
transfer; batches and losses equal to the plain path drawing from the same generator. CUDA
checks are marked `gpu`."""
from __future__ import annotations

import gc
import threading
import time
import types

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets.synthetic import power_law_graph
from gnnorch.device.config import DataPathConfig
from gnnorch.device.placement import structure_bytes
from gnnorch.device.seeds import sampling_seed
from gnnorch.device.twin import device_twin
from gnnorch.intercept.device_path import DevicePath
from gnnorch.launch.context import RankContext
from gnnorch.launch.plan import CorePlan
from gnnorch.run_options import RunOptions
from gnnorch.sampling.neighbor import FastNeighborSampler

from helpers import assert_same_batch

SEED = 7
FANOUT = [4, 3]


def _graph(num_nodes=500, seed=0):
    data = power_law_graph(num_nodes=num_nodes, avg_degree=8.0, num_features=16,
                           num_classes=4, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    data.edge_attr = torch.randn(data.edge_index.size(1), 3, generator=gen)
    return data


DATA = _graph()
#: a budget that holds the CSC and the 150 hottest rows of x, y and the masks (with the
#: split's slot table of 4 bytes a vertex): a split
SPLIT_BUDGET = (structure_bytes(DATA.num_nodes, DATA.edge_index.size(1)) + 4 * DATA.num_nodes
                + 150 * (16 * 4 + 8 + 3))


def _ctx(config, **options):
    return RankContext(rank=0, world_size=1, plan=CorePlan(1, 0, 1), cores=None, seed=SEED,
                       options=RunOptions(data_path=config, **options))


def _state(role="train"):
    return types.SimpleNamespace(role=role, index=0, user_num_workers=0, partition=None,
                                 device=None, kind="node")


def _loader(data=DATA, batch_size=32):
    sampler = FastNeighborSampler(data, num_neighbors=FANOUT)
    return NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                          batch_size=batch_size, shuffle=True, num_workers=0,
                          neighbor_sampler=sampler)


def _served(config, data=DATA, batch_size=32, device=None, **options):
    ctx = _ctx(config, **options)
    path = DevicePath(ctx, config, device)
    loader, state = _loader(data, batch_size), _state()
    path.adopt(loader, state)
    return ctx, path, loader, state


def _plain_epoch(loader, epoch, key=0, shuffle_seed=11):
    """One epoch of the plain path, sampling with the generator the policy gives."""
    loader.node_sampler.generator = torch.Generator().manual_seed(
        sampling_seed(SEED, 0, key, epoch))
    torch.manual_seed(shuffle_seed)
    return list(loader)


def _device_epoch(path, loader, state, shuffle_seed=11):
    torch.manual_seed(shuffle_seed)
    return list(path.feed(iter(loader), loader, state, True))


def _no_pipeline_thread():
    gc.collect()
    deadline = time.time() + 2
    while time.time() < deadline:
        if not any(t.name == "gnnorch-device-path" for t in threading.enumerate()):
            return True
        time.sleep(0.02)
    return False


# --------------------------------------------------------------------------- decisions
def test_placement_decided_and_in_stats():
    ctx, path, loader, state = _served(DataPathConfig(mode="device"))
    record = state.device
    assert record.served and record.samples_on_device and record.features == "gpu"
    assert loader.num_workers == 0 and loader.node_sampler.generator is None
    stats = ctx.stats["device"]
    entry = stats["loaders"][0]
    assert stats["active"] and stats["device"] == "cpu"
    assert entry["placement"]["structure"] == "gpu" and entry["placement"]["features"] == "gpu"
    assert entry["placement"]["budget_bytes"] > 0 and len(entry["placement"]["reasons"]) == 2
    # the CPU standing in for a GPU is named as what it is
    assert all("device (cpu)" in r and "GPU" not in r for r in entry["placement"]["reasons"])
    assert "sampled and gathered" in entry["reason"] and "-> 0" in entry["num_workers"]
    assert entry["bytes_on_device"] > 0


def test_budget_and_features_host_decide_where_data_lives():
    small = DataPathConfig(mode="device", budget_bytes=16)
    _, _, _, state = _served(small)
    assert state.device.served and not state.device.samples_on_device
    assert state.device.features == "host"           # no pinning on a CPU device
    assert "exceeds" in state.device.placement.reasons[0]
    _, _, loader, state = _served(DataPathConfig(mode="device", features="host"))
    assert state.device.samples_on_device and state.device.features == "host"
    assert "features='host'" in state.device.placement.reasons[1]


def test_modes_that_do_not_serve():
    for config, why in ((DataPathConfig(mode="host"), "mode 'host'"),
                        (DataPathConfig(mode="auto"), "trains on the CPU")):
        ctx, path, loader, state = _served(config)
        assert not state.device.served and why in state.device.reason
        it = iter(loader)
        assert path.feed(it, loader, state, True) is it        # untouched
        assert ctx.stats["device"]["loaders"][0]["served"] is False


# --------------------------------------------------------------------------- same batches
@pytest.mark.parametrize("config", [
    DataPathConfig(mode="device"),
    DataPathConfig(mode="device", prefetch=0),
    DataPathConfig(mode="device", features="host", prefetch=3),
    DataPathConfig(mode="device", budget_bytes=16),            # structure and features host
    DataPathConfig(mode="device", budget_bytes=SPLIT_BUDGET),  # the hottest rows on the device
])
def test_same_batches_as_the_plain_path(config):
    _, path, loader, state = _served(config)
    split = config.budget_bytes == SPLIT_BUDGET
    assert (state.device.features == "split") == split
    plain = _loader()
    for epoch in range(2):
        want = _plain_epoch(plain, epoch)
        got = _device_epoch(path, loader, state)
        assert len(got) == len(want) == len(loader)
        for g, w in zip(got, want):
            assert_same_batch(g, w)
    assert state.device.epochs == 2 and state.device.batches == 2 * len(loader)
    assert _no_pipeline_thread()


def test_host_sampling_with_device_features_gives_the_same_batches():
    # a budget that holds the features (~38 KB) but not the CSC (~68 KB)
    data = power_law_graph(num_nodes=500, avg_degree=8.0, num_features=16, num_classes=4)
    features = sum(data[k].numel() * data[k].element_size()
                   for k in ("x", "y", "train_mask", "val_mask", "test_mask"))
    config = DataPathConfig(mode="device", budget_bytes=features + 1024)
    _, path, loader, state = _served(config, data=data)
    assert not state.device.samples_on_device and state.device.features == "gpu"
    plain = _loader(data)
    for epoch in range(2):
        want = _plain_epoch(plain, epoch)
        got = _device_epoch(path, loader, state)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_batch(g, w)


def test_host_side_uses_of_batch_fields():
    _, path, loader, state = _served(DataPathConfig(mode="device"))
    host_table = torch.arange(DATA.num_nodes) * 10
    for batch in path.feed(iter(loader), loader, state, True):
        assert batch.n_id.device.type == "cpu" and batch.e_id.device.type == "cpu"
        assert batch.input_id.device.type == "cpu"
        assert torch.equal(host_table[batch.n_id], batch.n_id * 10)
        assert batch.y.tolist() == DATA.y[batch.n_id].tolist()
        assert (batch.x.cpu().numpy() == DATA.x[batch.n_id].numpy()).all()
        assert torch.equal(batch.edge_attr, DATA.edge_attr[batch.e_id])
        assert batch.to("cpu") is batch or torch.equal(batch.to("cpu").x, batch.x)


def test_user_data_is_not_modified():
    data = _graph(300, seed=3)
    before = {k: data[k] for k in data.keys()}
    _, path, loader, state = _served(DataPathConfig(mode="device", features="host"), data=data)
    list(path.feed(iter(loader), loader, state, True))
    assert loader.data is data
    assert all(data[k] is before[k] for k in before)


def _seam_epoch(path, loader, state, shuffle_seed=11):
    """One epoch as the loader seam runs it: `epoch_start`, then the epoch's iterator."""
    path.epoch_start(loader, state)
    return _device_epoch(path, loader, state, shuffle_seed)


def _change(data):
    """What PyG's examples do to a loader's data after building it (reddit.py's subgraph
    loader: features deleted, a global ``n_id`` added), plus an in-place write and a
    replaced tensor."""
    del data.edge_attr
    data.n_id = torch.arange(data.num_nodes)
    data.x.mul_(2)                       # in place: a device copy must be made again
    data.y = data.y.flip(0)


@pytest.mark.parametrize("features", ["auto", "host"])
def test_changes_to_the_loaders_data_are_seen_from_the_next_epoch(features):
    data, twin_data = _graph(300, seed=5), _graph(300, seed=5)
    _, path, loader, state = _served(DataPathConfig(mode="device", features=features),
                                     data=data)
    plain = _loader(twin_data)
    for epoch in range(3):
        if epoch == 1:
            _change(data)
            _change(twin_data)
        want = _plain_epoch(plain, epoch)
        got = _seam_epoch(path, loader, state)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_batch(g, w)
        assert ("edge_attr" in got[0]) == (epoch == 0)
        assert state.device.replans == (0 if epoch == 0 else 1)    # once, not every epoch
    assert state.device.served and loader.data is data


def test_data_replaced_by_one_without_edge_index_is_given_back_to_pyg():
    from torch_geometric.data import Data

    _, path, loader, state = _served(DataPathConfig(mode="device"))
    plain = _loader()
    def bare():
        return Data(x=DATA.x, y=DATA.y, train_mask=DATA.train_mask, num_nodes=DATA.num_nodes)

    loader.data, plain.data = bare(), bare()
    path.epoch_start(loader, state)
    record = state.device
    assert not record.served and not record.samples_on_device
    assert "given back to PyG" in record.reason and "filter_fn" not in loader.__dict__
    want, got = _plain_epoch(plain, 0), _plain_epoch(loader, 0)
    for g, w in zip(got, want):
        assert "edge_index" not in g
        assert_same_batch(g, w)


def _learnt_features_train(data, epochs=2):
    """Node features learnt with the model (a Parameter in data.x, as a featureless graph's
    embedding table can be): PyG's gather gives their rows gradients."""
    torch.manual_seed(0)
    data = data.clone()
    data.x = torch.nn.Parameter(torch.randn(data.num_nodes, 8))
    before = data.x.detach().clone()
    loader = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                            batch_size=32, shuffle=True)
    model = GraphSAGE(8, 16, 2, 4)
    optimizer = torch.optim.SGD(list(model.parameters()) + [data.x], lr=0.1)
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    return (data.x.detach() != before).any(dim=1).sum().item()


def test_learnt_features_are_left_to_pyg():
    """A device copy of a Parameter gets no gradient and lags the optimizer: such a loader is
    not served, and the features learn as in a plain run."""
    runtime = gnnorch.Runtime(_learnt_features_train, processes=1, launch={"threads": 1},
                              data_path="device")
    changed = runtime(DATA)
    record = runtime.last_run.stats[0]["device"]["loaders"][0]
    assert not record["served"] and "require grad (x)" in record["reason"]
    assert changed > 0.5 * DATA.num_nodes        # rows the batches touched were updated


def _adjacency_of_first_batch(data):
    loader = NeighborLoader(data, num_neighbors=[-1], batch_size=64, shuffle=False)
    batch = next(iter(loader))
    return batch.adj_t.sparse_sizes(), batch.adj_t.nnz(), batch.edge_index.size(1)


def test_data_with_adj_t_beside_edge_index_is_left_to_pyg():
    """PyG's filter_fn rebuilds ``adj_t`` for each batch (the sampled edges at the batch's
    size), as PyG's inference benchmark builds it (``T.ToSparseTensor(remove_edge_index=
    False)``); the gather plan would hand the whole graph's: such a loader is left to PyG
    (found by running PyG's benchmark under the path)."""
    pytest.importorskip("torch_sparse")
    import torch_geometric.transforms as T

    data = T.ToSparseTensor(remove_edge_index=False)(_graph())
    expected = _adjacency_of_first_batch(data)
    runtime = gnnorch.Runtime(_adjacency_of_first_batch, processes=1, data_path="device")
    assert expected[1] == expected[2]          # PyG's: the batch's own edges
    assert runtime(data) == expected
    record = runtime.last_run.stats[0]["device"]["loaders"][0]
    assert not record["served"] and "adj_t beside edge_index" in record["reason"]


def test_data_given_learnt_features_later_is_given_back_to_pyg():
    _, path, loader, state = _served(DataPathConfig(mode="device"))
    data = DATA.clone()
    data.x = torch.nn.Parameter(DATA.x.clone())
    loader.data = data
    path.epoch_start(loader, state)
    assert not state.device.served and "require grad (x)" in state.device.reason
    assert "given back to PyG" in state.device.reason and "filter_fn" not in loader.__dict__


def test_user_worker_contexts_run_as_is_while_sampling_on_the_device():
    """PyG's training benchmark wraps its loop in ``loader.enable_cpu_affinity(...)``, which
    raises at 0 workers: a loader sampling on the device has none to bind, so the block runs
    as it is; after the run the loader has PyG's methods back."""
    _, path, loader, state = _served(DataPathConfig(mode="device"))
    assert loader.num_workers == 0 and state.device.samples_on_device
    plain = _loader()
    with loader.enable_cpu_affinity(loader_cores=[0, 1]):
        got = _seam_epoch(path, loader, state)
    with loader.enable_multithreading(2):
        got += _seam_epoch(path, loader, state)
    want = _plain_epoch(plain, 0) + _plain_epoch(plain, 1)
    for g, w in zip(got, want):
        assert_same_batch(g, w)
    assert "enable_cpu_affinity() had no worker" in state.device.num_workers
    assert "enable_multithreading() had no worker" in state.device.num_workers
    path.close()
    assert not {"enable_cpu_affinity", "enable_multithreading"} & set(loader.__dict__)
    with pytest.raises(ValueError, match="at least one"):   # PyG's own again, 0 workers
        with loader.enable_cpu_affinity():
            pass


@pytest.mark.parametrize("features", ["auto", "host"])
def test_numpy_attributes_are_gathered_as_pyg_gathers_them(tmp_path, features):
    """PyG's ``test_memmap_neighbor_loader``: ``data.x`` a numpy memmap; batches carry its
    rows as a tensor (PyG's ``index_select``), never the whole array."""
    import numpy as np

    data, twin_data = _graph(300, seed=4), _graph(300, seed=4)
    for d in (data, twin_data):
        memmap = np.memmap(tmp_path / f"x{id(d)}.npy", dtype=np.float32, mode="w+",
                           shape=tuple(d.x.shape))
        memmap[:] = d.x.numpy()
        d.x = memmap
        d.weight = np.arange(d.edge_index.size(1), dtype=np.float64)   # edge-level
    _, path, loader, state = _served(DataPathConfig(mode="device", features=features),
                                     data=data)
    assert state.device.served
    plain = _loader(twin_data)
    got, want = _seam_epoch(path, loader, state), _plain_epoch(plain, 0)
    for g, w in zip(got, want):
        assert isinstance(g.x, torch.Tensor) and g.x.size(0) == g.n_id.numel()
        assert torch.equal(g.weight, torch.from_numpy(data.weight)[g.e_id])
        assert_same_batch(g, w)


def test_worker_processes_never_share_one_sampling_generator():
    """Where workers sample (the structure stays on the host; the user's ``num_workers``
    kept), each worker draws from torch's RNG as PyG seeds it per worker: a generator set on
    the sampler would be forked into every worker in the same state, and batch i of worker 0
    would draw the same numbers as batch i of worker 1. Here every seed has 12 in-neighbours
    and a fanout of 3: with shared draws, batches 2j and 2j+1 (workers 0 and 1) would pick
    the same 3 places of their seeds' CSC segments (by chance: 1 in 220 per pair)."""
    from torch_geometric.data import Data

    hubs = torch.arange(16, 28)
    seeds = torch.arange(16)
    edge_index = torch.stack([hubs.repeat(16), seeds.repeat_interleave(12)])
    data = Data(x=torch.randn(28, 2), edge_index=edge_index, num_nodes=28)
    config = DataPathConfig(mode="device", budget_bytes=16)       # structure on the host
    ctx = _ctx(config)
    path = DevicePath(ctx, config, None)
    loader = NeighborLoader(data, num_neighbors=[3], input_nodes=seeds, batch_size=1,
                            num_workers=2, neighbor_sampler=FastNeighborSampler(
                                data, num_neighbors=[3]))
    state = _state()
    state.user_num_workers = 2
    path.adopt(loader, state)
    assert state.device.served and not state.device.samples_on_device
    colptr, row = loader.node_sampler.colptr, loader.node_sampler.row

    def positions(batch):   # which places of its seed's CSC segment the draw picked
        seed = int(batch.n_id[0])
        segment = row[colptr[seed]:colptr[seed + 1]].tolist()
        return frozenset(segment.index(v) for v in batch.n_id[1:].tolist())

    for _ in range(3):                        # epochs 1 and 2 fork workers after epoch 0
        picked = [positions(b) for b in _seam_epoch(path, loader, state)]
        assert len(picked) == 16 and all(len(p) == 3 for p in picked)
        same = sum(picked[2 * j] == picked[2 * j + 1] for j in range(8))
        assert same < 4, f"workers drew alike in {same} of 8 pairs"


def test_resident_copies_follow_in_place_writes():
    from gnnorch.device.gather import ResidentTensors

    resident, x = ResidentTensors(), torch.arange(6.0)
    cpu = torch.device("cpu")
    assert resident.on_device(x, cpu) is x and resident.has_on_device(x, cpu)
    x[:2] = -1.0                                       # a write through a view
    assert not resident.has_on_device(x, cpu)
    resident.on_device(x, cpu)
    assert resident.has_on_device(x, cpu)


def test_resident_copies_die_with_their_source():
    """A tensor the user replaced and dropped (``data.x = augment(x0)`` at each epoch) frees
    its copy; a live one keeps it."""
    import weakref

    from gnnorch.device.gather import ResidentTensors

    resident, meta = ResidentTensors(), torch.device("meta")
    kept = torch.ones(3)
    copy_of_kept = resident.on_device(kept, meta)        # a real copy (another device)
    assert resident.on_device(kept, meta) is copy_of_kept
    dropped = torch.zeros(4)
    copy_of_dropped = weakref.ref(resident.on_device(dropped, meta))
    gc.collect()
    assert copy_of_dropped() is not None                 # kept while its source lives
    del dropped
    gc.collect()
    assert copy_of_dropped() is None and len(resident._copies) == 1
    same = torch.ones(2)
    assert resident.on_device(same, torch.device("cpu")) is same   # no copy: nothing kept
    assert len(resident._copies) == 2
    del same
    gc.collect()
    assert len(resident._copies) == 1


def _train_losses(batches_of_epoch, epochs=2):
    torch.manual_seed(0)
    model = GraphSAGE(16, 32, 2, 4, dropout=0.3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for epoch in range(epochs):
        model.train()
        for batch in batches_of_epoch(epoch):
            batch = batch.to("cpu")
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def test_same_losses_as_the_plain_path():
    _, path, loader, state = _served(DataPathConfig(mode="device", prefetch=2))
    plain = _loader()

    def plain_epoch(epoch):
        plain.node_sampler.generator = torch.Generator().manual_seed(
            sampling_seed(SEED, 0, 0, epoch))
        return iter(plain)

    want = _train_losses(plain_epoch)
    got = _train_losses(lambda epoch: path.feed(iter(loader), loader, state, True))
    assert got == want and len(got) == 2 * len(loader)


# --------------------------------------------------------------------------- pipeline
def _counting(loader, fail_at=None):
    sampler = loader.node_sampler
    original = sampler.sample_from_nodes
    calls = []

    def sample_from_nodes(inputs, **kwargs):
        calls.append(threading.current_thread().name)
        if fail_at is not None and len(calls) == fail_at:
            raise RuntimeError("sampling failed at batch 3")
        return original(inputs, **kwargs)

    sampler.sample_from_nodes = sample_from_nodes
    return calls


def test_back_pressure_and_threads():
    _, path, loader, state = _served(DataPathConfig(mode="device", prefetch=2), batch_size=8)
    calls = _counting(loader)
    it = path.feed(iter(loader), loader, state, True)
    next(it)
    time.sleep(0.3)
    # batch 0 drawn in the trainer thread, then at most depth queued + one in the producer
    assert 2 <= len(calls) <= 1 + 2 + 1
    assert calls[0] == threading.current_thread().name
    assert set(calls[1:]) == {"gnnorch-device-path"}
    del it
    assert _no_pipeline_thread()


def test_break_leaves_no_thread_and_next_epoch_repeats():
    config = DataPathConfig(mode="device", prefetch=3)
    _, path, loader, state = _served(config, batch_size=8)
    for i, _ in enumerate(path.feed(iter(loader), loader, state, True)):
        if i == 2:
            break
    assert _no_pipeline_thread()
    assert state.device.epochs == 1
    second = _device_epoch(path, loader, state)
    # a fresh path whose first epoch ran to the end: the same second epoch
    _, path2, loader2, state2 = _served(DataPathConfig(mode="device", prefetch=0),
                                         batch_size=8)
    _device_epoch(path2, loader2, state2)
    again = _device_epoch(path2, loader2, state2)
    for g, w in zip(second, again):
        assert_same_batch(g, w)


@pytest.mark.parametrize("depth", [0, 3])
def test_epochs_of_one_loader_at_once_each_give_their_own_batches(depth):
    """``zip(loader, loader)``, or an epoch left mid-way but still referenced (a traceback, a
    variable) while the next one runs: as in PyG, both run to their end, and each draws
    from its own epoch's generator only, so each gives the batches of a fixed-seed run."""
    config = DataPathConfig(mode="device", prefetch=depth)
    _, path, loader, state = _served(config, batch_size=8)
    plain = _loader(batch_size=8)
    want = [_plain_epoch(plain, epoch, shuffle_seed=11 + epoch) for epoch in range(2)]
    # an epoch's shuffle draws its permutation from torch's RNG at its first batch (as PyG)
    torch.manual_seed(11)
    first = path.feed(iter(loader), loader, state, True)
    heads = [next(first)]
    torch.manual_seed(12)
    second = path.feed(iter(loader), loader, state, True)
    heads.append(next(second))
    pairs = [tuple(heads)] + list(zip(first, second))
    assert len(pairs) == len(want[0]) == len(loader)
    for (a, b), wa, wb in zip(pairs, want[0], want[1]):
        assert_same_batch(a, wa)
        assert_same_batch(b, wb)
    torch.manual_seed(11)
    kept = path.feed(iter(loader), loader, state, True)     # epoch 2, left after one batch
    head = next(kept)
    third = _device_epoch(path, loader, state, shuffle_seed=13)   # epoch 3 runs meanwhile
    rest = list(kept)                                       # epoch 2 resumes where it was
    assert len(rest) + 1 == len(third) == len(loader)
    for g, w in zip([head] + rest, _plain_epoch(plain, 2, shuffle_seed=11)):
        assert_same_batch(g, w)
    for g, w in zip(third, _plain_epoch(plain, 3, shuffle_seed=13)):
        assert_same_batch(g, w)
    assert _no_pipeline_thread()


def test_errors_arrive_in_place():
    _, path, loader, state = _served(DataPathConfig(mode="device", prefetch=2), batch_size=8)
    _counting(loader, fail_at=3)
    got = []
    with pytest.raises(RuntimeError, match="sampling failed at batch 3"):
        for batch in path.feed(iter(loader), loader, state, True):
            got.append(batch)
    assert len(got) == 2
    assert _no_pipeline_thread()


def test_wait_time_and_prefetch_in_stats():
    ctx, path, loader, state = _served(DataPathConfig(mode="device", prefetch=2), batch_size=8)
    for _ in path.feed(iter(loader), loader, state, True):
        time.sleep(0.002)
    entry = ctx.stats["device"]["loaders"][0]
    assert entry["prefetch"] == 2 and entry["epochs"] == 1
    assert entry["batches"] == len(loader) and entry["wait_s"] >= 0.0


# --------------------------------------------------------------------------- the runtime
def _train_under_runtime(data, epochs=2):
    loader = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                            batch_size=32, shuffle=True)
    torch.manual_seed(0)
    model = GraphSAGE(16, 32, 2, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, ids_on_host = [], True
    for _ in range(epochs):
        for batch in loader:
            batch = batch.to("cpu")
            ids_on_host &= batch.n_id.device.type == "cpu"
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, ids_on_host


def test_runtime_serves_loaders_with_the_cpu_as_the_device():
    runs = {}
    for depth in (0, 3):
        runtime = gnnorch.Runtime(_train_under_runtime, processes=1, seed=SEED,
                                  data_path={"mode": "device", "prefetch": depth})
        runs[depth] = runtime(DATA)
        stats = runtime.last_run.stats[0]["device"]
        assert stats["active"] and stats["loaders"][0]["served"]
        assert stats["loaders"][0]["samples_on_device"]
        assert stats["loaders"][0]["epochs"] == 2
    # sampling ahead does not change what a fixed seed gives
    assert runs[0] == runs[3] and runs[0][1]


def test_two_ranks_each_serve_their_own_shard():
    runtime = gnnorch.Runtime(_train_under_runtime, processes=2, seed=SEED,
                              data_path="device")
    losses, ids_on_host = runtime(DATA)
    assert ids_on_host and all(l == l for l in losses)
    records = [runtime.last_run.stats[r]["device"]["loaders"][0] for r in (0, 1)]
    for record in records:
        assert record["served"] and record["samples_on_device"] and record["epochs"] == 2
    assert records[0]["batches"] == records[1]["batches"] > 0


def _train_with_eval(data, epochs=3):
    """An ordinary PyG training function on the CPU: (losses, test accuracy)."""
    return _train_on(data, None, epochs)[:2]


def test_cache_composes_with_the_device_path():
    runtime = gnnorch.Runtime(_train_with_eval, processes=1, seed=SEED, cache=True,
                              data_path="device")
    losses, accuracy = runtime(DATA)
    assert all(l == l for l in losses) and 0.0 <= accuracy <= 1.0
    stats = runtime.last_run.stats[0]
    train, evaluation = stats["device"]["loaders"]
    # the cache's training loader samples on the device too (its exclusion mask there); the
    # cache reads the host's copy of the CSC
    assert train["served"] and train["samples_on_device"] and train["features"] == "gpu"
    assert "sampled and gathered" in train["reason"]
    assert train["prefetch"] == 2 and train["prefetch_reason"] == ""
    assert evaluation["served"] and evaluation["samples_on_device"]
    assert evaluation["role"] == "eval" and evaluation["prefetch"] == 2
    assert stats["cache"]["status"] in ("active", "off")


def test_the_cache_refreshes_from_the_device_copy_of_the_features():
    """A loader whose features the path put on the device hands the cache a source of that
    copy (the "meta" device stands in for a GPU: a real copy, no computation), current after
    data.x is written in place; features on the host, or a loader not served: no source, and
    the cache reads data.x."""
    meta = torch.device("meta")
    data = _graph(seed=3)
    _, path, loader, _ = _served(DataPathConfig(mode="device"), data=data, device=meta)
    source = path.feature_source(loader)
    first = source()
    assert first.device == meta and first.shape == data.x.shape and source() is first
    data.x[0] = 1.0                                    # written in place: copied again
    assert source() is not first and source().device == meta
    _, path, loader, _ = _served(DataPathConfig(mode="device", features="host"), data=data,
                                 device=meta)
    assert path.feature_source(loader) is None
    assert path.feature_source(_loader(data)) is None   # never adopted
    from gnnorch.cache.admission import LoaderSpec

    assert LoaderSpec.of(_loader(data)).features() is data.x


def test_cache_loaders_prefetch_with_the_same_losses():
    """A cache training loader drawn ahead: each batch carries the mask it was sampled with,
    nothing is drawn ahead while admission is pending, so prefetch 2 gives exactly the losses
    of prefetch 0 (refreshes on demand: the background thread's timing would vary them); the
    staleness bound holds with the background refresher too (debug: a forward that would use
    a row over the bound raises `StalenessError`)."""
    from gnnorch.cache import CacheConfig

    runs, stats = {}, {}
    for depth, overlap in ((0, "off"), (2, "off"), ("thread", "thread")):
        runtime = gnnorch.Runtime(
            _train_with_eval, processes=1, seed=SEED,
            cache=CacheConfig(staleness=2, hot_ratio=0.2, overlap=overlap,
                              debug=overlap == "thread"),
            data_path={"mode": "device", "prefetch": 2 if depth == "thread" else depth})
        runs[depth] = runtime(DATA)
        stats[depth] = runtime.last_run.stats[0]
    for depth in (0, 2, "thread"):
        cache, train = stats[depth]["cache"], stats[depth]["device"]["loaders"][0]
        assert cache["status"] == "active" and cache["pruned_batches"] > 0
        assert cache["max_staleness_seen"] <= 2 and cache["overlap"] in ("off", "thread")
        assert train["prefetch"] == (2 if depth == "thread" else depth)
        assert train["epochs"] == 3
    assert stats["thread"]["cache"]["overlap"] == "thread"
    assert stats["thread"]["cache"]["background_refreshes"] > 0
    assert stats[0]["cache"]["pruned_batches"] == stats[2]["cache"]["pruned_batches"]
    assert runs[0] == runs[2]


def test_the_background_refresher_is_shown_the_batches_drawn_ahead(monkeypatch):
    """With batches drawn ahead, each background job is given, next first, the store slots of
    the hot rows those batches read at hop L-1: checked against the batches the trainer then
    gets (after step t, entry j is the batch of the forward taken when t + j - 1 steps are
    done), and those batches arrive with their lookup kept for their forward. Without a
    pipeline (prefetch 0) it is given none and falls back to the rows read since written; the
    bound holds either way."""
    from gnnorch.cache import CacheConfig, CacheStatus
    from gnnorch.cache.background import BackgroundRefresh
    from gnnorch.cache.batches import AheadLookups
    from gnnorch.intercept.session import active

    shown: list[tuple[int, list[torch.Tensor] | None]] = []
    after_step = BackgroundRefresh.after_step

    def spy(self, step, degrees, upcoming=None):
        shown.append((step, None if upcoming is None else [u.clone() for u in upcoming]))
        return after_step(self, step, degrees, upcoming)

    monkeypatch.setattr(BackgroundRefresh, "after_step", spy)
    arrived_looked_up = []   # per batch reaching the cache: whether its lookup was kept
    take = AheadLookups.take

    def taken(self, batch):
        lookup = take(self, batch)
        arrived_looked_up.append(lookup is not None)
        return lookup

    monkeypatch.setattr(AheadLookups, "take", taken)

    def train(data, used):
        loader = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                                batch_size=16, shuffle=True)
        torch.manual_seed(0)
        model = GraphSAGE(16, 32, 2, 4)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        steps = 0
        for _ in range(3):
            for batch in loader:
                cache = active().cache.loaders[0]
                if cache.status is CacheStatus.ACTIVE:
                    counts = batch.num_sampled_nodes
                    slots = cache.store.slots_of(batch.n_id[counts[0]:sum(counts[:2])])
                    used[steps] = slots[slots >= 0].sort().values
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                opt.step()
                steps += 1
        return steps

    config = CacheConfig(staleness=2, hot_ratio=0.3, overlap="thread")
    for depth in (2, 0):
        shown.clear()
        arrived_looked_up.clear()
        used: dict[int, torch.Tensor] = {}
        runtime = gnnorch.Runtime(train, processes=1, seed=SEED, cache=config,
                                  data_path={"mode": "device", "prefetch": depth})
        steps = runtime(DATA, used)
        looked_up_ahead = sum(arrived_looked_up)
        stats = runtime.last_run.stats[0]["cache"]
        assert stats["status"] == "active" and stats["max_staleness_seen"] <= 2
        if depth == 0:
            assert all(upcoming is None for _, upcoming in shown)
            assert stats["background_lookahead_jobs"] == looked_up_ahead == 0
            continue
        # a batch looked up while drawn ahead arrives with its lookup kept (BatchInfo takes it)
        assert looked_up_ahead > steps // 2
        # the first step's job comes before the pipeline starts (admission had the first
        # batch drawn on demand); every later one is shown the batches drawn ahead
        assert [upcoming is None for _, upcoming in shown[1:]] == [False] * (len(shown) - 1)
        compared = 0
        for step, upcoming in shown[1:]:
            assert len(upcoming) <= depth
            for j, slots in enumerate(upcoming, start=1):
                if step + j - 1 < steps:
                    assert torch.equal(slots.sort().values, used[step + j - 1])
                    compared += int(slots.numel() > 0)
        assert compared > steps // 2
        assert stats["background_lookahead_jobs"] > steps // 2


def _train_and_keep(data):
    train = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                           batch_size=32, shuffle=True, num_workers=0)
    evaluation = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.test_mask,
                                batch_size=64, num_workers=0)
    for loader in (train, evaluation):
        for _ in loader:
            pass
    return train, evaluation


def test_loaders_kept_after_the_run_are_plain_pyg_loaders():
    """The run's end gives every served loader back (`DevicePath.close`): no instance
    filter_fn, its own filter_per_worker / num_workers, the sampler's CSC where it was, with
    its own generator; it then draws the batches a loader built outside the runtime draws."""
    for config in ({"mode": "device"}, {"mode": "device", "features": "host"}):
        runtime = gnnorch.Runtime(_train_and_keep, processes=1, seed=SEED, data_path=config)
        kept = runtime(DATA)
        assert all(r["served"] for r in runtime.last_run.stats[0]["device"]["loaders"])
        backends = [r["backend"] for r in runtime.last_run.stats[0]["sampler"]["loaders"]]
        for loader, mask, size, shuffle, backend in zip(
                kept, (DATA.train_mask, DATA.test_mask), (32, 64), (True, False), backends):
            plain = NeighborLoader(DATA, num_neighbors=FANOUT, input_nodes=mask,
                                   batch_size=size, shuffle=shuffle, num_workers=0,
                                   neighbor_sampler=FastNeighborSampler(DATA, FANOUT))
            assert "filter_fn" not in loader.__dict__
            assert loader.filter_per_worker == plain.filter_per_worker
            assert loader.num_workers == 0
            sampler = loader.node_sampler
            # given back as sampler="auto" chose it (pyg-lib where installed and faster)
            plain.node_sampler.use_pyg = sampler.use_pyg
            assert sampler.generator is None and sampler.use_pyg == (backend == "pyg-lib")
            assert sampler.colptr.device.type == "cpu" and sampler.row.device.type == "cpu"
            torch.manual_seed(3)
            got = list(loader)
            torch.manual_seed(3)
            want = list(plain)
            assert len(got) == len(want) > 0
            for a, b in zip(got, want):
                assert_same_batch(a, b)
                assert "_exclusion_version" not in a._store.__dict__


class _Stop(Exception):
    pass


def test_every_backend_hands_the_rank_its_training_device(monkeypatch):
    """A CUDA run trains, and its data path serves, on the rank's GPU whatever its group's
    backend: `RankJob.device` reaches `session` from every backend, a bare "cuda" read as the
    rank's current CUDA device (cuda:LOCAL_RANK in a torchrun world, here faked as 2)."""
    from gnnorch.execute import backends, world_run
    from gnnorch.execute import rank as rank_module
    from gnnorch.execute.request import Request
    from gnnorch.launch.config import LaunchConfig
    from gnnorch.launch.context import RankProcess

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    plan, gpu = CorePlan(1, 0, 1), torch.device("cuda", 2)
    job = rank_module.RankJob(RunOptions(), SEED, device="cuda")
    assert job.training_device(RankProcess(0, 1, plan, None)) == gpu     # gloo / one rank
    nccl = RankProcess(0, 1, plan, None, "nccl", torch.device("cuda", 1))
    assert job.training_device(nccl) == torch.device("cuda", 1)
    assert rank_module.RankJob(RunOptions(), SEED).training_device(nccl) == \
        torch.device("cuda", 1)
    assert rank_module.RankJob(RunOptions(), SEED).training_device(
        RankProcess(0, 1, plan, None)) is None

    seen = []

    def run_session(ctx, fn, args, kwargs, hooks=(), comm_device=None, device=None):
        seen.append(device)
        return fn(*args, **kwargs)

    monkeypatch.setattr(rank_module, "run_session", run_session)
    request = Request(len, ("ab",), device="cuda", launch=LaunchConfig(bind=False))
    assert backends.InProcess().run(plan, request)[0] == 2
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29555"}.items():
        monkeypatch.setenv(name, value)
    assert world_run.run_in_world(plan, request)[0] == 2      # ExistingWorld (torchrun)
    assert seen == [gpu, gpu]

    jobs = []

    class Group:   # RankProcesses' ranks run the job they are sent
        def __init__(self, spec):
            pass

        def run(self, watched, fn, args, kwargs):
            jobs.append(watched.job)
            raise _Stop

    monkeypatch.setattr(backends, "RankGroup", Group)
    with pytest.raises(_Stop):
        backends.RankProcesses().run(CorePlan(2, 0, 1), request)
    assert jobs[0].training_device(RankProcess(1, 2, plan, None, "gloo")) == gpu


# --------------------------------------------------------------------------- CUDA
def _sample_counts(device, draws=6000):
    from gnnorch.sampling.uniform import sample_neighbors

    # node 0 has in-neighbours 1..10; fanout 3 without replacement: 120 equally likely subsets
    colptr = torch.tensor([0, 10] + [10] * 10, device=device)
    row = torch.arange(1, 11, device=device)
    seeds = torch.zeros(draws, dtype=torch.long, device=device)
    gen = torch.Generator(device=device).manual_seed(1)
    out = sample_neighbors(colptr, row, seeds, [3], generator=gen)
    src = out.node[out.row].view(draws, 3).sort(dim=1).values.cpu()
    keys = (src[:, 0] * 100 + src[:, 1] * 10 + src[:, 2]).tolist()
    counts = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return counts


@pytest.mark.gpu
def test_cuda_sampling_draws_the_cpu_distribution():
    from scipy.stats import chi2_contingency, chisquare

    cuda, cpu = _sample_counts("cuda"), _sample_counts("cpu")
    assert len(cuda) == len(cpu) == 120
    keys = sorted(cpu)
    assert chisquare([cuda[k] for k in keys]).pvalue > 1e-3          # uniform subsets
    table = [[cuda[k] for k in keys], [cpu[k] for k in keys]]
    assert chi2_contingency(table).pvalue > 1e-3                     # same distribution


@pytest.mark.gpu
def test_cuda_pinned_features_equal_the_host_rows():
    device = torch.device("cuda", torch.cuda.current_device())
    config = DataPathConfig(mode="auto", features="host")
    _, path, loader, state = _served(config, device=device, rewrite=False)
    assert state.device.samples_on_device and state.device.features == "pinned"
    plan = path._served[loader].plan
    assert all(t is DATA[k] for k, t in plan.sources.items())   # no pinned copy of a source
    for batch in path.feed(iter(loader), loader, state, True):
        assert batch.x.is_cuda and batch.edge_index.is_cuda
        assert batch.n_id.device.type == "cpu"
        twin = device_twin(batch.n_id)                         # batch.to(device): no copy
        assert twin is not None and batch.n_id.to(device) is twin
        assert torch.equal(twin.cpu(), batch.n_id)
        assert torch.equal(batch.x.cpu(), DATA.x[batch.n_id])
        assert torch.equal(batch.edge_attr.cpu(), DATA.edge_attr[batch.e_id])
    assert _no_pipeline_thread()


@pytest.mark.gpu
def test_cuda_split_features_equal_the_host_rows():
    device = torch.device("cuda", torch.cuda.current_device())
    config = DataPathConfig(mode="auto", budget_bytes=SPLIT_BUDGET)
    _, path, loader, state = _served(config, device=device, rewrite=False)
    assert state.device.samples_on_device and state.device.features == "split"
    plan = path._served[loader].plan
    assert plan.pin and all(rows.is_cuda for rows in plan.device_rows.values())
    assert {"x", "y", "train_mask"} <= set(plan.device_rows)
    for _ in range(2):   # the second epoch reuses pinned blocks the first one's copies read
        for batch in path.feed(iter(loader), loader, state, True):
            assert batch.x.is_cuda and batch.y.is_cuda and batch.n_id.device.type == "cpu"
            assert torch.equal(batch.x.cpu(), DATA.x[batch.n_id])
            assert torch.equal(batch.y.cpu(), DATA.y[batch.n_id])
            assert torch.equal(batch.train_mask.cpu(), DATA.train_mask[batch.n_id])
            assert torch.equal(batch.edge_attr.cpu(), DATA.edge_attr[batch.e_id])
    rows = state.device.split_rows
    assert rows.device > 0 and rows.host > 0
    assert _no_pipeline_thread()


@pytest.mark.gpu
def test_cuda_split_under_deterministic_algorithms_ranks_on_the_host():
    # the ranking's weighted bincount and float cumsum have no deterministic CUDA kernel
    device = torch.device("cuda", torch.cuda.current_device())
    config = DataPathConfig(mode="auto", budget_bytes=SPLIT_BUDGET)
    torch.use_deterministic_algorithms(True)
    try:
        _, path, loader, state = _served(config, device=device, rewrite=False)
        assert state.device.features == "split" and state.device.ranking_on == "cpu"
        for batch in path.feed(iter(loader), loader, state, True):
            assert torch.equal(batch.x.cpu(), DATA.x[batch.n_id])
    finally:
        torch.use_deterministic_algorithms(False)
    assert _no_pipeline_thread()


@pytest.mark.gpu
def test_cuda_losses_equal_the_plain_path():
    device = torch.device("cuda", torch.cuda.current_device())
    # structure on the host (same CPU generator as the plain path), features on the GPU:
    # a budget that holds the features (~38 KB) but not the CSC (~68 KB)
    data = power_law_graph(num_nodes=500, avg_degree=8.0, num_features=16, num_classes=4)
    features = sum(data[k].numel() * data[k].element_size()
                   for k in ("x", "y", "train_mask", "val_mask", "test_mask"))
    config = DataPathConfig(mode="auto", budget_bytes=features + 1024)
    _, path, loader, state = _served(config, data=data, device=device, rewrite=False)
    assert not state.device.samples_on_device and state.device.features == "gpu"
    plain = _loader(data)

    def run(epoch_batches):
        torch.manual_seed(0)
        model = GraphSAGE(16, 32, 2, 4).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses = []
        for epoch in range(2):
            for batch in epoch_batches(epoch):
                batch = batch.to(device)
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    def plain_epoch(epoch):
        plain.node_sampler.generator = torch.Generator().manual_seed(
            sampling_seed(SEED, 0, 0, epoch))
        return iter(plain)

    want = run(plain_epoch)
    got = run(lambda epoch: path.feed(iter(loader), loader, state, True))
    assert len(got) == len(want)
    assert torch.allclose(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_cuda_device_copies_follow_writes_to_the_users_data():
    device = torch.device("cuda", torch.cuda.current_device())
    data = _graph(300, seed=5)
    _, path, loader, state = _served(DataPathConfig(mode="auto"), data=data, device=device,
                                     rewrite=False)
    assert state.device.features == "gpu"
    _seam_epoch(path, loader, state)
    _change(data)
    for batch in _seam_epoch(path, loader, state):
        assert batch.x.is_cuda and torch.equal(batch.x.cpu(), data.x[batch.n_id])
        assert torch.equal(batch.y.cpu(), data.y[batch.n_id]) and "edge_attr" not in batch
    assert state.device.replans == 1


@pytest.mark.gpu
def test_cuda_features_host_leave_x_pinned_for_the_host_transform():
    device = torch.device("cuda", torch.cuda.current_device())
    # without prefetching (x's copy would be on the trainer's stream anyway), x waits in
    # pinned rows for DAHA's host transform; with it, x is copied on the side stream
    config = DataPathConfig(mode="auto", features="host", prefetch=0)
    _, path, loader, state = _served(config, device=device)      # rewrites on: DAHA may run
    assert state.device.deferred == ("x",)
    for batch in path.feed(iter(loader), loader, state, True):
        assert batch.x.device.type == "cpu" and batch.x.is_pinned()
        assert batch.y.is_cuda and batch.edge_index.is_cuda
        assert torch.equal(batch.x, DATA.x[batch.n_id])
    _, path, loader, state = _served(DataPathConfig(mode="auto", features="host"),
                                     device=device)
    assert state.device.deferred == ()
    for batch in path.feed(iter(loader), loader, state, True):
        assert batch.x.is_cuda and torch.equal(batch.x.cpu(), DATA.x[batch.n_id])


@pytest.mark.gpu
def test_cuda_split_ranking_falls_back_to_the_host(monkeypatch):
    from gnnorch.intercept import device_decisions

    device = torch.device("cuda", torch.cuda.current_device())
    config = DataPathConfig(mode="auto", budget_bytes=SPLIT_BUDGET)
    _, path, loader, state = _served(config, device=device, rewrite=False)
    assert state.device.features == "split" and state.device.ranking_on == str(device)
    # out of memory while ranking on the GPU (another process took the room): the host ranks
    original = device_decisions._row_ranking

    def out_of_memory(loader, sampler, colptr, row):
        if colptr.is_cuda:
            raise torch.OutOfMemoryError("CUDA out of memory (a test)")
        return original(loader, sampler, colptr, row)

    monkeypatch.setattr(device_decisions, "_row_ranking", out_of_memory)
    _, path, loader, state = _served(config, device=device, rewrite=False)
    assert state.device.features == "split"
    assert state.device.ranking_on == f"cpu (out of memory on {device})"
    for batch in path.feed(iter(loader), loader, state, True):
        assert torch.equal(batch.x.cpu(), DATA.x[batch.n_id])
    assert _no_pipeline_thread()


@pytest.mark.gpu
def test_cuda_split_leaves_x_pinned_for_the_host_transform():
    # a split with rewrites on and no prefetching: x is deferred (DAHA's host transform
    # reads its pinned rows) and only the other node tensors are split
    device = torch.device("cuda", torch.cuda.current_device())
    config = DataPathConfig(mode="auto", budget_bytes=SPLIT_BUDGET, prefetch=0)
    _, path, loader, state = _served(config, device=device)      # rewrites on
    assert state.device.deferred == ("x",) and state.device.features == "split"
    plan = path._served[loader].plan
    assert "x" not in plan.device_rows and {"y", "train_mask"} <= set(plan.device_rows)
    for batch in path.feed(iter(loader), loader, state, True):
        assert batch.x.device.type == "cpu" and batch.x.is_pinned()
        assert torch.equal(batch.x, DATA.x[batch.n_id])
        assert batch.y.is_cuda and torch.equal(batch.y.cpu(), DATA.y[batch.n_id])
        assert torch.equal(batch.edge_attr.cpu(), DATA.edge_attr[batch.e_id])
    assert _no_pipeline_thread()


@pytest.mark.gpu
def test_cuda_loaders_kept_after_the_run_hold_no_device_tensor():
    """After a CUDA run (its CSC sampled on the GPU), a loader the user kept has its sampler
    back on the host and builds its batches as PyG does: every tensor on the host."""
    runtime = gnnorch.Runtime(_train_and_keep, processes=1, seed=SEED, device="cuda")
    train, evaluation = runtime(DATA)
    records = runtime.last_run.stats[0]["device"]["loaders"]
    assert records[0]["served"] and records[0]["samples_on_device"]
    for loader in (train, evaluation):
        sampler = loader.node_sampler
        assert "filter_fn" not in loader.__dict__ and sampler.generator is None
        assert not sampler.colptr.is_cuda and not sampler.row.is_cuda
        batch = next(iter(loader))
        values = batch.to_dict().values()
        assert not any(isinstance(v, torch.Tensor) and v.is_cuda for v in values)


# --------------------------------------------------------------------------- found late
def test_device_found_at_first_forward_serves_from_the_next_epoch():
    """mode="auto" on a CPU run: nothing served; once the model is found on a device
    (`model_found_on`, here the CPU standing in for CUDA through the internal flag), a loader
    built before is served from its next epoch, with the same batches as the plain path."""
    config = DataPathConfig(mode="auto")
    ctx, path, loader, state = _served(config)
    assert not state.device.served and path._watch is None   # no GPU visible: no watch
    path.model_found_on(torch.device("cpu"))                   # a CPU model: nothing changes
    assert path.device is None and not path._late
    path.device, path._late = torch.device("cpu"), True        # as model_found_on(cuda) sets
    path.epoch_start(loader, state)
    assert state.device.served and state.device.samples_on_device
    assert "from its epoch 0 (0-based) on" in state.device.reason
    got = _device_epoch(path, loader, state)
    path.close()
    want = _plain_epoch(_loader(), 0)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert_same_batch(a, b)


def test_first_model_watch_reports_cuda_parameters_once(monkeypatch):
    """The watch passes over modules without MessagePassing, reports the first GNN's
    parameter device when it is CUDA, and removes itself at that forward whatever it found."""
    from gnnorch.intercept.model_watch import FirstModelWatch

    found = []
    watch = FirstModelWatch(found.append)
    try:
        torch.nn.Linear(2, 2)(torch.randn(1, 2))
        assert watch.watching and not found
        model = GraphSAGE(4, 8, num_layers=1)
        model(torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]]))
        assert not watch.watching and not found               # CPU parameters: nothing found
    finally:
        watch.remove()
    watch = FirstModelWatch(found.append)
    try:
        fake = torch.device("cuda", 0)
        monkeypatch.setattr(torch.nn.Module, "parameters",
                            lambda self, recurse=True: iter([types.SimpleNamespace(device=fake)]))
        watch._pre(GraphSAGE(4, 8, num_layers=1), ())
        assert found == [fake] and not watch.watching
    finally:
        watch.remove()


def test_auto_path_watches_only_when_a_gpu_is_visible(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _, path, _, _ = _served(DataPathConfig(mode="auto"))
    try:
        assert path._watch is not None and path._watch.watching
    finally:
        path.close()
    assert not path._watch.watching
    _, path, _, _ = _served(DataPathConfig(mode="host"))
    assert path._watch is None



def test_loaders_of_one_graph_share_one_device_structure():
    """Two served loaders over the same data: one CSC on the device (the second loader's
    sampler takes the first's), counted once in the bytes put on the device."""
    config = DataPathConfig(mode="device")
    ctx = _ctx(config)
    path = DevicePath(ctx, config, None)
    first, second = _loader(), _loader()
    states = [_state(), _state("eval")]
    path.adopt(first, states[0])
    path.adopt(second, states[1])
    a, b = first.node_sampler, second.node_sampler
    assert a.colptr is b.colptr and a.row is b.row and a.perm is b.perm
    structure = states[0].device.placement.structure_bytes
    assert states[0].device.bytes_on_device >= structure
    assert states[1].device.bytes_on_device < structure
    got = _device_epoch(path, second, states[1])
    path.close()
    want = _plain_epoch(_loader(), 0, key=1)
    assert len(got) == len(want)
    for x, y in zip(got, want):
        assert_same_batch(x, y)


def _train_on(data, device, epochs=3):
    """A PyG training function as its user writes it, on `device` (None: the CPU, no
    ``batch.to``): (losses, test accuracy, training batches whose ``n_id`` the user's
    ``batch.to(device)`` copied instead of taking its device twin)."""
    loader = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                            batch_size=32, shuffle=True)
    evaluation = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.test_mask,
                                batch_size=64)
    torch.manual_seed(0)
    model = GraphSAGE(16, 32, 2, 4).to(device or "cpu")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, ids_copied = [], 0
    for _ in range(epochs):
        model.train()
        for batch in loader:
            if device is not None:
                n_id = batch.n_id
                batch = batch.to(device)
                ids_copied += device_twin(n_id) is not batch.n_id
                assert torch.equal(batch.n_id.cpu(), n_id)
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in evaluation:
            batch = batch.to(device) if device is not None else batch
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
    return losses, correct / int(data.test_mask.sum()), ids_copied


@pytest.mark.gpu
@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("features", ["auto", "host"])
def test_cuda_runtime_trains_with_the_path_and_the_cache(cache, features):
    """A whole CUDA run through the runtime: every training batch's ids were twinned (the
    user's batch.to copied none), losses finite, accuracy that of the CPU run within noise, the
    cache active within its staleness bound."""
    from gnnorch.cache import CacheConfig

    config = CacheConfig(staleness=2, hot_ratio=0.2, debug=True) if cache else False
    runtime = gnnorch.Runtime(_train_on, processes=1, seed=SEED, device="cuda", cache=config,
                              data_path={"features": features})
    losses, accuracy, ids_copied = runtime(DATA, "cuda")
    stats = runtime.last_run.stats[0]
    train = stats["device"]["loaders"][0]
    assert train["served"] and all(l == l for l in losses) and ids_copied == 0
    assert train["features"] == ("pinned" if features == "host" else "gpu")
    plain = gnnorch.Runtime(_train_on, processes=1, seed=SEED, device="cpu", cache=config)
    _, cpu_accuracy, _ = plain(DATA, "cpu")
    assert abs(accuracy - cpu_accuracy) <= 0.15
    if cache:
        assert stats["cache"]["status"] == "active"
        assert stats["cache"]["max_staleness_seen"] <= 2
        if stats["cache"]["overlap"] == "thread":   # jobs draw where the loader samples
            assert stats["cache"]["refresh_structure"].startswith("device (cuda")


@pytest.mark.gpu
def test_cuda_consumer_waits_for_a_slow_side_stream():
    """The side stream is held up (a GPU spin before each copy): batches still arrive complete
    and in order, so the trainer's stream really waits on each batch's event."""
    from torch_geometric.data import Data

    from gnnorch.device.pipeline import Prefetcher
    from gnnorch.device.transfer import DeviceTransfer

    move = DeviceTransfer("cuda")
    batches = [Data(x=torch.full((4096, 64), float(i)), y=torch.arange(4096) + i)
               for i in range(6)]
    expected = [b.clone() for b in batches]

    def slow(batch):
        with move.producing():
            torch.cuda._sleep(50_000_000)   # ~ tens of ms of GPU time on the side stream
        return move.transfer(batch)

    out = list(Prefetcher(batches, transfer=slow, ready=move.ready, depth=2,
                          produce_in=move.producing))
    for got, want in zip(out, expected):
        total = got.x.sum() + got.y.sum()   # on the trainer's (default) stream
        assert float(total) == float(want.x.sum() + want.y.sum())
