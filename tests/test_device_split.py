"""Split feature placement on the device data path: the hottest rows on the device, the rest on
the host (`gnnorch.device.hot_rows`, `gnnorch.device.split_rows`, the placement rule), with
the CPU as the device; batches equal to the plain path's are checked in
`test_device_path.test_same_batches_as_the_plain_path`."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE
from torch_geometric.sampler.utils import to_csc

import gnnorch

from gnnorch.datasets.synthetic import power_law_graph
from gnnorch.device.gather import GatherPlan, ResidentTensors
from gnnorch.device.hot_rows import expected_gathers, rank_rows
from gnnorch.device.placement import (SPLIT, SPLIT_MIN_SHARE, feature_bytes,
                                      plan_data_placement, structure_bytes)
from gnnorch.device.split_rows import TABLE_BYTES, SplitCounts, SplitRows
from gnnorch.intercept.device_decisions import ranking_device
from gnnorch.sampling.uniform import new_workspace, sample_neighbors

from helpers import cora


# ------------------------------------------------------------------------- the ranking
def _counted_gathers(colptr, row, seeds, fanouts, batch_size, epochs, seed=0):
    """Batches per epoch in which each vertex's row is gathered, counted with the sampler."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(colptr.numel() - 1, dtype=torch.float64)
    workspace = new_workspace(colptr.numel() - 1)
    for _ in range(epochs):
        perm = seeds[torch.randperm(seeds.numel(), generator=gen)]
        for start in range(0, perm.numel(), batch_size):
            out = sample_neighbors(colptr, row, perm[start:start + batch_size], fanouts,
                                   generator=gen, workspace=workspace)
            counts.index_add_(0, out.node, torch.ones(out.node.numel(), dtype=torch.float64))
    return counts / epochs


def test_expected_gathers_predict_the_share_the_hottest_rows_serve():
    data = power_law_graph(num_nodes=5000, avg_degree=15.0, num_features=4, num_classes=3,
                           seed=0)
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    seeds = data.train_mask.nonzero().view(-1)
    fanouts, batch_size = [10, 5, 3], 32
    ranking = rank_rows(colptr, row, seeds, fanouts, batch_size)
    counted = _counted_gathers(colptr, row, seeds, fanouts, batch_size, epochs=6)
    # every vertex the batches reached is ranked (and some they could reach but did not)
    assert set(counted.nonzero().view(-1).tolist()) <= set(ranking.order.tolist())
    assert math.isclose(ranking.total, float(counted.sum()), rel_tol=0.1)
    for k in (100, 500, 1500):
        hot = ranking.hottest(k)
        assert hot.numel() == k and torch.equal(hot, hot.sort().values)
        measured = float(counted[hot].sum() / counted.sum())
        assert abs(ranking.share(k) - measured) < 0.03, (k, ranking.share(k), measured)
        # and the ranking is about as good as ranking by the counts themselves
        best = float(counted.sort(descending=True).values[:k].sum() / counted.sum())
        assert measured >= best - 0.05, (k, measured, best)
    assert ranking.share(0) == 0.0 and ranking.share(10 ** 9) == pytest.approx(1.0)


def test_float32_flows_rank_as_float64_does():
    data = power_law_graph(num_nodes=20000, avg_degree=20.0, num_features=4, num_classes=3,
                           seed=4)
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    seeds = data.train_mask.nonzero().view(-1)
    ranking = rank_rows(colptr, row, seeds, [15, 10, 5], 256)
    reference = expected_gathers(colptr, row, seeds, [15, 10, 5], 256,
                                 flow_dtype=torch.float64)
    assert ranking.total == pytest.approx(float(reference.sum()), rel=1e-6)
    best = reference.sort(descending=True).values.cumsum(0) / reference.sum()
    for k in (50, 1000, 5000):
        assert ranking.share(k) == pytest.approx(float(best[k - 1]), abs=1e-6)
        # the rows kept serve the reference's share: near-ties may swap, nothing else
        kept = float(reference[ranking.hottest(k)].sum() / reference.sum())
        assert kept == pytest.approx(float(best[k - 1]), abs=1e-6)


def test_a_non_float_flow_dtype_is_refused_with_what_to_pass():
    colptr, row = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
    with pytest.raises(ValueError, match="torch.float32 or torch.float64"):
        rank_rows(colptr, row, torch.tensor([0]), [1], 1, flow_dtype=torch.int64)


