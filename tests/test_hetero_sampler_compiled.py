"""The heterogeneous sampler's body compiled by TorchScript
(`gnnorch.sampling.hetero.compiled_hetero_sampler`).

As for the homogeneous body (tests/test_sampler_compiled.py): the compiled body runs the eager
body's operations in the same order on the same generator, so it must return the same
subgraph bit for bit, for both draws, with and without replacement, with fanouts shared by
several edge types (one draw for the group) and per edge type; where TorchScript is missing
it steps aside. Exactness against PyG's law is tests/test_hetero_sampler.py's (which runs the
default, compiled body).
"""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.sampler.utils import to_hetero_csc

from gnnorch.compat import unavailable
from gnnorch.sampling import hetero
from gnnorch.sampling.hetero import new_hetero_workspace, sample_hetero_neighbors
from gnnorch.sampling.hetero_neighbor import FastHeteroNeighborSampler
from gnnorch.sampling.uniform import UNSEEN

from helpers import torchscript_gone

pytestmark = pytest.mark.usefixtures("one_thread")


def _graph(seed: int = 0) -> HeteroData:
    """Papers, authors, venues and a type without edges; five edge types."""
    gen = torch.Generator().manual_seed(seed)

    def edges(n_src, n_dst, count):
        return torch.stack([torch.randint(0, n_src, (count,), generator=gen),
                            torch.randint(0, n_dst, (count,), generator=gen)])

    data = HeteroData()
    for node_type, count in (("paper", 400), ("author", 300), ("venue", 20), ("topic", 5)):
        data[node_type].num_nodes = count
    data["author", "writes", "paper"].edge_index = edges(300, 400, 1500)
    data["paper", "rev_writes", "author"].edge_index = \
        data["author", "writes", "paper"].edge_index.flip(0)
    data["paper", "cites", "paper"].edge_index = edges(400, 400, 2400)
    data["venue", "hosts", "paper"].edge_index = edges(20, 400, 400)
    data["paper", "in", "venue"].edge_index = data["venue", "hosts", "paper"].edge_index.flip(0)
    return data


@pytest.fixture(scope="module")
def graph():
    data = _graph()
    colptr, row, _ = to_hetero_csc(data, device="cpu", share_memory=False, is_sorted=False)
    colptr = {e: colptr[e] for e in data.edge_types}
    row = {e: row[e] for e in data.edge_types}
    counts = {t: data[t].num_nodes for t in data.node_types}
    return data, colptr, row, counts


#: fanouts shared by edge types (one draw a hop for the group) and per edge type
FANOUTS = {
    "shared": lambda e: [5, 3],
    "mixed": lambda e: {"writes": [4, 2], "rev_writes": [3, 3], "cites": [4, -1],
                        "hosts": [0, 2], "in": [1, 1]}[e[1]],
}


def _both(graph, seeds, fanout, seed=0, device="cpu", **kwargs):
    _, colptr, row, counts = graph
    colptr = {e: c.to(device) for e, c in colptr.items()}
    row = {e: r.to(device) for e, r in row.items()}
    outs = []
    for compiled in (False, True):
        workspace = new_hetero_workspace(counts, device)
        gen = torch.Generator(device=device).manual_seed(seed)
        outs.append(sample_hetero_neighbors(
            colptr, row, seeds, {e: fanout(e) for e in colptr}, counts, generator=gen,
            workspace=workspace, compiled=compiled, **kwargs))
        assert all(bool((w == UNSEEN).all()) for w in workspace.values())
    return outs


def _assert_same(eager, compiled):
    for field in ("node", "row", "col", "edge"):
        got, want = getattr(compiled, field), getattr(eager, field)
        assert list(got) == list(want), field
        for key in want:
            assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), \
                (field, key)
    assert compiled.num_sampled_nodes == eager.num_sampled_nodes
    assert compiled.num_sampled_edges == eager.num_sampled_edges


def test_the_body_compiles_here():
    assert hetero.compiled_hetero_sampler() is not None
    assert "torch.jit.script" not in unavailable(resolve=False)


@pytest.mark.parametrize("fanout", sorted(FANOUTS))
@pytest.mark.parametrize("method", ["floyd", "wide"])
@pytest.mark.parametrize("replace", [False, True])
def test_compiled_equals_eager_bit_for_bit(graph, fanout, method, replace):
    seeds = {"paper": torch.arange(0, 400, 7), "author": torch.tensor([3, 3, 250])}
    eager, compiled = _both(graph, seeds, FANOUTS[fanout], method=method, replace=replace)
    _assert_same(eager, compiled)
    assert sum(eager.num_sampled_nodes["venue"]) > 0   # reached: the draws ran


def test_seeds_of_one_type_and_no_hop(graph):
    for fanout in (lambda e: [], lambda e: [2]):
        eager, compiled = _both(graph, {"venue": torch.arange(20)}, fanout)
        _assert_same(eager, compiled)


def test_the_sampler_runs_the_compiled_body(graph, monkeypatch):
    """A FastHeteroNeighborSampler call runs the compiled body: the eager draw is not called."""
    data = graph[0]
    calls = []
    draw = hetero._draw
    monkeypatch.setattr(hetero, "_draw", lambda *a: calls.append(1) or draw(*a))
    sampler = FastHeteroNeighborSampler(data, [3, 3])
    sampler.sample_ours({"paper": torch.arange(10)})
    assert calls == []
    _, colptr, row, counts = graph
    sample_hetero_neighbors(colptr, row, {"paper": torch.arange(10)},
                            {e: [3, 3] for e in colptr}, counts, compiled=False)
    assert len(calls) == 2   # the eager body: one draw a hop (one fanout for every type)


def test_without_torchscript_the_eager_body_runs(graph, monkeypatch):
    seeds = {"paper": torch.arange(0, 400, 11)}
    expected = _both(graph, seeds, FANOUTS["mixed"])[0]

    with torchscript_gone(monkeypatch):
        assert hetero.compiled_hetero_sampler() is None
        assert "TorchScript is gone" in unavailable(resolve=False)["torch.jit.script"]
        _, colptr, row, counts = graph
        out = sample_hetero_neighbors(colptr, row, seeds,
                                      {e: FANOUTS["mixed"](e) for e in colptr}, counts,
                                      generator=torch.Generator().manual_seed(0))
        _assert_same(expected, out)
    assert hetero.compiled_hetero_sampler() is not None


def test_an_error_inside_the_compiled_body_resets_the_workspace(graph):
    _, colptr, row, counts = graph
    workspace = new_hetero_workspace(counts)
    with pytest.raises(Exception):
        sample_hetero_neighbors(colptr, row, {"paper": torch.tensor([0, 5000])},
                                {e: [3] for e in colptr}, counts, workspace=workspace)
    assert all(bool((w == UNSEEN).all()) for w in workspace.values())


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["floyd", "wide"])
@pytest.mark.parametrize("replace", [False, True])
def test_cuda_compiled_equals_eager(graph, method, replace):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    seeds = {"paper": torch.arange(0, 400, 7, device="cuda")}
    eager, compiled = _both(graph, seeds, FANOUTS["mixed"], device="cuda", method=method,
                            replace=replace)
    _assert_same(eager, compiled)
