"""gnnorch.sampling.hetero: the vectorised heterogeneous neighbour sampler and its hook.

Exactness is checked two ways: with fanouts that take every in-edge the sampler is
deterministic, and its node lists, edges, edge ids and counts must equal torch_sparse's
``hetero_neighbor_sample`` element by element (same layout, same order); with random fanouts,
per-edge inclusion counts over many draws are compared with a plain-Python reference of
pyg-lib's sequential loop (exact uniform subsets by ``random.sample``) by two-sample z-scores
(|z| <= 4.5, as tests/test_sampler.py).
"""
from __future__ import annotations

import pickle
import random
import time

import pytest
import torch
import torch_geometric.typing as pyg_typing
from torch_geometric.data import HeteroData
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
from torch_geometric.nn import HeteroConv, SAGEConv
from torch_geometric.sampler.utils import to_hetero_csc
from torch_geometric.utils import trim_to_layer

import gnnorch
from gnnorch.sampling.choice import forget_choices
from gnnorch.sampling.hetero import sample_hetero_neighbors
from gnnorch.sampling.hetero_neighbor import FastHeteroNeighborSampler
from gnnorch.sampling.uniform import UNSEEN, WIDE_FACTOR

from helpers import reference_choice

Z_MAX = 4.5
PYG_LIB_WARNING = "ignore:Using 'NeighborSampler' without a 'pyg-lib'"


pytestmark = pytest.mark.usefixtures("one_thread")


def _graph(seed: int = 0, papers: int = 60, authors: int = 40, venues: int = 5) -> HeteroData:
    """Three node types; two edge types add authors (order matters for their local ids),
    venues are reached only at hop 2 from paper seeds, and `topic` has no edges at all."""
    gen = torch.Generator().manual_seed(seed)

    def edges(n_src, n_dst, count):
        return torch.stack([torch.randint(0, n_src, (count,), generator=gen),
                            torch.randint(0, n_dst, (count,), generator=gen)])

    data = HeteroData()
    data["paper"].x = torch.randn(papers, 4, generator=gen)
    data["paper"].y = torch.randint(0, 3, (papers,), generator=gen)
    data["paper"].train_mask = torch.rand(papers, generator=gen) < 0.5
    data["author"].x = torch.randn(authors, 4, generator=gen)
    data["venue"].x = torch.randn(venues, 4, generator=gen)
    data["topic"].x = torch.randn(3, 4, generator=gen)
    data["author", "writes", "paper"].edge_index = edges(authors, papers, 150)
    data["author", "writes", "paper"].edge_attr = torch.randn(150, 2, generator=gen)
    data["paper", "cites", "paper"].edge_index = edges(papers, papers, 240)
    data["paper", "rev_writes", "author"].edge_index = \
        data["author", "writes", "paper"].edge_index.flip(0)
    data["author", "reviews", "paper"].edge_index = edges(authors, papers, 80)
    data["venue", "hosts", "author"].edge_index = edges(venues, authors, 60)
    data["topic", "of", "venue"].edge_index = torch.empty(2, 0, dtype=torch.long)
    return data


@pytest.fixture(scope="module")
def graph():
    data = _graph()
    colptr, row, _ = to_hetero_csc(data, device="cpu")
    counts = {t: data[t].num_nodes for t in data.node_types}
    return data, colptr, row, counts


def _ours(graph, seeds, fanout, replace=False, generator=None):
    data, colptr, row, counts = graph
    ets = data.edge_types
    return sample_hetero_neighbors({e: colptr[e] for e in ets}, {e: row[e] for e in ets}, seeds,
                                   {e: fanout[e] for e in ets}, counts, replace=replace,
                                   generator=generator)


def _fanout(data, hops):
    return {e: list(hops) for e in data.edge_types}


# --------------------------------------------------------------------------- exact


def _hop_sets(out, data, num_hops):
    """Per node type and hop, the set of nodes first reached then; per edge type and hop, the
    set of (global source, global destination, CSC position) of its edges."""
    nodes, edges = {}, {}
    for t in data.node_types:
        ids = out["node"][t].tolist()
        counts = out["num_nodes"][t] if out["num_nodes"] else None
        nodes[t] = [set(ids[sum(counts[:h]):sum(counts[:h + 1])]) for h in range(num_hops + 1)] \
            if counts else set(ids)
    for e in data.edge_types:
        src, _, dst = e
        triples = list(zip(out["node"][src][out["row"][e]].tolist(),
                           out["node"][dst][out["col"][e]].tolist(), out["edge"][e].tolist()))
        edges[e] = sorted(triples)
    return nodes, edges


