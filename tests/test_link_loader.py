"""LinkNeighborLoader under the runtime: gnnorch's sampler, training epochs sharded over ranks,
and the GPU data path (the CPU as the device) building the batches PyG's ``LinkLoader.filter_fn``
builds, with negatives drawn from the path's own generator."""
from __future__ import annotations

import json
import os
import types

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch_geometric.typing as pyg_typing
from torch_geometric.data import HeteroData
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.nn import GraphSAGE
from torch_geometric.sampler import NegativeSampling

import gnnorch
from gnnorch.compat import pyg as compat_pyg
from gnnorch.datasets.synthetic import power_law_graph
from gnnorch.device.config import DataPathConfig
from gnnorch.device.placement import structure_bytes
from gnnorch.device.split_rows import TABLE_BYTES
from gnnorch.intercept.device_path import DevicePath
from gnnorch.launch.context import RankContext
from gnnorch.launch.plan import CorePlan
from gnnorch.run_options import RunOptions
from gnnorch.sampling.negatives import seeded_negatives
from gnnorch.sampling.neighbor import FastNeighborSampler

from helpers import assert_same_batch, plain_epoch

pytestmark = pytest.mark.usefixtures("no_leftover_children")

SEED = 5
# what sampler="auto" may keep: gnnorch's, or pyg-lib where it is installed and timed faster
AUTO_BACKENDS = ("gnnorch", "pyg-lib") if pyg_typing.WITH_PYG_LIB else ("gnnorch",)
FANOUT = [4, 3]
NEGATIVES = {"binary": dict(neg_sampling_ratio=2.0),
             "triplet": dict(neg_sampling=NegativeSampling("triplet", 2)),
             "none": {}}


