"""The cache's write-back (`CacheConfig.write_back`): rows a training batch computes for hot
vertices at shallower hops become their stored rows, at the step's version; the bound holds;
fewer rows are refreshed; where the batch's row is not a cached row's law, it stays off and
says why."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GINConv

from gnnorch.cache import CacheConfig, CacheStatus
from gnnorch.cache.writeback import dropout_inside
from gnnorch.intercept.session import active

from helpers import cora
from test_cache import _independent_age, _steps_train, run

pytestmark = pytest.mark.usefixtures("one_thread")


def _shallow_hot(batch, store):
    """(batch rows, store slots) of hot vertices at hops 0..L-2, from the batch's own fields."""
    hops = len(batch.num_sampled_nodes) - 1
    lo = sum(batch.num_sampled_nodes[:hops - 1])
    slots = store.slots_of(batch.n_id[:lo])
    rows = (slots >= 0).nonzero().view(-1)
    return rows, slots[rows]


def _rows_match_the_batch(batch, steps):
    """Every hot vertex at a shallow hop of this batch: its stored row is SAGEConv's row on the
    batch's in-edges with the weights of this step (computed here, independently), its version
    this step, its stored aggregate the mean of its in-neighbours' raw features. Returns the
    number of rows checked."""
    lc = active().cache.loaders[0]
    if lc.status is not CacheStatus.ACTIVE or steps == 0:
        # the first forward runs exactly (admission); the store is filled by refreshes at
        # its end
        return 0
    store = lc.store
    rows, slots = _shallow_hot(batch, store)
    if rows.numel() == 0:
        return 0
    conv = lc.served.layer            # the model's own bottom layer, with this step's weights
    src, dst = batch.edge_index
    agg = torch.zeros(rows.numel(), batch.x.size(1))
    count = torch.zeros(rows.numel())
    position = torch.full((batch.num_nodes,), -1)
    position[rows] = torch.arange(rows.numel())
    into = position[dst] >= 0
    agg.index_add_(0, position[dst[into]], batch.x[src[into]])
    count.index_add_(0, position[dst[into]], torch.ones(int(into.sum())))
    agg = agg / count.clamp_min(1).view(-1, 1)
    with torch.no_grad():
        expected = conv.lin_l(agg) + conv.lin_r(batch.x[rows])
    assert store.version[slots].tolist() == [steps] * rows.numel()
    torch.testing.assert_close(store.read(slots), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(store.read_aux(slots), agg, rtol=1e-5, atol=1e-6)
    return rows.numel()


def test_written_back_rows_are_the_batch_rows_at_the_step():
    data = cora()
    config = CacheConfig(staleness=2, hot_ratio=0.3, refresh="sample", overlap="off")
    (steps, checked), stats = run(_steps_train, data, 2, kw=dict(check=_rows_match_the_batch),
                                  cache=config)
    assert stats["status"] == "active" and stats["write_back"] == "on"
    assert stats["gradient"] == "linear"
    assert checked > 0 and stats["written_back_rows"] > 0


@pytest.mark.parametrize("overlap", ["off", "thread"])
def test_write_back_keeps_the_bound_and_refreshes_fewer_rows(overlap):
    data = cora()
    bound = 2
    counts = {}
    for write_back in (True, False):
        config = CacheConfig(staleness=bound, hot_ratio=0.3, refresh="sample", overlap=overlap,
                             write_back=write_back, debug=overlap == "thread")
        # the run's seed pinned: by default it is torch.initial_seed(), whatever the tests
        # before left it at
        (steps, seen), stats = run(_steps_train, data, 4, kw=dict(check=_independent_age),
                                   cache=config, seed=0)
        assert stats["status"] == "active"
        assert seen <= bound and stats["max_staleness_seen"] <= bound
        counts[write_back] = (stats["written_back_rows"],
                              stats["refresh_rows"] + stats["background_rows"],
                              stats["refresh_gathered_vertices"])
    (written, refreshed, gathered), (written_off, refreshed_off, gathered_off) = \
        counts[True], counts[False]
    assert written > 0 and written_off == 0
    assert refreshed < refreshed_off and gathered < gathered_off


@pytest.mark.parametrize("config, kind, why", [
    (CacheConfig(hot_ratio=0.3, refresh="full"), "sage", "refresh neighbourhood is full"),
    (CacheConfig(hot_ratio=0.3, refresh="sample", write_back=False), "sage", "write_back=False"),
    (CacheConfig(hot_ratio=0.3, refresh="sample"), "gcn", "store='aggregate'"),
])
def test_write_back_says_why_it_is_off(config, kind, why):
    data = cora()
    _, stats = run(_steps_train, data, 1, kw=dict(kind=kind), cache=config)
    assert stats["status"] == "active"
    assert stats["write_back"].startswith("off") and why in stats["write_back"]
    assert stats["written_back_rows"] == 0


def _gat_train(data, dropout):
    from torch_geometric.nn import GATConv

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATConv(data.num_features, 8, heads=2, dropout=dropout)
            self.conv2 = GATConv(16, 7, heads=1)

        def forward(self, x, edge_index):
            return self.conv2(F.elu(self.conv1(x, edge_index)), edge_index)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=16, shuffle=True)
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()


@pytest.mark.parametrize("dropout", [0.0, 0.6])
def test_bottom_layer_with_attention_dropout_writes_nothing_back(dropout):
    data = cora()
    _, stats = run(_gat_train, data, dropout,
                   cache=CacheConfig(hot_ratio=0.3, refresh="sample", overlap="off"))
    assert stats["status"] == "active"
    if dropout:
        assert "dropout" in stats["write_back"] and stats["written_back_rows"] == 0
    else:
        assert stats["write_back"] == "on" and stats["written_back_rows"] > 0


def test_dropout_inside_names_modules_and_rates():
    gin = GINConv(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)))
    assert "Dropout" in dropout_inside(gin) and "p=0.5" in dropout_inside(gin)
    assert dropout_inside(GINConv(torch.nn.Sequential(torch.nn.Linear(4, 4),
                                                      torch.nn.Dropout(0.0)))) is None
    from torch_geometric.nn import GATConv, SAGEConv

    assert dropout_inside(GATConv(4, 4, dropout=0.2)) == "GATConv.dropout=0.2"
    assert dropout_inside(GATConv(4, 4)) is None and dropout_inside(SAGEConv(4, 4)) is None