@pytest.mark.parametrize("hops", [[-1], [-1, -1], [-1, -1, -1]])
@pytest.mark.parametrize("seeds", [{"paper": [0, 5, 9]}, {"paper": [3, 3, 7], "author": [2]}])
def test_full_fanout_equals_torch_sparse(graph, hops, seeds):
    """The same nodes and edges as torch_sparse's sampler. The order in which a node type's
    new nodes are numbered when several edge types reach it in one hop is each backend's own
    (pyg-lib: the given edge-type order on one thread, a hash order on several; torch_sparse:
    its dictionary's order): ours is pyg-lib's one-thread order, checked element by element
    in `test_full_fanout_follows_the_sequential_order`."""
    pytest.importorskip("torch_sparse")
    data, colptr, row, _ = graph
    seeds = {t: torch.tensor(v) for t, v in seeds.items()}
    ets = data.edge_types
    rel = {e: "__".join(e) for e in ets}
    node, rows, cols, edges = torch.ops.torch_sparse.hetero_neighbor_sample(
        data.node_types, ets, {rel[e]: colptr[e] for e in ets}, {rel[e]: row[e] for e in ets},
        seeds, {rel[e]: hops for e in ets}, len(hops), False, True)
    theirs = {"node": node, "row": {e: rows[rel[e]] for e in ets},
              "col": {e: cols[rel[e]] for e in ets}, "edge": {e: edges[rel[e]] for e in ets},
              "num_nodes": None}
    out = _ours(graph, seeds, _fanout(data, hops))
    ours = {"node": out.node, "row": out.row, "col": out.col, "edge": out.edge,
            "num_nodes": None}
    assert _hop_sets(ours, data, len(hops)) == _hop_sets(theirs, data, len(hops))
    for t in data.node_types:   # seeds first, in input order, duplicates kept
        if t in seeds:
            assert torch.equal(out.node[t][:seeds[t].numel()], seeds[t])
        assert sum(out.num_sampled_nodes[t]) == out.node[t].numel()
        assert len(out.num_sampled_nodes[t]) == len(hops) + 1
    for e in ets:
        assert sum(out.num_sampled_edges[e]) == out.edge[e].numel()
        assert len(out.num_sampled_edges[e]) == len(hops)


def _sequential(graph, seeds, hops):
    """pyg-lib's one-thread loop with every in-edge taken, in plain Python: per node type its
    node list, per edge type its (local source, local destination, CSC position) list."""
    data, colptr, row, _ = graph
    nodes = {t: list(seeds.get(t, [])) for t in data.node_types}
    local = {t: {} for t in data.node_types}
    for t, ids in nodes.items():
        for i, v in enumerate(ids):
            local[t].setdefault(v, i)
    ranges = {t: (0, len(ids)) for t, ids in nodes.items()}
    edges = {e: [] for e in data.edge_types}
    for _ in range(hops):
        for e in data.edge_types:
            src, _, dst = e
            for i in range(*ranges[dst]):
                v = nodes[dst][i]
                for p in range(int(colptr[e][v]), int(colptr[e][v + 1])):
                    u = int(row[e][p])
                    if u not in local[src]:
                        local[src][u] = len(nodes[src])
                        nodes[src].append(u)
                    edges[e].append((local[src][u], i, p))
        ranges = {t: (ranges[t][1], len(nodes[t])) for t in data.node_types}
    return nodes, edges


