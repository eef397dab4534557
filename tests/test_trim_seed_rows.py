"""Models that keep only the seed rows themselves (``return x[:batch_size]`` in their forward,
as PyG's `infomax_inductive` encoder does, or a head on ``x_dict[seed_type][:batch_size]``, as
PyG's `rdl` example does): trimmed at their output, or at an encoder that does it, handed back
as they are (every row exact), with the same losses and gradients as untrimmed (forward and
backward). A module whose slice reaches beyond the seeds in a later batch (a constant
``x[:96]`` on a last, smaller batch) is recomputed untrimmed, with a warning; one that reads
other rows after its last layer is left whole by the one-off check, quietly."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import Linear, SAGEConv, to_hetero

from gnnorch.datasets import power_law_graph
from gnnorch.errors import TrimmingWarning

from helpers import (SageStack, assert_same_training, small_hetero_graph, train_steps,
                     trimmed_and_untrimmed)

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 3
DATA = power_law_graph(num_nodes=1500, avg_degree=8.0, num_features=16, num_classes=4,
                       train_ratio=0.5, val_ratio=0.1, test_ratio=0.4, seed=0)
HETERO = small_hetero_graph(topic=False, papers=300, authors=200)


class SeedNet(torch.nn.Module):
    """Three SAGE layers; the forward keeps the seed rows itself (`keep`: None, the
    ``batch_size`` argument; an int, a constant; "mean": the seed rows plus the mean of every
    row, a read beyond them)."""

    def __init__(self, keep=None):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(16, 32), SAGEConv(32, 32), SAGEConv(32, 4)])
        self.keep = keep

    def forward(self, x, edge_index, batch_size):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        if self.keep == "mean":
            return x[:batch_size] + x.mean(0)
        return x[:self.keep or batch_size]


class SummaryModel(torch.nn.Module):
    """DeepGraphInfomax's shape with one encoder call: an encoder returning the seed rows, and
    an output that is no tensor with a row per vertex (the rows and their summary)."""

    def __init__(self):
        super().__init__()
        self.encoder = SeedNet()

    def forward(self, x, edge_index, batch_size):
        z = self.encoder(x, edge_index, batch_size)
        return z, torch.sigmoid(z.mean(dim=0))


def _train(make, *, loss_of=None, epochs=2, evaluate=False):
    """Node classification on a power-law graph, each step's loss `loss_of(model, output,
    batch.y)` (default: cross-entropy of the output's rows): the losses of `epochs` epochs,
    the last step's gradients, and (`evaluate`) the predictions of an evaluation pass."""
    loss_of = loss_of or (lambda model, out, y: F.cross_entropy(out, y[:out.size(0)]))

    def train(data):
        loader = NeighborLoader(data, num_neighbors=[5, 5, 5], batch_size=96, shuffle=True,
                                input_nodes=data.train_mask)
        torch.manual_seed(0)
        model = make()
        losses, grads = train_steps(model, loader, lambda model, batch: loss_of(
            model, model(batch.x, batch.edge_index, batch.batch_size), batch.y), epochs)
        predictions = None
        if evaluate:
            model.eval()
            with torch.no_grad():
                predictions = torch.cat([
                    model(b.x, b.edge_index, b.batch_size)
                    for b in NeighborLoader(data, num_neighbors=[5, 5, 5], batch_size=128,
                                            input_nodes=data.test_mask)])
        return losses, grads, predictions
    return train


def _runs(train, data=DATA, **options):
    trimmed, untrimmed, runtime = trimmed_and_untrimmed(train, data, SEED, **options)
    (model,) = runtime.last_run.stats[0]["trim"]["models"]
    return trimmed, untrimmed, model, runtime


def test_a_model_returning_its_seed_rows_is_trimmed():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, model, runtime = _runs(_train(SeedNet, evaluate=True))
    assert_same_training(trimmed, untrimmed)
    assert model["trimmed"] and model["seeds_only"] and model["encoder"] is None, model
    assert model["trimmed_forwards"] > 0 and model["materialized"] == 0, model
    assert model["verified_by"] == "the one-off check"
    stats = runtime.last_run.stats[0]["trim"]
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"] / 2
    assert "SeedNet trimmed (verified" in runtime.summary()


def test_the_outputs_are_the_modules_own_tensors_not_wrappers():
    """Every row of a seed-rows output is exact: it is handed back as it is (a plain tensor,
    no recomputation on any read, however it is used)."""
    seen = []

    def loss_of(model, out, y):
        seen.append(type(out))
        return F.cross_entropy(out, y[:out.size(0)]) + out.sum() * 0.0

    trimmed, untrimmed, model, _ = _runs(_train(SeedNet, loss_of=loss_of, epochs=1))
    assert_same_training(trimmed, untrimmed)
    assert model["trimmed"] and set(seen) == {torch.Tensor}


def test_a_slice_reaching_beyond_the_seeds_later_is_recomputed_untrimmed():
    """A constant slice ``x[:96]``: the seed rows on full batches, more on the last, smaller
    one; that forward is recomputed untrimmed (its last layers' outputs are padded, so the
    rows it returns show the read), with a warning, and training equals untrimmed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trimmed, untrimmed, model, _ = _runs(_train(lambda: SeedNet(keep=96)))
    assert_same_training(trimmed, untrimmed)
    assert not model["trimmed"] and model["trimmed_forwards"] > 0, model
    assert "not the seed rows in a later forward" in model["reason"], model
    assert any(issubclass(w.category, TrimmingWarning) and "seed rows" in str(w.message)
               for w in caught)


def test_a_model_reading_other_rows_after_its_last_layer_is_left_whole_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, model, _ = _runs(_train(lambda: SeedNet(keep="mean"), epochs=1))
    assert_same_training(trimmed, untrimmed)
    assert not model["trimmed"] and not model["seeds_only"], model
    assert "differ" in model["reason"], model


def test_an_encoder_returning_the_seed_rows_is_trimmed_at():
    def loss_of(model, out, y):
        z, summary = out
        return F.cross_entropy(z, y[:z.size(0)]) + summary.sum()

    trimmed, untrimmed, model, runtime = _runs(_train(SummaryModel, loss_of=loss_of))
    assert_same_training(trimmed, untrimmed)
    assert model["trimmed"] and model["encoder"] == "encoder" and model["seeds_only"], model
    assert "trimmed at its encoder encoder" in runtime.summary()


def test_pygs_deep_graph_infomax_is_trimmed_at_its_encoders_two_calls():
    """PyG's `DeepGraphInfomax` (examples/infomax_inductive.py): its encoder, returning the
    seed rows, runs on the batch and on a corruption that permutes the batch's rows; the
    summary is the mean of the seed rows. Trimmed at both encoder calls, pass by pass."""
    from torch_geometric.nn import DeepGraphInfomax

    def make():
        return DeepGraphInfomax(
            hidden_channels=4, encoder=SeedNet(),
            summary=lambda z, *args, **kwargs: torch.sigmoid(z.mean(dim=0)),
            corruption=lambda x, edge_index, size: (x[torch.randperm(x.size(0))], edge_index,
                                                    size))

    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, model, runtime = _runs(
            _train(make, loss_of=lambda model, out, y: model.loss(*out)))
    assert_same_training(trimmed, untrimmed)
    assert model["trimmed"] and model["encoder"] == "encoder", model
    assert model["encoder_calls"] == 2 and model["layer_plan"] == [0, 1, 2, 0, 1, 2], model
    stats = runtime.last_run.stats[0]["trim"]
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]


def test_the_device_path_and_two_ranks_serve_seed_rows_models():
    trimmed, untrimmed, model, _ = _runs(_train(SeedNet, epochs=1),
                                         data_path={"mode": "device", "prefetch": 2})
    assert_same_training(trimmed, untrimmed)
    assert model["trimmed"]
    import gnnorch

    runs = {trim: gnnorch.Runtime(_train(SeedNet, epochs=1), processes=2, seed=SEED,
                                  trim=trim)(DATA) for trim in (True, False)}
    assert_same_training(runs[True], runs[False])


# --------------------------------------------------------------------------- HeteroData
class HeadOnSeeds(torch.nn.Module):
    """PyG's relational deep learning example (`examples/rdl.py`): a heterogeneous GNN and an
    MLP head on the seed type's seed rows, kept inside the forward."""

    def __init__(self, data):
        super().__init__()
        self.gnn = to_hetero(SageStack(out=16), data.metadata(), aggr="sum")
        self.head = Linear(16, 3)

    def forward(self, x_dict, edge_index_dict, batch_size):
        x_dict = self.gnn(x_dict, edge_index_dict)
        return self.head(x_dict["paper"][:batch_size])


def _train_hetero(data):
    loader = NeighborLoader(data, num_neighbors=[4, 4], batch_size=24, shuffle=True,
                            input_nodes=("paper", data["paper"].train_mask))
    torch.manual_seed(0)
    model = HeadOnSeeds(data)
    with torch.no_grad():
        first = next(iter(loader))
        model(first.x_dict, first.edge_index_dict, first["paper"].batch_size)

    def loss_of(model, batch):
        size = batch["paper"].batch_size
        out = model(batch.x_dict, batch.edge_index_dict, size)
        return F.cross_entropy(out, batch["paper"].y[:size])

    return (*train_steps(model, loader, loss_of, epochs=2), None)


def test_a_hetero_model_with_a_head_on_the_seed_rows_is_trimmed():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, untrimmed, model, runtime = _runs(_train_hetero, HETERO)
    assert_same_training(trimmed, untrimmed)
    assert model["trimmed"] and model["seeds_only"], model
    stats = runtime.last_run.stats[0]["trim"]
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]
