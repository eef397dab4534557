"""Hop-aware trimming of disjoint (and temporal) neighbour samples. PyG samples them with
pyg-lib (`disjoint=True`, `time_attr`: gnnorch's sampler defers to PyG's there): each seed's
subgraph is its own, but the sampler still lays the batch out hop by hop, with per-hop counts,
so trimming applies as to any directional sample. Trimmed training equals untrimmed (losses and
gradients); without pyg-lib PyG cannot sample these loaders at all, and the tests skip."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.typing as pyg_typing
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
from torch_geometric.nn import GraphSAGE

from helpers import WRITES, assert_same_training, trimmed_and_untrimmed
from test_trim_encoder import GRAPH, HETERO, HeteroLinkModel

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not pyg_typing.WITH_PYG_LIB,
                                 reason="disjoint / temporal sampling needs pyg-lib")]

SEED = 5


def _steps(model, loader, loss_of, steps=6):
    """`steps` Adam steps over `loader`: the losses and the last step's gradients."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, grads = [], {}
    for _, batch in zip(range(steps), loader):
        opt.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        losses.append(loss.item())
    return losses, grads, None


def _train_disjoint_nodes(data):
    loader = NeighborLoader(data, num_neighbors=[4, 4], batch_size=32, shuffle=True,
                            disjoint=True)
    torch.manual_seed(0)
    labels = torch.arange(data.num_nodes) % 4

    def loss_of(model, batch):
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        return F.cross_entropy(out, labels[batch.n_id[:batch.batch_size]])

    return _steps(GraphSAGE(12, 16, 2, out_channels=4), loader, loss_of)


def _train_temporal_links(data):
    """A temporal link loader (disjoint by construction) training a model trimmed at its
    `to_hetero` encoder."""
    data = data.clone()
    data[WRITES].time = torch.arange(data[WRITES].num_edges)
    loader = LinkNeighborLoader(data, num_neighbors=[4, 4], batch_size=32, shuffle=True,
                                edge_label_index=(WRITES, data[WRITES].edge_index),
                                edge_label_time=data[WRITES].time, time_attr="time",
                                temporal_strategy="last",
                                neg_sampling=dict(mode="binary", amount=1))
    torch.manual_seed(0)
    model = HeteroLinkModel(data)
    with torch.no_grad():
        model(next(iter(loader)))

    def loss_of(model, batch):
        return F.binary_cross_entropy_with_logits(model(batch), batch[WRITES].edge_label)

    return _steps(model, loader, loss_of)


@pytest.mark.parametrize("train, data, encoder", [
    (_train_disjoint_nodes, GRAPH, None),
    (_train_temporal_links, HETERO, "gnn"),
])
def test_disjoint_samples_are_trimmed_exactly(train, data, encoder):
    trimmed, untrimmed, runtime = trimmed_and_untrimmed(train, data, SEED)
    assert_same_training(trimmed, untrimmed)
    stats = runtime.last_run.stats[0]["trim"]
    (model,) = stats["models"]
    assert model["trimmed"] and model["encoder"] == encoder, model
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]
