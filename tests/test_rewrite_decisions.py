"""The rewrite engine's one-off costs pay for themselves: deferred probes, no start-up
calibration in the runtime, and measured decisions kept on disk across processes."""
from __future__ import annotations

import json

import pytest
import torch
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.rewrite import decisions
from gnnorch.rewrite.engine import RewriteEngine
from gnnorch.rewrite.planner import ORIGINAL, REWRITTEN, Planner, probe_after_for
from gnnorch.rewrite.shapes import LayerShape

from helpers import cora

SHAPE = LayerShape(100, 10, 300, 8, 8, False, True)


def test_probe_after_bounds_the_probing_share():
    assert probe_after_for(2, 0.05) == 80
    assert probe_after_for(1, 1.0) == 2
    with pytest.raises(ValueError):
        probe_after_for(2, 0.0)


def test_deferred_probes_happen_only_after_enough_calls():
    planner = Planner(probes_per_bucket=2, reprobe_every=0, probe_after=5)
    state = planner.state("sig", SHAPE)
    probed_at = []
    for call in range(1, 13):
        if planner.plan(state, None):
            probed_at.append(call)
            planner.record(state, ORIGINAL, 0.0, 1.0)
            planner.record(state, REWRITTEN, 0.0, 0.5)
            planner.finish_probe(state)
        elif not probed_at:
            # before any measurement: PyG's order, not a guess
            assert not state.rewrite and state.decided_by == "unmeasured"
    assert probed_at == [5, 10]
    assert state.rewrite and state.decided_by == "measured"


def test_default_planner_still_probes_first_calls():
    planner = Planner(probes_per_bucket=2, reprobe_every=0)
    state = planner.state("sig", SHAPE)
    assert planner.plan(state, None) is True


def test_engine_without_model_decisions_never_calibrates():
    from torch_geometric.nn import SAGEConv

    torch.manual_seed(0)
    layer = SAGEConv(64, 4)
    x = torch.randn(50, 64)
    edge_index = torch.randint(0, 50, (2, 200))
    engine = RewriteEngine(True, model_decides=False,
                           planner=Planner(probe_after=3, reprobe_every=0))
    for _ in range(2):
        engine.forward(layer, lambda *a, **k: SAGEConv.forward(layer, *a, **k),
                       (x, edge_index), {})
    assert engine.overhead_s == 0.0          # neither calibration nor probes yet
    assert all(not m.calibrated for m in engine._models.values())
    engine.forward(layer, lambda *a, **k: SAGEConv.forward(layer, *a, **k), (x, edge_index), {})
    assert engine.overhead_s > 0.0           # the third call was probed
    assert all(not m.calibrated for m in engine._models.values())


@pytest.fixture
def fresh_process_decisions(tmp_path, monkeypatch):
    """Empty in-process decision tables and a private disk cache, as in a new process."""
    monkeypatch.setenv("GNNORCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GNNORCH_DECISION_CACHE", raising=False)
    saved = (dict(decisions._DECISIONS), set(decisions._LOADED_FROM_DISK))

    def new_process():
        decisions._DECISIONS.clear()
        decisions._LOADED_FROM_DISK.clear()

    new_process()
    yield new_process
    decisions._DECISIONS.clear()
    decisions._DECISIONS.update(saved[0])
    decisions._LOADED_FROM_DISK.clear()
    decisions._LOADED_FROM_DISK.update(saved[1])


def test_disk_cache_round_trip(fresh_process_decisions):
    orders, _ = decisions.shared_decisions()
    state = orders.state("sig|cpu", SHAPE)
    orders.record(state, ORIGINAL, 0.0, 1.0)
    orders.record(state, REWRITTEN, 0.0, 0.5)
    orders.finish_probe(state)
    path = decisions.save_disk_decisions(threads=3)
    assert path is not None and path.exists()
    assert decisions.decision_cache_path(4) != path   # thread count is part of the key
    fresh_process_decisions()
    assert decisions.load_disk_decisions(threads=4) == 0
    assert decisions.load_disk_decisions(threads=3) == 1
    adopted = decisions.shared_decisions()[0].state("sig|cpu", SHAPE)
    assert adopted.rewrite and adopted.decided_by == "measured"


def test_disk_cache_off_and_unreadable(fresh_process_decisions, monkeypatch, tmp_path):
    path = decisions.decision_cache_path(2)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert decisions.load_disk_decisions(2) == 0      # ignored, not raised
    monkeypatch.setenv("GNNORCH_DECISION_CACHE", "0")
    assert decisions.decision_cache_path(2) is None
    assert decisions.save_disk_decisions(2) is None


def _train(data, epochs=2):
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[10, 5], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    return model


def test_runtime_short_run_probes_nothing_and_later_runs_reuse_disk(fresh_process_decisions):
    data = cora()
    runtime = gnnorch.Runtime(_train, processes=1, autotune=False)
    runtime(data)
    report = runtime.last_run.stats[0]["rewrite"]
    # a 10-step run: no bucket reaches the calls that would make probing pay
    assert all(b["probes"] == 0 for layer in report["layers"] for b in layer["buckets"])
    assert all(not m["micro_rows"] for m in report["cost_models"].values())

    # a run whose buckets were probed (as a long run's are) leaves its decisions on disk ...
    decisions.shared_decisions()[0].probe_after = 1
    runtime(data)
    measured = sum(b["probes"] > 0 for layer in runtime.last_run.stats[0]["rewrite"]["layers"]
                   for b in layer["buckets"])
    assert measured > 0
    files = list((decisions.decision_cache_path(torch.get_num_threads())).parent.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["orders"]

    # ... which a new process adopts: nothing probed again
    fresh_process_decisions()
    runtime(data)
    again = runtime.last_run.stats[0]["rewrite"]
    assert again["adopted_from_disk"] >= 1
    probed = [b for layer in again["layers"] for b in layer["buckets"]
              if b["decided_by"] == "measured"]
    assert probed and all(b["calls"] > 0 for b in probed)