@pytest.mark.skipif(not pyg_typing.WITH_PYG_LIB, reason="pyg-lib not installed")
@pytest.mark.parametrize("hops", [[-1], [-1, -1], [-1, -1, -1]])
def test_full_fanout_equals_pyg_lib_element_by_element(graph, hops):
    """On one thread pyg-lib expands edge types in the given order, as ours does: the same
    node lists, edges and per-hop counts, element by element. (Distinct seeds, as PyG's
    loaders pass them: with a repeated seed pyg-lib numbers the new nodes by distinct nodes
    seen, so its local ids stop indexing its own node list; ours and torch_sparse's do.)"""
    data = graph[0]
    sampler = FastHeteroNeighborSampler(data, hops)
    seeds = {"paper": torch.tensor([3, 7, 11]), "author": torch.tensor([2])}
    ours, theirs = sampler.sample_ours(seeds), sampler.sample_pyg(seeds)
    for t in data.node_types:
        assert torch.equal(ours.node[t], theirs.node[t]), t
        assert list(ours.num_sampled_nodes[t]) == list(theirs.num_sampled_nodes[t]), t
    for e in data.edge_types:
        for field in ("row", "col", "edge"):
            assert torch.equal(getattr(ours, field)[e], getattr(theirs, field)[e]), (e, field)
        assert list(ours.num_sampled_edges[e]) == list(theirs.num_sampled_edges[e]), e


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_full_fanout_follows_the_sequential_order(graph, hops):
    data = graph[0]
    seeds = {"paper": [3, 3, 7, 11], "author": [2]}
    nodes, edges = _sequential(graph, seeds, hops)
    out = _ours(graph, {t: torch.tensor(v) for t, v in seeds.items()}, _fanout(data, [-1] * hops))
    for t in data.node_types:
        assert out.node[t].tolist() == nodes[t], t
    for e in data.edge_types:
        got = list(zip(out.row[e].tolist(), out.col[e].tolist(), out.edge[e].tolist()))
        assert got == edges[e], e


def test_structure_and_hop_layout(graph):
    """Every edge is a graph edge of its type; seeds first; each hop's edges end in the nodes
    first reached the hop before; the maps are all UNSEEN again after the call."""
    data, colptr, row, counts = graph
    ets = data.edge_types
    workspace = {t: torch.full((n,), UNSEEN) for t, n in counts.items()}
    seeds = {"paper": torch.tensor([1, 2, 3, 4])}
    out = sample_hetero_neighbors({e: colptr[e] for e in ets}, {e: row[e] for e in ets}, seeds,
                                  {e: [3, 2] for e in ets}, counts, workspace=workspace,
                                  generator=torch.Generator().manual_seed(0))
    assert all(bool((w == UNSEEN).all()) for w in workspace.values())
    assert torch.equal(out.node["paper"][:4], seeds["paper"])
    for t in data.node_types:
        assert out.node[t].unique().numel() == out.node[t].numel()
    for e in ets:
        src, _, dst = e
        assert torch.equal(out.node[src][out.row[e]], row[e][out.edge[e]])
        owner = torch.searchsorted(colptr[e], out.edge[e], right=True) - 1
        assert torch.equal(out.node[dst][out.col[e]], owner)
        # hop h's edges end in dst's nodes of hop h (cumulative counts)
        first = [0]
        for n in out.num_sampled_nodes[dst]:
            first.append(first[-1] + n)
        start = 0
        for hop, n in enumerate(out.num_sampled_edges[e]):
            cols = out.col[e][start:start + n]
            assert bool(((cols >= first[hop]) & (cols < first[hop + 1])).all())
            start += n
    assert out.node["topic"].numel() == 0 and out.num_sampled_nodes["topic"] == [0, 0, 0]


@pytest.mark.parametrize("k", [-1, 2])
def test_one_draw_for_edge_types_of_one_fanout_splits_back_exactly(graph, k):
    """`_draw` lays the frontiers of a group end to end; each edge type gets back exactly its
    own destinations' edges, also where a frontier ends (or starts) with nodes of no in-edge
    of that type."""
    from gnnorch.sampling.hetero import _draw

    data, colptr, _, _ = graph
    group = [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
             ("author", "reviews", "paper")]
    no_edges = {e: [int(v) for v in range(colptr[e].numel() - 1)
                    if colptr[e][v] == colptr[e][v + 1]] for e in group}
    frontier = {"paper": torch.tensor([no_edges[group[0]][0], 5, 9, no_edges[group[2]][-1]]),
                "author": torch.tensor([no_edges[group[1]][0], 1, 3])}
    owners, positions = {}, {}
    _draw([colptr[e] for e in group], [e[2] for e in group], frontier, [0, 1, 2], k, False,
          torch.Generator().manual_seed(0), "floyd", WIDE_FACTOR, owners, positions)
    for i, e in enumerate(group):
        owner, pos = owners[i], positions[i]
        front = frontier[e[2]]
        deg = (colptr[e][front + 1] - colptr[e][front]).tolist()
        want = [d if k < 0 else min(d, k) for d in deg]
        assert torch.bincount(owner, minlength=front.numel()).tolist() == want, e
        assert bool(((pos >= colptr[e][front[owner]]) & (pos < colptr[e][front[owner] + 1])).all())
        assert bool((owner[1:] >= owner[:-1]).all())


