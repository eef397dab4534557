"""The cache's parts on their own (issue #13): the PyG layer-type tuples mean what their
docstrings say, refreshes call the layer through the `unpatched` call they are given (no
global), the manager takes that call from the seam's calls, every `LoaderCache` attribute exists
from its construction on, and the package keeps its size and layering rules."""
from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GCNConv, GINEConv, MessagePassing, SAGEConv

import gnnorch
from gnnorch.cache import CacheConfig, CacheStatus
from gnnorch.cache.manager import CacheManager
from gnnorch.cache.refresh import Neighbourhoods, Refresher
from gnnorch.intercept.session import active
from gnnorch.launch import context
from gnnorch.trim import layer_types

from helpers import cora

CACHE = Path(gnnorch.__file__).parent / "cache"
HIGHER = ("launch", "execute", "intercept", "tune", "runtime")  # floors above the cache


def _layer(cls, cin=6, cout=4):
    torch.manual_seed(0)
    if cls.__name__ in ("GINConv",):
        return cls(torch.nn.Linear(cin, cout))
    if cls.__name__ == "GINEConv":
        return cls(torch.nn.Linear(cin, cout), edge_dim=3)
    if cls.__name__ in ("GATConv", "GATv2Conv"):
        return cls(cin, cout, heads=2)
    return cls(cin, cout)


def _graph(num=12, edges=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num, 6, generator=gen, dtype=torch.float64)
    edge_index = torch.randint(0, num, (2, edges), generator=gen)
    return x, edge_index


# ----------------------------------------------------------------------- layer-type tuples
def test_layer_type_tuples_nest_as_documented():
    pair, rec = layer_types.pair_capable(), layer_types.recomputable()
    assert GINEConv in pair and SAGEConv in pair and GCNConv not in pair
    assert GCNConv in rec and GINEConv not in rec
    assert set(layer_types.pair_recomputable()) == set(pair) & set(rec)
    assert set(layer_types.self_looping()) <= set(layer_types.pair_recomputable())
    assert layer_types.pruning_safe() == rec
    for group in (pair, rec, layer_types.self_looping()):
        assert group and all(issubclass(t, MessagePassing) for t in group)


@pytest.mark.parametrize("cls", layer_types.pair_capable(), ids=lambda c: c.__name__)
def test_pair_capable_layers_compute_the_destination_rows_only(cls):
    """A bipartite call on (x, x[:d]) with the edges into the first d rows gives those rows of
    the full call (self-looping layers pair x_dst[i] with x_src[i])."""
    layer = _layer(cls).double().eval()
    x, edge_index = _graph()
    extra = {}
    if cls is GINEConv:
        extra = {"edge_attr": torch.randn(edge_index.size(1), 3, dtype=torch.float64)}
    d = 5
    keep = edge_index[1] < d
    with torch.no_grad():
        full = layer(x, edge_index, **extra)[:d]
        part = layer((x, x[:d]), edge_index[:, keep],
                     **{k: v[keep] for k, v in extra.items()})
    assert part.shape[0] == d
    torch.testing.assert_close(part, full)


@pytest.mark.parametrize("cls", layer_types.recomputable(), ids=lambda c: c.__name__)
def test_recomputable_layers_depend_only_on_the_in_neighbourhood(cls):
    """v's row is unchanged when every edge not into v and every vertex not feeding v goes
    (GCNConv: its normalisation reads the sources' degrees, so they are fed as edge weights)."""
    layer = _layer(cls).double().eval()
    x, edge_index = _graph()
    v = int(edge_index[1, 0])
    into = edge_index[1] == v
    src = edge_index[0, into]
    nodes = torch.unique(torch.cat([torch.tensor([v]), src]))
    local = torch.full((x.size(0),), -1, dtype=torch.long)
    local[nodes] = torch.arange(nodes.numel())
    sub = torch.stack([local[src], local.new_full((src.numel(),), int(local[v]))])
    with torch.no_grad():
        if cls is GCNConv:
            from torch_geometric.nn.conv.gcn_conv import gcn_norm

            ei, w = gcn_norm(edge_index, None, x.size(0), add_self_loops=True)
            layer.normalize = False
            full = layer(x, ei, w)[v]
            keep = ei[1] == v
            ei, w = ei[:, keep], w[keep]
            got = layer(x[nodes], local[ei], w)[local[v]]
        else:
            full = layer(x, edge_index)[v]
            got = layer(x[nodes], sub)[local[v]]
    torch.testing.assert_close(got, full)


