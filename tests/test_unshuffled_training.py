"""Training on a NeighborLoader built with shuffle=False (PyG's benchmark/multi_gpu/training):
promoted to a training loader at its first epoch that trains, sharded in order over p ranks,
timed; a pass before any model ran (PNAConv.get_degree_histogram) and evaluation stay whole."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE, PNAConv

import gnnorch
from gnnorch.intercept.shard import ShardSampler

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def test_unshuffled_shard_sampler_is_sequential_until_sharded():
    whole = ShardSampler(0, 2, seed=5, shuffle=False)
    whole.num_items = 11
    assert not whole.sharded                             # PyG's order until an epoch trains
    assert list(whole) == list(range(11)) and list(whole) == list(range(11))
    parts = []
    for rank in range(2):
        part = ShardSampler(rank, 2, seed=5, shuffle=False)
        part.num_items, part.sharded = 11, True
        parts.append(list(part))
    b = 4                                               # global batch; per rank 2
    for k in range(3):
        together = sorted(parts[0][2 * k:2 * k + 2] + parts[1][2 * k:2 * k + 2])
        assert together == list(range(b * k, min(b * k + b, 11))) or k == 2
    assert sorted(parts[0][4:] + parts[1][4:]) == [0, 8, 9, 10]   # wrap-around padding


def unshuffled_sage(data, epochs, batch_size=20):
    """Deterministic sampling (full neighbourhoods), no dropout; the loader is not shuffled;
    after training, an evaluation pass over the same loader under no_grad."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=data.train_mask,
                            batch_size=batch_size)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        evaluated = sum(int(batch.batch_size) for batch in loader)
    return {"state": model.state_dict(), "evaluated": evaluated}


def test_two_ranks_train_an_unshuffled_loader_as_one_process_does():
    data = cora()
    ref = unshuffled_sage(data, 3)
    runtime = gnnorch.Runtime(unshuffled_sage, processes=2, autotune=False)
    got = runtime(data, 3)
    for key, value in ref["state"].items():
        torch.testing.assert_close(got["state"][key], value, atol=1e-5, rtol=1e-4)
    assert got["evaluated"] == ref["evaluated"] == 140    # evaluation kept every seed
    for rank in range(2):
        (record,) = runtime.last_run.stats[rank]["sampler"]["loaders"]
        assert record["role"] == "train" and record["index"] == 0, record
        assert "trains from its epoch 2" in record["promoted"]
        epochs = runtime.last_run.epochs[rank]
        # epoch 1 ran before any model was seen (whole, in every rank); epochs 2-3 sharded
        assert [e["seeds"] for e in epochs] == [70, 70]
        assert [e["batches"] for e in epochs] == [7, 7]


def test_one_process_times_and_tunes_on_an_unshuffled_loader():
    runtime = gnnorch.Runtime(unshuffled_sage, processes=1)
    runtime(cora(), 3)
    epochs = runtime.last_run.epochs[0]
    assert [e["batches"] for e in epochs] == [7, 7]
    text = runtime.summary()
    assert "epochs (2, rank 0)" in text and "sampler: train gnnorch" in text, text
    assert "ran no training step" not in text, text    # the tuner saw its steps


def degree_histogram_then_train(data):
    """PyG's benchmark/multi_gpu/training/common.py: the PNA degree histogram is taken over
    the (unshuffled) training loader before the model exists."""
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=16)
    torch.manual_seed(0)
    deg = PNAConv.get_degree_histogram(loader)
    rank = dist.get_rank() if dist.is_initialized() else 0
    return {"rank": rank, "deg_total": int(deg.sum()), "batches": len(loader)}


def test_a_pass_before_any_model_is_not_sharded():
    data = cora()
    runtime = gnnorch.Runtime(degree_histogram_then_train, processes=2, autotune=False)
    got = runtime(data)
    assert got["batches"] == 9                              # ceil(140 / 16): the whole loader
    for rank in range(2):
        (record,) = runtime.last_run.stats[rank]["sampler"]["loaders"]
        assert record["role"] == "eval" and "promoted" not in record
        assert runtime.last_run.epochs[rank] == []
    # every sampled node of every batch counted once: each batch holds all its seeds at least
    assert got["deg_total"] >= 140
