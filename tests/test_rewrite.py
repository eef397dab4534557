"""Exact layer rewrites: every rewrite equals the PyG layer, forward and backward; the engine
returns what PyG returns in every mode; training through the engine learns what PyG learns.

Tolerances. float64: ``rtol=1e-5, atol=1e-8`` (the orders differ only in rounding).
float32: ``rtol=1e-4, atol=1e-5`` -- a reordered sum of ``k`` products moves by about
``sqrt(k) * 6e-8`` relative, and the widths here keep ``k`` below ~10^3.
"""
from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.nn import MLP, EdgeConv, GATConv, GCNConv, GINConv, SAGEConv
from torch_geometric.utils import to_torch_csr_tensor

from gnnorch.rewrite import CostModel, Op, Planner, RewriteEngine, rule_for
from gnnorch.rewrite.calibrate import calibrate
from gnnorch.rewrite.costmodel import OP_KINDS
from gnnorch.rewrite.planner import ORIGINAL, REWRITTEN
from gnnorch.rewrite.shapes import LayerShape

from helpers import cora

F64 = dict(rtol=1e-5, atol=1e-8)
F32 = dict(rtol=1e-4, atol=1e-5)
#: float32 with ``atol`` in units of each compared tensor's largest magnitude (at least 1): the
#: two orders sum the same terms in another order, and such a reordering moves a sum by up to
#: about (number of terms) x eps x (the terms' magnitude) -- not x the sum's own magnitude. An
#: element that cancels to near zero (a GAT attention gradient of 1e-6 beside elements of 34)
#: keeps the rounding error of its large terms, which a fixed atol of 1e-5 cannot hold; the
#: tensor's largest element is the scale of those terms. Elements away from cancellation are
#: still held to ``rtol`` 1e-4, and any real mistake (a missing bias, a wrong edge) is off by
#: orders of magnitude more.
F32_SCALED = dict(rtol=1e-4, atol=1e-5, scaled=True)
PROPERTY = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- helpers

def random_graph(draw, dtype, bipartite: bool, f_src: int, f_dst: int):
    """Random (x, edge_index) with isolated / zero-in-degree vertices and duplicate edges."""
    n_src = draw(st.integers(1, 24))
    n_dst = draw(st.integers(1, n_src)) if bipartite else n_src
    n_edges = draw(st.integers(0, 60))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_src, (n_edges,), generator=gen)
    # targets drawn from a prefix so that some destinations have no in-edges
    dst = torch.randint(0, max(1, n_dst - 1), (n_edges,), generator=gen)
    if n_edges > 1:
        src[-1], dst[-1] = src[0], dst[0]  # a duplicate edge
    edge_index = torch.stack([src, dst])
    x_src = torch.randn(n_src, f_src, generator=gen, dtype=dtype)
    if not bipartite:
        return x_src, edge_index, gen
    x_dst = (x_src[:n_dst] if f_src == f_dst
             else torch.randn(n_dst, f_dst, generator=gen, dtype=dtype))
    return (x_src, x_dst), edge_index, gen