def test_rows_out_of_reach_are_never_ranked():
    # 0 <- 1 <- 2 <- 3 (edge j -> j-1): one seed, two hops of full neighbourhoods
    colptr = torch.tensor([0, 1, 2, 3, 3])
    row = torch.tensor([1, 2, 3])
    ranking = rank_rows(colptr, row, torch.tensor([0]), [-1, -1], batch_size=1)
    # vertices 0, 1, 2 are reached (each hop less surely under the Poisson model), 3 is not
    assert ranking.order.tolist() == [0, 1, 2] and ranking.share(3) == pytest.approx(1.0)
    assert 0 < ranking.share(1) < 1


# ------------------------------------------------------------------------- the rule
def _tensors(n=1000, f=100):
    return {"x": torch.zeros(n, f), "y": torch.zeros(n, dtype=torch.long)}


def test_features_that_do_not_fit_are_split_when_the_hottest_rows_pay():
    tensors, row_bytes = _tensors(), 100 * 4 + 8
    s = structure_bytes(1000, 20_000)
    asked = []

    def share(k):
        asked.append(k)
        return k / 1000 * 2   # the hottest rows serve twice their share of the rows

    table = TABLE_BYTES * 1000   # the slot table comes out of the budget
    plan = plan_data_placement(1000, 20_000, tensors,
                               budget_bytes=s + table + 250 * row_bytes + 7,
                               row_bytes=row_bytes, device_share=share)
    assert plan.features == "split" and plan.device_rows == 250 and asked == [250]
    assert plan.device_share == pytest.approx(0.5) and plan.host_rows == "pinned"
    assert "split, the 250 hottest of 1000 rows" in plan.reasons[1] and "50.0 %" in plan.reasons[1]
    assert plan.to_dict()["device_rows"] == 250
    # too few rows to pay: the host, and the reason says what the split would have served
    few = s + table + int(SPLIT_MIN_SHARE * 1000 / 2 * 0.5) * row_bytes
    plan = plan_data_placement(1000, 20_000, tensors, budget_bytes=few, row_bytes=row_bytes,
                               device_share=share, pin=False)
    assert plan.features == "host" and plan.device_rows == 0
    assert "under the 5 % a split needs" in plan.reasons[1]
    # whole features that fit never ask; features forced to the host never split
    asked.clear()
    fits = s + feature_bytes(tensors)
    assert plan_data_placement(1000, 20_000, tensors, budget_bytes=fits, row_bytes=row_bytes,
                               device_share=share).features == "gpu"
    assert plan_data_placement(1000, 20_000, tensors, budget_bytes=s + 500 * row_bytes,
                               row_bytes=row_bytes, device_share=share,
                               features_host=True).features == "pinned"
    assert asked == []
    # without a ranking (or a row size) the rule is the whole-or-host one
    assert plan_data_placement(1000, 20_000, tensors,
                               budget_bytes=s + 500 * row_bytes).features == "pinned"


# ------------------------------------------------------------------------- the gather
@pytest.mark.parametrize("hot_count", [0, 3, 17, 40])
def test_split_rows_gather_equals_indexing_the_whole_tensor(hot_count):
    gen = torch.Generator().manual_seed(hot_count)
    n = 40
    hot = torch.randperm(n, generator=gen)[:hot_count].sort().values
    counts = SplitCounts()
    split = SplitRows(hot, n, torch.device("cpu"), pin=False, counts=counts)
    sources = [torch.randn(n, 5, generator=gen), torch.randint(0, 9, (n,), generator=gen),
               torch.rand(n, generator=gen) > 0.5, torch.randn(n, 2, 3, generator=gen)]
    total = 0
    for index in (torch.randperm(n, generator=gen)[:25], torch.arange(n),
                  torch.empty(0, dtype=torch.long)):
        found = split.lookup(index)
        total += index.numel()
        for source in sources:
            out = split.gather(source, source.index_select(0, hot), found)
            assert out.dtype == source.dtype and torch.equal(out, source[index])
    assert counts.device + counts.host == total
    assert counts.device == (0 if hot_count == 0 else counts.device)
    if hot_count == n:
        assert counts.host == 0


