"""Hop-aware trimming: seed outputs and all gradients equal the untrimmed model's; models that
mix vertices are detected and left untrimmed; the hop layout is recovered from edges alone."""
import math

import pytest
import torch
from torch_geometric.nn import GAT, GCN, GIN, GraphSAGE, GCNConv, MessagePassing, SAGEConv
from torch_geometric.sampler.utils import to_csc

from gnnorch.errors import TrimmingWarning
from gnnorch.intercept.layers import LayerSeam
from gnnorch.trim.batch import BatchGraph
from gnnorch.sampling.uniform import sample_neighbors
from gnnorch.trim import HopLayout, hops_from_edges

from helpers import cora


def sampled_batch(fanout, seeds=16, seed=0):
    data = cora()
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    torch.manual_seed(seed)
    s = sample_neighbors(colptr, row, torch.randperm(data.num_nodes)[:seeds], fanout)
    x = data.x[s.node].double()
    edge_index = torch.stack([s.row, s.col])
    layout = HopLayout.from_counts(s.num_sampled_nodes, s.num_sampled_edges)
    return x, edge_index, layout, seeds


class Custom(torch.nn.Module):
    """A hand-written stack: encoder Linear, two layers, a residual, a per-vertex head."""

    def __init__(self, cin, hidden, cout):
        super().__init__()
        self.enc = torch.nn.Linear(cin, hidden)
        self.conv1 = SAGEConv(hidden, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, cout)

    def forward(self, x, edge_index):
        h = self.enc(x).relu()
        h = h + self.conv1(h, edge_index).relu()
        h = self.conv2(h, edge_index, edge_weight=None)
        return self.head(h)


class GlobalMix(torch.nn.Module):
    """Subtracts the batch mean between layers: trimming would change the seeds' outputs."""

    def __init__(self, cin, hidden, cout):
        super().__init__()
        self.conv1 = SAGEConv(cin, hidden)
        self.conv2 = SAGEConv(hidden, cout)

    def forward(self, x, edge_index):
        h = self.conv1(x, edge_index)
        return self.conv2(h - h.mean(dim=0), edge_index)


class NormInLayers(torch.nn.Module):
    """Normalisation inside the layers themselves, over the rows a layer computes: PyG's
    GENConv (its MLP: norm "batch" by default; "layer" is torch's row-local LayerNorm) or a
    GINConv whose `nn` holds a BatchNorm1d. Batch statistics over fewer rows: trimming would
    change the seeds' outputs."""

    def __init__(self, cin, hidden, cout, inner):
        super().__init__()
        from torch_geometric.nn import GENConv, GINConv

        if inner == "gin_bn":
            def conv(i, o):
                return GINConv(torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.BatchNorm1d(o),
                                                   torch.nn.ReLU(), torch.nn.Linear(o, o)))
        else:
            def conv(i, o):
                return GENConv(i, o, norm=inner.split("_")[1], num_layers=2)
        self.conv1 = conv(cin, hidden)
        self.conv2 = conv(hidden, cout)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def make(kind, layers):
    torch.manual_seed(1)
    cin, hidden, cout = 1433, 24, 7
    if kind == "sage":
        model = GraphSAGE(cin, hidden, layers, cout)
    elif kind == "gcn":
        model = GCN(cin, hidden, layers, cout)
    elif kind == "gat":
        model = GAT(cin, hidden, layers, cout, heads=2)
    elif kind == "gin":
        model = GIN(cin, hidden, layers, cout)
    elif kind == "sage_jk":
        model = GraphSAGE(cin, hidden, layers, cout, jk="cat")
    elif kind == "custom":
        model = Custom(cin, hidden, cout)
    elif kind == "batchnorm":
        model = GraphSAGE(cin, hidden, layers, cout, norm="batch_norm")
    elif kind in ("gin_bn", "gen_batch", "gen_layer"):
        model = NormInLayers(cin, hidden, cout, kind)
    else:
        model = GlobalMix(cin, hidden, cout)
    return model.double()


