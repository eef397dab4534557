"""gnnorch.sampling: the vectorised uniform neighbour sampler and its NeighborLoader hook.

Distribution tests are seeded (deterministic) and compare per-edge inclusion counts over
many draws: two-sample z-scores |z| <= 4.5 against torch_sparse or an exact pure-Python
reference sampler (random.sample: exact uniform subsets), and a chi-square test of the whole
k-subset law at one node. With ~100 edges per test, a correct sampler exceeds 4.5 with
probability < 1e-3 per test; a bias of a few percent of an inclusion probability does not
pass at these draw counts.
"""
from __future__ import annotations

import collections
import itertools
import math
import pickle
import random

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NeighborLoader
from torch_geometric.sampler.utils import to_csc

from gnnorch.compat.pyg import sampler_parameters
from gnnorch.datasets import products_like
from gnnorch.sampling import UNSEEN, FastNeighborSampler, new_workspace, sample_neighbors

from helpers import reference_choice

# PyG >= 2.7 (older: FastNeighborSampler refuses "backward", tests/test_compat.py)
BACKWARD = pytest.mark.skipif("sample_direction" not in (sampler_parameters() or ()),
                              reason="NeighborSampler(sample_direction=) needs PyG >= 2.7")

Z_MAX = 4.5


pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- graphs


def _mixed_graph() -> Data:
    """24 nodes: a hub with in-degree 20, mid-degree nodes (3..8), degree-1 and -0 nodes."""
    gen = torch.Generator().manual_seed(7)
    src, dst = [], []
    for v, d in [(0, 20), (1, 8), (2, 6), (3, 5), (4, 4), (5, 3), (6, 2), (7, 1), (8, 1)]:
        others = [u for u in torch.randperm(24, generator=gen).tolist() if u != v][:d]
        src += others
        dst += [v] * d
    for v in range(9, 23):  # a sparse ring so hop 2 reaches further
        src.append(v)
        dst.append(v + 1)
    return Data(edge_index=torch.tensor([src, dst]), num_nodes=24)


@pytest.fixture(scope="module")
def mixed():
    data = _mixed_graph()
    colptr, row, _ = to_csc(data, device="cpu")
    return data, colptr, row


@pytest.fixture(scope="module")
def medium():
    data = products_like(num_nodes=3000, num_features=8, num_classes=5)
    colptr, row, perm = to_csc(data, device="cpu")
    return data, colptr, row, perm


# --------------------------------------------------------------------------- references


def _reference_sample(colptr, row, seeds, num_neighbors, replace, rng):
    """PyG's semantics in plain Python with exact uniform subsets; returns CSC positions."""
    seen = set(seeds)
    frontier, positions = list(seeds), []
    for k in num_neighbors:
        new = []
        for v in frontier:
            lo, hi = int(colptr[v]), int(colptr[v + 1])
            if hi == lo:
                continue
            chosen = reference_choice(lo, hi, k, replace, rng)
            for p in chosen:
                positions.append(p)
                u = int(row[p])
                if u not in seen:
                    seen.add(u)
                    new.append(u)
        frontier = new
    return positions


def _counts(draws: int, num_edges: int, sample_positions) -> torch.Tensor:
    """[draws, num_edges] float: how often each CSC position was sampled in each draw."""
    out = torch.zeros(draws, num_edges)
    for i in range(draws):
        out[i] = torch.bincount(torch.as_tensor(sample_positions(), dtype=torch.long),
                                minlength=num_edges).float()
    return out