def test_errors_are_clear(graph):
    data, colptr, row, counts = graph
    ets = data.edge_types
    with pytest.raises(ValueError, match="same number of hops"):
        sample_hetero_neighbors({e: colptr[e] for e in ets}, {e: row[e] for e in ets},
                                {"paper": torch.tensor([0])},
                                {e: [2] if e[1] == "cites" else [2, 2] for e in ets}, counts)
    with pytest.raises(TypeError, match="int64"):
        sample_hetero_neighbors({e: colptr[e].int() for e in ets}, {e: row[e] for e in ets},
                                {"paper": torch.tensor([0])}, _fanout(data, [2]), counts)


# --------------------------------------------------------------------------- the law


def _reference(graph, seeds, fanout, replace, rng):
    """pyg-lib's sequential loop in plain Python; returns {edge type: CSC positions}."""
    data, colptr, row, _ = graph
    seen = {t: set(seeds.get(t, [])) for t in data.node_types}
    frontier = {t: list(seeds.get(t, [])) for t in data.node_types}
    positions = {e: [] for e in data.edge_types}
    for hop in range(len(next(iter(fanout.values())))):
        new = {t: [] for t in data.node_types}
        for e in data.edge_types:
            src, _, dst = e
            k = fanout[e][hop]
            for v in frontier[dst]:
                lo, hi = int(colptr[e][v]), int(colptr[e][v + 1])
                if hi == lo or k == 0:
                    continue
                chosen = reference_choice(lo, hi, k, replace, rng)
                for p in chosen:
                    positions[e].append(p)
                    u = int(row[e][p])
                    if u not in seen[src]:
                        seen[src].add(u)
                        new[src].append(u)
        frontier = new
    return positions


def _counts(graph, draws, sample):
    """[draws, all edges of all types]: how often each (type, CSC position) was sampled."""
    data, _, row, _ = graph
    sizes = [row[e].numel() for e in data.edge_types]
    out = torch.zeros(draws, sum(sizes))
    for i in range(draws):
        got = sample()
        out[i] = torch.cat([torch.bincount(torch.as_tensor(got[e], dtype=torch.long),
                                           minlength=n).float()
                            for e, n in zip(data.edge_types, sizes)])
    return out


def _max_z(a, b):
    diff = a.mean(0) - b.mean(0)
    se = ((a.var(0) + b.var(0)) / a.shape[0]).sqrt()
    exact = se == 0
    assert (diff[exact] == 0).all(), "a deterministic edge differs"
    return float((diff[~exact].abs() / se[~exact]).max()) if (~exact).any() else 0.0


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("method", ["floyd", "wide"])
def test_inclusion_matches_the_sequential_reference(graph, replace, method):
    data, colptr, row, counts = graph
    fanout = {e: [2, 3] for e in data.edge_types}
    fanout["paper", "cites", "paper"] = [3, -1]
    fanout["author", "reviews", "paper"] = [1, 0]
    seeds = {"paper": [0, 1, 2, 3], "author": [5]}
    gen, rng, draws = torch.Generator().manual_seed(4), random.Random(4), 1500
    ets = data.edge_types
    tensors = {t: torch.tensor(v) for t, v in seeds.items()}

    def ours():
        out = sample_hetero_neighbors({e: colptr[e] for e in ets}, {e: row[e] for e in ets},
                                      tensors, fanout, counts, replace=replace, generator=gen,
                                      method=method)
        return {e: out.edge[e] for e in ets}

    a = _counts(graph, draws, ours)
    b = _counts(graph, draws, lambda: _reference(graph, seeds, fanout, replace, rng))
    assert _max_z(a, b) <= Z_MAX


def test_global_seed_reproduces(graph):
    data = graph[0]
    torch.manual_seed(11)
    a = _ours(graph, {"paper": torch.arange(6)}, _fanout(data, [3, 3]))
    torch.manual_seed(11)
    b = _ours(graph, {"paper": torch.arange(6)}, _fanout(data, [3, 3]))
    assert all(torch.equal(a.node[t], b.node[t]) for t in data.node_types)
    assert all(torch.equal(a.edge[e], b.edge[e]) for e in data.edge_types)


