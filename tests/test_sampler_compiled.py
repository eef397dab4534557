"""The sampler's body compiled by TorchScript (`gnnorch.sampling.uniform.compiled_sampler`).

The compiled body runs the eager body's operations in the same order on the same generator,
so it must return the same subgraph bit for bit, for every option; where TorchScript is
missing it must step aside (the eager body, the reason recorded). What it is for, a call that
leaves the GIL to the other threads (the GPU data path's producer samples beside the trainer
thread), is timed by `scripts/bench_sampler_gil.py`, not here: a timing on a shared 2-core
machine is no test.
"""
from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler.utils import to_csc

from gnnorch.compat import unavailable
from gnnorch.datasets import products_like
from gnnorch.sampling import UNSEEN, FastNeighborSampler, new_workspace, sample_neighbors
from gnnorch.sampling import uniform

from helpers import torchscript_gone

FIELDS = ("node", "row", "col", "edge")


@pytest.fixture(scope="module")
def graph():
    data = products_like(3000, seed=1, avg_degree=12.0, num_features=4, num_classes=3)
    colptr, row, _ = to_csc(data, device="cpu", share_memory=False, is_sorted=False)
    return data, colptr, row


def _both(colptr, row, seeds, fanout, seed=0, **kwargs):
    outs = []
    for compiled in (False, True):
        workspace = new_workspace(colptr.numel() - 1, colptr.device)
        gen = torch.Generator(device=colptr.device).manual_seed(seed)
        outs.append(sample_neighbors(colptr, row, seeds, fanout, generator=gen,
                                     workspace=workspace, compiled=compiled, **kwargs))
        assert bool((workspace == UNSEEN).all()), "the workspace must be left all UNSEEN"
    return outs


def _assert_same(eager, compiled):
    for field in FIELDS:
        assert torch.equal(getattr(eager, field), getattr(compiled, field)), field
    assert eager.num_sampled_nodes == compiled.num_sampled_nodes
    assert eager.num_sampled_edges == compiled.num_sampled_edges


def test_the_body_compiles_here():
    """On the torch versions gnnorch supports the body compiles; nothing is reported missing."""
    assert uniform.compiled_sampler() is not None
    assert "torch.jit.script" not in unavailable(resolve=False)


@pytest.mark.parametrize("method", ["floyd", "wide"])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("directed", [True, False])
def test_compiled_equals_eager_bit_for_bit(graph, method, replace, directed):
    _, colptr, row = graph
    seeds = torch.randint(0, 3000, (96,), generator=torch.Generator().manual_seed(3))
    seeds[5] = seeds[4]   # a duplicated seed, kept as PyG keeps it
    for fanout in ([15, 10, 5], [-1, 3], [2], []):
        eager, compiled = _both(colptr, row, seeds, fanout, method=method, replace=replace,
                                directed=directed)
        _assert_same(eager, compiled)
        assert (compiled.num_sampled_edges is None) == (not directed)


def test_compiled_equals_eager_with_exclusion(graph):
    """The cache's pruning mask: excluded nodes are kept but not expanded at chosen hops."""
    _, colptr, row = graph
    exclude = torch.zeros(3000, dtype=torch.bool)
    exclude[::3] = True
    seeds = torch.arange(0, 3000, 37)
    eager, compiled = _both(colptr, row, seeds, [10, 5, 5], exclude=exclude, exclude_hops=[1, 2])
    _assert_same(eager, compiled)


def test_compiled_under_inference_mode(graph):
    """A user's evaluation loop under ``torch.inference_mode()``: the workspace (a normal tensor)
    is updated in place, the outputs are inference tensors, as eagerly."""
    _, colptr, row = graph
    workspace = new_workspace(3000)
    with torch.inference_mode():
        out = sample_neighbors(colptr, row, torch.arange(40), [5, 5], workspace=workspace,
                               generator=torch.Generator().manual_seed(1))
    eager = sample_neighbors(colptr, row, torch.arange(40), [5, 5], compiled=False,
                             generator=torch.Generator().manual_seed(1))
    _assert_same(eager, out)
    assert out.node.is_inference() and bool((workspace == UNSEEN).all())


def test_compiled_sampler_is_what_fast_neighbor_sampler_runs(graph, monkeypatch):
    """A FastNeighborSampler call runs the compiled body: the eager helpers are not called."""
    data, _, _ = graph
    assert uniform.compiled_sampler() is not None
    calls = []
    relabel = uniform.relabel
    monkeypatch.setattr(uniform, "relabel", lambda *a: calls.append(1) or relabel(*a))
    sampler = FastNeighborSampler(data, [5, 5])
    sampler.sample_ours(torch.arange(10))
    assert calls == []
    sample_neighbors(sampler.colptr, sampler.row, torch.arange(10), [5, 5], compiled=False)
    assert len(calls) == 2   # the eager body, one relabel per hop


def test_without_torchscript_the_eager_body_runs(graph, monkeypatch):
    """Fail closed: where TorchScript cannot compile, sampling runs eagerly, with the same
    result, and the reason is reported under ``torch.jit.script``."""
    _, colptr, row = graph
    seeds = torch.arange(0, 3000, 101)
    expected = _both(colptr, row, seeds, [4, 4])[0]

    with torchscript_gone(monkeypatch):
        assert uniform.compiled_sampler() is None
        assert "TorchScript is gone" in unavailable(resolve=False)["torch.jit.script"]
        out = sample_neighbors(colptr, row, seeds, [4, 4],
                               generator=torch.Generator().manual_seed(0))
        _assert_same(expected, out)
    assert uniform.compiled_sampler() is not None


def test_an_error_inside_the_compiled_body_resets_the_workspace(graph):
    _, colptr, row = graph
    workspace = new_workspace(3000)
    with pytest.raises(Exception):
        sample_neighbors(colptr, row, torch.tensor([0, 5000]), [3], workspace=workspace)
    assert bool((workspace == UNSEEN).all())


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["floyd", "wide"])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("directed", [True, False])
def test_cuda_compiled_equals_eager(graph, method, replace, directed):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _, colptr, row = graph
    dev = torch.device("cuda")
    seeds = torch.arange(0, 3000, 13, device=dev)
    eager, compiled = _both(colptr.to(dev), row.to(dev), seeds, [15, 10, 5], method=method,
                            replace=replace, directed=directed)
    _assert_same(eager, compiled)


@pytest.mark.gpu
def test_cuda_compiled_equals_eager_with_exclusion(graph):
    """The cache's pruning mask on the device (a CUDA run's cache loaders sample with it)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _, colptr, row = graph
    dev = torch.device("cuda")
    exclude = torch.zeros(3000, dtype=torch.bool, device=dev)
    exclude[::3] = True
    seeds = torch.arange(0, 3000, 37, device=dev)
    eager, compiled = _both(colptr.to(dev), row.to(dev), seeds, [10, 5, 5], exclude=exclude,
                            exclude_hops=[1, 2], method="wide")
    _assert_same(eager, compiled)
