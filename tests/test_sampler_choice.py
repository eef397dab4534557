"""sampler="auto": the backend is chosen by measurement on the loader's own graph."""
from __future__ import annotations

import time

import pytest
import torch
import torch_geometric.typing as pyg_typing
from torch_geometric.loader import NeighborLoader
from torch_geometric.sampler import NeighborSampler

import gnnorch
from gnnorch.sampling import FastNeighborSampler
from gnnorch.sampling.choice import choose_sampler, forget_choices, seed_pool

from helpers import cora


@pytest.fixture(autouse=True)
def fresh_decisions():
    forget_choices()
    yield
    forget_choices()


def _slow(seconds: float):
    def sample(seeds):
        time.sleep(seconds)
        return seeds
    return sample


def test_faster_backend_wins_and_decision_is_reused():
    pool = torch.arange(100)
    key = ("graph", 100)
    first = choose_sampler({"a": _slow(0.02), "b": _slow(0.001)}, pool, 10, key, threads=1)
    assert first.backend == "b" and not first.reused
    assert first.ms_per_batch["a"] > first.ms_per_batch["b"]
    assert first.measure_s >= 0.06  # three batches of the slow one at least
    again = choose_sampler({"a": _slow(0.02), "b": _slow(0.001)}, pool, 10, key, threads=1)
    assert again.reused and again.measure_s == 0.0 and again.backend == "b"
    assert "reused" in again.reason and "b faster" in again.reason
    other = choose_sampler({"a": _slow(0.001), "b": _slow(0.02)}, pool, 10, key, threads=2)
    assert other.backend == "a"  # another thread count is another decision


def test_measuring_leaves_user_rng_and_threads_alone():
    torch.manual_seed(3)
    state = torch.get_rng_state()
    threads = torch.get_num_threads()
    seen = []
    # "b" draws from torch's global RNG, as gnnorch's sampler without a generator does: the
    # measurement undoes it (PyG's test_neighbor_loader_with_imbalanced_sampler with pyg-lib
    # saw its second loader, whose choice was reused, draw other batches)
    choose_sampler({"a": lambda s: seen.append(s.clone()), "b": lambda s: torch.rand(3)},
                   torch.arange(50), 8, ("k",), threads=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    assert all(s.numel() == 8 and s.unique().numel() == 8 for s in seen)


def test_seed_pool_follows_input_nodes():
    mask = torch.tensor([True, False, True, False])
    assert seed_pool(mask, 4).tolist() == [0, 2]
    assert seed_pool(torch.tensor([3, 1]), 4).tolist() == [3, 1]
    assert seed_pool(None, 3).tolist() == [0, 1, 2]


def test_use_pyg_routes_every_call_to_pygs_backend(monkeypatch):
    data = cora()
    sampler = FastNeighborSampler(data, num_neighbors=[5, 5])
    calls = []

    def pyg_sample(self, seed, seed_time=None, **kwargs):
        calls.append(seed)
        return "pyg"

    monkeypatch.setattr(NeighborSampler, "_sample", pyg_sample)
    seeds = torch.arange(8)
    assert sampler._sample(seeds) != "pyg"          # ours by default
    sampler.use_pyg = True
    assert sampler._sample(seeds) == "pyg"
    assert sampler.sample_ours(seeds) != "pyg"      # measuring ours ignores the flag
    assert sampler.use_pyg
    assert sampler.sample_pyg(seeds) == "pyg" and len(calls) == 2


def _loader_stats(**options):
    def train(data):
        loader = NeighborLoader(data, num_neighbors=[5, 5], batch_size=64,
                                input_nodes=data.train_mask, shuffle=True)
        return sum(batch.batch_size for batch in loader)

    runtime = gnnorch.Runtime(train, processes=1, rewrite=False, **options)
    seeds = runtime(cora())
    return seeds, runtime.last_run.stats[0]["sampler"]["loaders"][0]


def test_auto_measures_both_and_reports_the_choice(monkeypatch):
    # pretend pyg-lib is installed and slower than ours on this graph
    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", True)
    monkeypatch.setattr(FastNeighborSampler, "sample_pyg",
                        lambda self, seed: (time.sleep(0.03), self.sample_ours(seed))[1])
    seeds, loader = _loader_stats(sampler="auto")
    assert seeds == int(cora().train_mask.sum())
    assert loader["backend"] == "gnnorch"
    choice = loader["sampler_choice"]
    assert choice["backend"] == "gnnorch"
    assert choice["ms_per_batch"]["pyg-lib"] > choice["ms_per_batch"]["gnnorch"]
    assert "measured" in loader["reason"]


@pytest.mark.parametrize("mode", ["device", "host"])
def test_a_loader_sampled_on_the_device_times_no_host_sampler(monkeypatch, mode):
    """The device path samples with gnnorch's sampler on the device (no PyG backend can):
    timing both samplers on the host would only delay the run. A loader the path leaves to
    the host is timed as before. (The CPU stands in for the device: mode "device".)"""
    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", True)
    timed = []
    monkeypatch.setattr(FastNeighborSampler, "sample_pyg",
                        lambda self, seed: (timed.append(1), time.sleep(0.03),
                                            self.sample_ours(seed))[2])
    seeds, loader = _loader_stats(sampler="auto", data_path={"mode": mode})
    assert seeds == int(cora().train_mask.sum()) and loader["backend"] == "gnnorch"
    if mode == "device":
        assert loader["device"]["samples_on_device"]
        assert loader["sampler_choice"] is None and not timed
        assert "not timed" in loader["reason"]
    else:
        assert not (loader.get("device") or {}).get("samples_on_device")
        assert loader["sampler_choice"] is not None and timed


def test_auto_without_pyg_lib_measures_nothing(monkeypatch):
    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", False)
    _, loader = _loader_stats(sampler="auto")
    assert loader["backend"] == "gnnorch" and loader["sampler_choice"] is None
    assert loader["setup_s"] > 0.0   # the sampler's set-up (CSC conversion) is measured


@pytest.mark.skipif(not pyg_typing.WITH_PYG_LIB, reason="pyg-lib not installed")
def test_auto_with_real_pyg_lib_gives_complete_batches():
    seeds, loader = _loader_stats(sampler="auto")
    assert seeds == int(cora().train_mask.sum())
    assert loader["backend"] in ("gnnorch", "pyg-lib")
    assert set(loader["sampler_choice"]["ms_per_batch"]) == {"gnnorch", "pyg-lib"}


@pytest.mark.parametrize("choice", ["auto", "gnnorch"])
def test_a_sampler_that_defers_to_pyg_is_reported_as_pygs(choice):
    """gnnorch's sampler hands disjoint (and temporal, weighted) sampling to PyG's own: the
    loader's record names PyG's backend and why, not gnnorch's, and nothing is timed."""
    from gnnorch.intercept.feeds import LoaderState
    from gnnorch.intercept.sampler_backend import choose_backend

    state = LoaderState(role="train", index=0, global_batch_size=8, user_num_workers=0)
    kwargs = {"num_neighbors": [5, 5], "batch_size": 8, "disjoint": True}
    timing = choose_backend(choice, state, NeighborLoader.__init__, (cora(), ), kwargs,
                            cached=False)
    assert timing is None and isinstance(kwargs["neighbor_sampler"], FastNeighborSampler)
    assert state.backend in ("pyg-lib", "torch_sparse")
    assert state.backend_reason == "gnnorch's sampler defers to PyG's for disjoint sampling"