def _max_z(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest two-sample z-score of per-edge mean counts; equal constants score 0."""
    diff = a.mean(0) - b.mean(0)
    se = ((a.var(0) + b.var(0)) / a.shape[0]).sqrt()
    exact = se == 0
    assert (diff[exact] == 0).all(), "a deterministic edge differs"
    return float((diff[~exact].abs() / se[~exact]).max()) if (~exact).any() else 0.0


def _ours(colptr, row, seeds, fanout, replace, gen, method="auto"):
    ws = new_workspace(colptr.numel() - 1, colptr.device)
    return lambda: sample_neighbors(colptr, row, seeds, fanout, replace=replace,
                                    generator=gen, workspace=ws, method=method).edge


#: both exact ways to draw k-subsets (gnnorch.sampling.uniform's docstring)
METHOD = pytest.mark.parametrize("method", ["floyd", "wide"])


CONFIGS = [([-1], False), ([3], False), ([3], True), ([1], False), ([2, 2], False),
           ([2, 2], True), ([4, -1], False)]


@METHOD
@pytest.mark.parametrize("fanout,replace", CONFIGS)
def test_inclusion_matches_exact_reference(mixed, fanout, replace, method):
    _, colptr, row = mixed
    seeds, draws = torch.arange(0, 9), 2000
    rng = random.Random(1)
    ours = _counts(draws, row.numel(),
                   _ours(colptr, row, seeds, fanout, replace, torch.Generator().manual_seed(1),
                         method))
    ref = _counts(draws, row.numel(), lambda: _reference_sample(
        colptr, row, seeds.tolist(), fanout, replace, rng))
    assert _max_z(ours, ref) <= Z_MAX


@pytest.mark.parametrize("fanout,replace",
                         [([-1], False), ([20], False), ([3], True), ([2, 2], True),
                          ([-1, 3], True), ([20, 20], False)])
def test_inclusion_matches_torch_sparse(mixed, fanout, replace):
    """Where torch_sparse's draw is exact: all edges, d <= k, or with replacement."""
    pytest.importorskip("torch_sparse")
    _, colptr, row = mixed
    seeds, draws = torch.arange(0, 9), 2000
    torch.manual_seed(2)
    ref = _counts(draws, row.numel(), lambda: torch.ops.torch_sparse.neighbor_sample(
        colptr, row, seeds, fanout, replace, True)[3])
    ours = _counts(draws, row.numel(),
                   _ours(colptr, row, seeds, fanout, replace, torch.Generator().manual_seed(2)))
    assert _max_z(ours, ref) <= Z_MAX


#: 0.999 quantiles of chi-square by degrees of freedom
CHI2_999 = {9: 27.88, 14: 36.12, 44: 78.75}


def _subset_law_chi2(draw, degree: int, k: int, draws: int) -> float:
    """Chi-square statistic of the k-subsets `draw()` returns (sorted offsets of one node of
    in-degree `degree`) against the uniform law on all C(degree, k) subsets."""
    seen = collections.Counter(tuple(sorted(draw())) for _ in range(draws))
    subsets = list(itertools.combinations(range(degree), k))
    assert set(seen) == set(subsets)
    expected = draws / len(subsets)
    return sum((c - expected) ** 2 / expected for c in seen.values())


@METHOD
@pytest.mark.parametrize("degree,k", [(5, 2), (6, 2), (10, 2)])
def test_subset_law_is_uniform(degree, k, method):
    """All C(degree, k) in-edge subsets of one node equally likely (chi-square). With the
    "wide" draw, degree 5 and 6 are keyed candidates (d <= 4k) and 10 i.i.d. draws (d > 4k)."""
    colptr = torch.tensor([0, degree] + [degree] * degree)
    row = torch.arange(1, degree + 1)
    gen, ws = torch.Generator().manual_seed(3), new_workspace(degree + 1)
    chi2 = _subset_law_chi2(
        lambda: sample_neighbors(colptr, row, torch.tensor([0]), [k], generator=gen,
                                 workspace=ws, method=method).edge.tolist(),
        degree, k, 4000 if degree < 10 else 9000)
    assert chi2 < CHI2_999[math.comb(degree, k) - 1]


def test_wide_redraw_keeps_the_law_uniform():
    """Width k: rows of degree > k keep their first k distinct draws, and a row with fewer
    (frequent here) is redrawn with Floyd's algorithm; the law stays uniform, every row gets
    exactly k distinct offsets, owners stay grouped."""
    from gnnorch.sampling.uniform import _wide_subsets

    gen = torch.Generator().manual_seed(9)
    deg = torch.tensor([6, 1, 6, 0, 3])
    redrawn = []

    def draw():
        owner, offset = _wide_subsets(deg, 2, gen, width=2)
        assert torch.equal(owner, torch.tensor([0, 0, 1, 2, 2, 4, 4]))
        first, second = offset[:2].tolist(), offset[3:5].tolist()
        assert len(set(first)) == 2 and offset[2] == 0 and len(set(offset[5:].tolist())) == 2
        redrawn.append(first)
        return second

    chi2 = _subset_law_chi2(draw, 6, 2, 6000)
    assert chi2 < CHI2_999[14]
    chi2 = _subset_law_chi2(iter(redrawn).__next__, 6, 2, 6000)
    assert chi2 < CHI2_999[14]


def test_wide_keeps_low_degree_nodes_in_csc_order():
    """Nodes with degree <= k keep every in-edge, in CSC order (as PyG does)."""
    from gnnorch.sampling.uniform import _wide_subsets

    owner, offset = _wide_subsets(torch.tensor([3, 0, 2, 7]), 4,
                                  torch.Generator().manual_seed(0), 16)
    assert owner.tolist()[:5] == [0, 0, 0, 2, 2] and offset.tolist()[:5] == [0, 1, 2, 0, 1]
    assert owner.tolist()[5:] == [3] * 4 and len(set(offset.tolist()[5:])) == 4


def test_unknown_method_is_refused(mixed):
    _, colptr, row = mixed
    with pytest.raises(ValueError, match="method must be one of"):
        sample_neighbors(colptr, row, torch.tensor([0]), [2], method="fast")


# --------------------------------------------------------------------------- structure


def _hop_ranges(counts):
    starts = [0, *itertools.accumulate(counts)]
    return list(zip(starts[:-1], starts[1:]))


def _check_structure(colptr, row, seeds, fanout, replace, out, exclude=None, hops=()):
    """Every invariant of a directional sample; `exclude`/`hops` as passed to the sampler."""
    node = out.node
    n_ranges, e_ranges = _hop_ranges(out.num_sampled_nodes), _hop_ranges(out.num_sampled_edges)
    assert torch.equal(node[:seeds.numel()], seeds)
    assert len(out.num_sampled_nodes) == len(fanout) + 1 == len(out.num_sampled_edges) + 1
    assert n_ranges[-1][1] == node.numel() and e_ranges[-1][1] == out.edge.numel()
    assert node.unique().numel() == node.numel()  # seeds are distinct here
    dst = node[out.col]
    assert torch.equal(row[out.edge], node[out.row])
    assert ((colptr[dst] <= out.edge) & (out.edge < colptr[dst + 1])).all()
    for hop, k in enumerate(fanout):
        (n0, n1), (e0, e1), (m0, m1) = n_ranges[hop], e_ranges[hop], n_ranges[hop + 1]
        col, src = out.col[e0:e1], out.row[e0:e1]
        assert ((n0 <= col) & (col < n1)).all()
        assert (src < m1).all()
        new_sources = src[src >= m0].unique()
        assert torch.equal(new_sources, torch.arange(m0, m1))
        frontier = node[n0:n1]
        deg = colptr[frontier + 1] - colptr[frontier]
        if hop in hops:
            deg = deg.masked_fill(exclude[frontier], 0)
        if k < 0:
            want = deg
        elif replace:
            want = (deg > 0).long() * k
        else:
            want = deg.clamp_max(k)
        assert torch.equal(torch.bincount(col - n0, minlength=n1 - n0), want)
        if not replace:
            assert out.edge[e0:e1].unique().numel() == e1 - e0


@METHOD
@pytest.mark.parametrize("fanout,replace", [([15, 10, 5], False), ([5, 5], True),
                                            ([-1, 3], False), ([0, 4], False)])
def test_structure(medium, fanout, replace, method):
    _, colptr, row, _ = medium
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(4))[:64]
    out = sample_neighbors(colptr, row, seeds, fanout, replace=replace,
                           generator=torch.Generator().manual_seed(5), method=method)
    _check_structure(colptr, row, seeds, fanout, replace, out)