# ------------------------------------------------------------------------- a run
def _split_graph():
    """A graph and a budget that holds its CSC, the split's slot table and 200 rows of x, y
    and the three masks: its features split."""
    data = power_law_graph(num_nodes=600, avg_degree=8.0, num_features=16, num_classes=4,
                           seed=1)
    row_bytes = 16 * 4 + 8 + 3
    return data, (structure_bytes(data.num_nodes, data.edge_index.size(1))
                  + TABLE_BYTES * 600 + 200 * row_bytes)


def _train(data, epochs, budget):
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, 2, out_channels=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[5, 3], batch_size=32, shuffle=True,
                            input_nodes=data.train_mask)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    return losses


def test_a_split_run_trains_as_the_host_features_run_and_says_so():
    data, budget = _split_graph()
    runs = {}
    for name, config in (
            ("split", {"mode": "device", "budget_bytes": budget}),
            ("host", {"mode": "device", "features": "host"})):
        runtime = gnnorch.Runtime(_train, processes=1, autotune=False, verbose=False,
                                  data_path=config, seed=3)
        runs[name] = (runtime(data, 2, None), runtime)
    assert runs["split"][0] == runs["host"][0]      # the same batches: the same losses
    runtime = runs["split"][1]
    loader = runtime.last_run.stats[0]["device"]["loaders"][0]
    assert loader["features"] == "split" and loader["placement"]["device_rows"] == 200
    rows = loader["split_rows"]
    assert rows["device"] > 0 and rows["host"] > 0
    measured = rows["device"] / (rows["device"] + rows["host"])
    assert abs(measured - loader["placement"]["device_share"]) < 0.1, (measured, loader)
    assert "features split (hottest rows on cpu" in runtime.summary()
    assert loader["ranking_on"] == "cpu" and loader["ranking_s"] > 0   # the host ranks for it


def test_deterministic_algorithms_keep_the_ranking_on_the_host():
    # decided before any CUDA call: runs without a GPU too
    row = torch.zeros(10, dtype=torch.long)
    torch.use_deterministic_algorithms(True)
    try:
        assert ranking_device(torch.device("cuda", 0), 10, row) == torch.device("cpu")
    finally:
        torch.use_deterministic_algorithms(False)
    assert ranking_device(torch.device("cpu"), 10, row) == torch.device("cpu")


@pytest.mark.gpu
def test_cuda_ranking_equals_the_hosts():
    device = torch.device("cuda", torch.cuda.current_device())
    data = power_law_graph(num_nodes=20000, avg_degree=20.0, num_features=4, num_classes=3,
                           seed=4)
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    seeds = data.train_mask.nonzero().view(-1)
    assert ranking_device(device, colptr.numel() - 1, row) == device   # room to spare
    host = rank_rows(colptr, row, seeds, [15, 10, 5], 256)
    cuda = rank_rows(colptr.to(device), row.to(device), seeds, [15, 10, 5], 256)
    assert not cuda.order.is_cuda and cuda.total == pytest.approx(host.total, rel=1e-6)
    for k in (50, 1000, 5000):   # atomics add in another order: near-ties may swap
        assert cuda.share(k) == pytest.approx(host.share(k), abs=1e-6)


def test_the_ranking_runs_on_the_gpu_only_with_room_for_it(monkeypatch):
    # decided from the GPU's free memory alone (faked here: runs without a GPU): twice the
    # CSC copy and the working set, else the host ranks
    from gnnorch.device.hot_rows import working_bytes

    device, row = torch.device("cuda", 0), torch.zeros(1000, dtype=torch.long)
    need = 8 * 101 + row.numel() * 8 + working_bytes(100, row.numel())
    for free, where in ((2 * need, device), (2 * need - 1, torch.device("cpu"))):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None, f=free: (f, 10 * need))
        assert ranking_device(device, 100, row) == where


@pytest.mark.gpu
@pytest.mark.parametrize("sampled_on_device", [True, False])
def test_cuda_split_rows_gather_equals_indexing_the_whole_tensor(sampled_on_device):
    device = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator().manual_seed(0)
    n = 1000
    hot = torch.randperm(n, generator=gen)[:300].sort().values
    counts = SplitCounts()
    split = SplitRows(hot, n, device, pin=True, counts=counts)
    source = torch.randn(n, 7, generator=gen)
    rows = source.index_select(0, hot).to(device)
    for _ in range(3):   # pinned blocks reused once the copies that read them are done
        index = torch.randperm(n, generator=gen)[:600]
        # sampled on the device: looked up there; else on the host, positions copied over
        found = split.lookup(index, index.to(device) if sampled_on_device else None)
        out = split.gather(source, rows, found)
        assert out.is_cuda and torch.equal(out.cpu(), source[index])
    assert counts.device + counts.host == 1800 and counts.device > 0


