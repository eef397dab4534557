"""Rewrites under the runtime: the user's unchanged training loop learns the same thing with
rewrite on, off and "report", and the decisions reach `last_run.stats`."""
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GCN

import gnnorch

from helpers import cora


def train_gcn(data, epochs=2):
    """Plain PyG: a 2-layer GCN on sampled Cora batches (GCN is rewritten aggregate-first)."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                            batch_size=35, shuffle=True)
    model = GCN(data.num_features, 64, 2, 7, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                                   batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def run(mode):
    runtime = gnnorch.Runtime(train_gcn, processes=1, sampler="gnnorch", rewrite=mode)
    return runtime(cora()), runtime.last_run.stats[0]


def test_rewrite_keeps_the_loss_curve_and_reports():
    off, stats_off = run(False)
    on, stats_on = run(True)
    report, stats_report = run("report")
    torch.testing.assert_close(torch.tensor(on), torch.tensor(off), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(report), torch.tensor(off), rtol=1e-4, atol=1e-5)
    assert "rewrite" not in stats_off
    layers = stats_on["rewrite"]["layers"]
    assert {entry["type"] for entry in layers} == {"GCNConv"}
    assert all(entry["calls"] > 0 for entry in layers)
    assert all(entry["rewritten_calls"] == 0 for entry in stats_report["rewrite"]["layers"])


def _autocast_outputs(data):
    """A GraphSAGE forward under torch.autocast(bfloat16) on each batch: the output dtypes."""
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                            batch_size=35)
    model = GraphSAGE(data.num_features, 64, 2, 7)
    dtypes = []
    for batch in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            dtypes.append(model(batch.x, batch.edge_index).dtype)
    return dtypes


def test_rewrites_step_aside_under_autocast():
    """Found by a user idiom: SAGE's transform-first order added lin_l's float32 bias after
    the aggregation, which promoted autocast's bfloat16 output to float32 (PyG's own order
    stays bfloat16), and rounds in other places in reduced precision. Under autocast the
    layer keeps PyG's order."""
    runtime = gnnorch.Runtime(_autocast_outputs, processes=1, sampler="gnnorch", rewrite=True)
    assert set(runtime(cora())) == {torch.bfloat16}
    for entry in runtime.last_run.stats[0]["rewrite"]["layers"]:
        assert entry["rewritten_calls"] == 0
        assert any("autocast is on" in why for why in entry["left_alone"])