# ------------------------------------------------------------------- the unpatched call
def test_refresher_calls_the_layer_through_the_given_unpatched_call():
    assert context.current() is None  # nothing global to reach for
    x, edge_index = _graph(num=30, edges=120)
    x = x.float()
    from torch_geometric.utils import sort_edge_index

    edge_index = sort_edge_index(edge_index, sort_by_row=False)
    colptr = torch.zeros(31, dtype=torch.long)
    colptr[1:] = torch.cumsum(torch.bincount(edge_index[1], minlength=30), 0)
    row = edge_index[0]
    layer = SAGEConv(6, 4)
    seen = []

    def unpatched(module, *args, **kwargs):
        seen.append(module)
        return MessagePassing.__call__(module, *args, **kwargs)

    hood = Neighbourhoods(colptr, row, -1, False, True, seed=0)
    refresher = Refresher(layer, lambda: x, hood, chunk_rows=7, unpatched=unpatched)
    ids = torch.tensor([0, 3, 5, 8, 13, 21, 29, 2, 9])
    rows, _ = refresher.compute(ids)
    assert seen and all(m is refresher.shadow for m in seen)
    with torch.no_grad():
        ref = layer(x, edge_index)[ids]
    torch.testing.assert_close(rows, ref)


def test_manager_takes_the_unpatched_call_from_the_seam():
    manager = CacheManager(CacheConfig(), seed=lambda: 0)
    marker = object()

    def unpatched(layer, *args, **kwargs):
        return marker

    batch = types.SimpleNamespace(cache=None, training=True)
    call = types.SimpleNamespace(batch=batch, run=lambda: "ran", unpatched=unpatched)
    assert manager.unpatched is None
    assert manager.on_layer(call) == "ran"
    assert manager.unpatched is unpatched
    other = types.SimpleNamespace(batch=batch, run=lambda: "ran", unpatched=print)
    manager.on_layer(other)
    assert manager.unpatched is unpatched  # the same for every call of a run


# ------------------------------------------------------------- attributes and lifecycle
def test_loader_cache_attributes_exist_from_construction_and_status_is_an_enum():
    data = cora()

    def train(data):
        torch.manual_seed(0)
        from torch_geometric.nn import GraphSAGE

        model = GraphSAGE(data.num_features, 16, 2, 7)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = NeighborLoader(data, num_neighbors=[4, 3], input_nodes=data.train_mask,
                                batch_size=32, shuffle=True)
        names, statuses = [], []
        for batch in loader:
            lc = active().cache.loaders[0]
            names.append(set(vars(lc)))
            statuses.append(lc.status)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
        names.append(set(vars(lc)))
        return names, statuses

    runtime = gnnorch.Runtime(train, processes=1, launch={"threads": 1},
                              cache=CacheConfig(hot_ratio=0.2, overlap="thread", staleness=2))
    names, statuses = runtime(data)
    assert statuses[0] is CacheStatus.PENDING and statuses[-1] is CacheStatus.ACTIVE
    assert all(n == names[0] for n in names), "an attribute appeared after construction"
    stats = runtime.last_run.stats[0]["cache"]
    assert stats["status"] == "active" and stats["overlap"] == "thread"
    assert stats["background_refreshes"] > 0


# ------------------------------------------------------------------ size and layering
def _modules():
    return sorted(CACHE.glob("*.py")) + [Path(layer_types.__file__)]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_cache_modules_stay_small_and_read_only_their_own_attributes(path):
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.count("\n")
    assert lines <= 400 or text.splitlines()[0].startswith("# long:"), f"{lines} lines"
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            size = node.end_lineno - node.lineno + 1
            assert size <= 250, f"class {node.name}: {size} lines"
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
            raise AssertionError(f"line {node.lineno}: {node.func.id}(self, ...)")
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level >= 2:
                names = [node.module]
            elif node.level == 0 and node.module.startswith("gnnorch."):
                names = [node.module[len("gnnorch."):]]
        elif isinstance(node, ast.Import):
            names = [a.name[len("gnnorch."):] for a in node.names
                     if a.name.startswith("gnnorch.")]
        for name in names:
            assert name.split(".")[0] not in HIGHER, f"line {node.lineno}: imports {name}"