# --------------------------------------------------------------------------- PyG's hook


def _check_batch(data, batch, seed_type="paper"):
    for t in data.node_types:
        n_id = batch[t].n_id
        assert torch.equal(batch[t].x, data[t].x[n_id])
        assert sum(batch[t].num_sampled_nodes) == n_id.numel()
    for e in data.edge_types:
        src, _, dst = e
        e_id = batch[e].e_id
        got = torch.stack([batch[src].n_id[batch[e].edge_index[0]],
                           batch[dst].n_id[batch[e].edge_index[1]]])
        assert torch.equal(got, data[e].edge_index[:, e_id])
        assert sum(batch[e].num_sampled_edges) == e_id.numel()
    assert torch.equal(batch["author", "writes", "paper"].edge_attr,
                       data["author", "writes", "paper"].edge_attr[
                           batch["author", "writes", "paper"].e_id])


@pytest.mark.parametrize("num_workers", [0, 1])
def test_neighbor_loader_batches(num_workers):
    data = _graph()
    sampler = FastHeteroNeighborSampler(data, [4, 3], share_memory=num_workers > 0)
    assert sampler.fallback_reason is None
    loader = NeighborLoader(data, num_neighbors=[4, 3], batch_size=8, shuffle=True,
                            input_nodes=("paper", data["paper"].train_mask),
                            neighbor_sampler=sampler, num_workers=num_workers)
    seen = []
    for batch in loader:
        _check_batch(data, batch)
        seeds = batch["paper"].n_id[:batch["paper"].batch_size]
        assert data["paper"].train_mask[seeds].all()
        seen.append(seeds)
    assert torch.cat(seen).sort().values.tolist() == \
        data["paper"].train_mask.nonzero().view(-1).tolist()


def _canonical(batch):
    """A batch up to the numbering of its nodes within a type (test_full_fanout_equals_
    torch_sparse): per node type its seeds and its rows sorted by global id, per edge type
    its (edge id, global source, global destination, attributes) sorted."""
    out = {}
    for t in batch.node_types:
        store, order = batch[t], batch[t].n_id.argsort()
        size = store.get("batch_size")
        out[t] = {"seeds": store.n_id[:size].tolist() if size is not None else None,
                  "n_id": store.n_id[order].tolist(), "x": store.x[order].tolist(),
                  "input_id": store.input_id.tolist() if "input_id" in store else None}
    for e in batch.edge_types:
        src, _, dst = e
        store = batch[e]
        ends = torch.stack([batch[src].n_id[store.edge_index[0]],
                            batch[dst].n_id[store.edge_index[1]]])
        attr = store.edge_attr.tolist() if "edge_attr" in store else [None] * ends.size(1)
        e_id = store.e_id.tolist() if "e_id" in store else [None] * ends.size(1)
        out[e] = sorted(zip(map(str, e_id), ends[0].tolist(), ends[1].tolist(),
                            map(str, attr)))
    return out


@pytest.mark.filterwarnings(PYG_LIB_WARNING)
def test_batches_equal_pygs_with_every_in_edge():
    """Deterministic fanouts: the batches PyG's own sampler builds, up to the numbering of a
    type's nodes (ours adds the per-hop counts, which PyG fills with pyg-lib only)."""
    pytest.importorskip("torch_sparse")
    data = _graph()
    kwargs = dict(num_neighbors=[-1, -1], batch_size=5, input_nodes=("paper", torch.arange(20)))
    ours = list(NeighborLoader(data, neighbor_sampler=FastHeteroNeighborSampler(data, [-1, -1]),
                               **kwargs))
    theirs = list(NeighborLoader(data, **kwargs))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        for store_a, store_b in zip(a.stores, b.stores):
            extra = set(store_a.keys()) - set(store_b.keys())
            assert extra <= {"num_sampled_nodes", "num_sampled_edges"}
            assert not extra or not pyg_typing.WITH_PYG_LIB
        assert _canonical(a) == _canonical(b)