def _graph(num_nodes=400, seed=0):
    data = power_law_graph(num_nodes=num_nodes, avg_degree=8.0, num_features=16,
                           num_classes=4, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    data.edge_attr = torch.randn(data.edge_index.size(1), 3, generator=gen)
    # what RandomLinkSplit leaves on its splits: PyG's batches overwrite or delete them
    data.edge_label_index = data.edge_index[:, :50]
    data.edge_label = torch.ones(50)
    return data


DATA = _graph()


def _link_loader(negatives, data=DATA, batch_size=16, **kwargs):
    sampler = FastNeighborSampler(data, num_neighbors=FANOUT)
    return LinkNeighborLoader(data, num_neighbors=FANOUT, edge_label_index=data.edge_index,
                              batch_size=batch_size, shuffle=True, num_workers=0,
                              neighbor_sampler=sampler, **NEGATIVES[negatives], **kwargs)


def _state():
    return types.SimpleNamespace(role="train", index=0, user_num_workers=0, partition=None,
                                 device=None, kind="link")


def _plain_epoch(loader, epoch, shuffle_seed=11):
    return plain_epoch(loader, SEED, epoch, shuffle_seed)


def _served(negatives, prefetch=2):
    config = DataPathConfig(mode="device", prefetch=prefetch)
    ctx = RankContext(rank=0, world_size=1, plan=CorePlan(1, 0, 1), cores=None, seed=SEED,
                      options=RunOptions(data_path=config))
    path = DevicePath(ctx, config, None)
    loader, state = _link_loader(negatives), _state()
    path.adopt(loader, state)
    return path, loader, state


@pytest.mark.parametrize("negatives", sorted(NEGATIVES))
def test_device_path_link_batches_equal_pygs_filter_fn(negatives):
    path, loader, state = _served(negatives)
    plain = _link_loader(negatives)
    assert state.device.served and state.device.samples_on_device
    for epoch in range(2):
        want = _plain_epoch(plain, epoch)
        torch.manual_seed(11)
        got = list(path.feed(iter(loader), loader, state, True))
        assert len(got) == len(want) == -(-DATA.edge_index.size(1) // 16)
        for a, b in zip(got, want):
            assert_same_batch(a, b)
    last = got[-1]
    assert torch.equal(last.x, DATA.x[last.n_id])
    assert torch.equal(last.edge_attr, DATA.edge_attr[last.e_id])
    if negatives == "triplet":
        assert "edge_label_index" not in last and last.dst_neg_index.shape[1] == 2
    else:   # positives are edges of the graph, in local indices
        pos = last.edge_label_index if negatives == "none" else \
            last.edge_label_index[:, last.edge_label == 1]
        edges = set(map(tuple, DATA.edge_index.t().tolist()))
        assert set(map(tuple, last.n_id[pos].t().tolist())) <= edges


@pytest.mark.parametrize("where", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_link_batches_over_split_features_equal_the_whole_features(where):
    """A link loader whose node features do not fit the budget whole: its hottest rows (both
    ends of its input edges as seeds) on the device, the others gathered on the host. Its
    batches are the batches of the same loader with every row on the device (and, with the CPU
    as the device, PyG's own filter_fn's)."""
    device = torch.device(where) if where == "cpu" else \
        torch.device("cuda", torch.cuda.current_device())
    row_bytes = 16 * 4 + 8 + 3          # x, y and the three masks
    split = (structure_bytes(DATA.num_nodes, DATA.edge_index.size(1))
             + TABLE_BYTES * DATA.num_nodes + 120 * row_bytes)
    epochs = {}
    for name, budget in (("split", split), ("whole", None)):
        config = DataPathConfig(mode="device", prefetch=2, budget_bytes=budget)
        ctx = RankContext(rank=0, world_size=1, plan=CorePlan(1, 0, 1), cores=None,
                          seed=SEED, options=RunOptions(data_path=config, rewrite=False))
        path, (loader, state) = DevicePath(ctx, config, device), (_link_loader("binary"),
                                                                  _state())
        path.adopt(loader, state)
        assert state.device.samples_on_device
        assert state.device.features == ("split" if budget else "gpu"), state.device.reasons
        epochs[name] = []
        for _ in range(2):
            torch.manual_seed(11)
            epochs[name].append(list(path.feed(iter(loader), loader, state, True)))
        if budget:
            record = state.device
            assert record.ranking_on == str(device) and record.ranking_s > 0
            assert record.split_rows.device > 0 and record.split_rows.host > 0
        path.close()
    for split_epoch, whole_epoch in zip(epochs["split"], epochs["whole"]):
        assert len(split_epoch) == len(whole_epoch) > 1
        for a, b in zip(split_epoch, whole_epoch):
            assert_same_batch(a, b)
            assert torch.equal(a.x.cpu(), DATA.x[a.n_id]) and a.x.device == device
            assert torch.equal(a.edge_attr.cpu(), DATA.edge_attr[a.e_id])
    if where == "cpu":    # the same batches as PyG's own link loader
        plain = _link_loader("binary")
        for epoch, got in enumerate(epochs["split"]):
            for a, b in zip(got, _plain_epoch(plain, epoch)):
                assert_same_batch(a, b)


def test_negatives_drawn_ahead_leave_the_users_random_stream_alone():
    """Sampling ahead in the producer thread takes no number from torch's global RNG: after
    an epoch the global state is the same with negatives as without (the shuffle's draw
    only), and a fixed seed gives the same batches whatever the prefetch depth."""
    states, batches = {}, {}
    for negatives, prefetch in (("binary", 2), ("none", 2), ("binary", 0)):
        path, loader, state = _served(negatives, prefetch)
        torch.manual_seed(3)
        batches[negatives, prefetch] = list(path.feed(iter(loader), loader, state, True))
        states[negatives, prefetch] = torch.get_rng_state()
        assert state.device.prefetch == prefetch and state.device.prefetch_reason == ""
        path.close()
    assert torch.equal(states["binary", 2], states["none", 2])
    for a, b in zip(batches["binary", 2], batches["binary", 0]):
        assert_same_batch(a, b)


def test_seeded_negatives_draw_pygs_law_from_the_generator():
    gen = lambda: torch.Generator().manual_seed(1)   # noqa: E731
    uniform = seeded_negatives(NegativeSampling("binary", 1.5), gen())
    assert torch.equal(uniform.sample(50, "src", 9), torch.randint(9, (50,), generator=gen()))
    assert uniform.is_binary() and uniform.amount == 1.5
    weight = torch.tensor([0.0, 1.0, 0.0, 3.0])
    weighted = seeded_negatives(NegativeSampling("triplet", 2, dst_weight=weight), gen())
    draws = weighted.sample(400, "dst", 4)
    assert set(draws.tolist()) <= {1, 3} and 0.6 < (draws == 3).float().mean() < 0.9
    src = seeded_negatives(NegativeSampling("triplet", 2, dst_weight=weight), gen())
    assert torch.equal(src.sample(5, "src", 4), torch.randint(4, (5,), generator=gen()))
    assert weighted.is_triplet() and weighted.amount == 2
    # a subclass with its own sample, or weights off the generator's device: not seeded
    subclass = type("Mine", (NegativeSampling,), {})("binary")
    assert seeded_negatives(subclass, gen()) is None
    meta = NegativeSampling("binary", 1, src_weight=torch.ones(4, device="meta"))
    assert seeded_negatives(meta, gen()) is None


def test_seeded_negatives_fail_closed_on_another_shape(monkeypatch):
    monkeypatch.setattr(compat_pyg, "negative_sampling_class", lambda: None)
    assert seeded_negatives(NegativeSampling("binary"), torch.Generator()) is None
    path, loader, state = _served("binary")
    list(path.feed(iter(loader), loader, state, True))
    assert state.device.prefetch == 0 and "global RNG" in state.device.prefetch_reason
    path.close()


# ------------------------------------------------------------------------------ runtime
#: the edge type a HeteroData link loader below trains on (bipartite, as PyG's
#: examples/hetero/bipartite_sage_unsup.py)
RATES = ("user", "rates", "item")


def _bipartite(num_users=120, num_items=80, per_user=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    src = torch.arange(num_users).repeat_interleave(per_user)
    dst = torch.randint(0, num_items, (src.numel(),), generator=gen)
    data = HeteroData()
    data["user"].x = torch.randn(num_users, 8, generator=gen)
    data["item"].x = torch.randn(num_items, 8, generator=gen)
    data[RATES].edge_index = torch.unique(torch.stack([src, dst]), dim=1)
    data[RATES[::-1]].edge_index = data[RATES].edge_index.flip(0)
    return data


def _record_link_epochs(data, out_dir, epochs=2):
    rank = dist.get_rank() if dist.is_initialized() else 0
    hetero = isinstance(data, HeteroData)
    label = dict(edge_label_index=(RATES, None)) if hetero else {}
    train = LinkNeighborLoader(data, num_neighbors=[3], batch_size=40, shuffle=True,
                               neg_sampling_ratio=1.0, **label)
    evaluate = LinkNeighborLoader(data, num_neighbors=[3], batch_size=500, **label)
    torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)   # a training function's

    def ids(batch):
        return (batch[RATES] if hetero else batch).input_id.tolist()

    seen = {"batch_size": train.batch_size, "epochs": [], "eval": [],
            "sampler": type(train.link_sampler).__name__}
    for _ in range(epochs):
        seen["epochs"].append([ids(b) for b in train])
    seen["eval"] = [i for b in evaluate for i in ids(b)]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


@pytest.mark.parametrize("hetero", [False, True])
def test_training_link_loader_sharded_over_ranks(tmp_path, hetero):
    """Each rank's training epoch takes a disjoint half of the input edges (of a HeteroData's
    edge type too), evaluation loaders every edge on every rank."""
    data = _bipartite() if hetero else _graph(num_nodes=200)
    runtime = gnnorch.Runtime(_record_link_epochs, processes=2)
    runtime(data, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    edges = set(range((data[RATES] if hetero else data).edge_index.size(1)))
    for seen in ranks:
        # gnnorch's samplers serve both
        assert seen["batch_size"] == 20
        assert seen["sampler"] == ("FastHeteroNeighborSampler" if hetero
                                   else "FastNeighborSampler")
        assert sorted(seen["eval"]) == sorted(edges)   # evaluation: every edge, every rank
    for epoch in range(2):
        a = [i for b in ranks[0]["epochs"][epoch] for i in b]
        b = [i for b in ranks[1]["epochs"][epoch] for i in b]
        assert len(ranks[0]["epochs"][epoch]) == len(ranks[1]["epochs"][epoch])
        assert not set(a) & set(b) and set(a) | set(b) == edges
    loaders = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert [(s["kind"], s["role"]) for s in loaders] == [("link", "train"), ("link", "eval")]
    assert {s["graph"] for s in loaders} == {"HeteroData" if hetero else "Data"}
    # sampler="auto": gnnorch's, unless pyg-lib is installed and measured faster here
    assert all(s["backend"] in AUTO_BACKENDS for s in loaders), loaders
    assert all(e["seeds"] > 0 for e in runtime.last_run.epochs[0])


def _train_link_prediction(data, epochs=2):
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, num_layers=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = LinkNeighborLoader(data, num_neighbors=FANOUT, batch_size=64, shuffle=True,
                                neg_sampling_ratio=1.0)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((h[src] * h[dst]).sum(-1),
                                                      batch.edge_label)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("prefetch", [0, 2])
def test_link_prediction_on_the_device_path_repeats_whatever_the_prefetch(prefetch):
    data = _graph(num_nodes=300)
    runs = {}
    for depth in (prefetch, 1):
        runtime = gnnorch.Runtime(_train_link_prediction, processes=1, autotune=False,
                                  data_path={"mode": "device", "prefetch": depth})
        torch.manual_seed(1)
        runs[depth] = runtime(data)
        record = runtime.last_run.stats[0]["device"]["loaders"][0]
        assert record["served"] and record["samples_on_device"] and record["prefetch"] == depth
    assert runs[prefetch] == runs[1]
    assert all(torch.isfinite(torch.tensor(runs[1])))


def _link_objective(batch, h):
    """PyG's link objectives, read at the batch's seed-relative indices."""
    if hasattr(batch, "dst_neg_index"):      # triplet: src, a positive, k negatives each
        pos = (h[batch.src_index] * h[batch.dst_pos_index]).sum(-1)
        neg = (h[batch.src_index].unsqueeze(1) * h[batch.dst_neg_index]).sum(-1)
        return F.softplus(neg - pos.unsqueeze(1)).mean()
    src, dst = batch.edge_label_index
    return F.binary_cross_entropy_with_logits((h[src] * h[dst]).sum(-1),
                                              batch.edge_label.to(h.dtype))


def _train_link_trimmable(data, negatives, epochs=2, read_all=False, disjoint=False):
    """Link prediction with a 2-layer GraphSAGE in the features' dtype; returns each step's
    loss and the first step's gradients (forward and backward of a link batch, trimmed or
    not)."""
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, num_layers=2).to(data.x.dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = LinkNeighborLoader(data, num_neighbors=FANOUT, batch_size=32, shuffle=True,
                                disjoint=disjoint, **NEGATIVES[negatives])
    losses, first_grads = [], None
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            h = model(batch.x, batch.edge_index)
            loss = _link_objective(batch, h)
            if read_all:                      # a read of every row, not only the seeds'
                loss = loss + 1e-3 * h.pow(2).mean()
            loss.backward()
            if first_grads is None:
                first_grads = [p.grad.clone() for p in model.parameters()]
            optimizer.step()
            losses.append(loss.item())
    return {"losses": losses, "grads": first_grads}


def _graph64(num_nodes: int):
    """`_graph` in float64: comparisons of whole training runs (trimmed vs not) then measure
    trimming, not float32 rounding differences (a matrix product of fewer rows may round
    differently) that hundreds of Adam steps amplify from 1e-7 to 1e-3 on some CPUs."""
    data = _graph(num_nodes=num_nodes)
    data.x = data.x.double()
    return data


def _run_trim(trim, *args, **kwargs):
    runtime = gnnorch.Runtime(_train_link_trimmable, processes=1, autotune=False, trim=trim)
    torch.manual_seed(1)
    value = runtime(*args, **kwargs)
    return value, runtime.last_run.stats[0]["trim"]


@pytest.mark.parametrize("negatives", ["binary", "triplet"])
def test_link_batches_are_trimmed_to_their_seeds_exactly(negatives):
    """A link batch's layers are trimmed to its first hop's nodes (the endpoints of its
    supervision edges and negatives): losses and first gradients equal the untrimmed run's."""
    data = _graph64(num_nodes=500)
    plain, off = _run_trim(False, data, negatives)
    trimmed, stats = _run_trim(True, data, negatives)
    assert not off["models"]
    (model,) = stats["models"]
    assert model["trimmed"] and model["materialized"] == 0, model
    assert model["trimmed_forwards"] == len(trimmed["losses"])
    assert stats["rows_computed"] < stats["rows_untrimmed"]
    torch.testing.assert_close(torch.tensor(trimmed["losses"]), torch.tensor(plain["losses"]),
                               rtol=1e-4, atol=1e-5)
    for a, b in zip(trimmed["grads"], plain["grads"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_link_batches_of_merged_graphs_are_trimmed_to_their_seeds():
    """A loader over graphs merged by ``Batch.from_data_list`` (PyG's PPI example) yields
    `Batch` objects, whose ``batch_size`` property is PyG's alias of ``num_graphs``: the seed
    count is never read from it, so trimming stays on and exact."""
    from torch_geometric.data import Batch

    data = Batch.from_data_list([_graph(num_nodes=200, seed=s) for s in range(3)])
    data.x = data.x.double()     # as _graph64, for the same reason
    plain, _ = _run_trim(False, data, "binary", epochs=1)
    trimmed, stats = _run_trim(True, data, "binary", epochs=1)
    (model,) = stats["models"]
    assert model["trimmed"] and model["materialized"] == 0, model
    assert model["trimmed_forwards"] == len(trimmed["losses"])
    torch.testing.assert_close(torch.tensor(trimmed["losses"]), torch.tensor(plain["losses"]),
                               rtol=1e-4, atol=1e-5)


def test_link_output_read_beyond_its_seeds_is_recomputed_exactly():
    data = _graph64(num_nodes=300)
    plain, _ = _run_trim(False, data, "binary", epochs=1, read_all=True)
    with pytest.warns(gnnorch.errors.TrimmingWarning, match="edge_label_index"):
        value, stats = _run_trim(True, data, "binary", epochs=1, read_all=True)
    torch.testing.assert_close(torch.tensor(value["losses"]), torch.tensor(plain["losses"]),
                               rtol=1e-4, atol=1e-5)
    (model,) = stats["models"]
    assert not model["trimmed"] and model["materialized"] == 1


def test_disjoint_link_batches_are_not_trimmed():
    pytest.importorskip("pyg_lib")           # PyG samples disjoint subgraphs with pyg-lib only
    data = _graph(num_nodes=300)
    _, stats = _run_trim(True, data, "binary", epochs=1, disjoint=True)
    assert not any(m["trimmed_forwards"] for m in stats["models"])


# --------------------------------------------------------------------------------- CUDA
def _served_on(device, negatives, prefetch):
    config = DataPathConfig(mode="auto", prefetch=prefetch)
    ctx = RankContext(rank=0, world_size=1, plan=CorePlan(1, 0, 1), cores=None, seed=SEED,
                      options=RunOptions(data_path=config, rewrite=False))
    path = DevicePath(ctx, config, device)
    loader, state = _link_loader(negatives), _state()
    path.adopt(loader, state)
    return path, loader, state


@pytest.mark.gpu
@pytest.mark.parametrize("negatives", sorted(NEGATIVES))
def test_cuda_link_batches_are_sampled_and_gathered_on_the_device(negatives):
    """On CUDA: the structure and features on the device, every gathered field equal to the
    source rows at the batch's host ids, positives real edges, and the same batches at
    prefetch depth 2 as at 0 (the epoch's CUDA and CPU generators)."""
    device = torch.device("cuda", torch.cuda.current_device())
    epochs = {}
    for prefetch in (0, 2):
        path, loader, state = _served_on(device, negatives, prefetch)
        assert state.device.served and state.device.samples_on_device
        assert state.device.features == "gpu"
        torch.manual_seed(11)
        epochs[prefetch] = list(path.feed(iter(loader), loader, state, True))
        assert state.device.prefetch == prefetch and state.device.prefetch_reason == ""
        path.close()
    edges = set(map(tuple, DATA.edge_index.t().tolist()))
    for batch in epochs[2]:
        assert batch.x.is_cuda and batch.edge_index.is_cuda and batch.edge_attr.is_cuda
        assert batch.n_id.device.type == "cpu" and batch.input_id.device.type == "cpu"
        assert torch.equal(batch.x.cpu(), DATA.x[batch.n_id])
        assert torch.equal(batch.edge_attr.cpu(), DATA.edge_attr[batch.e_id])
        assert torch.equal(batch.n_id[batch.edge_index.cpu()], DATA.edge_index[:, batch.e_id])
        if negatives == "triplet":
            assert "edge_label_index" not in batch and batch.dst_neg_index.shape[1] == 2
            continue
        label_index = batch.edge_label_index.cpu()
        pos = label_index if negatives == "none" else \
            label_index[:, batch.edge_label.cpu() == 1]
        assert set(map(tuple, batch.n_id[pos].t().tolist())) <= edges
    assert len(epochs[0]) == len(epochs[2])
    for a, b in zip(epochs[0], epochs[2]):
        assert_same_batch(a, b)


def _link_epochs(data, batch_size, epochs):
    """SGD on a link objective over full-neighbourhood LinkNeighborLoader batches with given
    labels (no negatives drawn: only the supervision edges' order and batching matter)."""
    torch.manual_seed(0)
    model = GraphSAGE(16, 16, num_layers=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = LinkNeighborLoader(data, num_neighbors=[-1, -1], batch_size=batch_size,
                                edge_label_index=data.edge_label_index,
                                edge_label=data.edge_label, shuffle=True)
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            score = (h[src] * h[dst]).sum(-1)
            F.binary_cross_entropy_with_logits(score, batch.edge_label).backward()
            optimizer.step()
    return model.state_dict()


def test_two_ranks_on_a_batch_size_they_do_not_divide_train_one_process_link_steps():
    # 60 supervision edges in batches of 25 (13 + 12 a rank; the last 10: 5 + 5), weighted by
    # each rank's edges: the plain call's steps, on the permutations its generator draws
    data = _graph(num_nodes=120)
    gen = torch.Generator().manual_seed(3)
    data.edge_label_index = data.edge_index[:, torch.randperm(data.edge_index.size(1),
                                                              generator=gen)[:60]]
    data.edge_label = (torch.rand(60, generator=gen) < 0.5).float()
    runtime = gnnorch.Runtime(_link_epochs, processes=2, seed=SEED, autotune=False,
                              launch={"threads": 1})
    got = runtime(data, 25, 2)
    want = _link_epochs(data, 25, 2)
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, atol=1e-5, rtol=1e-4)
    (record,) = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert record["kind"] == "link" and "13/12 seeds" in record["uneven_batch"]
    assert sum(e["seeds"] for r in (0, 1) for e in runtime.last_run.epochs[r]) == 120