def test_duplicate_seeds_kept_and_expanded(mixed):
    """PyG keeps duplicated seeds in place; each copy is expanded like torch_sparse does."""
    _, colptr, row = mixed
    seeds = torch.tensor([3, 0, 3])
    out = sample_neighbors(colptr, row, seeds, [-1])
    assert torch.equal(out.node[:3], seeds)
    deg = colptr[seeds + 1] - colptr[seeds]
    assert torch.equal(torch.bincount(out.col, minlength=3), deg)
    assert (out.row != 2).all()  # the second copy of 3 is never a source: it maps to copy 0


def test_no_hop_gives_the_seeds_alone(mixed):
    """``num_neighbors=[]`` (PyG's ``test_homo_link_neighbor_loader_no_edges``): the seeds,
    no edge, one hop count, as PyG's samplers return."""
    _, colptr, row = mixed
    out = sample_neighbors(colptr, row, torch.tensor([4, 1]), [])
    assert out.node.tolist() == [4, 1] and out.num_sampled_nodes == [2]
    assert out.row.numel() == out.col.numel() == out.edge.numel() == 0
    assert out.row.dtype == torch.long and out.num_sampled_edges == []


def test_workspace_is_reset_and_reusable(medium):
    _, colptr, row, _ = medium
    ws = new_workspace(colptr.numel() - 1)
    seeds = torch.arange(32)
    a = sample_neighbors(colptr, row, seeds, [5, 5], generator=torch.Generator().manual_seed(0),
                         workspace=ws)
    assert (ws == UNSEEN).all()
    b = sample_neighbors(colptr, row, seeds, [5, 5], generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)


