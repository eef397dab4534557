"""The device data path for HeteroData loaders (issue 21), with the CPU as the device: placement
of every edge type's CSC and every store's attributes, sampling there with the path's own
generator, `HeteroGatherPlan`'s batches equal to PyG's ``filter_fn`` (node and link loaders,
negatives, edge attributes, types the sampler does not reach), losses equal to the plain
path's, the loader given back whole. CUDA checks are marked `gpu`."""
from __future__ import annotations

import copy
import types

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.typing as pyg_typing
from torch_geometric.data import HeteroData
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
from torch_geometric.nn import SAGEConv, to_hetero
from torch_geometric.sampler import NegativeSampling

import gnnorch
from gnnorch.device.config import DataPathConfig
from gnnorch.device.twin import device_twin
from gnnorch.intercept.device_path import DevicePath
from gnnorch.launch.context import RankContext
from gnnorch.launch.plan import CorePlan
from gnnorch.run_options import RunOptions
from gnnorch.sampling.hetero_neighbor import FastHeteroNeighborSampler

from helpers import WRITES, plain_epoch, small_hetero_graph

SEED = 7
FANOUT = [3, 2]
NEGATIVES = {"binary": dict(neg_sampling_ratio=1.0),
             "triplet": dict(neg_sampling=NegativeSampling("triplet", 2)),
             "none": {}}

pytestmark = pytest.mark.usefixtures("one_thread")


DATA = small_hetero_graph()
TRAIN_DATA = small_hetero_graph(topic=False)


def _ctx(config):
    return RankContext(rank=0, world_size=1, plan=CorePlan(1, 0, 1), cores=None, seed=SEED,
                       options=RunOptions(data_path=config))


def _state(kind="node"):
    return types.SimpleNamespace(role="train", index=0, user_num_workers=0, partition=None,
                                 device=None, kind=kind)


#: sampler options a served HeteroData loader is checked with (PyG's NeighborLoader knobs);
#: disjoint and induced go to PyG's own sampling (the fast sampler's fallback)
SAMPLER_OPTIONS = ("replace", "subgraph_type", "disjoint", "directed")
KNOBS = {
    "replace": dict(replace=True),
    "bidirectional": dict(subgraph_type="bidirectional"),
    "every_in_edge": dict(num_neighbors=[-1, -1]),
    "batch_size_1": dict(batch_size=1),
    "to_undirected": dict(transform="ToUndirected"),
    "filter_per_worker": dict(filter_per_worker=True),
    "disjoint": dict(disjoint=True),
    "induced": dict(subgraph_type="induced"),
}


def _node_loader(data=DATA, batch_size=16, num_neighbors=FANOUT, **kwargs):
    import torch_geometric.transforms as T

    options = {k: kwargs[k] for k in SAMPLER_OPTIONS if k in kwargs}
    if isinstance(kwargs.get("transform"), str):
        kwargs["transform"] = getattr(T, kwargs["transform"])()
    return NeighborLoader(data, num_neighbors=num_neighbors,
                          input_nodes=("paper", data["paper"].train_mask),
                          batch_size=batch_size, shuffle=True, num_workers=0,
                          neighbor_sampler=FastHeteroNeighborSampler(data, num_neighbors,
                                                                     **options), **kwargs)


def _link_loader(negatives, data=DATA, batch_size=32):
    return LinkNeighborLoader(data, num_neighbors=FANOUT, edge_label_index=WRITES,
                              batch_size=batch_size, shuffle=True, num_workers=0,
                              neighbor_sampler=FastHeteroNeighborSampler(data, FANOUT),
                              **NEGATIVES[negatives])


def _served(config, loader, kind="node"):
    ctx = _ctx(config)
    path, state = DevicePath(ctx, config, None), _state(kind)
    path.adopt(loader, state)
    return ctx, path, state


def _plain_epoch(loader, epoch, shuffle_seed=11):
    return plain_epoch(loader, SEED, epoch, shuffle_seed)


def _device_epoch(path, loader, state, shuffle_seed=11):
    torch.manual_seed(shuffle_seed)
    return list(path.feed(iter(loader), loader, state, True))


