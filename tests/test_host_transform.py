"""The host transform (DAHA pre-transformation, `gnnorch.rewrite.host`).

On a machine without a GPU the "device" is the CPU itself: deferred rows are then host rows
standing for a CPU copy, which exercises every code path but the asynchronous copies. The
tests marked `cuda` run the real thing and skip without a GPU.
"""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, GINConv, SAGEConv

from gnnorch.rewrite import host
from gnnorch.rewrite.engine import RewriteEngine
from gnnorch.rewrite.host import (DeferredFeatures, HostBatchFeatures, HostLinear,
                                  deferred_input, mark_host_features, materialised,
                                  transform_rows)
from gnnorch.rewrite.rules import rule_for

CUDA = pytest.mark.gpu


def graph(n=60, e=300, f=24, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=gen, dtype=dtype)
    ei = torch.stack([torch.randint(0, n, (e,), generator=gen),
                      torch.randint(0, n // 2, (e,), generator=gen)])  # rows >= n/2: no in-edges
    return x, ei


# ---------------------------------------------------------------- the deferred tensor
def test_deferred_rows_behave_as_the_device_tensor():
    x, _ = graph()
    d = DeferredFeatures.defer(x, "cpu")
    assert d.shape == x.shape and d.device.type == "cpu" and not d.requires_grad
    part = d[:20]
    assert isinstance(part, DeferredFeatures) and part.shape == (20, 24)
    assert torch.equal(part.host_rows, x[:20]) and part._root is d._root
    assert isinstance(d[5:-5], DeferredFeatures) and d[5:-5].shape[0] == 50
    assert d._root.copy is None                                   # nothing copied yet
    assert "rows on the host" in repr(d)
    y = d * 2                                                     # any other op: a copy
    assert type(y) is torch.Tensor and torch.equal(y, x * 2)
    assert d._root.copy is not None
    assert torch.equal(d[:, :3] + 0, x[:, :3])                    # column slices copy too
    assert torch.equal(materialised((d[:7], {"k": d})) [0], x[:7])
    assert deferred_input((d[:10], d[:5])) and not deferred_input((d, x)) \
        and not deferred_input(x)


def test_writes_through_the_device_copy_end_the_host_path():
    x, _ = graph()
    d = DeferredFeatures.defer(x.clone(), "cpu")
    d.add_(1.0)
    assert not d.usable and not deferred_input(d)
    w = torch.randn(5, 24, dtype=torch.float64)
    assert torch.allclose(transform_rows(d, w), F.linear(x + 1.0, w))


def test_marked_batch_features_defer_only_a_copy_to_the_deferring_device(monkeypatch):
    x, _ = graph()
    marked = mark_host_features(x)
    assert isinstance(marked, HostBatchFeatures) and marked.data_ptr() == x.data_ptr()
    assert type(marked + 1) is torch.Tensor                       # other ops: plain tensors
    assert type(marked.to(torch.float32)) is torch.Tensor
    assert mark_host_features(torch.arange(4)).dtype == torch.int64   # not features: as is
    monkeypatch.setattr(host, "DEFER_TO", ("cpu",))
    moved = Data(x=marked, edge_index=torch.zeros(2, 0, dtype=torch.long)).to("cpu")
    assert isinstance(moved.x, DeferredFeatures) and torch.equal(moved.x.host_rows, x)
    assert type(marked.to("cpu", torch.float32)) is torch.Tensor      # a conversion copies


# ---------------------------------------------------------------- HostLinear
@pytest.mark.parametrize("chunk", [7, 1000])
def test_host_linear_equals_linear_forward_and_backward(chunk):
    x, _ = graph(n=50)
    w = torch.randn(6, 24, dtype=torch.float64, requires_grad=True)
    out = HostLinear.apply(w, x, chunk)
    ref = F.linear(x, w)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(ref)
    (gw,) = torch.autograd.grad(out, w, g)
    (rw,) = torch.autograd.grad(ref, w, g)
    torch.testing.assert_close(gw, rw, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- rules
def layers():
    torch.manual_seed(0)
    return {
        "sage-mean": SAGEConv(24, 8, aggr="mean"),
        "sage-sum-noroot": SAGEConv(24, 8, aggr="sum", root_weight=False),
        "sage-normalize": SAGEConv(24, 8, normalize=True),
        "gcn": GCNConv(24, 8),
        "gcn-plain": GCNConv(24, 8, normalize=False, bias=False),
        "gin": GINConv(torch.nn.Sequential(torch.nn.Linear(24, 8), torch.nn.ReLU(),
                                           torch.nn.Linear(8, 8)), train_eps=True),
    }


@pytest.mark.parametrize("kind", list(layers()))
@pytest.mark.parametrize("bipartite", [False, True])
def test_host_order_equals_pyg_forward_and_backward(kind, bipartite):
    layer = layers()[kind].double()
    x, ei = graph()
    if bipartite and isinstance(layer, GCNConv):
        pytest.skip("GCNConv has no bipartite form")
    d = DeferredFeatures.defer(x, "cpu")
    if bipartite:   # what trimming passes: source rows [0, 60), destination rows [0, 30)
        keep = ei[1] < 30
        args_ref, args_host = ((x, x[:30]), ei[:, keep]), ((d, d[:30]), ei[:, keep])
    else:
        args_ref, args_host = (x, ei), (d, ei)
    rule = rule_for(layer)
    call = rule.bind(layer, args_host, {})
    assert not isinstance(call, str) and rule.host_reason(layer, call) is None
    out = rule.forward_host(layer, call)
    ref = layer(*args_ref)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
    g = torch.randn_like(ref)
    params = [p for p in layer.parameters() if p.requires_grad]
    got = torch.autograd.grad(out, params, g, allow_unused=True)
    want = torch.autograd.grad(ref, params, g, allow_unused=True)
    for a, b in zip(got, want):
        if b is None:
            assert a is None or not a.abs().any()
        else:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_sage_project_has_no_host_order():
    layer = SAGEConv(24, 8, project=True)
    x, ei = graph(dtype=torch.float32)
    call = rule_for(layer).bind(layer, (DeferredFeatures.defer(x, "cpu"), ei), {})
    assert "project" in rule_for(layer).host_reason(layer, call)


# ---------------------------------------------------------------- the engine
def test_engine_measures_both_placements_and_stays_exact():
    layer = SAGEConv(24, 8).double()
    x, ei = graph()
    engine = RewriteEngine(True, calibration_s=0.0)
    for _ in range(3):
        d = DeferredFeatures.defer(x, "cpu")
        out = engine.forward(layer, lambda *a, **k: layer.forward(*a, **k), (d, ei), {})
        torch.testing.assert_close(out, layer(x, ei), rtol=1e-9, atol=1e-10)
    placement = engine.report()["layers"][0]["host_transform"]
    assert placement["reason_not"] is None
    (bucket,) = placement["buckets"]
    assert bucket["probes"] == 2 and bucket["calls"] == 3
    assert bucket["measured_s"]["host"] > 0 and bucket["measured_s"]["device"] > 0
    assert bucket["choice"] in ("host", "device")


def test_engine_report_mode_never_runs_on_the_host():
    layer = GCNConv(24, 8).double()
    x, ei = graph()
    engine = RewriteEngine("report", calibration_s=0.0)
    engine.placements.margin = -1e9            # the host would always "win"
    for _ in range(3):
        out = engine.forward(layer, lambda *a, **k: layer.forward(*a, **k),
                             (DeferredFeatures.defer(x, "cpu"), ei), {})
        torch.testing.assert_close(out, layer(x, ei), rtol=1e-9, atol=1e-10)
    (bucket,) = engine.report()["layers"][0]["host_transform"]["buckets"]
    assert bucket["choice"] == "host" and bucket["host_calls"] == 0


def test_engine_runs_on_the_host_when_it_wins_and_gradients_match():
    layer = GINConv(torch.nn.Linear(24, 8)).double()
    x, ei = graph()
    engine = RewriteEngine(True, calibration_s=0.0)
    engine.placements.margin = -1e9            # force the host placement
    for _ in range(3):
        out = engine.forward(layer, lambda *a, **k: layer.forward(*a, **k),
                             (DeferredFeatures.defer(x, "cpu"), ei), {})
    ref = layer(x, ei)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
    got = torch.autograd.grad(out.sum(), list(layer.parameters()))
    want = torch.autograd.grad(ref.sum(), list(layer.parameters()))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    (bucket,) = engine.report()["layers"][0]["host_transform"]["buckets"]
    assert bucket["host_calls"] == 3


# ---------------------------------------------------------------- on a GPU
def train_on_cuda(data, epochs=3):
    """Plain PyG: features stay in host memory, each batch is moved to the GPU."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    device = torch.device("cuda")
    loader = NeighborLoader(data, num_neighbors=[10, 5], input_nodes=data.train_mask,
                            batch_size=35, shuffle=True)
    model = GraphSAGE(data.num_features, 64, 2, 7).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    return losses


@CUDA
@pytest.mark.parametrize("kind", ["sage-mean", "gcn", "gin"])
def test_cuda_host_order_equals_pyg(kind):
    cuda = torch.device("cuda")
    layer = layers()[kind].to(cuda)
    x, ei = graph(n=5000, e=40000, f=24, dtype=torch.float32)
    ei = ei.to(cuda)
    marked = mark_host_features(x)
    d = marked.to(cuda)
    assert isinstance(d, DeferredFeatures) and d.device.type == "cuda"
    rule = rule_for(layer)
    call = rule.bind(layer, (d, ei), {})
    out = rule.forward_host(layer, call)
    assert d._root.copy is None                                  # the wide rows never moved
    ref = layer(x.to(cuda), ei)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    params = list(layer.parameters())
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, params, g, allow_unused=True),
                    torch.autograd.grad(ref, params, g, allow_unused=True)):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


@CUDA
def test_cuda_runtime_training_equals_rewrite_off():
    import gnnorch
    from helpers import cora

    data = cora()
    runs = {}
    for rewrite in (True, False):
        torch.manual_seed(0)
        # Cora fits the GPU: the data path would gather x there. DAHA's host transform reads
        # x in pinned host rows, which the path leaves only with features on the host and no
        # prefetching (`intercept.device_path`; the first lent GPU found this test assuming
        # host features, written before the path existed)
        runtime = gnnorch.Runtime(train_on_cuda, device="cuda", rewrite=rewrite, seed=0,
                                  data_path={"features": "host", "prefetch": 0})
        runs[rewrite] = runtime(data, epochs=3)
        if rewrite:
            stats = runtime.last_run.stats[0]["rewrite"]
            placement = [b for layer in stats["layers"]
                         for b in layer["host_transform"]["buckets"]]
            assert placement, "no layer call saw deferred host rows"
    torch.testing.assert_close(torch.tensor(runs[True]), torch.tensor(runs[False]),
                               rtol=2e-3, atol=2e-3)
