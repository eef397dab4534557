"""Trimming at an encoder (`gnnorch.intercept.encoder`): a model whose output is a link decoder's
scores (PyG's link-prediction pattern, ``z = self.encoder(...); return self.decoder(z,
edge_label_index)``) is trimmed at the sub-module that makes every layer call, on Data and
HeteroData link batches, with the same losses and gradients as untrimmed (forward and backward);
models whose decoder reads beyond the seed rows, or whose layer calls are not all inside one
sub-module call, are left whole, saying why."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.nn import GraphSAGE, Linear, SAGEConv, to_hetero

import gnnorch
from gnnorch.errors import TrimmingWarning

from helpers import (WRITES, SageStack as Sage, assert_same_training, small_hetero_graph,
                     train_steps, trimmed_and_untrimmed)

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 5
HETERO = small_hetero_graph(topic=False, papers=300, authors=200)


def _graph(nodes: int = 400, edges: int = 1600, seed: int = 0) -> Data:
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, nodes, (2, edges), generator=gen)
    return Data(x=torch.randn(nodes, 12, generator=gen), edge_index=edge_index,
                num_nodes=nodes)


GRAPH = _graph()


# --------------------------------------------------------------------------- models
class DotDecoder(torch.nn.Module):
    def forward(self, z, edge_label_index):
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


class MlpDecoder(torch.nn.Module):
    """PyG's `EdgeDecoder` (bipartite_sage_unsup): an MLP on both ends' rows."""

    def __init__(self, hidden=8):
        super().__init__()
        self.lin1, self.lin2 = Linear(2 * hidden, hidden), Linear(hidden, 1)

    def forward(self, z, edge_label_index):
        row, col = edge_label_index
        z = torch.cat([z[row], z[col]], dim=-1)
        return self.lin2(self.lin1(z).relu()).view(-1)


class LinkModel(torch.nn.Module):
    """An input projection, a GNN encoder and a decoder at ``edge_label_index``."""

    def __init__(self, encoder=None, decoder=None, read_all=False, conv_after=False):
        super().__init__()
        self.lin = Linear(12, 16)
        self.encoder = encoder if encoder is not None else Sage(out=8)
        self.decoder = decoder if decoder is not None else DotDecoder()
        self.read_all = read_all       # the decoder adds the mean of every row (non-seed)
        self.conv_after = SAGEConv(8, 8) if conv_after else None

    def forward(self, x, edge_index, edge_label_index):
        z = self.encoder(self.lin(x).relu(), edge_index)
        if self.conv_after is not None:   # a layer call on the batch graph after the encoder
            z = self.conv_after(z, edge_index)
        score = self.decoder(z, edge_label_index)
        return score + z.mean() if self.read_all else score


class Siamese(torch.nn.Module):
    """The encoder called twice in one forward (both calls on the batch graph)."""

    def __init__(self):
        super().__init__()
        self.encoder = Sage(out=8)

    def forward(self, x, edge_index, edge_label_index):
        z = self.encoder(x, edge_index) + self.encoder(x.flip(1), edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


class Nested(torch.nn.Module):
    """The encoder inside another module without a row-per-vertex output: the outermost
    sub-module with one is chosen (here ``inner.encoder``)."""

    def __init__(self):
        super().__init__()
        self.inner = LinkModel()

    def forward(self, x, edge_index, edge_label_index):
        return self.inner(x, edge_index, edge_label_index) * 2.0


DATA_MODELS = {
    "sage-dot": lambda: LinkModel(),
    "graphsage-mlp": lambda: LinkModel(GraphSAGE(16, 16, num_layers=2, out_channels=8),
                                       MlpDecoder()),
    "sage-3-layers": lambda: LinkModel(Sage(layers=3, out=8)),
    "nested": Nested,
}


def _train_data_links(make, batches=None, evaluate=False, hops=2, grad_check=True):
    """Link prediction on a random graph: losses of 2 epochs, the last step's gradients, and
    (`evaluate`) the scores of an evaluation pass."""

    def train(data):
        loader = LinkNeighborLoader(data, num_neighbors=[4] * hops, batch_size=64,
                                    shuffle=True, neg_sampling_ratio=1.0)
        torch.manual_seed(0)
        model = make()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses, grads = [], {}
        for _ in range(2):
            for i, batch in enumerate(loader):
                if batches is not None and i >= batches:
                    break
                opt.zero_grad()
                score = model(batch.x, batch.edge_index, batch.edge_label_index)
                loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)
                loss.backward()
                grads = {n: p.grad.clone() for n, p in model.named_parameters()
                         if p.grad is not None}
                opt.step()
                losses.append(loss.item())
        scores = None
        if evaluate:
            model.eval()
            with torch.no_grad():
                scores = torch.cat([model(b.x, b.edge_index, b.edge_label_index)
                                    for b in LinkNeighborLoader(data, num_neighbors=[4] * hops,
                                                                batch_size=128)])
        return losses, grads, scores
    return train


def _runs(train, data, **options):
    """(trimmed, untrimmed) results of `train` under the runtime, and the trimmed run's trim
    statistics."""
    trimmed, untrimmed, runtime = trimmed_and_untrimmed(train, data, SEED, **options)
    return trimmed, untrimmed, runtime.last_run.stats[0]["trim"], runtime.summary()


def _model(stats):
    (model,) = stats["models"]
    return model


# --------------------------------------------------------------------------- Data batches
@pytest.mark.parametrize("name", list(DATA_MODELS))
def test_a_link_model_is_trimmed_at_its_encoder(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)   # nothing read beyond the seeds
        trimmed, untrimmed, stats, summary = _runs(
            _train_data_links(DATA_MODELS[name], batches=6), GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    encoder = "inner.encoder" if name == "nested" else "encoder"
    assert model["trimmed"] and model["encoder"] == encoder, model
    assert model["trimmed_forwards"] > 0 and model["materialized"] == 0, model
    assert model["verified_by"] == "the one-off check"
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]
    assert f"trimmed at its encoder {encoder}" in summary


def test_evaluation_scores_equal_and_deeper_samples():
    """An evaluation pass (eval mode, no gradients, unshuffled), and a 3-hop sample under a
    2-layer encoder."""
    for hops in (2, 3):
        trimmed, untrimmed, stats, _ = _runs(
            _train_data_links(DATA_MODELS["sage-dot"], batches=4, evaluate=True, hops=hops),
            GRAPH)
        assert_same_training(trimmed, untrimmed)
        assert _model(stats)["trimmed"]


def test_a_decoder_reading_beyond_the_seed_rows_leaves_the_model_whole_quietly():
    """The decoder reads every row (here: their mean): decided by the one-off check, so no
    forward is recomputed and no warning is given."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, stats, _ = _runs(
            _train_data_links(lambda: LinkModel(read_all=True), batches=4), GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert not model["trimmed"] and model["encoder"] is None, model
    assert "reads its encoder's output beyond the seed rows" in model["reason"], model
    assert model["materialized"] == 0