def forward_backward(model, x, edge_index, seeds, graph=None):
    """Seed outputs and parameter gradients; with `graph`, under the layer seam (second
    forward: the first one calibrates)."""
    model.zero_grad()
    if graph is None:
        out = model(x, edge_index)
    else:
        seam = LayerSeam(trim=True)
        with seam.installed():
            seam.set_batch(graph)
            with torch.no_grad():
                model(x, edge_index)
            seam.set_batch(graph)
            out = model(x, edge_index)
        state = next(iter(seam.models.values()))
        forward_backward.state, forward_backward.out = state, out
    out[:seeds].pow(2).sum().backward()
    return out[:seeds].detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind, layers, fanout", [
    ("sage", 2, [5, 5]), ("sage", 3, [5, 4, 3]), ("gcn", 2, [5, 5]), ("gcn", 3, [4, 3, 3]),
    ("gat", 2, [5, 5]), ("gin", 2, [5, 5]), ("gin", 3, [3, 3, 3]), ("sage_jk", 2, [5, 5]),
    ("custom", 2, [6, 4]), ("sage", 2, [-1, 3]), ("gcn", 2, [3, 3, 3]),
    ("gen_layer", 2, [5, 5]),   # GENConv's MLP with torch's LayerNorm: row-local, trimmed
])
@pytest.mark.parametrize("grouped", [False, True], ids=["mask", "prefix"])
def test_trimmed_equals_untrimmed_forward_and_backward(kind, layers, fanout, grouped):
    """`grouped`: the batch's edges are known to come hop by hop (the sampler's layout), so a
    layer keeps a prefix of them; else a mask of the edges into its rows."""
    x, edge_index, layout, seeds = sampled_batch(fanout)
    model = make(kind, layers)
    model.eval()  # dropout-free: the two runs must see the same computation
    ref_out, ref_grads = forward_backward(model, x, edge_index, seeds)
    graph = BatchGraph(edge_index, x.size(0), seeds, layout, edges_grouped=grouped)
    out, grads = forward_backward(model, x, edge_index, seeds, graph)
    state = forward_backward.state
    assert state.trim, state.reason
    # the first forward ran trimmed too when it is a PyG BasicGNN (`trim.trusted`) with a
    # layer per sampled hop; any other model's first forward runs untrimmed
    speculated = kind not in ("custom", "gen_layer") and layers == len(fanout)
    assert state.trimmed_forwards == (2 if speculated else 1)
    # compact (unpadded) unless the code between layers needs every row
    assert state.compact == (kind not in ("sage_jk", "custom"))
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-10)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-9, atol=1e-10, msg=name)
    full = forward_backward.out
    assert state.materialized == 0  # the seed rows were all that was read so far
    with pytest.warns(TrimmingWarning, match="read beyond its first"):
        rest = full[seeds:].detach()  # any other row: the forward is recomputed untrimmed
    model.zero_grad()
    torch.testing.assert_close(rest, model(x, edge_index)[seeds:].detach(), rtol=1e-9,
                               atol=1e-10)
    assert state.materialized == 1 and not state.trim


def test_trimming_computes_fewer_rows():
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = make("sage", 2).eval()
    seam = LayerSeam(trim=True)
    graph = BatchGraph(edge_index, x.size(0), seeds, layout)
    with seam.installed(), torch.no_grad():
        for _ in range(2):
            seam.set_batch(graph)
            model(x, edge_index)
    stats = seam.stats()
    assert stats["rows_untrimmed"] == 4 * x.size(0)  # two trimmed forwards, two layers
    assert stats["rows_computed"] == 2 * (layout.rows_within(1) + layout.rows_within(0))


@pytest.mark.parametrize("kind, layers, fanout", [("sage", 2, [5, 5]), ("sage_jk", 2, [5, 5]),
                                                  ("gcn", 3, [4, 3, 3])])
