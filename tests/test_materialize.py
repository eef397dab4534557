"""A trimmed training forward's parameters, kept so that reading its output beyond the seed rows
after an optimizer step recomputes it exactly (`gnnorch.trim.materialize`)."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.errors import TrimmingError, TrimmingWarning
from gnnorch.trim.materialize import ParameterSnapshot, materializer
from gnnorch.trim.state import ModelState

from helpers import cora


class TwoDtypes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 2)
        self.b = torch.nn.Linear(2, 2).double()
        self.frozen = torch.nn.Parameter(torch.randn(4), requires_grad=False)


def test_snapshot_holds_the_values_of_its_moment_by_name_in_order():
    model = TwoDtypes()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    snapshot = ParameterSnapshot(list(model.named_parameters()))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    copies = snapshot.tensors()
    assert list(copies) == list(before)
    for name, p in model.named_parameters():
        assert torch.equal(copies[name], before[name]) and not torch.equal(copies[name], p)
        assert copies[name].shape == p.shape and copies[name].dtype == p.dtype
        assert copies[name].requires_grad == p.requires_grad and copies[name].is_leaf
    assert snapshot.tensors() is copies


def test_a_training_forward_reruns_with_its_own_parameters_after_a_step():
    model = torch.nn.Linear(3, 2)
    before = model.weight.detach().clone()
    runs = []
    read = materializer(model, ModelState("m"), 1,
                        lambda grad, training, parameters: runs.append(parameters) or
                        torch.zeros(1))
    with torch.no_grad():
        model.weight.mul_(2.0)
    with pytest.warns(TrimmingWarning):
        read("test")
    assert torch.equal(runs[0]["weight"], before)


def test_unchanged_parameters_rerun_with_the_models_own():
    model = torch.nn.Linear(3, 2)
    runs = []
    read = materializer(model, ModelState("m"), 1,
                        lambda grad, training, parameters: runs.append(parameters) or
                        torch.zeros(1))
    with pytest.warns(TrimmingWarning):
        read("test")
    assert runs == [None]


def test_a_replaced_parameter_counts_as_a_change():
    """Without a snapshot (an eval forward), a parameter replaced by another object (its
    version counter starts afresh) must not be taken for the forward's own."""
    model = torch.nn.Linear(3, 2).eval()
    with torch.no_grad():
        read = materializer(model, ModelState("m"), 1, lambda *a: torch.zeros(1))
    model.weight = torch.nn.Parameter(torch.zeros(2, 3))
    with pytest.raises(TrimmingError):
        read("test")


def reads_after_the_step(data):
    """Reads every row of each batch's output after ``optimizer.step()`` (logging a sum over
    all sampled vertices): the trimmed forward is recomputed with the weights it ran with."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=64, shuffle=True)
    model = GraphSAGE(data.num_features, 16, 2, 7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    logged = []
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)
        loss = F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        logged.append(out.detach().double().sum())
    return torch.stack(logged)


def test_reading_beyond_the_seeds_after_the_step_gives_the_forwards_values():
    data = cora()
    plain = gnnorch.Runtime(reads_after_the_step, processes=1, autotune=False, trim=False,
                            sampler="gnnorch")(data)
    runtime = gnnorch.Runtime(reads_after_the_step, processes=1, autotune=False,
                              sampler="gnnorch")
    with pytest.warns(TrimmingWarning, match="read beyond"):
        trimmed = runtime(data)
    torch.testing.assert_close(trimmed, plain, rtol=1e-5, atol=1e-6)
    model = runtime.last_run.stats[0]["trim"]["models"][0]
    assert model["materialized"] == 1 and not model["trimmed"]