def test_link_neighbor_loader_with_negatives():
    data = _graph()
    et = ("author", "writes", "paper")
    loader = LinkNeighborLoader(data, num_neighbors=[3, 2], batch_size=16, shuffle=True,
                                edge_label_index=(et, data[et].edge_index[:, :40]),
                                neg_sampling_ratio=1.0,
                                neighbor_sampler=FastHeteroNeighborSampler(data, [3, 2]))
    labelled = 0
    for batch in loader:
        _check_batch(data, batch)
        label_index, label = batch[et].edge_label_index, batch[et].edge_label
        positive = label == 1
        got = torch.stack([batch["author"].n_id[label_index[0]],
                           batch["paper"].n_id[label_index[1]]])
        want = data[et].edge_index[:, batch[et].input_id]
        assert torch.equal(got[:, positive], want)
        labelled += int(positive.sum())
    assert labelled == 40


@pytest.mark.filterwarnings(PYG_LIB_WARNING)
def test_bidirectional_subgraphs_equal_pygs():
    """PyG's post-processing (``to_bidirectional``) applies to our output as to its own."""
    pytest.importorskip("torch_sparse")
    data = _graph()
    kwargs = dict(num_neighbors=[-1, -1], batch_size=6, input_nodes="paper",
                  subgraph_type="bidirectional")
    sampler = FastHeteroNeighborSampler(data, [-1, -1], subgraph_type="bidirectional")
    assert sampler.fallback_reason is None
    ours = next(iter(NeighborLoader(data, neighbor_sampler=sampler, **kwargs)))
    theirs = next(iter(NeighborLoader(data, **kwargs)))
    assert _canonical(ours) == _canonical(theirs)


def test_hop_counts_drive_pygs_hetero_trim_to_layer():
    """PyG's heterogeneous ``trim_to_layer`` with the batch's per-type counts: the seeds'
    outputs equal the untrimmed model's (needs pyg-lib with PyG's own sampler)."""
    data = _graph()
    batch = next(iter(NeighborLoader(data, num_neighbors=[4, 4], batch_size=6,
                                     input_nodes="paper",
                                     neighbor_sampler=FastHeteroNeighborSampler(data, [4, 4]))))
    torch.manual_seed(0)
    convs = [HeteroConv({e: SAGEConv((-1, -1), 8) for e in data.edge_types}) for _ in range(2)]
    x, edge_index = batch.x_dict, batch.edge_index_dict
    full = x
    for conv in convs:
        full = {**full, **conv(full, edge_index)}
    nodes = {t: batch[t].num_sampled_nodes for t in batch.node_types}
    edges = {e: batch[e].num_sampled_edges for e in batch.edge_types}
    trimmed, trimmed_index = x, edge_index
    for i, conv in enumerate(convs):
        trimmed, trimmed_index, _ = trim_to_layer(i, nodes, edges, trimmed, trimmed_index)
        trimmed = {**trimmed, **conv(trimmed, trimmed_index)}
    size = batch["paper"].batch_size
    assert torch.allclose(full["paper"][:size], trimmed["paper"][:size], atol=1e-5)


def test_pickle_drops_scratch():
    data = _graph()
    sampler = FastHeteroNeighborSampler(data, [3])
    sampler.sample_ours({"paper": torch.arange(4)})
    assert any(sampler._workspaces.pools().values())
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy._workspaces.pools() == {} and copy.generator is None
    assert copy.sample_ours({"paper": torch.arange(4)}).node["paper"].numel() >= 4


@pytest.mark.filterwarnings(PYG_LIB_WARNING)
@pytest.mark.parametrize("kwargs,reason", [
    ({"disjoint": True}, "disjoint sampling"),
    ({"subgraph_type": "induced"}, "induced heterogeneous subgraphs"),
    ({"weight_attr": "w"}, "weighted sampling (weight_attr)"),
    ({"time_attr": "time"}, "temporal sampling (time_attr)"),
])
def test_fallback_reasons(kwargs, reason):
    data = _graph()
    for e in data.edge_types:
        data[e].w = torch.rand(data[e].num_edges)
    for t in data.node_types:
        data[t].time = torch.zeros(data[t].num_nodes, dtype=torch.long)
    if kwargs.get("disjoint") and not pyg_typing.WITH_PYG_LIB:
        pytest.skip("PyG's disjoint hetero sampling needs pyg-lib")
    if "weight_attr" in kwargs and not pyg_typing.WITH_PYG_LIB:
        pytest.skip("PyG's weighted hetero sampling needs pyg-lib")
    if "time_attr" in kwargs and not pyg_typing.WITH_PYG_LIB:
        pytest.skip("PyG's temporal hetero sampling needs pyg-lib")
    assert FastHeteroNeighborSampler(data, [3], **kwargs).fallback_reason == reason