def _epochs_match(path, loader, state, plain, epochs=2):
    """`epochs` epochs of the served `loader` give the batches of PyG's own `plain` loader
    drawing from the generators of the path's policy; returns the last epoch's."""
    for epoch in range(epochs):
        want = _plain_epoch(plain, epoch)
        got = _device_epoch(path, loader, state)
        assert len(got) == len(want) == len(loader)
        for g, w in zip(got, want):
            assert_same_hetero_batch(g, w)
    return got


def assert_same_hetero_batch(got, want):
    """Two HeteroData batches: the same stores in the same order, each with the same fields in
    the same key order, equal values and dtypes (tensors compared on the host)."""
    assert got.node_types == want.node_types and got.edge_types == want.edge_types
    for key in [*want.node_types, *want.edge_types]:
        a, b = got[key], want[key]
        assert list(a.keys()) == list(b.keys()), key
        for name in b.keys():
            x, y = a[name], b[name]
            if isinstance(y, torch.Tensor):
                assert isinstance(x, torch.Tensor) and x.dtype == y.dtype, (key, name)
                assert torch.equal(x.cpu(), y.cpu()), (key, name)
            else:
                assert x == y, (key, name)


# --------------------------------------------------------------------------- decisions
def test_hetero_loaders_are_sampled_and_gathered_on_the_device():
    loader = _node_loader()
    ctx, path, state = _served(DataPathConfig(mode="device"), loader)
    record = state.device
    assert record.served and record.samples_on_device and record.features == "gpu"
    assert "sampled and gathered" in record.reason and loader.num_workers == 0
    entry = ctx.stats["device"]["loaders"][0]
    sampler = loader.node_sampler
    # the structure's bytes are every edge type's CSC and edge permutation
    assert entry["placement"]["structure_bytes"] == sampler.structure_bytes > 0
    assert entry["placement"]["structure"] == "gpu"


def test_budget_and_features_host_decide_where_hetero_data_lives():
    _, _, state = _served(DataPathConfig(mode="device", budget_bytes=16), _node_loader())
    assert state.device.served and not state.device.samples_on_device
    assert state.device.features == "host" and "exceeds" in state.device.placement.reasons[0]
    _, _, state = _served(DataPathConfig(mode="device", features="host"), _node_loader())
    assert state.device.samples_on_device and state.device.features == "host"


def test_hetero_data_with_adj_t_is_left_to_pyg():
    torch_sparse = pytest.importorskip("torch_sparse")
    data = small_hetero_graph()
    store = data["paper", "cites", "paper"]
    store.adj_t = torch_sparse.SparseTensor(row=store.edge_index[1], col=store.edge_index[0],
                                            sparse_sizes=(80, 80))
    loader = NeighborLoader(data, num_neighbors=FANOUT, input_nodes="paper", batch_size=16)
    _, _, state = _served(DataPathConfig(mode="device"), loader)
    assert not state.device.served and "adj_t" in state.device.reason


def test_learnt_hetero_features_are_left_to_pyg():
    data = small_hetero_graph()
    data["author"].x = torch.nn.Parameter(data["author"].x)
    _, _, state = _served(DataPathConfig(mode="device"), _node_loader(data))
    assert not state.device.served and "author.x" in state.device.reason


# --------------------------------------------------------------------------- same batches
@pytest.mark.parametrize("config", [
    DataPathConfig(mode="device"),
    DataPathConfig(mode="device", prefetch=0),
    DataPathConfig(mode="device", features="host", prefetch=3),
    DataPathConfig(mode="device", budget_bytes=16),            # structure and features host
])
def test_node_batches_equal_pygs_filter_fn(config):
    loader = _node_loader()
    _, path, state = _served(config, loader)
    got = _epochs_match(path, loader, state, _node_loader())
    last = got[-1]
    # what a training loop reads: the user's own n_id, gathered; types never reached: empty
    assert torch.equal(last["paper"].x, DATA["paper"].x[last["paper"].n_id])
    assert torch.equal(last[WRITES].edge_attr, DATA[WRITES].edge_attr[last[WRITES].e_id])
    assert last["topic"].x.shape == (0, 8) and last["topic"].n_id.numel() == 0
    assert last["paper"].input_id.device.type == "cpu"
    assert state.device.epochs == 2 and state.device.batches == 2 * len(loader)


