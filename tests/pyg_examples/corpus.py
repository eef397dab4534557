"""The corpus of PyTorch Geometric's own examples, adapted as tests (issue 12).

Each ``ex_<name>.py`` beside this file is one of PyG's example scripts (or benchmark / test
scripts where no example covers a feature), adapted as little as possible:

* data: bundled Cora / CiteSeer (``gnnorch.datasets``), synthetic graphs
  (``gnnorch.datasets.power_law_graph``) or small synthetic ``HeteroData`` / graph datasets
  built in the module -- nothing downloads;
* sizes and epochs: small;
* the script's top-level code moves into ``train(data, epochs, ...)``, which returns a dict of
  metrics (final accuracies, last loss, ...).

Model, loader arguments, training loop, loss and metrics are PyG's. Every change is listed in
the module's header comment.

Each module exposes ``CASE`` (or ``CASES``), a :class:`Case`. ``test_corpus.py`` runs each case
in four modes: ``vanilla`` (``train`` called directly), ``default`` (``gnnorch.Runtime(train)``),
``p2`` (``gnnorch.Runtime(train, processes=2)``) and ``device``
(``gnnorch.Runtime(train, data_path="device")``: the GPU data path, the CPU as its device).

Tolerance rule
--------------
For every compared metric the case states ``sd``: the standard deviation of that metric over
seeds in vanilla PyG, measured with ``measure_noise.py`` (>= 8 seeds; the numbers and the command
are in each case's docstring). A mode passes for that metric when the mean over the case's
``n`` seeds differs from vanilla's mean over the same seeds by at most::

    tol = max(floor, 3 * sd * sqrt(2 / n))

i.e. three standard deviations of the difference of two independent means of ``n`` runs (the
runtime's sampler draws different, equally distributed neighbours than torch_sparse, so runs
match in distribution, not bitwise; the same seeds make data and initial weights equal, which
only makes the bound conservative). ``floor`` is 0.02 for accuracies and 0.05 relative for
losses unless the case says otherwise. Metrics declared ``exact`` (counts: evaluated nodes,
graph breaks) must equal vanilla's exactly, seed by seed.
"""
from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

#: Runtime options of each mode beyond the case's own (``vanilla`` calls ``train`` directly).
#: ``device`` runs the GPU data path with the CPU standing in for the device (issue 21, item
#: 9): placement, sampling on the "device" CSC, the prefetch thread, gathering and the identity
#: transfer -- the path a GPU user's program takes, here on real PyG programs.
MODE_OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "p2": {"processes": 2},
    "device": {"data_path": "device"},
}
MODES = ("vanilla", *MODE_OPTIONS)

#: Master revision of pytorch_geometric the examples were taken from. The installed PyG is
#: 2.8.1, which has no tag in the repository (2.8.0.post1 is the newest); per the brief, the
#: examples come from master, checked to run on 2.8.1.
PYG_REV = "5c6461b2305ad068a6d61165b3c55852a11aaa41"


@dataclass(frozen=True)
class Metric:
    """A compared metric: ``sd`` is vanilla's measured std over seeds, ``floor`` the least
    tolerance (absolute; ``relative=True`` makes floor a fraction of vanilla's mean)."""

    sd: float
    floor: float = 0.02
    relative: bool = False

    def tolerance(self, n: int, reference: float) -> float:
        floor = self.floor * abs(reference) if self.relative else self.floor
        return max(floor, 3.0 * self.sd * math.sqrt(2.0 / n))


def acc(sd: float) -> Metric:
    """An accuracy in [0, 1] (floor 0.02)."""
    return Metric(sd=sd, floor=0.02)


def loss(sd: float, floor: float = 0.05) -> Metric:
    """A loss (floor: 5 % of vanilla's mean)."""
    return Metric(sd=sd, floor=floor, relative=True)


