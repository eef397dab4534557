"""Samplers over one graph share one CSC while any of them holds it (`gnnorch.sampling.csc`)."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch_geometric.sampler import NeighborSampler
from torch_geometric.sampler.utils import to_csc

from gnnorch import compat
from gnnorch.compat import pyg as compat_pyg
from gnnorch.datasets.synthetic import power_law_graph
from gnnorch.sampling import FastNeighborSampler

pytestmark = pytest.mark.filterwarnings("ignore:Using '.*' without a 'pyg-lib'")


def _graph(seed=0):
    return power_law_graph(num_nodes=400, avg_degree=6.0, num_features=4, num_classes=3,
                           seed=seed)


def test_samplers_over_one_graph_share_pygs_own_csc():
    data = _graph()
    a = FastNeighborSampler(data, num_neighbors=[5, 5])
    b = FastNeighborSampler(data, num_neighbors=[10])    # the fanout is not part of the CSC
    assert not a.csc_shared and b.csc_shared
    assert b.colptr is a.colptr and b.row is a.row and b.perm is a.perm
    colptr, row, perm = to_csc(data, device="cpu")       # PyG's own conversion
    assert torch.equal(a.colptr, colptr) and torch.equal(a.row, row)
    assert torch.equal(a.perm, perm)
    # the draws of a sampler on a shared CSC are those of one on its own
    alone = NeighborSampler(data, num_neighbors=[10])
    assert alone.colptr is not a.colptr and torch.equal(alone.row, b.row)


def test_a_changed_graph_or_other_options_get_their_own_conversion():
    data = _graph()
    a = FastNeighborSampler(data, num_neighbors=[5])
    assert not FastNeighborSampler(data, [5], sample_direction="backward").csc_shared
    assert not FastNeighborSampler(data, [5], share_memory=True).csc_shared
    data.edge_index[0, 0] = data.edge_index[0, 1]        # written in place: another graph
    c = FastNeighborSampler(data, num_neighbors=[5])
    assert not c.csc_shared and c.row is not a.row
    assert torch.equal(c.row, to_csc(data, device="cpu")[1])
    data.edge_index = data.edge_index.clone()            # replaced
    assert not FastNeighborSampler(data, num_neighbors=[5]).csc_shared
    data.num_nodes = data.num_nodes + 5                  # more nodes: another colptr
    assert not FastNeighborSampler(data, num_neighbors=[5]).csc_shared


def test_sharing_keeps_nothing_alive():
    """Once every sampler holding a CSC is gone, so is the CSC; the graph's entry dies with
    the graph."""
    from gnnorch.sampling.csc import SHARED_CSC

    data = _graph()
    a = FastNeighborSampler(data, num_neighbors=[5])
    rows = weakref.ref(a.row)
    del a
    gc.collect()
    assert rows() is None
    assert not FastNeighborSampler(data, num_neighbors=[5]).csc_shared   # converted again
    entries = len(SHARED_CSC._entries)
    del data
    gc.collect()
    assert len(SHARED_CSC._entries) == entries - 1


def test_a_changed_conversion_function_is_left_alone(monkeypatch):
    """PyG's ``to_csc`` with another signature: the probe says so, every sampler converts as
    PyG does, and nothing is patched."""
    import torch_geometric.sampler.neighbor_sampler as module

    original = module.to_csc

    def changed(data, share_memory=False, device=None, is_sorted=False, src_node_time=None,
                edge_time=None, to_transpose=False):
        return original(data, device=device, share_memory=share_memory, is_sorted=is_sorted,
                        src_node_time=src_node_time, edge_time=edge_time,
                        to_transpose=to_transpose)

    monkeypatch.setattr(module, "to_csc", changed)
    compat.reset()
    try:
        data = _graph()
        a, b = (FastNeighborSampler(data, num_neighbors=[5]) for _ in range(2))
        assert compat_pyg.TO_CSC.reason is not None and "to_csc takes" in compat_pyg.TO_CSC.reason
        assert not b.csc_shared and b.row is not a.row and torch.equal(b.row, a.row)
        assert module.to_csc is changed
    finally:
        monkeypatch.undo()
        compat.reset()


def test_the_patch_is_undone_and_pygs_own_sampler_unchanged():
    import torch_geometric.sampler.neighbor_sampler as module

    original = module.to_csc
    data = _graph()
    FastNeighborSampler(data, num_neighbors=[5])
    assert module.to_csc is original
    plain = NeighborSampler(data, num_neighbors=[5])       # outside: PyG converts itself
    assert torch.equal(plain.row, to_csc(data, device="cpu")[1])


def test_a_graph_collected_while_the_table_is_busy_does_not_deadlock():
    """A weakref callback runs wherever the collector does, also inside the table's own
    lock (a conversion allocating); forgetting an entry must not take that lock (found as a
    hung test run)."""
    import threading

    from gnnorch.sampling.csc import SHARED_CSC

    data = _graph()
    sampler = FastNeighborSampler(data, num_neighbors=[5])
    done = threading.Event()

    def collect_inside_the_lock():
        nonlocal data
        with SHARED_CSC._lock:
            data = None          # the graph's last reference: its entry's callback runs here
            gc.collect()
        done.set()

    worker = threading.Thread(target=collect_inside_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), "forgetting a collected graph waited for the table's lock"
    assert sampler.row is not None