def test_sampler_first_called_in_inference_mode_samples_outside_it(medium):
    """A user who evaluates under ``torch.inference_mode()`` before (or between) training
    epochs: the sampler's reused buffer must not become an inference tensor, which no
    in-place reset outside inference mode may touch."""
    data, _, _, _ = medium
    sampler = FastNeighborSampler(data, num_neighbors=[5, 5])
    seeds = torch.arange(32)
    with torch.inference_mode():
        inside = sampler.sample_ours(seeds)
    outside = sampler.sample_ours(seeds)
    assert inside.node[:32].tolist() == outside.node[:32].tolist() == seeds.tolist()
    assert not new_workspace(4).is_inference()
    with torch.inference_mode():
        assert not new_workspace(4).is_inference()


def test_global_seed_reproduces(medium):
    _, colptr, row, _ = medium
    seeds = torch.arange(100, 164)
    torch.manual_seed(11)
    a = sample_neighbors(colptr, row, seeds, [10, 5])
    torch.manual_seed(11)
    b = sample_neighbors(colptr, row, seeds, [10, 5])
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)


def test_exclusion_prunes_only_the_chosen_hop(medium):
    _, colptr, row, _ = medium
    gen = torch.Generator().manual_seed(6)
    exclude = torch.rand(3000, generator=gen) < 0.5
    seeds = torch.randperm(3000, generator=gen)[:64]
    fanout = [10, 5, 5]
    out = sample_neighbors(colptr, row, seeds, fanout, exclude=exclude, exclude_hops=[1],
                           generator=gen)
    _check_structure(colptr, row, seeds, fanout, False, out, exclude, {1})
    (h1_start, h1_end) = _hop_ranges(out.num_sampled_nodes)[1]
    e0, e1 = _hop_ranges(out.num_sampled_edges)[1]
    excluded_local = h1_start + exclude[out.node[h1_start:h1_end]].nonzero().squeeze(1)
    assert excluded_local.numel() > 0
    assert not torch.isin(out.col[e0:e1], excluded_local).any()
    # seeds in the mask are still expanded (hop 0 is not listed)
    hop0 = torch.bincount(out.col[:out.num_sampled_edges[0]], minlength=64)
    deg = colptr[seeds + 1] - colptr[seeds]
    assert torch.equal(hop0, deg.clamp_max(10))