def test_a_batch_carries_the_pruning_mask_it_was_sampled_with():
    """The sampler tags each output with its mask version, a device-path batch carries it
    (`sampled_exclusion`), and the cache labels the batch by it, not by the mask now: a batch
    drawn before activation is not pruned, one pruned by the live hot set is; one pruned by an
    earlier hot set cannot be served (an error, never a silent mislabel)."""
    from torch_geometric.sampler import NodeSamplerInput

    from gnnorch.cache.loader import LoaderCache
    from gnnorch.device.gather import GatherPlan, ResidentTensors, sampled_exclusion
    from gnnorch.sampling.neighbor import FastNeighborSampler

    data = cora()
    sampler = FastNeighborSampler(data, num_neighbors=[3, 2])
    plan = GatherPlan(data, torch.device("cpu"), "gpu", ResidentTensors())

    def batch():
        out = sampler.sample_from_nodes(NodeSamplerInput(torch.arange(8), torch.arange(8)))
        return plan.batch(out, sampler.edge_permutation)

    before = batch()                                     # no mask yet (version 0)
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[:200] = True
    sampler.set_exclusion(mask, {1})
    first = batch()                                      # the first hot set (version 1)
    sampler.set_exclusion(~mask, {1})
    live = batch()                                       # the live hot set (version 2)
    assert [sampled_exclusion(b) for b in (before, first, live)] == [0, 1, 2]
    assert sampled_exclusion(data) is None and "_exclusion_version" not in live.keys()

    with pytest.warns(gnnorch.CacheWarning):
        lc = LoaderCache(types.SimpleNamespace(config=CacheConfig()), None, 0, "a test")
    lc.hot = types.SimpleNamespace(mask_version=2, pruning_versions={1, 2}, exclusion_on=True)
    assert lc.pruned(live) and not lc.pruned(before)
    with pytest.raises(RuntimeError, match="earlier hot set"):
        lc.pruned(first)
    del live._store.__dict__["_exclusion_version"]       # a batch PyG built: the mask now
    lc.workers = 0
    assert lc.pruned(live)
    lc.hot.exclusion_on = False
    assert not lc.pruned(live)


def test_refresh_rows_are_gathered_where_the_features_live():
    """`rows_on`: rows of features on the layer's device are indexed there (the data path's
    resident copy); the aggregates of a refresh follow the features' device."""
    from gnnorch.cache.refresh import raw_aggregate, rows_on

    x = torch.arange(20.0).view(10, 2)
    nodes = torch.tensor([3, 1, 3])
    assert torch.equal(rows_on(x, nodes, torch.device("cpu")), x[nodes])
    on_meta = rows_on(x.to("meta"), nodes, torch.device("meta"))
    assert on_meta.device.type == "meta" and on_meta.shape == (3, 2)
    got = raw_aggregate(x, 2, torch.tensor([3, 1, 5]), torch.tensor([0, 0, 1]), "mean")
    assert torch.equal(got, torch.stack([(x[3] + x[1]) / 2, x[5]]))


@pytest.mark.parametrize("aggr", ["mean", "sum"])
def test_a_refresh_aggregates_the_rows_it_gathered_once(aggr):
    """With gradient="linear" a refresh keeps each row's raw aggregate beside it. It is computed
    from the distinct rows the layer's call gathered (one gather, on the layer's device), and
    equals the aggregate over a gather of its own, bit for bit; the layer's rows are the
    layer's own call on the refresh graph, and the rows counted are the distinct rows read."""
    from gnnorch.cache.refresh import layer_rows, raw_aggregate, refresh_graph

    torch.manual_seed(0)
    x = torch.randn(30, 6)
    ids = torch.tensor([2, 7, 11])
    src = torch.tensor([5, 9, 5, 2, 28, 9, 13])
    dst = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    layer = SAGEConv(6, 4, aggr=aggr).eval()
    calls = []

    def unpatched(module, *args):
        calls.append(module)
        return module(*args)

    rows, aux, gathered = layer_rows(layer, x, ids, src, dst, True, torch.device("cpu"),
                                     None, unpatched, aggr)
    assert torch.equal(aux, raw_aggregate(x, 3, src, dst, aggr))
    nodes, edge_index = refresh_graph(ids, src, dst)
    with torch.no_grad():
        assert torch.equal(rows, layer((x[nodes], x[ids]), edge_index))
    assert calls == [layer] and gathered == nodes.numel() == 3 + 5
    no_aux = layer_rows(layer, x, ids, src, dst, True, torch.device("cpu"), None, unpatched)
    assert no_aux[1] is None and torch.equal(no_aux[0], rows)


