"""Loaders the device data path leaves to PyG (here a NeighborLoader subclass with its own
``filter_fn``, over a HeteroData): their batches copied to the device by the path, drawn ahead in
the pipeline's thread where that changes nothing a fixed seed gives (issue 21). Tested with the CPU
as the device: the same batches and losses as the run without the path, worker errors in place, and
the decisions that keep draws in the trainer's thread (persistent workers, in-process sampling,
lazy index samplers, user code in the trainer's process), served loaders included. CUDA checks are
marked `gpu`."""
from __future__ import annotations

import functools
import types

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Sampler
from torch_geometric.data import HeteroData
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import HeteroConv, SAGEConv

import gnnorch
from gnnorch.device.transfer import DeviceTransfer, _each_tensor
from gnnorch.device.twin import device_twin
from gnnorch.intercept.draw_ahead import why_not_drawn_ahead

SEED = 5
FANOUT = [4, 3]


def _hetero(num_papers=300, num_authors=200, seed=0) -> HeteroData:
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(num_papers, 8, generator=gen)
    data["paper"].y = torch.randint(0, 3, (num_papers,), generator=gen)
    data["paper"].train_mask = torch.rand(num_papers, generator=gen) < 0.5
    data["author"].x = torch.randn(num_authors, 8, generator=gen)
    cites = torch.randint(0, num_papers, (2, 1500), generator=gen)
    writes = torch.stack([torch.randint(0, num_authors, (900,), generator=gen),
                          torch.randint(0, num_papers, (900,), generator=gen)])
    data["paper", "cites", "paper"].edge_index = cites
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    return data


DATA = _hetero()


class _HeteroSAGE(torch.nn.Module):
    def __init__(self, hidden=16, classes=3):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            HeteroConv({et: SAGEConv((-1, -1), hidden) for et in DATA.edge_types})
            for _ in range(2))
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x_dict, edge_index_dict):
        for conv in self.convs:
            x_dict = {k: v.relu() for k, v in conv(x_dict, edge_index_dict).items()}
        return self.head(x_dict["paper"])


class _OwnFilterLoader(NeighborLoader):
    """A NeighborLoader subclass with a ``filter_fn`` of its own (here PyG's, unchanged): the
    path cannot know what such a class builds, so it leaves its batches to PyG and copies
    them."""

    def filter_fn(self, out):
        return super().filter_fn(out)


def _loader(data, cls=_OwnFilterLoader, **kwargs):
    kwargs.setdefault("num_workers", 2)
    kwargs.setdefault("batch_size", 32)
    return cls(data, num_neighbors=FANOUT, input_nodes=("paper", data["paper"].train_mask),
               shuffle=True, **kwargs)