def test_induced_returns_all_edges_among_sampled_nodes(medium):
    data, colptr, row, _ = medium
    seeds = torch.arange(0, 3000, 97)
    out = sample_neighbors(colptr, row, seeds, [4, 3], directed=False,
                           generator=torch.Generator().manual_seed(8))
    assert out.num_sampled_edges is None
    assert sum(out.num_sampled_nodes) == out.node.numel()
    inside = torch.zeros(3000, dtype=torch.bool)
    inside[out.node] = True
    dst_of = torch.repeat_interleave(torch.arange(3000), colptr.diff())
    want = (inside[row] & inside[dst_of]).nonzero().squeeze(1)
    assert torch.equal(out.edge.sort().values, want)
    assert torch.equal(out.node[out.row], row[out.edge])
    assert torch.equal(out.node[out.col], dst_of[out.edge])


def test_induced_matches_torch_sparse_exactly_without_randomness(medium):
    """With fanout -1 nothing is random: same nodes, edges and order as torch_sparse."""
    pytest.importorskip("torch_sparse")
    _, colptr, row, _ = medium
    seeds = torch.tensor([5, 17, 5, 900])
    for directed in (True, False):
        ref = torch.ops.torch_sparse.neighbor_sample(colptr, row, seeds, [-1, -1], False,
                                                     directed)
        out = sample_neighbors(colptr, row, seeds, [-1, -1], directed=directed)
        for got, want in zip((out.node, out.row, out.col, out.edge), ref):
            assert torch.equal(got, want)


# --------------------------------------------------------------------------- NeighborLoader


def _loader(data, sampler, **kwargs):
    return NeighborLoader(data, num_neighbors=[5, 3], batch_size=50,
                          input_nodes=data.train_mask, neighbor_sampler=sampler, **kwargs)


def _check_batch(data, batch):
    n_id, e_id = batch.n_id, batch.e_id
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    assert torch.equal(batch.train_mask, data.train_mask[n_id])
    assert data.train_mask[n_id[:batch.batch_size]].all()
    assert torch.equal(n_id[batch.edge_index], data.edge_index[:, e_id])
    assert sum(batch.num_sampled_nodes) == batch.num_nodes
    assert sum(batch.num_sampled_edges) == batch.num_edges


@pytest.mark.parametrize("num_workers", [0, 1])
def test_neighbor_loader_batches(medium, num_workers):
    data = medium[0]
    sampler = FastNeighborSampler(data, num_neighbors=[5, 3], share_memory=num_workers > 0)
    assert sampler.fallback_reason is None
    batches = list(_loader(data, sampler, num_workers=num_workers))
    assert sum(b.batch_size for b in batches) == int(data.train_mask.sum())
    for batch in batches:
        _check_batch(data, batch)


@pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without a 'pyg-lib'")
def test_neighbor_loader_fields_match_pyg(medium):
    pytest.importorskip("torch_sparse")
    data = medium[0]
    ours = next(iter(_loader(data, FastNeighborSampler(data, num_neighbors=[5, 3]))))
    theirs = next(iter(_loader(data, None)))
    extra = set(ours.keys()) - set(theirs.keys())
    assert set(theirs.keys()) <= set(ours.keys())
    assert extra <= {"num_sampled_nodes", "num_sampled_edges"}  # PyG has them with pyg-lib


