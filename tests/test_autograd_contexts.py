"""The user's own autograd contexts around a model under gnnorch.

* Evaluation under ``torch.inference_mode()`` before, between and after training epochs, on
  the training loader too: nothing gnnorch keeps across batches may become an inference tensor
  (which no in-place write outside that mode may touch).
* Activation checkpointing (``torch.utils.checkpoint``) of a whole model or of single layers
  (PyG's ``DeepGCNLayer(ckpt_grad=True)``), re-entrant or not: the backward pass recomputes the
  checkpointed forward and requires every saved tensor to come back with the shape it had, so
  the forward and its recomputation must run the same way. Losses and gradients equal those of
  the same model run without checkpointing, on the same batches.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import DeepGCNLayer, GENConv, GraphSAGE

import gnnorch
from gnnorch.datasets.synthetic import power_law_graph

DATA = power_law_graph(num_nodes=400, avg_degree=6.0, num_features=16, num_classes=4, seed=0)


# --------------------------------------------------------------------------- inference_mode

def _inference_mode_around_training(data, epochs=2):
    """Train a GraphSAGE; evaluate both loaders under inference_mode before the first epoch
    (so the samplers first run there) and after each epoch (no_grad on odd epochs)."""
    train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[5, 5],
                                  batch_size=32, shuffle=True)
    test_loader = NeighborLoader(data, input_nodes=data.test_mask, num_neighbors=[5, 5],
                                 batch_size=64)
    model = GraphSAGE(data.num_features, 16, 2, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def evaluate(loader, inference: bool) -> int:
        model.eval()
        seen = 0
        with torch.inference_mode() if inference else torch.no_grad():
            for batch in loader:
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                assert out.shape[0] == batch.batch_size
                seen += batch.batch_size
        return seen

    evaluated = [evaluate(train_loader, True), evaluate(test_loader, True)]
    losses = []
    for epoch in range(epochs):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
        evaluated += [evaluate(train_loader, epoch % 2 == 0),
                      evaluate(test_loader, epoch % 2 == 0)]
    return {"evaluated": evaluated, "losses": losses}


@pytest.mark.parametrize("options", [{}, {"data_path": "device"}, {"cache": True}],
                         ids=["default", "device", "cache"])
def test_inference_mode_evaluation_around_training(options):
    want = _inference_mode_around_training(DATA)
    got = gnnorch.Runtime(_inference_mode_around_training, seed=0, **options)(DATA)
    assert got["evaluated"] == want["evaluated"]
    assert len(got["losses"]) == len(want["losses"])
    assert all(math.isfinite(loss) for loss in got["losses"])


# --------------------------------------------------------------------------- checkpointing

class WholeGNN(torch.nn.Module):
    """A BasicGNN run under one checkpoint inside the model (re-entrant checkpointing needs an
    input that requires grad: the encoder's output)."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(16, 16)
        self.gnn = GraphSAGE(16, 16, 2, 4)
        self.reentrant = reentrant

    def forward(self, x, edge_index, checkpointed: bool = True):
        x = self.encoder(x)
        if not checkpointed:
            return self.gnn(x, edge_index)
        return checkpoint(self.gnn, x, edge_index, use_reentrant=self.reentrant)


class EachLayer(torch.nn.Module):
    """A hand-written stack checkpointing every layer call (checked, then trimmed: the plain
    twin is)."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(16, 16)
        self.gnn = GraphSAGE(16, 16, 2, 4)
        self.reentrant = reentrant

    def forward(self, x, edge_index, checkpointed: bool = True):
        x = self.encoder(x)
        for i, conv in enumerate(self.gnn.convs):
            x = (checkpoint(conv, x, edge_index, use_reentrant=self.reentrant)
                 if checkpointed else conv(x, edge_index))
            x = x.relu() if i == 0 else x
        return x


class DeeperGCN(torch.nn.Module):
    """PyG's DeepGCNLayer with ckpt_grad on every other layer (examples/ogbn_proteins_deepgcn.py,
    dropout 0 so that both twins draw nothing)."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        del reentrant      # DeepGCNLayer's own choice (use_reentrant=True)
        self.lin_in = torch.nn.Linear(16, 16)
        self.layers = torch.nn.ModuleList()
        for i in range(3):
            conv = GENConv(16, 16, aggr="softmax", t=1.0, learn_t=True, num_layers=2)
            self.layers.append(DeepGCNLayer(conv, torch.nn.LayerNorm(16), torch.nn.ReLU(),
                                            block="res+", dropout=0.0, ckpt_grad=i % 2 == 1))
        self.lin_out = torch.nn.Linear(16, 4)

    def forward(self, x, edge_index, checkpointed: bool = True):
        flags = [layer.ckpt_grad for layer in self.layers]
        try:
            for layer in self.layers:
                layer.ckpt_grad = layer.ckpt_grad and checkpointed
            x = self.lin_in(x)
            x = self.layers[0].conv(x, edge_index)
            for layer in self.layers[1:]:
                x = layer(x, edge_index)
            return self.lin_out(self.layers[0].act(self.layers[0].norm(x)))
        finally:
            for layer, flag in zip(self.layers, flags):
                layer.ckpt_grad = flag