def test_a_refresh_reads_the_feature_matrix_once():
    """A refresh job (`Refresher.compute`, gradient="linear") reads the raw feature matrix in
    one operation, a gather of the distinct rows: the rows' raw aggregates come from those rows
    (before session 20 a second gather read every edge's source row again)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from gnnorch.cache.refresh import Refresher

    torch.manual_seed(0)
    x, edge_index = _graph(num=60, edges=400)
    x = x.float()
    order = torch.sort(edge_index[1], stable=True).indices
    row = edge_index[0][order]
    colptr = torch.zeros(61, dtype=torch.long)
    colptr[1:] = torch.bincount(edge_index[1], minlength=60).cumsum(0)
    layer = SAGEConv(6, 4)
    hood = Neighbourhoods(colptr, row, 3, False, False, seed=1)
    refresher = Refresher(layer, lambda: x, hood, 1000, unpatched=lambda m, *a: m(*a))
    refresher.linear = "mean"
    reads = []

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(a, torch.Tensor) and a.data_ptr() == x.data_ptr()
                   and a.shape == x.shape for a in args):
                reads.append(func.__name__)
            return func(*args, **(kwargs or {}))

    with Reads():
        rows, aux = refresher.compute(torch.tensor([1, 5, 9, 30]))
    assert reads == ["index_select.default"] and rows.shape == (4, 4) and aux.shape == (4, 6)


def test_a_job_draws_its_neighbourhoods_where_the_loader_samples():
    """`background.job_structure`: the sampler's device copy of the CSC when it samples on the
    layer's device (the GPU data path), the host CSC otherwise, and for GCN rows (their
    batch degrees are looked up on the host); the reason is reported."""
    from gnnorch.cache.background import job_structure

    host = (torch.tensor([0, 1, 2]), torch.tensor([1, 0]))
    meta = tuple(t.to("meta") for t in host)
    ns = types.SimpleNamespace

    def spec(structure):
        return ns(sampler=ns(colptr=structure[0], row=structure[1]),
                  colptr=host[0], row=host[1])

    sage = ns(degree_fix=False, aggregate=False)
    gcn = ns(degree_fix=True, aggregate=True)
    colptr, row, where = job_structure(spec(meta), sage, torch.device("meta"))
    assert colptr is meta[0] and row is meta[1] and where == "device (meta)"
    colptr, _, where = job_structure(spec(host), sage, torch.device("cpu"))
    assert colptr is host[0] and where == "host"
    colptr, _, where = job_structure(spec(meta), gcn, torch.device("meta"))
    assert colptr is host[0] and where.startswith("host: GCN")
    colptr, _, where = job_structure(spec(meta), sage, torch.device("cpu"))
    assert colptr is host[0] and "samples on meta" in where


@pytest.mark.gpu
def test_cuda_neighbourhoods_on_the_device_csc_have_the_host_law():
    """A refresh neighbourhood drawn on the sampler's CUDA copy of the CSC: the same in-edges
    allowed as on the host (every drawn edge is an in-edge of its vertex, min(deg, k) of them,
    distinct), on the device; host ids in, a refresh graph and rows gathered from host features
    through pinned memory (host ids), and the layer's rows equal on both sides."""
    from gnnorch.cache.refresh import layer_rows, refresh_graph

    cuda = torch.device("cuda")
    _, edge_index = _graph(num=200, edges=3000)
    src_all, dst_all = torch.unique(edge_index, dim=1)      # distinct edges, sorted by source
    order = torch.sort(dst_all, stable=True).indices
    row = src_all[order]
    colptr = torch.zeros(201, dtype=torch.long)
    colptr[1:] = torch.bincount(dst_all, minlength=200).cumsum(0)
    hood = Neighbourhoods(colptr.to(cuda), row.to(cuda), 5, False, False, seed=3)
    ids = torch.arange(0, 200, 7)
    src, dst = hood.edges(ids)
    assert src.device.type == "cuda" and dst.device.type == "cuda"
    deg = colptr[ids + 1] - colptr[ids]
    assert torch.equal(torch.bincount(dst.cpu(), minlength=ids.numel()), deg.clamp_max(5))
    edges = {(int(s), int(ids[d])) for s, d in zip(src.cpu(), dst.cpu())}
    assert len(edges) == src.numel()
    for s, v in edges:
        assert s in row[colptr[v]:colptr[v + 1]].tolist()
    x = torch.randn(200, 6)
    layer = SAGEConv(6, 4).eval()
    rows, aux, _ = layer_rows(layer.to(cuda), x, ids, src, dst, True, cuda, None,
                              lambda m, *a: m(*a), "mean")
    nodes, edge_index = refresh_graph(ids, src.cpu(), dst.cpu())
    with torch.no_grad():
        want = layer.cpu()((x[nodes], x[ids]), edge_index)
    assert torch.allclose(rows.cpu(), want, atol=1e-5) and aux.device.type == "cuda"