def test_hop_counts_drive_trim_to_layer(medium):
    """PyG's trim_to_layer relies on the hop layout; trimming must not change the output."""
    from torch_geometric.nn import GraphSAGE

    data = medium[0]
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=5).eval()
    batch = next(iter(_loader(data, FastNeighborSampler(data, num_neighbors=[5, 3]))))
    full = model(batch.x, batch.edge_index)[:batch.batch_size]
    trimmed = model(batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
    assert torch.allclose(full, trimmed, atol=1e-5)


@pytest.mark.parametrize("kwargs", [pytest.param({"sample_direction": "backward"},
                                                 marks=BACKWARD),
                                    {"subgraph_type": "bidirectional"},
                                    {"subgraph_type": "induced"}])
def test_other_subgraph_types(medium, kwargs):
    """PyG's post-processing applies; bidirectional reverse edges reuse the forward e_id."""
    data = medium[0]
    batch = next(iter(_loader(data, FastNeighborSampler(data, num_neighbors=[5, 3], **kwargs))))
    got, want = batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id]
    if kwargs.get("subgraph_type") == "bidirectional":
        assert ((got == want).all(0) | (got.flip(0) == want).all(0)).all()
    else:
        assert torch.equal(got, want)


def test_link_neighbor_loader(medium):
    from torch_geometric.loader import LinkNeighborLoader

    data = medium[0]
    sampler = FastNeighborSampler(data, num_neighbors=[5, 3])
    loader = LinkNeighborLoader(data, num_neighbors=[5, 3], batch_size=32,
                                edge_label_index=data.edge_index[:, :64],
                                neighbor_sampler=sampler)
    for batch in loader:
        assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
        labelled = batch.n_id[batch.edge_label_index]
        assert torch.equal(labelled, data.edge_index[:, batch.input_id])


def test_pickle_drops_scratch_and_keeps_exclusion(medium):
    data = medium[0]
    sampler = FastNeighborSampler(data, num_neighbors=[5, 3])
    sampler.set_exclusion(torch.zeros(3000, dtype=torch.bool), hops=[1])
    next(iter(_loader(data, sampler)))
    assert any(sampler._workspaces.pools().values())
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy._workspaces.pools() == {} and copy.exclusion[1] == frozenset({1})
    _check_batch(data, next(iter(_loader(data, copy))))
    with pytest.raises(ValueError):
        sampler.set_exclusion(torch.zeros(10, dtype=torch.bool))


@pytest.mark.filterwarnings("ignore:Using 'FastNeighborSampler' without a 'pyg-lib'")
def test_fallback_reasons(medium):
    data = medium[0]
    assert FastNeighborSampler(data, [5], disjoint=True).fallback_reason == "disjoint sampling"
    narrow = FastNeighborSampler(data, [5])   # pyg-lib keeps an int32 edge_index's CSC int32
    narrow.colptr, narrow.row = narrow.colptr.int(), narrow.row.int()
    assert "torch.int32 graph structure" in narrow.fallback_reason
    hetero = HeteroData()
    hetero["a"].num_nodes = 4
    hetero["a", "to", "a"].edge_index = torch.tensor([[0, 1], [1, 2]])
    assert FastNeighborSampler(hetero, [2]).fallback_reason == "heterogeneous graph"