class Plain(torch.nn.Module):
    """The same model and weights, never checkpointed (a root of its own for the seam)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x, edge_index):
        return self.model(x, edge_index, checkpointed=False)


class Root(torch.nn.Module):
    """The training loop checkpoints the model itself: ``checkpoint(model, x, edge_index)``
    (a trusted BasicGNN, whose first forward would be speculated)."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.gnn = GraphSAGE(16, 16, 2, 4)

    def forward(self, x, edge_index, checkpointed: bool = True):
        del checkpointed    # never called: see `_forward`
        raise AssertionError("Root is checkpointed from the loop")


def _forward(net, batch):
    if isinstance(net, Root):
        return checkpoint(net.gnn, batch.x, batch.edge_index, use_reentrant=False)
    return net(batch.x, batch.edge_index)


def _checkpointed_against_plain(data, kind: str, reentrant: bool, batches: int = 4):
    """On the same batches, losses and gradients of the checkpointed model and of its plain
    twin (same weights); the largest differences over the batches."""
    torch.manual_seed(0)
    model = MODELS[kind](reentrant)
    twin = (copy.deepcopy(model.gnn) if isinstance(model, Root)
            else Plain(copy.deepcopy(model)))
    loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[5, 5],
                            batch_size=32, shuffle=True)
    loss_diff = grad_diff = 0.0
    for i, batch in enumerate(loader):
        if i == batches:
            break
        results = []
        for net in (model, twin):
            net.zero_grad()
            out = _forward(net, batch)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            grads = [p.grad.clone() for p in net.parameters() if p.grad is not None]
            results.append((float(loss), grads))
        (loss_a, grads_a), (loss_b, grads_b) = results
        assert len(grads_a) == len(grads_b) > 0
        loss_diff = max(loss_diff, abs(loss_a - loss_b))
        grad_diff = max(grad_diff, *((a - b).abs().max().item()
                                     for a, b in zip(grads_a, grads_b)))
    return {"loss_diff": loss_diff, "grad_diff": grad_diff}


MODELS = {"whole-gnn": WholeGNN, "each-layer": EachLayer, "deepgcn-layer": DeeperGCN,
          "root": Root}


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_checkpointed_models_match_their_plain_twin(kind, reentrant):
    if kind == "deepgcn-layer" and not reentrant:
        pytest.skip("DeepGCNLayer chooses use_reentrant itself")
    if kind == "root" and reentrant:
        pytest.skip("a re-entrant checkpoint needs an input that requires grad")
    runtime = gnnorch.Runtime(_checkpointed_against_plain, seed=0)
    got = runtime(DATA, kind, reentrant)
    assert got["loss_diff"] < 1e-5 and got["grad_diff"] < 1e-5
    models = runtime.last_run.stats[0]["trim"]["models"]
    checkpointed = [m for m in models if m["reason"] and "checkpoint" in m["reason"]]
    assert checkpointed and not any(m["trimmed_forwards"] for m in checkpointed)
    assert all(m["checkpointed_calls"] > 0 for m in checkpointed)
    if kind != "deepgcn-layer":     # the plain twin is still trimmed (exact)
        assert any(m["trimmed"] and m["trimmed_forwards"] > 0 for m in models)


def test_checkpointed_model_with_the_cache():
    runtime = gnnorch.Runtime(_checkpointed_against_plain, seed=0, cache=True)
    got = runtime(DATA, "each-layer", False)
    assert got["loss_diff"] < 1e-5 and got["grad_diff"] < 1e-5