def _train_and_test(data, epochs, device=None):
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, 2, out_channels=4).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[5, 3], batch_size=32, shuffle=True,
                            input_nodes=data.train_mask)
    test_loader = NeighborLoader(data, num_neighbors=[5, 3], batch_size=64,
                                 input_nodes=data.test_mask)
    out = []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            batch = batch.to(device) if device is not None else batch
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                                   batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            out.append(float(loss))
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(b.x, b.edge_index)[:b.batch_size].argmax(-1)
                               == b.y[:b.batch_size]).sum()) for b in test_loader)
        out.append(correct)
    return out


def test_loaders_over_the_same_features_share_one_split():
    data, budget = _split_graph()
    runs = {}
    for name, config in (("split", {"mode": "device", "budget_bytes": budget}),
                         ("host", {"mode": "device", "features": "host"})):
        runtime = gnnorch.Runtime(_train_and_test, processes=1, autotune=False,
                                  verbose=False, data_path=config, seed=3)
        runs[name] = (runtime(data, 2), runtime)
    assert runs["split"][0] == runs["host"][0]   # the same batches: losses and counts
    train, test = runs["split"][1].last_run.stats[0]["device"]["loaders"]
    assert train["features"] == test["features"] == "split"
    # the test loader ranked nothing and copied no rows: it reads the training loader's
    assert train["ranking_on"] == "cpu" and test["ranking_on"] is None
    assert test["ranking_s"] == 0.0 and test["bytes_on_device"] < train["bytes_on_device"]
    assert test["placement"]["device_rows"] == train["placement"]["device_rows"] == 200
    assert "split as another loader split them" in test["placement"]["reasons"][-1]
    assert test["split_rows"]["device"] > 0 and test["split_rows"]["host"] > 0



@pytest.mark.gpu
def test_cuda_loaders_over_the_same_features_share_one_split():
    """On CUDA through the runtime: the training loader ranks its rows on the GPU, the test
    loader reads its split (one slot table, no second ranking), and training matches the run
    with every feature row on the host (the same batches; the GPU's atomics add in their own
    order, so losses agree to rounding)."""
    data, budget = _split_graph()
    runs = {}
    for name, config in (("split", {"mode": "auto", "budget_bytes": budget}),
                         ("host", {"mode": "auto", "features": "host"})):
        runtime = gnnorch.Runtime(_train_and_test, processes=1, autotune=False,
                                  verbose=False, data_path=config, seed=3, device="cuda")
        runs[name] = (runtime(data, 2, "cuda"), runtime)
    split, host = runs["split"][0], runs["host"][0]
    assert split == pytest.approx(host, rel=1e-3, abs=2)   # losses, then correct counts
    train, test = runs["split"][1].last_run.stats[0]["device"]["loaders"]
    assert train["samples_on_device"] and test["samples_on_device"]
    assert train["features"] == test["features"] == "split"
    assert train["ranking_on"].startswith("cuda") and test["ranking_on"] is None
    assert test["bytes_on_device"] < train["bytes_on_device"]
    assert test["split_rows"]["device"] > 0 and test["split_rows"]["host"] > 0

def test_plans_over_one_split_share_its_slot_table():
    # one table (and one device copy of it) however many loaders share the split: the
    # placement's budget counts it once
    data = power_law_graph(num_nodes=300, avg_degree=6.0, num_features=8, num_classes=3,
                           seed=2)
    resident, hot = ResidentTensors(), torch.arange(0, 300, 3)
    first, second = (GatherPlan(data, torch.device("cpu"), SPLIT, resident, pin=False,
                                hot_rows=hot) for _ in range(2))
    assert first.split is not second.split and first.split._tables is second.split._tables
    table = first.split._table(torch.device("cpu"))
    assert table[hot].tolist() == list(range(hot.numel())) and int((table >= 0).sum()) == 100
    index = torch.tensor([3, 4, 0, 299, 297])
    assert torch.equal(second.split.gather(data.x, second.device_rows["x"],
                                           second.split.lookup(index)), data.x[index])