@pytest.mark.gpu
def test_cuda_refresh_rows_from_host_features_and_the_store_on_the_device():
    """Host features bound for a CUDA layer are gathered through pinned memory (equal rows);
    the store keeps rows and aggregates on the rows' device whatever device the aggregates
    were computed on (write-back computes them on the GPU, host refreshes on the host)."""
    from gnnorch.cache import EmbeddingStore
    from gnnorch.cache.refresh import rows_on

    cuda = torch.device("cuda")
    x = torch.randn(1000, 8)
    nodes = torch.randint(0, 1000, (300,))
    got = rows_on(x, nodes, cuda)
    assert got.device.type == "cuda" and torch.equal(got.cpu(), x[nodes])
    store = EmbeddingStore(50, torch.tensor([4, 9, 17]))
    store.write(torch.tensor([0, 1, 2]), torch.ones(3, 4, device=cuda), 1, torch.ones(3, 8))
    store.write(torch.tensor([1]), 2 * torch.ones(1, 4, device=cuda), 2,
                3 * torch.ones(1, 8, device=cuda))
    assert store.rows.device.type == "cuda" and store.aux.device.type == "cuda"
    assert float(store.read_aux(torch.tensor([1]))[0, 0]) == 3.0


def test_lookahead_jobs_take_the_rows_the_next_two_batches_would_find_over_the_bound():
    """After step t, batch j (j = 1: the next forward, with t steps done) reads its rows at
    staleness t + j - 1 - version: a job takes the rows over the bound there, for
    j <= min(bound + 1, 2) (a row recomputed now is over the bound at any later j; later
    batches wait for later jobs). A row exactly at the bound there is not taken."""
    from gnnorch.cache.background import lookahead_slots

    version = torch.tensor([0, 3, 1, 5, 2, 4])
    upcoming = [torch.tensor([3, 1, 0]), torch.tensor([4, 2, 3, 5]), torch.tensor([5, 0])]

    def taken(bound, ahead):
        return sorted(lookahead_slots(version, 5, bound, ahead).tolist())

    # bound 2 at t = 5: batch 1 (5 steps done) needs version >= 3 (slot 0; slot 1 is at the
    # bound), batch 2 (6 steps) >= 4 (slots 2, 4)
    assert taken(2, upcoming) == [0, 2, 4]
    # bound 1: batch 1 needs >= 4 (slots 0, 1), batch 2 >= 5 (slots 2, 4, 5)
    assert taken(1, upcoming) == [0, 1, 2, 4, 5]
    # bound 0 (no overlap in practice): batch 1 needs >= 5 (slots 0, 1); batch 2 is too late
    assert taken(0, upcoming) == [0, 1]
    # bound 4: batch 1 needs >= 1 (slot 0), batch 2 >= 2 (slot 2); batch 3 is a later job's
    assert taken(4, upcoming) == [0, 2]
    # a slot both batches read is taken once
    assert taken(1, [torch.tensor([0, 2]), torch.tensor([2, 0])]) == [0, 2]
    assert taken(2, []) == []
    assert taken(2, [torch.tensor([], dtype=torch.long)]) == []