def leaves(x):
    """Fresh leaf copies requiring grad, with the same structure (Tensor or pair)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_()
    return tuple(None if t is None else t.detach().clone().requires_grad_() for t in x)


def flat(x):
    return [x] if isinstance(x, torch.Tensor) else [t for t in x if t is not None]


def run(layer, fn, x, args, kwargs, seed=0):
    """Forward with ``fn``, backward of a fixed random projection; outputs and gradients."""
    x = leaves(x)
    torch.manual_seed(seed)
    out = fn(layer, x, args, kwargs)
    tensor = out[0] if isinstance(out, tuple) else out
    weight = torch.randn(tensor.shape, generator=torch.Generator().manual_seed(1),
                         dtype=tensor.dtype).to(tensor.device)
    (tensor * weight).sum().backward()
    grads = {name: p.grad for name, p in layer.named_parameters()}
    return out, [t.grad for t in flat(x)], grads


def original(layer, x, args, kwargs):
    return layer(x, *args, **kwargs)


def rewritten(layer, x, args, kwargs):
    rule = rule_for(layer)
    assert not isinstance(rule, str), rule
    assert rule.applicable(layer) is None, rule.applicable(layer)
    call = rule.bind(layer, (x, *args), kwargs)
    assert not isinstance(call, str), call
    return rule.forward(layer, call)


def _close(actual, expected, tol, msg=None):
    """``assert_close`` with ``tol``; with ``scaled`` its atol is in units of ``expected``'s
    largest magnitude (at least 1: see `F32_SCALED`)."""
    tol = dict(tol)
    if tol.pop("scaled", False):
        tol["atol"] *= max(1.0, float(expected.detach().abs().max())) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, **tol, msg=msg)


def assert_same(layer, x, args=(), kwargs=None, tol=F64, seed=0):
    """The rewrite equals PyG: output (and attention weights), input and parameter grads."""
    kwargs = kwargs or {}
    a_layer, b_layer = copy.deepcopy(layer), copy.deepcopy(layer)
    out_a, gx_a, gp_a = run(a_layer, original, x, args, kwargs, seed)
    out_b, gx_b, gp_b = run(b_layer, rewritten, x, args, kwargs, seed)
    if isinstance(out_a, tuple):
        assert torch.equal(out_a[1][0], out_b[1][0])
        _close(out_b[1][1], out_a[1][1], tol)
        out_a, out_b = out_a[0], out_b[0]
    _close(out_b, out_a, tol)
    for ga, gb in zip(gx_a, gx_b):
        _close(gb, ga, tol)
    assert gp_a.keys() == gp_b.keys()
    for name in gp_a:
        if gp_a[name] is None:
            assert gp_b[name] is None or not gp_b[name].any(), name
        else:
            _close(gp_b[name], gp_a[name], tol, msg=name)
    for (name, buf_a), (_, buf_b) in zip(a_layer.named_buffers(), b_layer.named_buffers()):
        _close(buf_b, buf_a, tol, msg=name)


# --------------------------------------------------------------------------- property tests

@PROPERTY
@given(st.data())
def test_sage_rewrite_is_exact(data):
    bipartite = data.draw(st.booleans())
    f_src, f_out = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    f_dst = data.draw(st.integers(1, 12)) if bipartite else f_src
    x, edge_index, _ = random_graph(data.draw, torch.float64, bipartite, f_src, f_dst)
    layer = SAGEConv((f_src, f_dst) if bipartite else f_src, f_out,
                     aggr=data.draw(st.sampled_from(["mean", "sum"])),
                     normalize=data.draw(st.booleans()), root_weight=data.draw(st.booleans()),
                     project=data.draw(st.booleans()) and f_src == f_dst,
                     bias=data.draw(st.booleans())).double()
    if layer.lin_l.bias is not None:
        with torch.no_grad():
            layer.lin_l.bias.uniform_(-1, 1)  # zero-in-degree rows must get exactly this bias
    if bipartite and data.draw(st.booleans()):
        x = (x[0], None)  # no root term; PyG sizes the output by the largest target
    assert_same(layer, x, (edge_index,))


@PROPERTY
@given(st.data())
def test_gcn_rewrite_is_exact(data):
    f_in, f_out = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    x, edge_index, gen = random_graph(data.draw, torch.float64, False, f_in, f_in)
    normalize = data.draw(st.booleans())
    layer = GCNConv(f_in, f_out, improved=data.draw(st.booleans()),
                    cached=data.draw(st.booleans()),
                    add_self_loops=normalize and data.draw(st.booleans()),
                    normalize=normalize, bias=data.draw(st.booleans())).double()
    if layer.bias is not None:
        with torch.no_grad():
            layer.bias.uniform_(-1, 1)
    weighted = data.draw(st.booleans())
    edge_weight = (torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64) + 0.1
                   if weighted else None)
    positional = data.draw(st.booleans())
    if positional:
        assert_same(layer, x, (edge_index, edge_weight))
    else:
        assert_same(layer, x, (edge_index,), {"edge_weight": edge_weight})


def gin_nn(kind: str, f_in: int, f_out: int) -> torch.nn.Module:
    if kind == "linear":
        return torch.nn.Linear(f_in, f_out)
    if kind == "sequential":
        return torch.nn.Sequential(torch.nn.Linear(f_in, 8), torch.nn.ReLU(),
                                   torch.nn.Dropout(0.3), torch.nn.Linear(8, f_out))
    if kind == "mlp1":
        return MLP([f_in, f_out])
    return MLP([f_in, 8, 6, f_out], norm="batch_norm", dropout=0.2,
               act_first=kind == "mlp_act_first", plain_last=kind != "mlp_not_plain")


@PROPERTY
@given(st.data())
def test_gin_rewrite_is_exact(data):
    bipartite = data.draw(st.booleans())
    f_in, f_out = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    x, edge_index, _ = random_graph(data.draw, torch.float64, bipartite, f_in, f_in)
    kind = data.draw(st.sampled_from(["linear", "sequential", "mlp1", "mlp",
                                      "mlp_act_first", "mlp_not_plain"]))
    layer = GINConv(gin_nn(kind, f_in, f_out), eps=data.draw(st.floats(-0.5, 0.5)),
                    train_eps=data.draw(st.booleans()),
                    aggr=data.draw(st.sampled_from(["add", "mean"]))).double()
    if bipartite and data.draw(st.booleans()):
        x = (x[0], None)  # no root term
    if isinstance(x, torch.Tensor) or x[1] is not None:
        rows = (x if isinstance(x, torch.Tensor) else x[1]).size(0)
    else:  # no x_dst: PyG sizes the output by the largest target index
        rows = int(edge_index[1].max()) + 1 if edge_index.numel() else 0
    if data.draw(st.booleans()) or rows < 2:  # BatchNorm needs 2 rows in training
        layer.eval()
    assert_same(layer, x, (edge_index,), seed=data.draw(st.integers(0, 100)))


@PROPERTY
@given(st.data())
def test_gat_rewrite_is_exact(data):
    bipartite = data.draw(st.booleans())
    f_src, f_out = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    separate = bipartite and data.draw(st.booleans())
    f_dst = data.draw(st.integers(1, 12)) if separate else f_src
    x, edge_index, gen = random_graph(data.draw, torch.float64, bipartite, f_src, f_dst)
    edge_dim = data.draw(st.sampled_from([None, 3]))
    layer = GATConv((f_src, f_dst) if separate else f_src, f_out, heads=1,
                    concat=data.draw(st.booleans()),
                    negative_slope=data.draw(st.floats(0.0, 0.5)),
                    dropout=data.draw(st.sampled_from([0.0, 0.4])),
                    add_self_loops=data.draw(st.booleans()), edge_dim=edge_dim,
                    fill_value=data.draw(st.sampled_from(["mean", 0.5])),
                    bias=data.draw(st.booleans()), residual=data.draw(st.booleans())).double()
    if layer.bias is not None:
        with torch.no_grad():
            layer.bias.uniform_(-1, 1)
    if data.draw(st.booleans()):
        layer.eval()
    kwargs = {}
    if edge_dim is not None:
        kwargs["edge_attr"] = torch.randn(edge_index.size(1), edge_dim, generator=gen,
                                          dtype=torch.float64)
    if data.draw(st.booleans()):
        kwargs["return_attention_weights"] = True
    if bipartite and data.draw(st.booleans()):
        x = (x[0], None)  # no destination features: no alpha_dst, no residual
    assert_same(layer, x, (edge_index,), kwargs, seed=data.draw(st.integers(0, 100)))


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_rewrites_float32_tolerance(data):
    """float32 at realistic widths: the orders differ by float32 rounding only (`F32_SCALED`)."""
    f_in, f_out = data.draw(st.sampled_from([(64, 8), (8, 64), (128, 32)]))
    x, edge_index, _ = random_graph(data.draw, torch.float32, True, f_in, f_in)
    kind = data.draw(st.sampled_from(["sage", "gcn", "gin", "gat"]))
    layer = {"sage": lambda: SAGEConv(f_in, f_out),
             "gcn": lambda: GCNConv(f_in, f_out),
             "gin": lambda: GINConv(MLP([f_in, f_out, f_out], norm=None)),
             "gat": lambda: GATConv(f_in, f_out)}[kind]()
    if kind == "gcn":
        x = x[0]
    assert_same(layer, x, (edge_index,), tol=F32_SCALED)


def test_float32_tolerance_still_catches_a_wrong_rewrite(monkeypatch):
    """`F32_SCALED` is rounding-sized: a rewrite off by a small fraction of its bias fails."""
    from gnnorch.rewrite.rules.sage import SAGERule

    torch.manual_seed(0)
    x, edge_index = torch.randn(20, 64), torch.randint(0, 20, (2, 60))
    layer = SAGEConv(64, 8)
    assert_same(layer, x, (edge_index,), tol=F32_SCALED)
    right = SAGERule.forward
    monkeypatch.setattr(SAGERule, "forward",
                        lambda self, layer, call: right(self, layer, call)
                        + 1e-2 * layer.lin_l.bias.detach())
    with pytest.raises(AssertionError):
        assert_same(layer, x, (edge_index,), tol=F32_SCALED)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sage", "gcn", "gin", "gat"])
def test_rewrites_and_engine_on_cuda(kind):
    """The rules and the engine (probes synchronise the device) are device-agnostic."""
    cuda = torch.device("cuda")
    x, edge_index = small_graph(3000, 3000, 30000, 64)
    # float64: in float32, scatter's atomics add in a run-dependent order on the GPU
    x, edge_index = x.to(cuda, torch.float64), edge_index.to(cuda)
    layer = {"sage": lambda: SAGEConv(64, 8), "gcn": lambda: GCNConv(64, 256),
             "gin": lambda: GINConv(MLP([64, 8, 8])), "gat": lambda: GATConv(64, 256)}[kind]()
    layer = layer.to(cuda, torch.float64)
    assert_same(layer, x, (edge_index,), tol=F64)
    eng = engine(True)
    out = eng.forward(layer, layer.forward, (x, edge_index), {})
    torch.testing.assert_close(out, layer(x, edge_index), **F64)
    assert "cuda:0" in eng.report()["cost_models"]


# --------------------------------------------------------------------------- rules: left alone

@pytest.mark.parametrize("layer, fragment", [
    (GATConv(8, 4, heads=2), "heads=2"),
    (SAGEConv(8, 4, aggr="max"), "not linear"),
    (SAGEConv(8, 4, aggr=["mean", "max"]), "not linear"),
    (GINConv(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(8, 4))), "Linear"),
    (EdgeConv(torch.nn.Linear(16, 4)), "no rewrite rule"),
])
def test_unsupported_layers_have_a_reason(layer, fragment):
    rule = rule_for(layer)
    reason = rule if isinstance(rule, str) else rule.applicable(layer)
    assert isinstance(reason, str) and fragment in reason


def test_subclass_and_hooks_are_left_alone():
    class MySAGE(SAGEConv):
        pass

    assert "subclasses" in rule_for(MySAGE(8, 4))
    layer = SAGEConv(8, 4)
    rule = rule_for(layer)
    assert rule.applicable(layer) is None
    handle = layer.lin_l.register_forward_hook(lambda *a: None)
    assert "hooks" in rule.applicable(layer)
    handle.remove()
    layer.register_propagate_forward_hook(lambda *a: None)
    assert "hook" in rule.applicable(layer)
    lazy = SAGEConv(-1, 4)
    assert "lazy" in rule_for(lazy).applicable(lazy)


# --------------------------------------------------------------------------- engine

def small_graph(n_src=3000, n_dst=3000, n_edges=30000, f=256, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.stack([torch.randint(0, n_src, (n_edges,), generator=gen),
                              torch.randint(0, n_dst, (n_edges,), generator=gen)])
    return torch.randn(n_src, f, generator=gen), edge_index


class Recorder:
    """An ``original_forward`` that remembers every output it produced."""

    def __init__(self, layer):
        self.layer, self.outputs = layer, []

    def __call__(self, *args, **kwargs):
        out = type(self.layer).forward(self.layer, *args, **kwargs)
        self.outputs.append(out)
        return out


def engine(mode, **kwargs):
    return RewriteEngine(mode, calibration_s=0.2, **kwargs)


@pytest.mark.parametrize("mode", [True, "report", False])
def test_engine_output_equals_original_in_every_mode(mode):
    """In float64: the weight gradients sum over all 3000 nodes and 3 backward passes, beyond
    the float32 tolerance's reach (one element of 512 moved 2e-4 relative on an AVX-512 CPU)."""
    torch.manual_seed(0)
    x, edge_index = small_graph()
    x = x.double()
    layer = SAGEConv(256, 2).double()  # transform-first aggregates 2 columns instead of 256
    reference = copy.deepcopy(layer)
    eng = engine(mode)
    for _ in range(3):
        recorder = Recorder(layer)
        out = eng.forward(layer, recorder, (x, edge_index), {})
        expected = reference(x, edge_index)
        torch.testing.assert_close(out, expected, **F64)
        out.square().sum().backward()
        expected.square().sum().backward()
        was_original = any(out is o for o in recorder.outputs)
        if mode is True:
            assert not was_original  # 128x fewer aggregated columns: the rewrite must win
        else:
            assert was_original
    for p, q in zip(layer.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **F64)
    report = json.loads(json.dumps(eng.report()))
    if mode is False:
        assert report["layers"] == []
        return
    (entry,) = report["layers"]
    assert entry["rewritten_calls"] == (3 if mode is True else 0)
    (bucket,) = entry["buckets"]
    assert bucket["choice"] == REWRITTEN and bucket["decided_by"] == "measured"
    assert bucket["measured_s"][REWRITTEN] < bucket["measured_s"][ORIGINAL]
    assert set(bucket["predicted_s"]) == {ORIGINAL, REWRITTEN}