def test_first_forward_runs_trimmed_and_exact(kind, layers, fanout):
    """No untrimmed training step is paid for: the first forward on a batch is trimmed
    (padded) before the one-off check, and its values and gradients are PyG's."""
    x, edge_index, layout, seeds = sampled_batch(fanout)
    model = make(kind, layers).eval()
    ref_out, ref_grads = forward_backward(model, x, edge_index, seeds)
    seam = LayerSeam(trim=True)
    model.zero_grad()
    with seam.installed():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        out = model(x, edge_index)
    out[:seeds].pow(2).sum().backward()
    state = next(iter(seam.models.values()))
    assert state.speculated and state.trim and state.trimmed_forwards == 1
    assert state.untrimmed_forwards == 0
    torch.testing.assert_close(out[:seeds].detach(), ref_out, rtol=1e-9, atol=1e-10)
    for name, g in ref_grads.items():
        torch.testing.assert_close(model.get_parameter(name).grad, g, rtol=1e-9, atol=1e-10)


def test_wrong_layer_guess_recomputes_untrimmed_from_the_same_random_state():
    """A 2-layer model on a 3-hop batch: the guess K = 3 is wrong, the forward is recomputed
    untrimmed (exact, same dropout masks as without the seam), and K = 2 is learnt."""
    x, edge_index, layout, seeds = sampled_batch([3, 3, 3])
    model = GraphSAGE(1433, 16, 2, 7, dropout=0.5).double().train()
    torch.manual_seed(5)
    ref = model(x, edge_index)
    after_ref = torch.rand(2)
    seam = LayerSeam(trim=True)
    torch.manual_seed(5)
    with seam.installed():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        out = model(x, edge_index)
    state = next(iter(seam.models.values()))
    assert state.layers == 2 and state.untrimmed_forwards == 1
    torch.testing.assert_close(out[:seeds], ref[:seeds])
    assert torch.equal(torch.rand(2), after_ref)


@pytest.mark.parametrize("kind, reason", [("batchnorm", "BatchNorm"), ("global", "differ"),
                                          ("gin_bn", "BatchNorm"), ("gen_batch", "BatchNorm")])
def test_vertex_mixing_models_are_left_untrimmed(kind, reason):
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = make(kind, 2).train()
    torch.manual_seed(3)
    ref_out, ref_grads = forward_backward(model, x, edge_index, seeds)
    graph = BatchGraph(edge_index, x.size(0), seeds, layout)
    torch.manual_seed(3)
    model.train()
    out, grads = forward_backward(model, x, edge_index, seeds, graph)
    state = forward_backward.state
    assert not state.trim and reason in state.reason
    assert not torch.isnan(forward_backward.out).any()
    if kind != "batchnorm":  # deterministic: untrimmed numbers are the reference's
        torch.testing.assert_close(out, ref_out)
        for name, g in ref_grads.items():
            torch.testing.assert_close(grads[name], g)


def test_calibration_check_keeps_rng_and_train_mode():
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = GraphSAGE(1433, 16, 2, 7, dropout=0.5).double().train()
    graph = BatchGraph(edge_index, x.size(0), seeds, layout)
    seam = LayerSeam(trim=True)
    torch.manual_seed(0)
    with seam.installed():
        seam.set_batch(graph)
        model(x, edge_index)
    after_seam = torch.rand(3)
    torch.manual_seed(0)
    model(x, edge_index)
    assert torch.equal(torch.rand(3), after_seam)
    assert all(m.training for m in model.modules())
    assert next(iter(seam.models.values())).trim


def test_no_layout_means_no_trimming():
    x, edge_index, _, seeds = sampled_batch([5, 5])
    model = make("sage", 2).eval()
    graph = BatchGraph(edge_index, x.size(0), seeds, None, reason="not directional")
    seam = LayerSeam(trim=True)
    with seam.installed(), torch.no_grad():
        seam.set_batch(graph)
        out = model(x, edge_index)
    assert not torch.isnan(out).any()
    assert next(iter(seam.models.values())).reason == "not directional"


def test_seam_is_removed_afterwards():
    before = MessagePassing.__dict__.get("__call__")
    with LayerSeam().installed():
        assert "__call__" in MessagePassing.__dict__
    assert MessagePassing.__dict__.get("__call__") is before


@pytest.mark.parametrize("fanout", [[5, 5], [3, 4, 2], [-1]])
def test_hop_layout_recovered_from_edges(fanout):
    x, edge_index, layout, seeds = sampled_batch(fanout)
    derived = hops_from_edges(edge_index, x.size(0), seeds, len(fanout))
    assert derived is not None
    assert derived.nodes == layout.nodes
    assert derived.edges == layout.edges