def test_a_batch_drawn_ahead_is_looked_up_once_and_only_for_its_own_ids():
    """`hot_rows_ahead` looks a batch's hop L-1 rows up in the store once and keeps the lookup
    (`AheadLookups`, not on the batch); the batch's `BatchInfo` reuses it for the same
    ``n_id`` and store, and looks up again for anything else (another ``n_id`` tensor, another
    store). A batch collected before it arrives leaves nothing behind."""
    import gc

    from torch_geometric.data import Data

    from gnnorch.cache import EmbeddingStore
    from gnnorch.cache.batches import AheadLookups, BatchInfo, hot_rows_ahead
    from gnnorch.trim.hops import HopLayout

    store = EmbeddingStore(10, torch.tensor([2, 5, 7]))
    n_id = torch.tensor([0, 1, 5, 9, 2, 3, 7, 8, 4])        # hops: 2 seeds, 3, 4 nodes
    batch = Data(n_id=n_id, num_sampled_nodes=[2, 3, 4])
    batch._exclusion_version = 4
    hot = types.SimpleNamespace(store=store, mask_version=4, pruning_versions={3, 4})
    kept = AheadLookups(limit=2)
    (slots,) = hot_rows_ahead([batch], hot, kept)
    assert slots.tolist() == [1, 0]                          # 5 and 2, at hop 1 (rows 2..4)
    lookup = kept.get(batch)
    assert (lookup.lo, lookup.hi) == (2, 5) and lookup.slots.tolist() == [1, -1, 0]
    assert "_gnnorch" not in repr(batch.to_dict())
    looked_up = []
    slots_of = store.slots_of
    store.slots_of = lambda ids: looked_up.append(ids) or slots_of(ids)
    assert hot_rows_ahead([batch], hot, kept)[0].tolist() == [1, 0] and not looked_up
    layout = HopLayout.from_counts([2, 3, 4], [4, 6])

    def rows(graph_ids, in_store):
        graph = types.SimpleNamespace(layout=layout, n_id=graph_ids)
        found, found_slots, width = BatchInfo(None, None, True, lookup).hot(graph, in_store)
        return found.tolist(), found_slots.tolist(), width

    assert rows(n_id, store) == ([2, 4], [1, 0], 3) and not looked_up
    assert rows(n_id.clone(), store) == ([2, 4], [1, 0], 3) and len(looked_up) == 1
    other = EmbeddingStore(10, torch.tensor([9]))
    assert rows(n_id, other) == ([3], [0], 3)
    assert kept.take(batch) is lookup and kept.get(batch) is None   # arrived: forgotten
    # batches dropped before they arrive are forgotten once the limit is reached
    for _ in range(3):
        dropped = Data(n_id=n_id.clone(), num_sampled_nodes=[2, 3, 4])
        dropped._exclusion_version = 4
        hot_rows_ahead([dropped], hot, kept)
        del dropped
        gc.collect()
    assert len(kept._kept) <= 2
    # a batch labelled with another mask: nothing to read ahead
    batch._exclusion_version = 3
    assert hot_rows_ahead([batch], hot, kept)[0].numel() == 0


def test_linear_parts_follow_the_aggregation_pyg_runs():
    from torch_geometric.nn import GraphConv

    from gnnorch.cache.refresh import linear_parts

    conv = GraphConv(4, 3)                       # sums
    conv.aggr = "mean"                            # PyG's graph_saint.py `set_aggr`: still sums
    assert linear_parts(conv)[2] == "sum"
    assert linear_parts(SAGEConv(4, 3))[2] == "mean"
    assert linear_parts(SAGEConv(4, 3, aggr="max")) is None
    assert linear_parts(GraphConv(4, 3, aggr="mean"))[1] is not None