@pytest.mark.gpu
def test_cuda_matches_structure(medium):
    _, colptr, row, _ = medium
    dev = torch.device("cuda")
    seeds = torch.arange(0, 3000, 50)
    out = sample_neighbors(colptr.to(dev), row.to(dev), seeds.to(dev), [10, 5])
    assert out.node.device.type == "cuda"
    cpu = type(out)(*(t.cpu() for t in (out.node, out.row, out.col, out.edge)),
                    out.num_sampled_nodes, out.num_sampled_edges)
    _check_structure(colptr, row, seeds, [10, 5], False, cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("degree,k", [(5, 2), (10, 2)])
def test_cuda_subset_law_is_uniform(degree, k):
    """On CUDA the default draw is "wide": the same uniform k-subset law."""
    dev = torch.device("cuda")
    colptr = torch.tensor([0, degree] + [degree] * degree, device=dev)
    row = torch.arange(1, degree + 1, device=dev)
    gen = torch.Generator(device=dev).manual_seed(3)
    ws = new_workspace(degree + 1, dev)
    chi2 = _subset_law_chi2(
        lambda: sample_neighbors(colptr, row, torch.tensor([0], device=dev), [k],
                                 generator=gen, workspace=ws).edge.tolist(),
        degree, k, 4000 if degree < 10 else 9000)
    assert chi2 < CHI2_999[math.comb(degree, k) - 1]


@pytest.mark.gpu
@pytest.mark.parametrize("fanout,replace", CONFIGS)
def test_cuda_inclusion_matches_exact_reference(mixed, fanout, replace):
    _, colptr, row = mixed
    dev = torch.device("cuda")
    seeds, draws = torch.arange(0, 9), 2000
    rng = random.Random(1)
    gen = torch.Generator(device=dev).manual_seed(1)
    sample = _ours(colptr.to(dev), row.to(dev), seeds.to(dev), fanout, replace, gen)
    ours = _counts(draws, row.numel(), lambda: sample().cpu())
    ref = _counts(draws, row.numel(), lambda: _reference_sample(
        colptr, row, seeds.tolist(), fanout, replace, rng))
    assert _max_z(ours, ref) <= Z_MAX



@pytest.mark.gpu
def test_cuda_workspaces_are_kept_per_stream(medium):
    """A buffer released by a call on one stream is never taken by a call on another (its
    last use there may not have run yet)."""
    data = medium[0]
    sampler = FastNeighborSampler(data, [5, 5])
    sampler.move_to("cuda")
    seeds = torch.arange(64)
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        sampler.sample_ours(seeds)
    with torch.cuda.stream(b):
        sampler.sample_ours(seeds)
    pools = [pool for pool in sampler._workspaces.pools().values() if pool]
    assert len(pools) == 2 and pools[0][0] is not pools[1][0]
    torch.cuda.synchronize()


def test_host_structure_is_kept_for_host_side_users(medium):
    """A sampler moved to a device with keep_host keeps its host CSC for the cache's hotness
    and refreshes (`host_structure`); moved without it, it holds no second copy."""
    data = medium[0]
    sampler = FastNeighborSampler(data, [5])
    colptr, row = sampler.colptr, sampler.row
    assert sampler.host_structure == (colptr, row)
    sampler.move_to("meta", keep_host=True)
    assert sampler.colptr.device.type == "meta"
    kept = sampler.host_structure
    assert kept[0] is colptr and kept[1] is row
    sampler.move_to("meta")                        # moved again without keep_host: let go
    assert sampler._host_structure is None
    other = FastNeighborSampler(data, [5])
    other.use_structure(colptr.to("meta"), row.to("meta"), None, keep_host=True)
    assert other.host_structure[0].device.type == "cpu"
    assert other.__getstate__()["_host_structure"] is None   # not pickled to workers


def test_workspaces_take_four_bytes_a_node_and_an_int64_one_samples_alike(medium):
    """The map is int32 (half of int64's memory at every scale, per sampling thread or
    worker); a user's int64 map gives the same subgraph, every output int64 either way."""
    _, colptr, row, _ = medium
    num_nodes = colptr.numel() - 1
    small = new_workspace(num_nodes)
    assert small.dtype == torch.int32 and small.element_size() == 4
    wide = torch.full((num_nodes,), UNSEEN, dtype=torch.long)
    seeds = torch.arange(0, num_nodes, 37)
    for directed in (True, False):
        outs = [sample_neighbors(colptr, row, seeds, [5, 3], directed=directed, workspace=w,
                                 generator=torch.Generator().manual_seed(1))
                for w in (small, wide)]
        for field in ("node", "row", "col", "edge"):
            a, b = getattr(outs[0], field), getattr(outs[1], field)
            assert a.dtype == b.dtype == torch.long and torch.equal(a, b), field
        assert bool((small == UNSEEN).all()) and bool((wide == UNSEEN).all())


def test_a_hop_too_large_for_an_int32_map_says_so():
    from gnnorch.sampling.uniform import relabel

    with pytest.raises(RuntimeError, match="int64 workspace"):
        relabel(new_workspace(10), torch.arange(5), 2**31 - 3)