def test_hop_layout_rejects_unordered_batches():
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    flipped = edge_index.flip(0)  # bidirectional-like: destinations in the last hop
    assert hops_from_edges(flipped, x.size(0), seeds, 2) is None


def _transformed(edge_index, num_nodes, how):
    """The batch's edges (and vertex count) after a batch transform PyG users apply."""
    loops = torch.arange(num_nodes).repeat(2, 1)
    if how == "self_loops":                     # T.AddSelfLoops
        return torch.cat([edge_index, loops], 1), num_nodes
    if how == "undirected":                     # T.ToUndirected (duplicates kept)
        return torch.cat([edge_index, edge_index.flip(0)], 1), num_nodes
    if how == "virtual_node":                   # T.VirtualNode: one more vertex, both ways
        hub = torch.full((num_nodes,), num_nodes)
        spokes = torch.stack([torch.arange(num_nodes), hub])
        return torch.cat([edge_index, spokes, spokes.flip(0)], 1), num_nodes + 1
    raise ValueError(how)


@pytest.mark.parametrize("how, admitted", [
    ("self_loops", True), ("undirected", True), ("virtual_node", False)])
def test_hop_layout_admits_only_transforms_that_keep_the_hop_invariant(how, admitted):
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    assert layout.admits(edge_index, x.size(0))
    edges, num_nodes = _transformed(edge_index, x.size(0), how)
    assert layout.admits(edges, num_nodes) == admitted
    last = layout.rows_within(1)            # a vertex of the last hop, feeding a seed directly
    skip = torch.cat([edge_index, torch.tensor([[last], [0]])], 1)
    assert not layout.admits(skip, x.size(0))


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("how", ["self_loops", "undirected"])
def test_trimmed_equals_untrimmed_on_admitted_transformed_batches(kind, how):
    """Edges a transform adds within one hop: trimming keeps every in-edge of the rows it
    computes, so the seeds' outputs and all gradients are the untrimmed ones."""
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    edges, _ = _transformed(edge_index, x.size(0), how)
    model = make(kind, 2).eval()
    ref_out, ref_grads = forward_backward(model, x, edges, seeds)
    out, grads = forward_backward(model, x, edges, seeds, BatchGraph(edges, x.size(0), seeds,
                                                                     layout))
    assert forward_backward.state.trim
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-10)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-9, atol=1e-10, msg=name)


def test_layer_bounds():
    layout = HopLayout.from_counts([4, 10, 30], [20, 60])
    assert layout.bounds(0, 2).num_src == 44 and layout.bounds(0, 2).num_dst == 14
    assert layout.bounds(1, 2).num_src == 14 and layout.bounds(1, 2).num_dst == 4
    assert layout.bounds(0, 2).num_edges == 80 and layout.bounds(1, 2).num_edges == 20
    assert layout.bounds(0, 3) is None  # a 3-layer model on a 2-hop sample: first layer whole
    with pytest.raises(ValueError):
        HopLayout.from_counts([1, 2], [3, 4])
    assert math.isclose(layout.num_nodes, 44)


def test_pyg_basic_gnns_are_trusted_and_skip_the_reference_forward():
    """GraphSAGE / GCN / GIN / GAT from PyG are exact by construction: no one-off check runs
    (no untrimmed reference forward), and the first forward is still PyG's seed rows."""
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    for kind, compact in (("sage", True), ("gcn", True), ("gin", True), ("sage_jk", False)):
        model = make(kind, 2).eval()
        ref_out, ref_grads = forward_backward(model, x, edge_index, seeds)
        seam = LayerSeam(trim=True)
        model.zero_grad()
        with seam.installed():
            seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
            out = model(x, edge_index)
        out[:seeds].pow(2).sum().backward()
        state = next(iter(seam.models.values()))
        assert seam.check.seconds == 0.0 and state.trim and state.compact == compact, kind
        assert "exact by construction" in state.verified_by
        torch.testing.assert_close(out[:seeds].detach(), ref_out, rtol=1e-9, atol=1e-10)
        for name, g in ref_grads.items():
            torch.testing.assert_close(model.get_parameter(name).grad, g, rtol=1e-9,
                                       atol=1e-10)


