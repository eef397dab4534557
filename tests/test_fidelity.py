"""Drop-in fidelity (issue 12): PyG programs that broke under the runtime now run as PyG runs
them. Each test is a regression test for one failure seen on PyG's own examples and tests."""
import os
import socket
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GCN, GraphSAGE, MessagePassing, SAGEConv

import gnnorch
from gnnorch.errors import TrimmingWarning
from gnnorch.trim.exact_output import PrefixExact

from helpers import cora


def run(fn, *args, processes=1, **options):
    runtime = gnnorch.Runtime(fn, processes=processes, autotune=False, **options)
    value = runtime(*args)
    return value, runtime.last_run.stats


# -- exact whatever rows the user reads ---------------------------------------------------------
def masked_loss_training(data, epochs=2, mask_rows="train", dropout=0.0):
    """Older PyG examples: the loss over every sampled *training* vertex, not only the seeds."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=32, shuffle=True)
    model = GraphSAGE(data.num_features, 16, 2, 7, dropout=dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)
            if mask_rows == "train":
                mask = batch.train_mask
            else:  # a mask inside the seed rows only
                mask = torch.zeros(batch.num_nodes, dtype=torch.bool)
                mask[:batch.batch_size] = batch.train_mask[:batch.batch_size]
            loss = F.cross_entropy(out[mask], batch.y[mask])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return torch.tensor(losses)


def test_loss_over_train_mask_equals_untrimmed_and_never_nan():
    data = cora()
    plain, _ = run(masked_loss_training, data, trim=False, sampler="gnnorch")
    with pytest.warns(TrimmingWarning, match="read beyond"):
        trimmed, stats = run(masked_loss_training, data, sampler="gnnorch")
    assert torch.isfinite(trimmed).all()
    torch.testing.assert_close(trimmed, plain, rtol=1e-4, atol=1e-5)
    model = stats[0]["trim"]["models"][0]
    assert not model["trimmed"] and model["materialized"] == 1


def test_mask_within_seed_rows_stays_trimmed():
    data = cora()
    plain, _ = run(masked_loss_training, data, 1, "seeds", trim=False, sampler="gnnorch")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrimmingWarning)
        trimmed, stats = run(masked_loss_training, data, 1, "seeds", sampler="gnnorch")
    model = stats[0]["trim"]["models"][0]
    assert model["trimmed"] and model["materialized"] == 0 and model["trimmed_forwards"] > 0
    torch.testing.assert_close(trimmed, plain, rtol=1e-4, atol=1e-5)


def test_prefix_exact_row_local_ops_and_autograd():
    base = torch.randn(6, 3, requires_grad=True)
    calls = []

    def materialize(reason):
        calls.append(reason)
        return base * 10

    out = gnnorch.trim.exact_output.prefix_exact(base * 1.0, 2, materialize)
    soft = out.log_softmax(dim=-1)
    assert isinstance(soft, PrefixExact) and out.shape == (6, 3) and not calls
    head = soft[:2]
    assert type(head) is torch.Tensor
    head.sum().backward()
    assert base.grad is not None and base.grad[2:].abs().sum() == 0 and not calls
    assert type(out.argmax(dim=1)[torch.tensor([0, 1])]) is torch.Tensor and not calls
    total = soft.sum()  # a reduction over all rows: materialised, replayed through log_softmax
    assert calls and torch.allclose(total, (base * 10).log_softmax(dim=-1).sum())
    assert torch.equal(out[3], base[3] * 10)


def test_prefix_exact_index_select_of_seed_rows_is_cheap():
    """`index_select` along the rows reads exact rows as indexing does (a link objective's
    ``h.index_select(0, edge_label_index[0])``); beyond them, or along another dimension of
    a 1-row selection, it materialises."""
    base = torch.randn(6, 3)
    calls = []

    def materialize(reason):
        calls.append(reason)
        return base * 10

    out = gnnorch.trim.exact_output.prefix_exact(base.clone(), 2, materialize)
    idx = torch.tensor([1, 0, 1])
    for picked in (out.index_select(0, idx), torch.index_select(out, 0, idx),
                   torch.index_select(out, dim=-2, index=idx)):
        assert type(picked) is torch.Tensor and torch.equal(picked, base[idx])
    assert not calls
    assert torch.equal(out.index_select(0, torch.tensor([0, 4])), (base * 10)[[0, 4]])
    assert len(calls) == 1
    fresh = gnnorch.trim.exact_output.prefix_exact(base.clone(), 2, materialize)
    assert torch.equal(fresh.index_select(1, torch.tensor([2])), (base * 10)[:, [2]])
    assert len(calls) == 2


def test_prefix_exact_sums_of_two_stay_prefix_exact():
    """Two prefix-exact tensors of one shape and the same exact rows (two encoder calls'
    outputs) summed or multiplied: the result is prefix-exact in those rows, reading them
    costs nothing, and a read beyond materialises both parents and replays the operation.
    Tensors of other exact rows, or a broadcast, materialise at once."""
    a, b = torch.randn(6, 3), torch.randn(6, 3)
    calls = []

    def exact_of(value):
        def materialize(reason):
            calls.append(reason)
            return value * 10
        return materialize

    left = gnnorch.trim.exact_output.prefix_exact(a.clone(), 2, exact_of(a))
    right = gnnorch.trim.exact_output.prefix_exact(b.clone(), 2, exact_of(b))
    total = left + right
    assert isinstance(total, PrefixExact) and not calls
    assert torch.equal(total[:2], a[:2] + b[:2]) and not calls
    assert torch.equal((left * right)[1], a[1] * b[1]) and not calls
    assert torch.allclose(total.sum(), (a * 10 + b * 10).sum()) and len(calls) == 2
    other = gnnorch.trim.exact_output.prefix_exact(b.clone(), 3, exact_of(b))
    fresh = gnnorch.trim.exact_output.prefix_exact(a.clone(), 2, exact_of(a))
    assert type(fresh + other) is torch.Tensor and len(calls) == 4
    row = gnnorch.trim.exact_output.prefix_exact(a[:1].clone(), 1, exact_of(a[:1]))
    assert type(gnnorch.trim.exact_output.prefix_exact(a.clone(), 2, exact_of(a)) + row) \
        is torch.Tensor


# -- models that trim themselves ----------------------------------------------------------------
def hierarchical(data, epochs=1):
    """PyG's examples/hierarchical_sampling.py: BasicGNN with its own trim_to_layer."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[5, 4, 3], input_nodes=data.train_mask,
                            batch_size=32, shuffle=True)
    model = GraphSAGE(data.num_features, 16, 3, 7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for epoch in range(epochs + 1):  # the example's first epoch runs without PyG's trimming
        for batch in loader:
            optimizer.zero_grad()
            hops = {} if epoch == 0 else dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                                               num_sampled_edges_per_hop=batch.num_sampled_edges)
            out = model(batch.x, batch.edge_index, **hops)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return torch.tensor(losses)