@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_loader_knobs_give_pygs_batches(knob):
    """PyG's NeighborLoader knobs on a served HeteroData loader: the batches PyG's filter_fn
    makes of the same draws (the path's generator for gnnorch's sampler; torch's global RNG,
    in the trainer's thread, where the sampler leaves the draw to PyG)."""
    kwargs = KNOBS[knob]
    if kwargs.get("subgraph_type") == "induced" and not pyg_typing.WITH_TORCH_SPARSE:
        pytest.skip("PyG samples induced heterogeneous subgraphs with torch_sparse only")
    if kwargs.get("disjoint") and not pyg_typing.WITH_PYG_LIB:
        pytest.skip("PyG's disjoint sampling needs pyg-lib")
    loader = _node_loader(**kwargs)
    _, path, state = _served(DataPathConfig(mode="device"), loader)
    fast = loader.node_sampler.fallback_reason is None
    assert state.device.served and state.device.samples_on_device == fast
    _epochs_match(path, loader, state, _node_loader(**kwargs))


@pytest.mark.skipif(not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE),
                    reason="PyG samples a HeteroData with pyg-lib or torch_sparse")
def test_pygs_own_sampler_is_gathered_by_the_path():
    """A loader sampled by PyG's own sampler (``sampler="pyg"``): sampled on the host, drawing
    from torch's global RNG (so in the trainer's thread), its batches built by the path."""
    def loader():
        return NeighborLoader(DATA, num_neighbors=FANOUT, batch_size=16, shuffle=True,
                              input_nodes=("paper", DATA["paper"].train_mask))

    served = loader()
    _, path, state = _served(DataPathConfig(mode="device"), served)
    assert state.device.served and not state.device.samples_on_device
    assert "has no device path" in state.device.placement.reasons[0]
    plain = loader()
    for _ in range(2):
        torch.manual_seed(3)
        want = list(plain)
        got = _device_epoch(path, served, state, shuffle_seed=3)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert_same_hetero_batch(g, w)
    assert state.device.prefetch == 0 and "global RNG" in state.device.prefetch_reason


