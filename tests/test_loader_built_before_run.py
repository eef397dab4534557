"""A NeighborLoader built before the call (passed in as an argument) runs as PyG runs it: the
loader seam is set up at construction. The call says so -- a warning, the summary, the stats
and the tuner's reason -- instead of silently leaving the loader out; training is vanilla's."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets import load_cora


def train(loader, epochs=2):
    torch.manual_seed(3)
    model = GraphSAGE(1433, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                                   batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def test_loader_built_before_the_call_is_named_and_runs_as_pyg():
    data = load_cora()
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    torch.manual_seed(0)
    expected = train(loader)
    runtime = gnnorch.Runtime(train, verbose=False)
    torch.manual_seed(0)
    with pytest.warns(gnnorch.GnnorchWarning, match="built before the call") as record:
        losses = runtime(loader)
    assert sum("built before the call" in str(w.message) for w in record) == 1  # once
    assert losses == expected
    assert runtime.last_run.stats[0]["sampler"]["built_before_run"] == 1
    assert "1 loader built before the call, run as PyG runs it" in runtime.summary()
    if runtime.report is not None:
        assert "built before the call" in runtime.report.data["decision"]["reason"]