@dataclass(frozen=True)
class Case:
    """One adapted example.

    ``make_args(seed) -> (args, kwargs)`` builds the call's arguments (called after
    ``torch.manual_seed(seed)``); ``train(*args, **kwargs)`` returns a dict of metrics.
    ``metrics`` maps the compared keys to their :class:`Metric`; ``exact`` lists keys that must
    equal vanilla's seed by seed. ``may_refuse`` names the modes in which a gnnorch refusal
    (a :class:`gnnorch.errors.GnnorchError` that is not a rank crash, whose message names an
    option to pass) counts as a pass. ``options`` are extra ``Runtime`` options for both
    runtime modes (empty: the default runtime exactly as a new user writes it).
    ``shard_sums`` names metrics the function sums over a training epoch's batches and divides
    by a constant (``total_loss / data.num_nodes``): with p ranks each rank sums its own 1/p of
    the batches and only rank 0's value returns (README, semantics with p > 1), so they are
    compared multiplied by the run's number of ranks.
    ``vanilla_kwargs`` override keyword arguments in vanilla mode only (with ``vanilla_note``
    saying why: vanilla PyG cannot run the same call). ``time_limit`` bounds one mode's run
    over all seeds in seconds (a hang fails the test with ``TimeoutError`` instead of blocking
    the suite). ``needs``: modules without which the example cannot run even in vanilla PyG
    (the case is skipped where one is missing).
    """

    name: str
    source: str
    train: Callable[..., dict]
    make_args: Callable[[int], tuple[tuple, dict]]
    metrics: dict[str, Metric]
    seeds: tuple[int, ...] = (0, 1, 2)
    exact: tuple[str, ...] = ()
    slow: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    may_refuse: frozenset[str] = frozenset()
    shard_sums: tuple[str, ...] = ()
    vanilla_kwargs: dict[str, Any] = field(default_factory=dict)
    vanilla_note: str = ""
    time_limit: float = 300.0
    doc: str = ""
    needs: tuple[str, ...] = ()   # modules the example itself needs (PyG's HGTLoader: torch_sparse)


class TransformedGraph:
    """Stands in for a one-graph PyG dataset built with ``transform=`` (``DBLP(path,
    transform=...)``): ``dataset[0]`` is a copy of the graph with the transform applied, as
    PyG's ``InMemoryDataset`` returns it."""

    def __init__(self, data, transform=None) -> None:
        self._data = data
        self.transform = transform

    def __getitem__(self, idx: int):
        if idx != 0:
            raise IndexError(idx)
        data = self._data.clone()
        return data if self.transform is None else self.transform(data)

    def __len__(self) -> int:
        return 1


class OfflineDataset:
    """Stands in for a PyG dataset object (``Reddit(path)``, ``PygNodePropPredDataset``...)
    around one offline graph, so the examples' ``dataset[0]``, ``dataset.num_features``,
    ``dataset.num_classes`` and ``dataset.get_idx_split()`` lines stay as they are."""

    def __init__(self, data, num_classes: int | None = None) -> None:
        self._data = data
        y = data.y
        self.num_classes = int(num_classes if num_classes is not None else int(y.max()) + 1)
        self.num_features = int(data.num_features)
        self.num_node_features = self.num_features

    def __getitem__(self, idx: int):
        if idx != 0:
            raise IndexError(idx)
        return self._data

    def __len__(self) -> int:
        return 1

    def get_idx_split(self) -> dict[str, torch.Tensor]:
        d = self._data
        return {
            "train": d.train_mask.nonzero(as_tuple=False).view(-1),
            "valid": d.val_mask.nonzero(as_tuple=False).view(-1),
            "test": d.test_mask.nonzero(as_tuple=False).view(-1),
        }


def free_port() -> int:
    """A TCP port that is free right now on localhost (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_float(value: Any) -> float:
    """A metric as a Python float (tensors and numpy scalars included)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().item())
    return float(value)


def non_finite(result: Any, prefix: str = "") -> list[str]:
    """Keys of every NaN / inf number anywhere in ``result`` (dicts, lists, tensors)."""
    bad: list[str] = []
    if isinstance(result, dict):
        for key, value in result.items():
            bad += non_finite(value, f"{prefix}{key}.")
    elif isinstance(result, (list, tuple)):
        for i, value in enumerate(result):
            bad += non_finite(value, f"{prefix}{i}.")
    elif isinstance(result, torch.Tensor):
        if result.is_floating_point() and not bool(torch.isfinite(result).all()):
            bad.append(prefix.rstrip("."))
    elif isinstance(result, (int, float)) and not isinstance(result, bool):
        if not math.isfinite(float(result)):
            bad.append(prefix.rstrip("."))
    return bad


#: Packages a case may need that an environment may lack (the baseline environment has
#: pyg-lib but not torch_sparse): a script importing one at its top is left out of the
#: corpus where it is missing, as its case's ``needs`` would skip it.
OPTIONAL_MODULES = frozenset({"torch_sparse", "torch_scatter", "pyg_lib", "faiss", "sklearn"})


def load_cases() -> list[Case]:
    """Every case of every ``ex_*.py`` module beside this file, in file order."""
    import importlib
    import pathlib

    here = pathlib.Path(__file__).resolve().parent
    cases: list[Case] = []
    for path in sorted(here.glob("ex_*.py")):
        try:
            module = importlib.import_module(path.stem)
        except ModuleNotFoundError as exc:
            if exc.name not in OPTIONAL_MODULES:
                raise
            continue   # a script that imports an optional package at its top (its case
            #            would be skipped for lacking it anyway)
        found = getattr(module, "CASES", None) or [module.CASE]
        cases.extend(found)
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), f"duplicate case names: {names}"
    return cases