def test_an_unknown_keyword_names_the_ones_it_takes():
    with pytest.raises(TypeError, match=r"\['num_neighbours'\].*subgraph_type, replace"):
        FastHeteroNeighborSampler(_graph(), [3], num_neighbours=[3])


def test_fallback_reasons_without_sampling():
    """Reasons read from the sampler alone (the PyG calls they route to need pyg-lib)."""
    data = _graph()
    sampler = FastHeteroNeighborSampler(data, [3])
    sampler.sample_direction = "backward"
    assert sampler.fallback_reason == "sample_direction='backward'"
    narrow = FastHeteroNeighborSampler(data, [3])
    key = next(iter(narrow.colptr_dict))
    narrow.colptr_dict[key] = narrow.colptr_dict[key].int()
    assert "non-int64 graph structure" in narrow.fallback_reason
    from torch_geometric.data import Data

    plain = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)
    assert "homogeneous" in FastHeteroNeighborSampler(plain, [2]).fallback_reason


def test_use_pyg_routes_calls_to_pyg(monkeypatch):
    from torch_geometric.sampler import NeighborSampler

    data = _graph()
    sampler = FastHeteroNeighborSampler(data, [3])
    monkeypatch.setattr(NeighborSampler, "_sample", lambda self, seed, *a, **k: "pyg")
    seeds = {"paper": torch.arange(4)}
    assert sampler._sample(seeds) != "pyg"
    sampler.use_pyg = True
    assert sampler._sample(seeds) == "pyg" and sampler.sample_ours(seeds) != "pyg"


# --------------------------------------------------------------------------- the runtime


def _train(data, epochs=2):
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[4, 3], batch_size=8, shuffle=True,
                            input_nodes=("paper", data["paper"].train_mask))
    model = HeteroConv({e: SAGEConv((-1, -1), 3) for e in data.edge_types})
    seeds = 0
    for _ in range(epochs):
        for batch in loader:
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:batch["paper"].batch_size]
            out.sum().backward()
            seeds += batch["paper"].batch_size
    return seeds


@pytest.mark.parametrize("sampler,backend", [("gnnorch", "gnnorch"), ("pyg", None)])
def test_runtime_samples_heterodata_loaders_with_ours(sampler, backend):
    data = _graph()
    runtime = gnnorch.Runtime(_train, processes=1, sampler=sampler)
    assert runtime(data) == 2 * int(data["paper"].train_mask.sum())
    loader = runtime.last_run.stats[0]["sampler"]["loaders"][0]
    assert loader["graph"] == "HeteroData"
    if backend:
        assert loader["backend"] == backend and loader["reason"] is None
    else:
        assert loader["backend"] != "gnnorch"


def test_auto_times_both_backends_on_a_heterodata(monkeypatch):
    forget_choices()
    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", True)
    monkeypatch.setattr(FastHeteroNeighborSampler, "sample_pyg",
                        lambda self, seed: (time.sleep(0.02), self.sample_ours(seed))[1])
    data = _graph()
    runtime = gnnorch.Runtime(_train, processes=1, sampler="auto")
    assert runtime(data) == 2 * int(data["paper"].train_mask.sum())
    loader = runtime.last_run.stats[0]["sampler"]["loaders"][0]
    assert loader["backend"] == "gnnorch"
    assert set(loader["sampler_choice"]["ms_per_batch"]) == {"gnnorch", "pyg-lib"}
    forget_choices()


@pytest.mark.gpu
def test_cuda_equals_cpu_with_every_in_edge(graph):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    data, colptr, row, counts = graph
    ets = data.edge_types
    seeds = {"paper": torch.tensor([0, 4, 8]), "author": torch.tensor([1])}
    cpu = _ours(graph, seeds, _fanout(data, [-1, -1]))
    cuda = sample_hetero_neighbors({e: colptr[e].cuda() for e in ets},
                                   {e: row[e].cuda() for e in ets},
                                   {t: s.cuda() for t, s in seeds.items()},
                                   _fanout(data, [-1, -1]), counts)
    for t in data.node_types:
        assert torch.equal(cuda.node[t].cpu(), cpu.node[t])
    for e in ets:
        assert torch.equal(cuda.edge[e].cpu(), cpu.edge[e])
        assert torch.equal(cuda.row[e].cpu(), cpu.row[e])
        assert cuda.num_sampled_edges[e] == cpu.num_sampled_edges[e]