def test_engine_predict_and_observe():
    x, edge_index = small_graph(300, 300, 3000, 32)
    layer = SAGEConv(32, 4)
    eng = engine(True)
    with pytest.raises(ValueError, match="has not been run through the engine"):
        eng.predict(layer, LayerShape(300, 300, 3000, 32, 4, False, True))
    eng.forward(layer, layer.forward, (x, edge_index), {})
    shape = LayerShape(300, 300, 3000, 32, 4, False, True)
    predicted = eng.predict(layer, shape)
    assert set(predicted) == {ORIGINAL, REWRITTEN} and all(v > 0 for v in predicted.values())
    model = eng.cost_model(torch.device("cpu"))
    before = model.summary()["observations"]
    eng.observe(layer, shape, {ORIGINAL: 0.01, REWRITTEN: 0.002})
    assert model.summary()["observations"] == before + 2


def test_engine_keeps_original_when_the_rewrite_costs_more():
    x, edge_index = small_graph(n_src=20000, n_dst=200, n_edges=2000, f=4)
    layer = SAGEConv((4, 4), 512)  # transform-first: 20000 rows x 512 instead of 200
    eng = engine(True)
    for _ in range(3):
        recorder = Recorder(layer)
        out = eng.forward(layer, recorder, ((x, x[:200]), edge_index), {})
        assert any(out is o for o in recorder.outputs)
    (entry,) = eng.report()["layers"]   # f_out >= f_in: no shape would pay, none measured
    assert entry["buckets"] == [] and entry["rewritten_calls"] == 0
    assert entry["left_alone"] == {"transform-first never does less work at widths 4 -> 512": 3}


