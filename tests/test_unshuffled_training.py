"""Training on a NeighborLoader built with shuffle=False (PyG's benchmark/multi_gpu/training):
promoted to a training loader at its first epoch that trains, sharded in order over p ranks,
timed; a pass before any model ran (PNAConv.get_degree_histogram) and evaluation stay whole."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.data import HeteroData
from torch_geometric.nn import GraphSAGE, PNAConv, SAGEConv

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
    b = 4                                               # global batch; per rank 2
    for rank in range(2):
        part = ShardSampler(rank, 2, seed=5, shuffle=False, batch_size=b)
        part.num_items, part.sharded = 11, True
        parts.append(list(part))
    for k in range(3):                                  # the last batch: 8, 9, 10 (2 + 1)
        together = sorted(parts[0][2 * k:2 * k + 2] + parts[1][2 * k:2 * k + 2])
        assert together == list(range(b * k, min(b * k + b, 11)))
    assert parts[0][4:] == [8, 10] and parts[1][4:] == [9]     # dealt, nothing padded


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


@pytest.mark.parametrize("options", [{}, {"trim": False, "rewrite": False}])
def test_two_ranks_train_an_unshuffled_loader_as_one_process_does(options):
    # with trim and rewrite off no layer seam sees the model: the gradient synchroniser does
    data = cora()
    ref = unshuffled_sage(data, 3)
    runtime = gnnorch.Runtime(unshuffled_sage, processes=2, autotune=False, **options)
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


class PaperSAGE(torch.nn.Module):
    """A hand-written model on one node type's tensors of HeteroData batches."""

    def __init__(self, channels):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(channels, 32), SAGEConv(32, 7)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def unshuffled_hetero_sage(data, epochs, batch_size=20):
    """`unshuffled_sage` on HeteroData batches (one node type, one edge type), whose batches
    the layer seam announces no graph for (trimming is for homogeneous batches)."""
    torch.manual_seed(0)
    hetero = HeteroData()
    hetero["paper"].x, hetero["paper"].y = data.x, data.y
    hetero["paper", "cites", "paper"].edge_index = data.edge_index
    loader = NeighborLoader(hetero, num_neighbors=[-1, -1],
                            input_nodes=("paper", data.train_mask), batch_size=batch_size)
    model = PaperSAGE(data.num_features)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            paper = batch["paper"]
            optimizer.zero_grad()
            out = model(paper.x, batch["paper", "cites", "paper"].edge_index)
            F.cross_entropy(out[:paper.batch_size], paper.y[:paper.batch_size]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        evaluated = sum(int(batch["paper"].batch_size) for batch in loader)
    return {"state": model.state_dict(), "evaluated": evaluated}


def test_two_ranks_train_an_unshuffled_hetero_loader_as_one_process_does():
    """A model the layer seam sees only through its layer calls (no batch graph announced)
    counts as seen: the unshuffled loader is promoted and sharded as a homogeneous one is."""
    data = cora()
    ref = unshuffled_hetero_sage(data, 3)
    runtime = gnnorch.Runtime(unshuffled_hetero_sage, processes=2, autotune=False)
    got = runtime(data, 3)
    for key, value in ref["state"].items():
        torch.testing.assert_close(got["state"][key], value, atol=1e-5, rtol=1e-4)
    assert got["evaluated"] == ref["evaluated"] == 140
    for rank in range(2):
        (record,) = runtime.last_run.stats[rank]["sampler"]["loaders"]
        assert record["role"] == "train" and "trains from its epoch 2" in record["promoted"]
        assert [e["seeds"] for e in runtime.last_run.epochs[rank]] == [70, 70]


def test_one_process_times_and_tunes_on_an_unshuffled_loader():
    runtime = gnnorch.Runtime(unshuffled_sage, processes=1)
    runtime(cora(), 3)
    epochs = runtime.last_run.epochs[0]
    assert [e["batches"] for e in epochs] == [7, 7]
    text = runtime.summary()
    assert "epochs (2, rank 0)" in text and "sampler: train " in text, text   # any backend
    assert "ran no training step" not in text, text    # the tuner saw its steps


def degree_histogram_then_train(data, shuffle, epochs=2):
    """PyG's benchmark/multi_gpu/training/common.py: the PNA degree histogram is taken over
    the training loader before the model and its optimizer exist (and here the seeds of one
    more such pass are counted); then a model, an optimizer and `epochs` training epochs."""
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=16, shuffle=shuffle)
    deg = PNAConv.get_degree_histogram(loader)
    seeds_before_model = sum(int(batch.batch_size) for batch in loader)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    return {"seeds_before_model": seeds_before_model, "deg_total": int(deg.sum())}


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_pass_before_any_model_is_not_sharded(shuffle):
    """Before the model and its optimizer exist, a loader's passes keep every seed in every
    rank (PNA's degree histogram must not differ between ranks); the training epochs after
    are sharded: all of them for a shuffled loader, from the second for an unshuffled one
    (its first starts before any model was seen)."""
    runtime = gnnorch.Runtime(degree_histogram_then_train, processes=2, autotune=False)
    got = runtime(cora(), shuffle)
    assert got["seeds_before_model"] == 140
    assert got["deg_total"] > 0
    for rank in range(2):
        (record,) = runtime.last_run.stats[rank]["sampler"]["loaders"]
        assert record["role"] == "train"
        seeds = [e["seeds"] for e in runtime.last_run.epochs[rank]]
        assert seeds == ([70, 70] if shuffle else [70]), seeds


