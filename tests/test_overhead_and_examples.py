"""One rank costs next to nothing; the gnnorch example is the vanilla one plus two lines; the
GPU example trains through the data path."""
import difflib
import time

import pytest

import gnnorch

from helpers import ROOT, cora, load_example


def test_one_rank_within_two_seconds_of_vanilla():
    example = load_example("train_vanilla")
    data = cora()
    example.train(data, epochs=1)                       # warm caches and imports
    start = time.perf_counter()
    example.train(data, epochs=5)
    vanilla = time.perf_counter() - start
    start = time.perf_counter()
    gnnorch.Runtime(example.train, processes=1)(data, epochs=5)
    runtime = time.perf_counter() - start
    print(f"vanilla {vanilla:.2f} s, Runtime(processes=1) {runtime:.2f} s")
    assert runtime - vanilla < 2.0


def test_examples_differ_by_exactly_two_added_lines():
    vanilla = (ROOT / "examples" / "train_vanilla.py").read_text().splitlines()
    ours = (ROOT / "examples" / "train_gnnorch.py").read_text().splitlines()
    diff = [line for line in difflib.ndiff(vanilla, ours) if line[:2] in ("+ ", "- ")]
    assert diff == ["+ import gnnorch", "+     train = gnnorch.Runtime(train, processes=2)"]


def test_gpu_example_runs_through_the_data_path_on_the_cpu():
    """examples/train_gpu.py: a PyG function written for a GPU (model and batches moved to
    `device`) trains under the data path with the CPU as its device, both loaders served, to
    the accuracy of its plain run (a generator of the path's own draws other batches)."""
    example = load_example("train_gpu")
    data = cora()
    plain = example.train(data, epochs=10)
    runtime = gnnorch.Runtime(example.train, processes=1, device="auto", data_path="device")
    served = runtime(data, epochs=10)
    loaders = runtime.last_run.stats[0]["device"]["loaders"]
    assert [(d["role"], d["served"], d["samples_on_device"]) for d in loaders] == \
        [("train", True, True), ("eval", True, True)]
    assert abs(served - plain) < 0.05 and served > 0.7


@pytest.mark.gpu
def test_gpu_example_is_served_on_cuda():
    example = load_example("train_gpu")
    runtime = gnnorch.Runtime(example.train, processes=1, device="auto")
    accuracy = runtime(cora(), epochs=10)
    loaders = runtime.last_run.stats[0]["device"]["loaders"]
    assert all(d["served"] and d["samples_on_device"] and d["device"].startswith("cuda")
               for d in loaders)
    assert accuracy > 0.7