def test_engine_leaves_unsupported_layers_alone_with_a_reason():
    x, edge_index = small_graph(300, 300, 1500, 8)
    eng = engine(True)
    layers = [GATConv(8, 4, heads=2), SAGEConv(8, 4, aggr="max"), EdgeConv(torch.nn.Linear(16, 4))]
    for layer in layers:
        recorder = Recorder(layer)
        out = eng.forward(layer, recorder, (x, edge_index), {})
        assert out is recorder.outputs[-1]
    sparse = SAGEConv(8, 4)
    adj = to_torch_csr_tensor(edge_index.flip(0), size=(300, 300))
    recorder = Recorder(sparse)
    assert eng.forward(sparse, recorder, (x, adj), {}) is recorder.outputs[-1]
    eng.register_names(torch.nn.ModuleDict({"gat": layers[0], "sparse": sparse}))
    report = {entry["name"]: entry for entry in eng.report()["layers"]}
    assert "heads=2" in next(iter(report["gat"]["left_alone"]))
    assert "not linear" in next(iter(report["SAGEConv#1"]["left_alone"]))
    assert "no rewrite rule" in next(iter(report["EdgeConv#2"]["left_alone"]))
    assert "left to PyG" in next(iter(report["sparse"]["left_alone"]))
    assert all(entry["rewritten_calls"] == 0 for entry in report.values())


