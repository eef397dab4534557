"""One rank costs next to nothing; the gnnorch example is the vanilla one plus two lines."""
import difflib
import time

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