def test_model_trimming_itself_is_left_to_pyg():
    data = cora()
    plain, _ = run(hierarchical, data, trim=False, sampler="gnnorch")
    value, stats = run(hierarchical, data, sampler="gnnorch")
    torch.testing.assert_close(value, plain, rtol=1e-4, atol=1e-5)
    model = stats[0]["trim"]["models"][0]
    assert not model["trimmed"] and "trims its own layers" in model["reason"]
    assert model["trimmed_forwards"] > 0  # the first epoch was trimmed by gnnorch


# -- torch.fx, to_hetero, torch.compile ---------------------------------------------------------
def fx_and_hetero():
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import to_hetero

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 8)
            self.conv2 = SAGEConv((-1, -1), 3)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(20, 4)
    data["author"].x = torch.randn(10, 5)
    data["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 10, (40,)), torch.randint(0, 20, (40,))])
    data["paper", "rev_writes", "author"].edge_index = \
        data["author", "writes", "paper"].edge_index.flip(0)
    class LeafTracer(torch.fx.Tracer):  # PyG layers as leaves, as PyG's own fx tools do
        def is_leaf_module(self, module, name):
            return isinstance(module, MessagePassing) or super().is_leaf_module(module, name)

    traced = torch.fx.GraphModule(Net(), LeafTracer().trace(Net()))
    model = to_hetero(Net(), data.metadata(), aggr="sum")
    out = model(data.x_dict, data.edge_index_dict)
    return [n.op for n in traced.graph.nodes], {k: v.shape for k, v in out.items()}


def test_fx_tracing_and_to_hetero_pass_through():
    expected = fx_and_hetero()
    value, _ = run(fx_and_hetero)
    assert value == expected
    assert "call_module" in value[0]


def compiled_forward(fullgraph, cls=GraphSAGE):
    import torch._dynamo

    torch._dynamo.reset()
    data = cora()
    torch.manual_seed(0)
    model = cls(data.num_features, 16, 2, 7)
    explanation = torch._dynamo.explain(model)(data.x, data.edge_index)
    compiled = torch.compile(model, fullgraph=fullgraph, backend="eager")
    out = compiled(data.x, data.edge_index)
    return explanation.graph_break_count, out.detach()


@pytest.mark.parametrize("fullgraph, cls", [(False, GraphSAGE), (True, GraphSAGE),
                                            (False, GCN)])
def test_compile_adds_no_graph_break(fullgraph, cls):
    """As many graph breaks as plain PyG (GraphSAGE: none, so fullgraph=True compiles; GCN:
    PyG's own add_remaining_self_loops breaks on torch 2.13), no dynamo warnings."""
    breaks, out = compiled_forward(fullgraph and cls is GraphSAGE, cls)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value, _ = run(compiled_forward, fullgraph, cls)
    assert value[0] == breaks and (breaks == 0 or cls is GCN)
    torch.testing.assert_close(value[1], out)
    texts = [str(w.message) for w in caught]
    assert not [t for t in texts if "global hooks" in t or "get_ident" in t], texts


# -- several ranks ------------------------------------------------------------------------------
def compiled_training(data, epochs=2):
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=64, shuffle=True)
    model = torch.compile(GCN(data.num_features, 16, 2, 7), backend="eager")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
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