def chosen_offsets(data, epochs=1, num_workers=0):
    """Each seed of a star forest has 100 leaves; per batch, which leaf (0-99) each seed's
    one sampled neighbour is, in seed order: the sampler's random draws, made visible."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    loader = NeighborLoader(data, num_neighbors=[1], input_nodes=data.seeds, batch_size=64,
                            shuffle=True, num_workers=num_workers)
    model = torch.nn.Linear(1, 1)   # an optimizer built, gradients on: epochs train
    torch.optim.SGD(model.parameters(), lr=0.1)
    offsets = []
    for _ in range(epochs):
        for batch in loader:
            src, dst = batch.edge_index
            leaf = batch.n_id[src]
            seed = batch.n_id[dst]
            order = torch.argsort(dst)
            offsets.append((leaf[order] - seed[order] - 1).tolist())
    return {"rank": rank, "offsets": offsets, "training": model.training}


def star_forest(stars=256, leaves=100):
    from torch_geometric.data import Data

    centre = torch.arange(stars).repeat_interleave(leaves) * (leaves + 1)
    leaf = centre + torch.arange(leaves).repeat(stars) + 1
    data = Data(edge_index=torch.stack([leaf, centre]), num_nodes=stars * (leaves + 1))
    data.seeds = torch.arange(stars) * (leaves + 1)
    return data


def _both_ranks(tmp_path, **kwargs):
    import json

    def recorded(data, path):
        out = chosen_offsets(data, **kwargs)
        (path / f"rank{out['rank']}.json").write_text(json.dumps(out["offsets"]))

    runtime = gnnorch.Runtime(recorded, processes=2, autotune=False)
    runtime(star_forest(), tmp_path)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_ranks_draw_independent_neighbours(tmp_path, num_workers):
    """Forked ranks inherit one RNG state: had both sampled from torch's global RNG, the k-th
    batches of rank 0 and rank 1 would pick the same leaf positions (all 32 equal). Drawn
    independently, about 1 in 100 agree."""
    ranks = _both_ranks(tmp_path, num_workers=num_workers)
    pairs = [(a, b) for x, y in zip(*ranks) for a, b in zip(x, y)]
    assert len(pairs) == 128
    equal = sum(a == b for a, b in pairs)
    assert equal <= 10, f"{equal} of {len(pairs)} draws equal across ranks"
    assert all(0 <= a < 100 for a, _ in pairs)