def test_a_rewrite_that_disagrees_with_pyg_is_disabled(monkeypatch):
    x, edge_index = small_graph()
    layer = SAGEConv(256, 2)
    rule = rule_for(layer)
    correct = rule.forward
    monkeypatch.setattr(rule, "forward", lambda layer, call: correct(layer, call) + 1.0)
    eng = engine(True)
    with pytest.warns(RuntimeWarning, match="differs from PyG"):
        out = eng.forward(layer, layer.forward, (x, edge_index), {})
    torch.testing.assert_close(out, layer(x, edge_index))
    out = eng.forward(layer, layer.forward, (x, edge_index), {})
    torch.testing.assert_close(out, layer(x, edge_index))
    (entry,) = eng.report()["layers"]
    assert entry["rewritten_calls"] == 0
    assert any("rewrite disabled" in reason for reason in entry["left_alone"])


def test_probes_leave_random_stream_and_buffers_untouched():
    """A probing call (GIN with BatchNorm and dropout) changes nothing a plain call would not."""
    x, edge_index = small_graph(400, 400, 2000, 16)
    layer = GINConv(MLP([16, 32, 8], norm="batch_norm", dropout=0.5))
    reference = copy.deepcopy(layer)
    eng = engine(True, probes_per_bucket=3)
    for step in range(3):
        torch.manual_seed(step)
        with warnings.catch_warnings():  # both orders draw the same dropout mask in a probe
            warnings.simplefilter("error", RuntimeWarning)
            out = eng.forward(layer, layer.forward, (x, edge_index), {})
        after = torch.rand(1)
        torch.manual_seed(step)
        expected = reference(x, edge_index)
        assert torch.equal(after, torch.rand(1))
        torch.testing.assert_close(out, expected, **F32)
    for (name, a), (_, b) in zip(layer.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(a, b, msg=name)
    assert all(p.grad is None for p in layer.parameters())


def test_engine_rejects_bad_modes():
    with pytest.raises(ValueError, match="True, False or 'report'"):
        RewriteEngine("yes")
    with pytest.raises(ValueError):
        RewriteEngine(1)


# --------------------------------------------------------------------------- planner / cost model

def test_planner_measured_choice_needs_the_margin():
    shape = LayerShape(100, 10, 300, 8, 8, False, True)
    planner = Planner(probes_per_bucket=1, reprobe_every=0, margin=0.05)
    state = planner.state(0, shape)
    assert planner.plan(state, (1.0, 0.5)) is True  # first call is probed
    assert state.rewrite and state.decided_by == "model"
    planner.record(state, ORIGINAL, 1.0, 1.0)
    planner.record(state, REWRITTEN, 0.5, 0.97)  # measured: only 3% faster
    planner.finish_probe(state)
    assert not state.rewrite and state.decided_by == "measured"
    assert planner.plan(state, None) is False
    other = planner.state(0, LayerShape(100_000, 10, 300, 8, 8, False, True))
    assert other is not state


def test_planner_decisions_travel_between_processes():
    shape = LayerShape(100, 10, 300, 8, 8, False, True)
    a = Planner(probes_per_bucket=2)
    state = a.state("sig", shape)
    a.plan(state, (1.0, 0.8))
    for _ in range(2):
        a.record(state, ORIGINAL, 1.0, 1.0)
        a.record(state, REWRITTEN, 0.8, 0.5)
        a.finish_probe(state)
    b = Planner(probes_per_bucket=2)
    assert b.load(json.loads(json.dumps(a.export()))) == 1
    adopted = b.state("sig", shape)
    assert adopted.rewrite and adopted.decided_by == "measured"
    assert b.plan(adopted, None) is False                   # not probed again


def test_cost_model_fits_a_linear_truth_and_reports_prequential_mape():
    model = CostModel()
    truth = {"linear": 2e-10, "agg_sum": 3e-9}
    gen = torch.Generator().manual_seed(0)
    for i in range(40):
        n, f = int(torch.randint(100, 5000, (1,), generator=gen)), 64
        lin = Op("linear", n=n, f_in=f, f_out=32)
        agg = Op("agg_sum", n_src=n, n_dst=n // 2, n_edges=4 * n, f_in=f)
        model.add_micro(lin, 1e-4 + truth["linear"] * n * f * 32)
        model.add_micro(agg, 1e-4 + truth["agg_sum"] * 4 * n * f)
    model.fit()
    layer = [Op("linear", n=3000, f_in=64, f_out=32), Op("agg_sum", n_src=3000, n_dst=1500,
                                                          n_edges=12000, f_in=64)]
    expected = 2e-4 + truth["linear"] * 3000 * 64 * 32 + truth["agg_sum"] * 12000 * 64
    assert model.predict(layer) == pytest.approx(expected, rel=1e-3)
    model.observe(layer, expected)
    assert model.mape() == pytest.approx(0.0, abs=1e-3)
    json.dumps(model.summary())


def test_calibration_respects_its_budget():
    import time

    model = CostModel()
    start = time.perf_counter()
    rows = calibrate(model, torch.device("cpu"), budget_s=1.0)
    # the last operation may overrun (by a lot on an oversubscribed machine)
    assert time.perf_counter() - start < 4.0
    assert rows >= len(OP_KINDS) and model.calibrated
    assert set(model.summary()["coefficients"]) == set(OP_KINDS)  # every kind has a row


# --------------------------------------------------------------------------- Cora training

def cora_loss_curve(kind: str, route: str, steps: int = 20) -> list[float]:
    """Train a 2-layer GCN / GraphSAGE full-batch on Cora; ``route``: "pyg" calls layers
    normally, "engine" through RewriteEngine, "forced" through the rule's forward."""
    data = cora()
    torch.manual_seed(0)
    conv = GCNConv if kind == "gcn" else SAGEConv
    convs = torch.nn.ModuleList([conv(data.num_features, 16), conv(16, 7)])
    eng = engine(True)
    for layer in convs:
        pyg_forward = layer.forward
        if route == "engine":
            layer.forward = (lambda layer, f: lambda *a, **k: eng.forward(layer, f, a, k))(
                layer, pyg_forward)
        elif route == "forced":
            rule = rule_for(layer)
            layer.forward = (lambda layer, rule: lambda *a, **k: rule.forward(
                layer, rule.bind(layer, a, k)))(layer, rule)
    optimizer = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        h = F.dropout(data.x, p=0.5, training=True)
        h = F.relu(convs[0](h, data.edge_index))
        h = F.dropout(h, p=0.5, training=True)
        out = convs[1](h, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if route == "engine" and kind == "sage":
        first = eng.report()["layers"][0]
        assert first["rewritten_calls"] > 0, first  # 1433 -> 16: transform-first must win
    return losses


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_cora_training_through_the_engine_matches_pyg(kind):
    pyg = cora_loss_curve(kind, "pyg")
    via_engine = cora_loss_curve(kind, "engine")
    forced = cora_loss_curve(kind, "forced")
    assert pyg[-1] < pyg[0]
    torch.testing.assert_close(torch.tensor(via_engine), torch.tensor(pyg), **F32)
    torch.testing.assert_close(torch.tensor(forced), torch.tensor(pyg), **F32)


def test_work_dominated_rewrites_are_not_probed():
    """GCN aggregate-first with f_in > f_out on a whole graph does more of every kind of work:
    PyG's order, no probe; with f_in < f_out it aggregates less: probed. SAGE transform-first
    with f_out > f_in does more work at every shape (`Rule.never_pays`): no bucket at all."""
    from gnnorch.rewrite.costmodel import dominated

    x, edge_index = small_graph(600, 600, 3000, 64)
    for layer, expect_probe in ((GCNConv(64, 16), False), (GCNConv(16, 64), True)):
        args = (x[:, :layer.in_channels], edge_index)
        rule = rule_for(layer)
        assert rule.never_pays(layer) is None
        shape = rule.shape(layer, rule.bind(layer, args, {}), True)
        assert dominated(rule.ops(layer, shape, True), rule.ops(layer, shape, False)) \
            is not expect_probe
        eng = engine(True)
        out = eng.forward(layer, layer.forward, args, {})
        torch.testing.assert_close(out, layer(*args), **F32)
        (bucket,) = eng.report()["layers"][0]["buckets"]
        assert (bucket["probes"] > 0) is expect_probe
        if not expect_probe:
            assert bucket["decided_by"] == "work" and bucket["choice"] == "original"
    sage, args = SAGEConv(16, 64), ((x[:, :16], x[:300, :16]), edge_index[:, :1000] % 300)
    eng = engine(True)
    torch.testing.assert_close(eng.forward(sage, sage.forward, args, {}), sage(*args), **F32)
    (entry,) = eng.report()["layers"]
    assert entry["buckets"] == [] and list(entry["left_alone"]) == [rule_for(sage).never_pays(sage)]


def test_work_dominating_rewrites_run_before_they_are_measured():
    """GCN aggregate-first with f_in < f_out aggregates the narrower width and transforms the
    same rows: where neither the features nor the edge weights need a gradient (or only the
    features do: both orders then need the transform's input gradient) it does less work of
    one kind and no more of any, so it runs from the bucket's first call, before any probe,
    equal to PyG forward and backward. Learnt edge weights make the rewritten transform need
    its input's gradient where PyG's does not: no longer dominating, PyG's order until
    measured. A probe's measurement then decides (`Planner`)."""
    from gnnorch.rewrite.costmodel import dominates

    torch.manual_seed(0)
    x, edge_index = small_graph(600, 600, 3000, 16)
    weight = torch.rand(edge_index.size(1))
    for x_grad, w_grad, expect in ((False, False, True), (True, False, True),
                                   (False, True, False)):
        layer = GCNConv(16, 64)
        xs, ws = x.clone().requires_grad_(x_grad), weight.clone().requires_grad_(w_grad)
        args = (xs, edge_index, ws)
        rule = rule_for(layer)
        shape = rule.shape(layer, rule.bind(layer, args, {}), True)
        assert dominates(rule.ops(layer, shape, True), rule.ops(layer, shape, False)) is expect
        eng = RewriteEngine(True, calibration_s=0.0, model_decides=False,
                            planner=Planner(probes_per_bucket=2, probe_after=10 ** 6))
        out = eng.forward(layer, layer.forward, args, {})
        (entry,) = eng.report()["layers"]
        (bucket,) = entry["buckets"]
        assert bucket["probes"] == 0 and entry["rewritten_calls"] == int(expect)
        assert (bucket["decided_by"], bucket["choice"]) == (
            ("work", "rewritten") if expect else ("unmeasured", "original"))
        reference = copy.deepcopy(layer)
        ref_args = (x.clone().requires_grad_(x_grad), weight.clone().requires_grad_(w_grad),)
        expected = reference(ref_args[0], edge_index, ref_args[1])
        torch.testing.assert_close(out, expected, **F32)
        out.square().sum().backward()
        expected.square().sum().backward()
        for mine, theirs in zip(layer.parameters(), reference.parameters()):
            torch.testing.assert_close(mine.grad, theirs.grad, **F32)
        for mine, theirs in ((xs, ref_args[0]), (ws, ref_args[1])):
            if mine.requires_grad:
                torch.testing.assert_close(mine.grad, theirs.grad, **F32)
    planner = Planner(probes_per_bucket=1)
    state = planner.state("gcn", shape)
    state.dominates = True
    planner.plan(state, None)
    assert state.rewrite and state.decided_by == "work"
    planner.record(state, ORIGINAL, 1.0, 1.0)
    planner.record(state, REWRITTEN, 1.0, 2.0)   # measured slower: PyG's order from now on
    planner.finish_probe(state)
    assert not state.rewrite and state.decided_by == "measured"


def test_hooks_are_checked_only_where_the_rewrite_could_run():
    """A layer whose rewrite never pays (SAGE transform-first with f_out > f_in) or a dominated
    bucket (GCN aggregate-first with f_in > f_out on a whole graph) runs PyG's order without
    the per-call admission checks, hooks and all; where the rewrite could pay, a call still
    steps aside for a hook, and the report counts that call's reason."""
    x, edge_index = small_graph(600, 600, 3000, 16)
    fired = []
    for layer, args, could_rewrite in (
            (SAGEConv(16, 64), ((x, x[:300]), edge_index % 300), False),
            (GCNConv(16, 4), (x, edge_index), False),
            (SAGEConv(16, 2), ((x, x[:300]), edge_index % 300), True)):
        handle = layer.lin.register_forward_hook(lambda *a: fired.append(1)) \
            if isinstance(layer, GCNConv) else \
            layer.lin_l.register_forward_hook(lambda *a: fired.append(1))
        eng = engine(True)
        recorder = Recorder(layer)
        for _ in range(3):
            assert eng.forward(layer, recorder, args, {}) is recorder.outputs[-1]
        (entry,) = eng.report()["layers"]
        assert entry["rewritten_calls"] == 0 and entry["calls"] == 3
        hooked = {why: n for why, n in entry["left_alone"].items() if "hook" in why}
        assert (sum(hooked.values()) == 3) is could_rewrite and (not hooked) is not could_rewrite
        handle.remove()
    assert len(fired) == 9      # every call ran PyG's own, hooked Linear


@pytest.mark.parametrize("kind", ["sequential", "mlp"])
def test_gin_split_follows_modules_replaced_after_first_use(kind):
    """The split of a GIN's ``nn`` is kept per layer: replacing its first Linear, or a module
    after it, between calls changes what the rewrite computes exactly as it changes PyG's."""
    from gnnorch.rewrite.rules.gin import GINRule

    torch.manual_seed(0)
    x, edge_index = small_graph(50, 50, 200, 6)
    x = x.double()
    layer = GINConv(gin_nn(kind, 6, 3)).double().eval()
    rule = GINRule()

    def rewritten():
        return rule.forward(layer, rule.bind(layer, (x, edge_index), {}))

    torch.testing.assert_close(rewritten(), layer(x, edge_index), **F64)
    lins = layer.nn if kind == "sequential" else layer.nn.lins
    lins[0] = torch.nn.Linear(6, 8).double()
    torch.testing.assert_close(rewritten(), layer(x, edge_index), **F64)
    lins[-1] = torch.nn.Linear(lins[-1].weight.size(1), 3).double()
    torch.testing.assert_close(rewritten(), layer(x, edge_index), **F64)
    assert rule.moved_modules(layer)[-1] is lins[0]
    layer.nn = torch.nn.Sequential(torch.nn.ReLU())
    assert "does not start with a Linear" in rule.applicable(layer)


def test_gin_nn_replaced_after_admission_goes_to_pyg():
    """A GIN admitted by the engine whose ``nn`` is then replaced by one that cannot be split
    runs PyG's order, the reason counted (it raised an AttributeError in the shape before)."""
    x, edge_index = small_graph(50, 50, 200, 6)
    layer = GINConv(torch.nn.Linear(6, 2))       # narrows: may pay, so it is bound per call
    eng = engine(True)
    for nn in (None, torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(6, 2))):
        if nn is not None:
            layer.nn = nn
        recorder = Recorder(layer)
        out = eng.forward(layer, recorder, (x, edge_index), {})
        torch.testing.assert_close(out, layer(x, edge_index), **F32)
    (entry,) = eng.report()["layers"]
    assert any("does not start with a Linear" in why for why in entry["left_alone"])


@PROPERTY
@given(st.data())
def test_never_pays_means_dominated_at_every_shape(data):
    """`Rule.never_pays` answers from the widths alone; at any call shape with n_src >= n_dst,
    in and out of backward, with and without input gradients, the rewrite then does at least
    as much work of every kind as PyG's order (what a bucket's `dominated` would find)."""
    from gnnorch.rewrite.costmodel import dominated

    f_in, f_out = data.draw(st.integers(1, 64)), data.draw(st.integers(1, 64))
    kind = data.draw(st.sampled_from(["sage", "gin"]))
    if kind == "sage":
        layer = SAGEConv(f_in, f_out, aggr=data.draw(st.sampled_from(["mean", "add"])),
                         root_weight=data.draw(st.booleans()),
                         project=data.draw(st.booleans()), normalize=data.draw(st.booleans()))
    else:
        layer = GINConv(gin_nn(data.draw(st.sampled_from(["linear", "sequential", "mlp"])),
                               f_in, f_out), train_eps=data.draw(st.booleans()))
    rule = rule_for(layer)
    reason = rule.never_pays(layer)
    n_dst = data.draw(st.integers(1, 5000))
    shape = LayerShape(n_src=n_dst + data.draw(st.integers(0, 5000)), n_dst=n_dst,
                       n_edges=data.draw(st.integers(0, 50000)), f_in=f_in,
                       f_out=rule.shape(layer, rule.bind(layer, (torch.randn(3, f_in),
                                                                 torch.zeros(2, 0).long()),
                                                         {}), True).f_out,
                       input_grad=data.draw(st.booleans()), backward=data.draw(st.booleans()))
    if reason is not None:
        assert dominated(rule.ops(layer, shape, True), rule.ops(layer, shape, False)), reason