class SiameseThenConv(Siamese):
    """The encoder called twice, then a layer call on the batch graph after both."""

    def __init__(self):
        super().__init__()
        self.conv_after = SAGEConv(8, 8)

    def forward(self, x, edge_index, edge_label_index):
        z = self.encoder(x, edge_index) + self.encoder(x.flip(1), edge_index)
        z = self.conv_after(z, edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


class SiameseUneven(Siamese):
    """The encoder called twice, with a layer call on the batch graph between the calls."""

    def __init__(self):
        super().__init__()
        self.conv_between = SAGEConv(12, 12)

    def forward(self, x, edge_index, edge_label_index):
        z = self.encoder(x, edge_index)
        z = z + self.encoder(self.conv_between(x, edge_index), edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


class TwoEncoders(torch.nn.Module):
    """Two encoders of different depths on the batch graph, their rows summed: trimmed at
    both, each a stack whose last layer is the top one (layers 1, 2 and 0, 1, 2 of K = 3)."""

    def __init__(self):
        super().__init__()
        self.shallow, self.deep = Sage(layers=2, out=8), Sage(layers=3, out=8)

    def forward(self, x, edge_index, edge_label_index):
        z = self.shallow(x, edge_index) + self.deep(x, edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


class Chained(torch.nn.Module):
    """Two blocks, the second's layers reading the first's output: no encoder output may
    feed layers, so the model is left whole (the data flow says why)."""

    def __init__(self):
        super().__init__()
        self.first, self.second = Sage(layers=1, out=12), Sage(layers=1, out=8)

    def forward(self, x, edge_index, edge_label_index):
        z = self.second(self.first(x, edge_index).relu(), edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


def test_two_encoders_are_trimmed_each_at_its_output():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, stats, summary = _runs(
            _train_data_links(TwoEncoders, batches=5, hops=3), GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert model["trimmed"] and model["encoder"] == "shallow and deep", model
    assert model["encoder_calls"] == 2 and model["layer_plan"] == [1, 2, 0, 1, 2], model
    assert model["materialized"] == 0 and 0 < stats["rows_computed"] < stats["rows_untrimmed"]
    assert "trimmed at its encoders shallow and deep" in summary


def test_an_encoder_output_feeding_layers_leaves_the_model_whole():
    trimmed, untrimmed, stats, _ = _runs(_train_data_links(Chained, batches=4), GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert not model["trimmed"] and model["encoder"] is None, model
    assert "the output of first feeds layers of the model" in model["reason"], model


@pytest.mark.parametrize("make", [lambda: LinkModel(conv_after=True), SiameseThenConv,
                                  SiameseUneven])
def test_layer_calls_outside_the_encoder_calls_leave_the_model_whole(make):
    trimmed, untrimmed, stats, _ = _runs(_train_data_links(make, batches=4), GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert not model["trimmed"], model
    assert "not one tensor with a row per vertex" in model["reason"], model
    assert "no sub-module makes every layer call" in model["reason"], model


def test_an_encoder_called_twice_is_trimmed_pass_by_pass():
    """`Siamese` runs its encoder on the batch and on a transform of its features, summing
    the two: each call's layers are trimmed as layers 0..K-1, and the sum of the two
    prefix-exact outputs stays prefix-exact (no recomputation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, stats, _ = _runs(_train_data_links(Siamese, batches=6), GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert model["trimmed"] and model["encoder"] == "encoder", model
    assert model["encoder_calls"] == 2 and model["layers"] == 2, model
    assert model["layer_plan"] == [0, 1, 0, 1] and model["materialized"] == 0, model
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]


def test_a_model_returning_its_encoder_output_reads_it_exactly():
    """The model returns (z, scores): its encoder's rows are compared whole by the check, which
    refuses; the outputs equal untrimmed."""

    class Both(LinkModel):
        def forward(self, x, edge_index, edge_label_index):
            z = self.encoder(self.lin(x).relu(), edge_index)
            return z, self.decoder(z, edge_label_index)

    def train(data):
        loader = LinkNeighborLoader(data, num_neighbors=[4, 4], batch_size=64,
                                    neg_sampling_ratio=1.0)
        torch.manual_seed(0)
        model = Both()
        outs = [model(b.x, b.edge_index, b.edge_label_index) for _, b in zip(range(3), loader)]
        return [z.sum(0) for z, _ in outs], {}, torch.cat([s for _, s in outs])

    trimmed, untrimmed, stats, _ = _runs(train, GRAPH)
    assert_same_training(trimmed, untrimmed)
    assert not _model(stats)["trimmed"]


def test_the_encoders_untrimmed_output_is_recomputed_when_read_beyond_the_seeds():
    """A trimmed forward's encoder output read beyond the seed rows later in training (the
    decoder reads every row at the fourth step) is recomputed untrimmed, with a warning, and
    training goes on exact."""

    def train(data):
        loader = LinkNeighborLoader(data, num_neighbors=[4, 4], batch_size=64, shuffle=True,
                                    neg_sampling_ratio=1.0)
        torch.manual_seed(0)
        model = LinkModel()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses, grads = [], {}
        for step, batch in zip(range(6), loader):
            model.read_all = step == 3
            opt.zero_grad()
            score = model(batch.x, batch.edge_index, batch.edge_label_index)
            loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)
            loss.backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters()}
            opt.step()
            losses.append(loss.item())
        return losses, grads, None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trimmed, untrimmed, stats, _ = _runs(train, GRAPH)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert model["materialized"] == 1 and not model["trimmed"], model
    assert model["trimmed_forwards"] == 3, model
    assert any(issubclass(w.category, TrimmingWarning) for w in caught)


def test_two_ranks_trimmed_at_the_encoder_equal_two_ranks_untrimmed():
    runs = {}
    for trim in (True, False):
        runtime = gnnorch.Runtime(_train_data_links(DATA_MODELS["sage-dot"], batches=3),
                                  processes=2, seed=SEED, trim=trim)
        runs[trim] = runtime(GRAPH)
        if trim:
            assert all(runtime.last_run.stats[r]["trim"]["models"][0]["encoder"] == "encoder"
                       for r in (0, 1))
    assert_same_training(runs[True], runs[False])


# --------------------------------------------------------------------------- HeteroData
class HeteroLinkModel(torch.nn.Module):
    """PyG's MovieLens link-prediction tutorial: per-type input projections, a `to_hetero` GNN
    encoder, a classifier on both ends' rows at ``edge_label_index``."""

    def __init__(self, data):
        super().__init__()
        self.author_lin = Linear(8, 16)
        self.paper_lin = Linear(8, 16)
        self.gnn = to_hetero(Sage(out=8), data.metadata(), aggr="sum")

    def forward(self, batch):
        x_dict = {"author": self.author_lin(batch["author"].x),
                  "paper": self.paper_lin(batch["paper"].x),
                  "venue": batch["venue"].x.new_zeros(batch["venue"].num_nodes, 16)}
        z = self.gnn(x_dict, batch.edge_index_dict)
        src, dst = batch[WRITES].edge_label_index
        return (z["author"][src] * z["paper"][dst]).sum(-1)


class PerTypeEncoders(torch.nn.Module):
    """PyG's `bipartite_sage_unsup`: an encoder per node type, of different depths over
    different edge types, each returning one tensor of its type's rows, scored by a decoder
    at ``edge_label_index``; the forward replaces an entry of the batch's ``x_dict``."""

    class Papers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = SAGEConv(-1, 16), SAGEConv(16, 8)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    class Authors(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = SAGEConv((-1, -1), 8)

        def forward(self, x_dict, edge_index_dict):
            return self.conv((x_dict["paper"], x_dict["author"]),
                             edge_index_dict["paper", "rev_writes", "author"])

    def __init__(self, data=None):
        super().__init__()
        self.lin = Linear(8, 8)
        self.paper_encoder, self.author_encoder = self.Papers(), self.Authors()

    def forward(self, batch):
        x_dict, edge_index_dict = batch.x_dict, batch.edge_index_dict
        x_dict["paper"] = self.lin(x_dict["paper"])
        z_paper = self.paper_encoder(x_dict["paper"], edge_index_dict["paper", "cites", "paper"])
        z_author = self.author_encoder(x_dict, edge_index_dict)
        src, dst = batch[WRITES].edge_label_index
        return (z_author[src] * z_paper[dst]).sum(-1)


def _train_hetero_links(data, make=HeteroLinkModel):
    loader = LinkNeighborLoader(data, num_neighbors=[4, 4], batch_size=32, shuffle=True,
                                edge_label_index=(WRITES, data[WRITES].edge_index),
                                neg_sampling_ratio=1.0)
    torch.manual_seed(0)
    model = make(data)
    with torch.no_grad():
        model(next(iter(loader)))
    return (*train_steps(model, loader, lambda model, batch: F.binary_cross_entropy_with_logits(
        model(batch), batch[WRITES].edge_label)), None)


def test_a_hetero_link_model_is_trimmed_at_its_to_hetero_encoder():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, stats, _ = _runs(_train_hetero_links, HETERO)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert model["trimmed"] and model["encoder"] == "gnn", model
    assert model["materialized"] == 0
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]


def test_a_hetero_link_model_with_an_encoder_per_node_type_is_trimmed_at_both():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, stats, _ = _runs(
            lambda data: _train_hetero_links(data, PerTypeEncoders), HETERO)
    assert_same_training(trimmed, untrimmed)
    model = _model(stats)
    assert model["trimmed"] and model["encoder"] == "paper_encoder and author_encoder", model
    assert model["layer_plan"] == [0, 1, 1] and model["materialized"] == 0, model
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]


def test_the_device_path_serves_encoder_trimmed_batches():
    trimmed, untrimmed, stats, _ = _runs(_train_hetero_links, HETERO,
                                         data_path={"mode": "device", "prefetch": 2})
    assert_same_training(trimmed, untrimmed)
    assert _model(stats)["encoder"] == "gnn"


def test_a_model_drawing_random_numbers_is_checked_from_one_random_state():
    """A model that draws random numbers in its forward (noise on its scores) draws the same in
    each of the check's forwards, so the check compares like with like and trims it."""

    class Noisy(LinkModel):
        def forward(self, x, edge_index, edge_label_index):
            score = super().forward(x, edge_index, edge_label_index)
            return score + 0.1 * torch.randn_like(score)

    trimmed, untrimmed, stats, _ = _runs(_train_data_links(Noisy, batches=4), GRAPH)
    assert_same_training(trimmed, untrimmed)
    assert _model(stats)["trimmed"] and _model(stats)["encoder"] == "encoder"


def test_modules_that_refuse_hooks_are_left_out_of_the_encoder_search():
    """A TorchScript sub-module takes no hooks: the search records the others (here: none
    spans the layer calls) and never raises."""
    from gnnorch.intercept.encoder import find_encoder

    class WithScript(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scripted = torch.jit.script(torch.nn.Linear(2, 2))

        def forward(self, x):
            return self.scripted(x)

    model = WithScript()
    for root in (model, model.scripted):
        output, found = find_encoder(root, lambda: model(torch.ones(3, 2)), lambda: 0, None)
        assert found is None and output.shape == (3, 2)