def test_compiled_model_trains_with_two_ranks(no_leftover_children):
    losses, _ = run(compiled_training, cora(), processes=2)
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_process_group(data, port):
    """PyG's multi_gpu examples: the function initialises (and destroys) its own group."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    losses = masked_loss_training(data, 1, "seeds")
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    return losses, rank, world


def test_own_init_process_group_with_two_ranks(no_leftover_children):
    data = cora()
    alone = own_process_group(data, _free_port())[0]
    (losses, rank, world), stats = run(own_process_group, data, _free_port(), processes=2)
    assert (rank, world) == (0, 2)
    assert stats[0]["distributed"]["user_managed"]
    # the script manages distribution itself: rank 0 trains on every seed, as it would alone
    assert len(losses) == len(alone)


def evaluation_with_shuffled_loader(data):
    """PyG's examples/ogbn_train.py builds its val/test loaders with shuffle=True."""
    torch.manual_seed(0)
    train_loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                                  batch_size=32, shuffle=True)
    test_loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.test_mask,
                                 batch_size=100, shuffle=True)
    model = GraphSAGE(data.num_features, 16, 2, 7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train_seeds = 0
    model.train()
    for batch in train_loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        train_seeds += batch.batch_size
    model.eval()
    seen, sizes = [], []
    with torch.no_grad():
        for batch in test_loader:
            model(batch.x, batch.edge_index)
            seen.append(batch.n_id[:batch.batch_size])
            sizes.append(batch.batch_size)
    return train_seeds, torch.cat(seen).sort().values, sizes


def test_shuffled_evaluation_loader_is_not_sharded(no_leftover_children):
    data = cora()
    (train_seeds, seen, sizes), _ = run(evaluation_with_shuffled_loader, data, processes=2)
    assert torch.equal(seen, data.test_mask.nonzero().view(-1))
    assert max(sizes) == 100
    assert train_seeds == 70  # rank 0's shard of the 140 training seeds


# -- the user's loader configuration ------------------------------------------------------------
def workers_and_affinity(data):
    loader = NeighborLoader(data, num_neighbors=[3], input_nodes=data.train_mask,
                            batch_size=70, num_workers=1, shuffle=True)
    with loader.enable_cpu_affinity(loader_cores=[0]):
        batches = sum(1 for _ in loader)
    return loader.num_workers, batches


def test_user_num_workers_and_cpu_affinity_are_kept():
    value, stats = run(workers_and_affinity, cora())
    assert value == (1, 2)
    assert stats[0]["sampler"]["loaders"][0]["num_workers"] == "user (1)"


def test_batch_fields_are_pygs_plus_hop_counts():
    """Decided: batches carry the fields of PyG's NeighborLoader with pyg-lib, i.e. with the hop
    counts `num_sampled_nodes` / `num_sampled_edges` (torch_sparse's batches lack them)."""
    pytest.importorskip("torch_sparse")

    def keys(data):
        loader = NeighborLoader(data, num_neighbors=[3, 2], batch_size=8)
        return sorted(next(iter(loader)).keys())

    data = cora()
    ours, _ = run(keys, data, sampler="gnnorch")
    pyg, _ = run(keys, data, sampler="pyg")
    assert set(ours) - set(pyg) <= {"num_sampled_nodes", "num_sampled_edges"}
    assert set(pyg) <= set(ours)


# -- rewrites on inputs PyG accepts ------------------------------------------------------------
def sparse_feature_gcn():
    """PyG's test_gcn_conv_with_sparse_input_feature: GCNConv on a sparse COO feature matrix."""
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)
    x = torch.sparse_coo_tensor(torch.tensor([[0, 0], [0, 1]]), torch.tensor([1.0, 1.0]),
                                size=(4, 16))
    edge_index = torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]])
    return GCNConv(16, 32)(x, edge_index).detach()


def test_sparse_input_features_are_left_to_pyg_by_rewrites():
    expected = sparse_feature_gcn()
    value, _ = run(sparse_feature_gcn)
    torch.testing.assert_close(value, expected)


def full_batch_with_dropout(data, steps=3):
    """PyG's examples/gcn.py style: no loader, dropout: nothing for the runtime to shard."""
    model = GCN(data.num_features, 16, 2, 7, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses)


def test_unsharded_work_on_two_ranks_equals_one_process(no_leftover_children):
    """Ranks start from the caller's RNG state: equal initial weights and dropout masks, so the
    averaged gradient of identical full-batch steps is the single process's gradient."""
    data = cora()
    torch.manual_seed(3)
    alone, _ = run(full_batch_with_dropout, data)
    torch.manual_seed(3)
    ranks, _ = run(full_batch_with_dropout, data, processes=2)
    torch.testing.assert_close(ranks, alone, rtol=1e-5, atol=1e-6)