def _fit(loader, epochs, device="cpu", take=None, keep=None):
    """A plain PyG loop: losses and the seed ids of every batch; `take` batches per epoch
    (the loop left with ``break``), the iterator kept in `keep` when given."""
    torch.manual_seed(0)
    model = _HeteroSAGE().to(device)
    with torch.no_grad():   # lazy layers: one forward over the first batch
        first = next(iter(loader)).to(device)
        model(first.x_dict, first.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, seeds, ids_on_host = [], [], True
    for _ in range(epochs):
        iterator = iter(loader)
        if keep is not None:
            keep.append(iterator)
        for step, batch in enumerate(iterator):
            if take is not None and step == take:
                break
            ids_on_host &= batch["paper"].n_id.device.type == "cpu"
            seeds.append(batch["paper"].n_id[:batch["paper"].batch_size].tolist())
            batch = batch.to(device)
            opt.zero_grad()
            size = batch["paper"].batch_size
            out = model(batch.x_dict, batch.edge_index_dict)[:size]
            loss = F.cross_entropy(out, batch["paper"].y[:size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, seeds, ids_on_host


def _train(data, epochs=2, take=None, keep_iterators=False, **loader_kwargs):
    kept = [] if keep_iterators else None
    return _fit(_loader(data, **loader_kwargs), epochs, take=take, keep=kept)


def _run(data_path, fn=_train, **kwargs):
    runtime = gnnorch.Runtime(fn, processes=1, seed=SEED, data_path=data_path)
    out = runtime(DATA, **kwargs)
    return out, runtime.last_run.stats[0].get("device")


# --------------------------------------------------------------------------- the runtime
def test_pyg_batches_copied_ahead_give_the_same_losses():
    (losses, seeds, on_host), _ = _run("host")
    (ahead_losses, ahead_seeds, ahead_on_host), stats = _run("device")
    assert seeds == ahead_seeds and losses == ahead_losses and ahead_on_host and on_host
    record = stats["loaders"][0]
    assert not record["served"] and "overrides filter_fn" in record["reason"]
    assert record["copied"] and record["prefetch"] == 2 and record["prefetch_reason"] == ""
    epochs = 2 + 1   # the lazy layers' first forward iterated the loader once more
    assert record["epochs"] == epochs and record["batches"] == len(seeds) + 1


def test_prefetch_zero_leaves_pyg_batches_in_the_trainers_thread():
    (losses, _, _), _ = _run("host")
    (same, _, _), stats = _run({"mode": "device", "prefetch": 0})
    assert same == losses
    record = stats["loaders"][0]
    assert record["copied"] and record["prefetch"] == 0
    assert record["prefetch_reason"] == "data_path prefetch is 0"


def test_in_process_sampling_stays_in_the_trainers_thread():
    (losses, _, _), _ = _run("host", num_workers=0)
    (same, _, _), stats = _run("device", num_workers=0)
    assert same == losses
    record = stats["loaders"][0]
    assert record["copied"] and record["prefetch"] == 0
    assert "num_workers=0" in record["prefetch_reason"]


def test_persistent_workers_are_not_drawn_ahead():
    """Persistent workers keep their random state from epoch to epoch, and the lazy layers'
    first forward leaves an epoch after one batch: batches drawn ahead there would still be
    sampled by the workers and change every later epoch. Small batches, so that an epoch has
    many more batches than the workers are given ahead of the loop; each epoch also left
    early with its iterator kept."""
    kwargs = dict(epochs=3, take=6, keep_iterators=True, persistent_workers=True,
                  batch_size=8)
    (losses, seeds, _), _ = _run("host", **kwargs)
    (same, same_seeds, _), stats = _run("device", **kwargs)
    assert same_seeds == seeds and same == losses and len(seeds) == 18
    record = stats["loaders"][0]
    assert record["copied"] and record["prefetch"] == 0
    assert "persistent_workers=True" in record["prefetch_reason"]


def _failing_transform(batch):
    if int(batch["paper"].n_id[0]) % 3 == 0:   # a seed id decides: the same batch each run
        raise ValueError("bad batch from the user's transform")
    return batch


def _train_until_error(data):
    torch.manual_seed(0)
    loader = _loader(data, transform=_failing_transform)
    losses = []
    try:
        for _ in range(3):
            for batch in loader:
                losses.append(int(batch["paper"].n_id[0]))
    except ValueError as exc:
        return losses, str(exc)
    return losses, None


def test_a_worker_error_arrives_at_its_place():
    (before, error), _ = _run("host", fn=_train_until_error)
    (ahead, ahead_error), stats = _run("device", fn=_train_until_error)
    assert error is not None and "bad batch" in error and len(before) >= 1
    assert ahead == before and ahead_error is not None and "bad batch" in ahead_error
    assert stats["loaders"][0]["copied"] and stats["loaders"][0]["prefetch"] == 2


# --------------------------------------------------------------------------- decisions
def _state(kind="node", partition=None):
    return types.SimpleNamespace(kind=kind, partition=partition)


class _LazySampler(Sampler):
    """Draws each index from torch's global RNG as it goes."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for _ in range(self.n):
            yield int(torch.randint(self.n, ()))

    def __len__(self):
        return self.n


def test_decisions_keep_draws_that_could_change_in_the_trainers_thread():
    def why(loader, served=False, **state):
        return why_not_drawn_ahead(loader, _state(**state), 2, served)

    _pyg = functools.partial(_loader, cls=NeighborLoader)

    assert why(_pyg(DATA)) is None
    assert "prefetch is 0" in why_not_drawn_ahead(_pyg(DATA), _state(), 0, False)
    assert "num_workers=0" in why(_pyg(DATA, num_workers=0))
    assert why(_pyg(DATA, num_workers=0), served=True) is None   # its own generator
    assert "persistent_workers" in why(_pyg(DATA, persistent_workers=True))
    assert "persistent_workers" in why(_pyg(DATA, persistent_workers=True), served=True)
    assert "partition" in why(_pyg(DATA), partition=object())
    # index samplers that draw at their first item (taken when the iterator is made) are fine
    from torch_geometric.loader import ImbalancedSampler
    imbalanced = ImbalancedSampler(DATA["paper"].y[DATA["paper"].train_mask])
    loader = NeighborLoader(DATA, num_neighbors=FANOUT, batch_size=32, num_workers=2,
                            input_nodes=("paper", DATA["paper"].train_mask), sampler=imbalanced)
    assert why(loader) is None
    lazy = NeighborLoader(DATA, num_neighbors=FANOUT, batch_size=32, num_workers=2,
                          input_nodes=("paper", DATA["paper"].train_mask),
                          sampler=_LazySampler(int(DATA["paper"].train_mask.sum())))
    assert "sampler (_LazySampler)" in why(lazy)
    assert "sampler (_LazySampler)" in why(lazy, served=True)
    # user code that finishes batches in this process: PyG's with filter_per_worker=False,
    # a served loader's always (its batches are built in the drawing thread)
    assert "transform" in why(_pyg(DATA, filter_per_worker=False, transform=lambda b: b))
    assert why(_pyg(DATA, filter_per_worker=False)) is None
    assert why(_pyg(DATA, transform=lambda b: b)) is None   # run in the workers
    assert "transform" in why(_pyg(DATA, transform=lambda b: b), served=True)


def test_every_tensor_keeps_its_host_values_and_carries_a_device_twin():
    """`DeviceTransfer(twin_all=True)`'s handling of a batch PyG built, with the "meta" device
    standing in for a GPU (a CUDA transfer is the only caller; `gpu` tests run it there):
    every tensor stays on the host with its values, ``.to`` the device returns the twin, and a
    tensor the user writes to before ``.to`` is copied as it is then, not from the stale twin."""
    batch = next(iter(_loader(DATA, num_workers=0)))
    before = {key: value.clone() for key, value in _tensors(batch)}
    batch = _each_tensor(batch, DeviceTransfer("meta", pin=False, twin_all=True).twin_of)
    for key, value in _tensors(batch):
        assert value.device.type == "cpu" and torch.equal(value, before[key]), key
        twin = device_twin(value)
        assert twin is not None and twin.device.type == "meta" and twin.shape == value.shape
        assert value.to("meta") is twin and value.to(torch.device("meta")) is twin
    assert batch["paper"].x.numpy().shape == before[("paper", "x")].shape
    batch["paper"].x[:, 0] = 0.0   # the user's in-place write before the copy
    assert device_twin(batch["paper"].x) is None
    assert device_twin(batch["author"].x) is not None
    kept = batch["author"].x   # the user keeps the host tensor, then writes to the device one
    moved = batch.to("meta")
    assert moved["author"].x.device.type == "meta" and moved["paper"].x.device.type == "meta"
    moved["author"].x.add_(1.0)
    assert device_twin(kept) is None


def _tensors(batch):
    return [((store._key if store._key is not None else "", key), value)
            for store in batch.stores for key, value in store.items()
            if isinstance(value, torch.Tensor)]


# --------------------------------------------------------------------------- CUDA
def _train_on_cuda(data, epochs=2):
    return _fit(_loader(data), epochs, device="cuda")


@pytest.mark.gpu
def test_cuda_pyg_batches_copied_ahead_train_alike():
    (losses, seeds, _), _ = _run("host", fn=_train_on_cuda)
    (same, same_seeds, on_host), stats = _run("auto", fn=_train_on_cuda)
    assert same_seeds == seeds and on_host
    assert torch.allclose(torch.tensor(same), torch.tensor(losses), rtol=1e-4, atol=1e-5)
    assert stats["loaders"][0]["copied"] and stats["loaders"][0]["prefetch"] == 2


def _batch_places(data):
    loader = _loader(data)
    for batch in loader:
        x, cites = batch["paper"].x, batch["paper", "cites", "paper"].edge_index
        twins = (device_twin(x), device_twin(cites))
        host = (x.device.type, cites.device.type, x.numpy().shape == tuple(x.shape))
        moved = batch.to("cuda")
        return host + tuple(t is not None and t.is_cuda for t in twins) + (
            moved["paper"].x is twins[0],
            moved["paper", "cites", "paper"].edge_index is twins[1])
    return None


@pytest.mark.gpu
def test_cuda_pyg_batches_stay_on_the_host_with_their_device_copies():
    places, stats = _run("auto", fn=_batch_places)
    assert places == ("cpu", "cpu", True, True, True, True, True), places


# --------------------------------------------------------------------------- served loaders
def _served_with_persistent_workers(data, epochs=2):
    """A homogeneous loader the path serves with its graph kept on the host (so its workers
    sample), workers persisting, one batch taken before training (an early exit)."""
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=FANOUT, input_nodes=data.train_mask,
                            batch_size=8, shuffle=True, num_workers=2, persistent_workers=True)
    first = next(iter(loader))
    model = GraphSAGE(data.num_features, 16, 2, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = [int(first.n_id[0])]
    for _ in range(epochs):
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def test_a_served_loader_with_persistent_workers_repeats_at_any_depth():
    from gnnorch.datasets.synthetic import power_law_graph

    data = power_law_graph(num_nodes=1500, avg_degree=6.0, num_features=8, num_classes=4,
                           seed=1)
    runs, records = {}, {}
    for depth in (0, 2):
        runtime = gnnorch.Runtime(_served_with_persistent_workers, processes=1, seed=SEED,
                                  data_path={"mode": "device", "prefetch": depth,
                                             "budget_bytes": 1})
        runs[depth] = runtime(data)
        records[depth] = runtime.last_run.stats[0]["device"]["loaders"][0]
    assert runs[0] == runs[2] and len(runs[0]) > 20
    assert records[2]["served"] and not records[2]["samples_on_device"]
    assert records[2]["prefetch"] == 0 and "persistent" in records[2]["prefetch_reason"]


def test_x_of_a_homogeneous_batch_drawn_on_demand_is_left_for_the_host_transform():
    """As a served loader's without prefetching: DAHA's host pre-transformation may take ``x``
    from the host (CUDA runs with rewrites on); drawn ahead, its copy is off the trainer's
    path; HeteroData batches are not marked for it."""
    from gnnorch.datasets.synthetic import power_law_graph
    from gnnorch.intercept.device_feed import deferred_fields

    homogeneous = power_law_graph(num_nodes=50, avg_degree=3.0, num_features=4, num_classes=2,
                                  seed=0)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert deferred_fields(homogeneous, cuda, 0, True) == ("x",)
    assert deferred_fields(homogeneous, cuda, 2, True) == ()
    assert deferred_fields(homogeneous, cuda, 0, False) == ()
    assert deferred_fields(homogeneous, cpu, 0, True) == ()
    assert deferred_fields(DATA, cuda, 0, True) == ()