def test_untrusted_models_still_get_the_check():
    from gnnorch.trim.trusted import trusted_trimming

    x, edge_index, layout, seeds = sampled_batch([5, 5])
    assert not trusted_trimming(make("custom", 2), (x, edge_index), {})[0]
    assert not trusted_trimming(make("global", 2), (x, edge_index), {})[0]
    sage = make("sage", 2)
    assert not trusted_trimming(sage, (x, edge_index), {"batch_size": 4})[0]
    mixing = GraphSAGE(8, 8, 2, 3, act=lambda t: t - t.mean(0))  # a callable activation
    assert not trusted_trimming(mixing, (x, edge_index), {})[0]

    class Sub(GraphSAGE):                        # an overridden forward
        def forward(self, x, edge_index):
            return super().forward(x, edge_index)

    assert not trusted_trimming(Sub(8, 8, 2, 3), (x, edge_index), {})[0]
    model = make("custom", 2).eval()
    seam = LayerSeam(trim=True)
    with seam.installed(), torch.no_grad():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        model(x, edge_index)
    state = next(iter(seam.models.values()))
    assert seam.check.seconds > 0 and state.verified_by == "the one-off check"
    # its first forward ran untrimmed, as without gnnorch (a trimmed one might fail for it)
    assert not state.speculated and state.untrimmed_forwards == 1


def test_verification_fails_closed_on_a_trimmed_output_of_another_dtype():
    """A trimmed forward whose output dtype differs from the untrimmed one's is not trimmed
    (it used to raise from torch.allclose: "BFloat16 did not match Float")."""
    from gnnorch.trim.batch import BatchGraph
    from gnnorch.trim.verify import verify_trimming

    plain = torch.ones(6, 3, dtype=torch.bfloat16)
    batch = BatchGraph(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=6,
                       batch_size=4, layout=None)
    trim, compact, reason = verify_trimming(plain, lambda compact: (plain.float(), None), batch)
    assert not trim and not compact and "float32" in reason and "bfloat16" in reason


def test_the_device_copy_the_data_path_made_is_the_batchs_own_without_comparing():
    """A batch the data path copied keeps its host edge_index carrying its device twin
    (`device.twin`); the twin the user's ``batch.to(device)`` returns is the batch's own
    edge_index at once, without copying it back to compare (on "meta", which has no values,
    a comparison could not run at all), and a slice of it is narrowed."""
    from gnnorch.device.twin import twinned

    host = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    twin = torch.empty_like(host, device="meta")
    graph = BatchGraph(twinned(host, twin), 4, 2, None)
    assert graph.is_own(twin)
    assert graph.is_narrowed(twin[:, :2])


def test_a_sampled_batchs_edges_into_a_layers_rows_are_a_prefix():
    """The sampler lays edges out hop by hop: the edges into rows [0, num_dst) of every layer
    are its first `num_edges`, which is what trimming keeps for a grouped batch."""
    for fanout in ([5, 5], [4, 3, 3], [-1, 3]):
        _, edge_index, layout, _ = sampled_batch(fanout)
        for layer in range(len(fanout)):
            bounds = layout.bounds(layer, len(fanout))
            into = (edge_index[1] < bounds.num_dst).nonzero().view(-1)
            assert torch.equal(into, torch.arange(bounds.num_edges))


def test_a_grouped_batch_is_trimmed_without_a_mask():
    """A grouped batch's trimmed layers keep a prefix of the edges: no comparison, no boolean
    index (on a GPU, no wait for the device to count a mask); an ungrouped one uses the mask."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = make("sage", 2).eval()
    counts = {}
    for grouped in (False, True):
        seam = LayerSeam(trim=True)
        graph = BatchGraph(edge_index, x.size(0), seeds, layout, edges_grouped=grouped)
        with seam.installed(), torch.no_grad():
            for _ in range(2):   # the second forward runs trimmed and checked
                seam.set_batch(graph)
                model(x, edge_index)
            seam.set_batch(graph)
            with Ops() as ops:
                model(x, edge_index)
        counts[grouped] = ops.names.count("lt")
    assert counts[False] == 2 and counts[True] == 0, counts
