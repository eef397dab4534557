"""The tuner runs the user's function more than once (the default run, probes, the real run).
A function that changes its arguments in place -- PyG's mag240m_graphsage.py deletes the masks
of the `data` it was given; a function handed a model trains it -- would hand the next run
changed arguments. The default run checks its arguments at its decision: changed, it goes on
as the real run, untuned, and the report says what changed; the call equals an untuned call."""
import os

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets import load_cora
from gnnorch.tune.arguments import Fingerprint
from gnnorch.tune.schema import validate

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
FORCE_ONE_RANK = {"max_overhead": 1e9, "max_processes": 1, "probe_batches": 6,
                  "warmup_batches": 2}


# -- the fingerprint ------------------------------------------------------------------------
def test_unchanged_arguments_have_no_changes():
    data = load_cora()
    model = torch.nn.Linear(3, 2)
    extra = {"k": torch.ones(2), "name": "cora", "lr": float("nan")}
    before = Fingerprint.of((data, [model], extra), {"epochs": 3})
    data.x = data.x.float()              # no copy: the same tensor
    data.to("cpu")                       # the same tensors put back
    data.y = data.y.view(-1)             # a new view of the same memory, same layout
    data.num_classes = 7                 # added: a re-run assigns it again
    assert before.changes(Fingerprint.of((data, [model], extra), {"epochs": 3})) == []
    assert "replaced" in before.changes(Fingerprint.of((data, [model], extra),
                                                       {"epochs": 4}))[0]


def test_deleted_replaced_and_in_place_changes_are_named():
    data = load_cora()
    before = Fingerprint.of((data, ), {})
    del data.val_mask
    data.y = data.y.clone()
    data.x.mul_(2)
    data.extra = torch.zeros(1)                       # added: a re-run sets it again
    changes = before.changes(Fingerprint.of((data, ), {}))
    assert any("val_mask" in c and "deleted" in c for c in changes), changes
    assert any(".y" in c and "replaced" in c for c in changes), changes
    assert any(".x" in c and "in place" in c for c in changes), changes
    assert not any("extra" in c for c in changes), changes


def test_tensors_moved_to_shared_memory_are_not_changes():
    """torch's multiprocessing pickler moves a tensor's storage into shared memory in place
    when the arguments go to rank processes: the same object, values and version, a new
    pointer. That is no change; a shared copy put in its place is one."""
    data = load_cora()
    data.train_mask.share_memory_()                   # shared before: stays so
    before = Fingerprint.of((data, ), {})
    pointer = data.x.data_ptr()
    data.x.share_memory_()
    data.edge_index.share_memory_()
    assert data.x.data_ptr() != pointer               # the move this test is about
    assert before.changes(Fingerprint.of((data, ), {})) == []
    data.y = data.y.clone().share_memory_()
    data.edge_index.mul_(1)
    changes = before.changes(Fingerprint.of((data, ), {}))
    assert any(".y" in c and "replaced" in c for c in changes), changes
    assert any(".edge_index" in c and "in place" in c for c in changes), changes


@TWO_CORES
def test_arguments_sent_to_rank_processes_are_unchanged_for_the_next_run():
    """A run with two ranks sends the arguments to them (moving the caller's tensors into
    shared memory); a probe in the caller afterwards found them "replaced" and stopped the
    call (ArgumentsChangedError, seen tuning a to_hetero model)."""
    data = load_cora()
    before = Fingerprint.of((data, ), {})
    gnnorch.Runtime(_count_batches, processes=2, autotune=False)(data)
    assert before.changes(Fingerprint.of((data, ), {})) == []


def _count_batches(data):
    loader = NeighborLoader(data, num_neighbors=[3], batch_size=256, input_nodes=data.train_mask)
    return sum(1 for _ in loader)


def test_hetero_store_and_model_parameters():
    data = HeteroData()
    data['paper'].x = torch.randn(4, 3)
    data['paper'].train_mask = torch.ones(4, dtype=torch.bool)
    data['paper', 'cites', 'paper'].edge_index = torch.tensor([[0, 1], [1, 2]])
    model = torch.nn.Linear(3, 2)
    before = Fingerprint.of((0, data), {"model": model})
    del data['paper'].train_mask
    with torch.no_grad():
        model.weight.add_(1.0)
    changes = before.changes(Fingerprint.of((0, data), {"model": model}))
    assert any("paper" in c and "train_mask" in c for c in changes), changes
    assert any("model" in c and "weight" in c for c in changes), changes


# -- the tuned call -------------------------------------------------------------------------
def _steps(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def train_given_model(model, data, epochs=6):
    """A function handed its model: training changes the caller's parameters in place."""
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    return _steps(model, loader, epochs)


def train_deleting_masks(data, epochs=6):
    """PyG's mag240m_graphsage.py: the masks are read, then deleted from the caller's data."""
    train_idx = data.train_mask.nonzero().view(-1)
    del data.train_mask, data.val_mask, data.test_mask
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=train_idx,
                            batch_size=20, shuffle=True)
    torch.manual_seed(3)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    return _steps(model, loader, epochs)


def _untuned(fn, *args, **kwargs):
    return gnnorch.Runtime(fn, autotune=False, processes=1)(*args, **kwargs)


@TWO_CORES
def test_model_trained_in_place_is_not_tuned_and_equals_the_untuned_call(capsys):
    data = cora()
    torch.manual_seed(5)
    init = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7).state_dict()

    def model():
        m = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
        m.load_state_dict(init)
        return m

    torch.manual_seed(1)
    expected = _untuned(train_given_model, model(), data)
    torch.manual_seed(1)
    runtime = gnnorch.Runtime(train_given_model, tune=FORCE_ONE_RANK)
    given = model()
    losses = runtime(given, data)
    report = runtime.report
    reason = report.data["decision"]["reason"]
    assert not report.tuned and "changed its arguments" in reason and "weight" in reason
    assert validate(report.data) == []
    assert len(losses) == len(expected) == 42
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4,
                               atol=1e-5)


@TWO_CORES
def test_deleted_attributes_do_not_break_the_call(capsys):
    torch.manual_seed(1)
    expected = _untuned(train_deleting_masks, load_cora())   # fresh objects: cora() is shared
    data = load_cora()
    torch.manual_seed(1)
    runtime = gnnorch.Runtime(train_deleting_masks, tune=FORCE_ONE_RANK)
    losses = runtime(data)
    reason = runtime.report.data["decision"]["reason"]
    assert not runtime.report.tuned and "train_mask" in reason and "deleted" in reason
    assert "train_mask" not in data                    # the call did what the function does
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4,
                               atol=1e-5)


CALLS: list[int] = []


def train_changing_on_second_call(data, epochs=6):
    """Changes nothing in its first call (the default run), then deletes an attribute in its
    second (the first probe, one rank in the caller's process)."""
    CALLS.append(1)
    if len(CALLS) == 2:
        del data.val_mask
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    torch.manual_seed(3)
    return _steps(GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7), loader,
                  epochs)


@TWO_CORES
def test_probe_that_changes_the_arguments_stops_the_call_with_a_clear_error(capsys):
    CALLS.clear()
    runtime = gnnorch.Runtime(train_changing_on_second_call, tune=FORCE_ONE_RANK)
    with pytest.raises(gnnorch.ArgumentsChangedError, match=r"probe 1 .*val_mask deleted"):
        runtime(load_cora())
    assert len(CALLS) == 2 and runtime.report.status == "failed"