@pytest.mark.parametrize("negatives", sorted(NEGATIVES))
def test_link_batches_equal_pygs_filter_fn(negatives):
    loader = _link_loader(negatives)
    _, path, state = _served(DataPathConfig(mode="device", prefetch=2), loader, kind="link")
    assert state.device.served and state.device.samples_on_device
    plain = _link_loader(negatives)
    for epoch in range(2):
        want = _plain_epoch(plain, epoch)
        got = _device_epoch(path, loader, state)
        assert len(got) == len(want) == -(-DATA[WRITES].edge_index.size(1) // 32)
        for g, w in zip(got, want):
            assert_same_hetero_batch(g, w)
    last = got[-1]
    if negatives == "triplet":
        assert "edge_label_index" not in last[WRITES]
        assert last["paper"].dst_neg_index.shape[1] == 2
    else:   # positives are edges of the graph, in local indices of their types
        pos = last[WRITES].edge_label_index
        pos = pos if negatives == "none" else pos[:, last[WRITES].edge_label == 1]
        src, dst = last["author"].n_id[pos[0]], last["paper"].n_id[pos[1]]
        edges = set(map(tuple, DATA[WRITES].edge_index.t().tolist()))
        assert set(zip(src.tolist(), dst.tolist())) <= edges


def test_a_graph_without_edges_is_served():
    """A HeteroData of one node type and no edge type (PyG's
    ``test_hetero_link_neighbor_loader_no_edges``): batches of the seeds alone."""
    data = HeteroData(paper=dict(num_nodes=100))
    label = torch.randint(0, 100, (2, 100), generator=torch.Generator().manual_seed(0))
    loader = LinkNeighborLoader(data, num_neighbors=[], batch_size=20,
                                edge_label_index=(("paper", "paper"), label),
                                neighbor_sampler=FastHeteroNeighborSampler(data, []))
    _, path, state = _served(DataPathConfig(mode="device"), loader, kind="link")
    assert state.device.served
    batches = _device_epoch(path, loader, state)
    assert len(batches) == 5
    for batch in batches:
        store = batch["paper", "to", "paper"]
        assert store.input_id.numel() == 20 and store.edge_label_index.size(1) == 20
        assert batch["paper"].num_nodes == store.edge_label_index.unique().numel()


def test_changes_to_the_loaders_data_are_seen_from_the_next_epoch():
    """PyG's filter_fn reads ``loader.data`` at each batch: an attribute deleted, added or
    written in place after the loader was built is in its batches from the next epoch."""
    data = small_hetero_graph()
    loader = _node_loader(data)
    _, path, state = _served(DataPathConfig(mode="device"), loader)
    first = _device_epoch(path, loader, state)
    assert "y" in first[0]["paper"]
    del data["paper"].y
    data["author"].z = torch.arange(data["author"].num_nodes)
    data["paper"].x.mul_(0)
    path.epoch_start(loader, state)
    batch = _device_epoch(path, loader, state)[0]
    assert "y" not in batch["paper"] and not batch["paper"].x.any()
    assert torch.equal(batch["author"].z, batch["author"].n_id)
    assert state.device.served and state.device.replans == 1


def test_loaders_of_one_hetero_graph_share_one_device_structure():
    config = DataPathConfig(mode="device")
    ctx = _ctx(config)
    path = DevicePath(ctx, config, None)
    first, second = _node_loader(), _node_loader(batch_size=40)
    for loader in (first, second):
        path.adopt(loader, _state())
    a, b = first.node_sampler, second.node_sampler
    assert all(a.colptr_dict[k] is b.colptr_dict[k] for k in a.colptr_dict)
    assert all(a.row_dict[k] is b.row_dict[k] for k in a.row_dict)
    assert path.loaders[1].bytes_on_device < path.loaders[0].bytes_on_device
    # a copy of the data with one edge type's edges replaced (same shape) is another graph
    other = copy.copy(DATA)
    cites = ("paper", "cites", "paper")
    other[cites].edge_index = DATA[cites].edge_index.flip(0).clone()
    third = _node_loader(other)
    path.adopt(third, _state())
    c = third.node_sampler
    rel = c.to_rel_type
    assert c.colptr_dict[rel[WRITES]] is not a.colptr_dict[rel[WRITES]]
    torch.testing.assert_close(c.colptr_dict[rel[cites]],
                               FastHeteroNeighborSampler(other, FANOUT).colptr_dict[rel[cites]])


# --------------------------------------------------------------------------- training
def _model(data):
    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 16)
            self.conv2 = SAGEConv((-1, -1), 3)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    return to_hetero(GNN(), data.metadata(), aggr="sum")


def _fit(data, first, batches_of_epoch, epochs=2):
    """A to_hetero model trained on paper labels: its lazy layers take their shapes from
    `first` (a batch), then `epochs` epochs of `batches_of_epoch(epoch)`. Returns (losses,
    whether every batch's ids stayed on the host)."""
    torch.manual_seed(0)
    model = _model(data)
    with torch.no_grad():
        model(first.x_dict, first.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, ids_on_host = [], True
    for epoch in range(epochs):
        for batch in batches_of_epoch(epoch):
            batch = batch.to("cpu")
            ids_on_host &= batch["paper"].n_id.device.type == "cpu"
            opt.zero_grad()
            size = batch["paper"].batch_size
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
            loss = F.cross_entropy(out, batch["paper"].y[:size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, ids_on_host


def _train_hetero(data, epochs=2):
    """An ordinary to_hetero training function (the lazy layers' first batch from its loader)."""
    loader = NeighborLoader(data, num_neighbors=FANOUT, batch_size=16, shuffle=True,
                            input_nodes=("paper", data["paper"].train_mask))
    torch.manual_seed(0)
    return _fit(data, next(iter(loader)), lambda epoch: loader, epochs)


def test_runtime_serves_hetero_loaders_whatever_the_prefetch():
    runs = {}
    for depth in (0, 3):
        runtime = gnnorch.Runtime(_train_hetero, processes=1, seed=SEED,
                                  data_path={"mode": "device", "prefetch": depth})
        runs[depth] = runtime(TRAIN_DATA)
        record = runtime.last_run.stats[0]["device"]["loaders"][0]
        # (the lazy layers' first batch is an epoch of its own)
        assert record["served"] and record["samples_on_device"] and record["epochs"] == 3
        assert runtime.last_run.stats[0]["sampler"]["loaders"][0]["backend"] == "gnnorch"
    # sampling ahead does not change what a fixed seed gives
    assert runs[0] == runs[3] and runs[0][1] and len(runs[0][0]) > 0


def test_two_ranks_each_serve_their_own_shard():
    runtime = gnnorch.Runtime(_train_hetero, processes=2, seed=SEED, data_path="device")
    losses, ids_on_host = runtime(TRAIN_DATA)
    assert ids_on_host and losses and all(loss == loss for loss in losses)
    records = [runtime.last_run.stats[r]["device"]["loaders"][0] for r in (0, 1)]
    for record in records:
        assert record["served"] and record["samples_on_device"]
    assert records[0]["batches"] == records[1]["batches"] > 0


def test_the_cache_steps_aside_for_hetero_loaders_saying_why():
    runtime = gnnorch.Runtime(_train_hetero, processes=1, seed=SEED, cache=True,
                              data_path="device")
    losses, _ = runtime(TRAIN_DATA)
    stats = runtime.last_run.stats[0]
    assert losses and stats["device"]["loaders"][0]["samples_on_device"]
    assert stats["cache"]["status"] == "off" and "HeteroData" in stats["cache"]["reason"]


def test_same_losses_as_the_plain_path():
    loader = _node_loader(TRAIN_DATA)
    _, path, state = _served(DataPathConfig(mode="device", prefetch=2), loader)
    plain = _node_loader(TRAIN_DATA)

    first = next(iter(_node_loader(TRAIN_DATA)))
    want, _ = _fit(TRAIN_DATA, first, lambda epoch: _plain_epoch(plain, epoch))
    got, _ = _fit(TRAIN_DATA, first, lambda epoch: _device_epoch(path, loader, state))
    assert got == want and len(got) == 2 * len(loader)


def _train_and_keep(data):
    loader = NeighborLoader(data, num_neighbors=FANOUT, batch_size=16, shuffle=True,
                            input_nodes=("paper", data["paper"].train_mask), num_workers=0)
    for _ in loader:
        pass
    return loader


def test_hetero_loaders_kept_after_the_run_are_plain_pyg_loaders():
    runtime = gnnorch.Runtime(_train_and_keep, processes=1, seed=SEED, data_path="device")
    kept = runtime(DATA)
    assert runtime.last_run.stats[0]["device"]["loaders"][0]["served"]
    assert "filter_fn" not in kept.__dict__
    sampler = kept.node_sampler
    assert sampler.generator is None and sampler.structure_device.type == "cpu"
    plain = NeighborLoader(DATA, num_neighbors=FANOUT, batch_size=16, shuffle=True,
                           input_nodes=("paper", DATA["paper"].train_mask), num_workers=0,
                           neighbor_sampler=FastHeteroNeighborSampler(DATA, FANOUT))
    torch.manual_seed(3)
    got = list(kept)
    torch.manual_seed(3)
    want = list(plain)
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert_same_hetero_batch(a, b)


# --------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("features", ["auto", "host"])
def test_cuda_hetero_batches_equal_the_cpu_paths(features):
    """On a GPU, the same batches as the CPU standing in for the device, with the same
    generator seed (the CUDA draw is a different stream of random numbers: the check is on
    what must not depend on it, run with fanouts that take every in-edge)."""
    full = [-1, -1]

    def loader():
        return NeighborLoader(DATA, num_neighbors=full, batch_size=16,
                              input_nodes=("paper", DATA["paper"].train_mask),
                              neighbor_sampler=FastHeteroNeighborSampler(DATA, full))

    got_loader, want_loader = loader(), loader()
    _, path, state = _served(DataPathConfig(mode="device", features=features),
                             got_loader)
    path_cuda = DevicePath(_ctx(DataPathConfig(mode="auto", features=features)),
                           DataPathConfig(mode="auto", features=features),
                           torch.device("cuda"))
    state_cuda = _state()
    path_cuda.adopt(want_loader, state_cuda)
    assert state_cuda.device.samples_on_device
    for g, w in zip(_device_epoch(path, got_loader, state),
                    _device_epoch(path_cuda, want_loader, state_cuda)):
        assert w["paper"].x.device.type == "cuda" and w["paper"].n_id.device.type == "cpu"
        assert device_twin(w["paper"].n_id) is not None
        torch.cuda.synchronize()
        assert_same_hetero_batch(w, g)
