"""gnnorch.datasets: bundled Planetoid graphs (offline) and the synthetic power-law generator."""
from __future__ import annotations

import os
import pathlib
import socket
import threading
import urllib.request

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from gnnorch import datasets
from gnnorch.datasets import (
    bundled_data_dir,
    load_citeseer,
    load_cora,
    load_planetoid,
    power_law_graph,
    products_like,
)


# --------------------------------------------------------------------------- Planetoid


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way PyG (or anything else) could reach the network raises instead."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    import torch_geometric.data.download as pyg_download
    import torch_geometric.io.fs as pyg_fs

    monkeypatch.setattr(pyg_download, "download_url", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(pyg_fs, "cp", refuse)
    monkeypatch.setattr(Planetoid, "download", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_bundled_files_present() -> None:
    root = bundled_data_dir()
    assert (root / "LICENSE").is_file()
    for name in datasets.PLANETOID_NAMES:
        for file_name in datasets.planetoid._raw_file_names(name):
            assert (root / name / "raw" / file_name).is_file(), file_name


def test_cora_shapes_and_public_split(tmp_path: pathlib.Path, no_network: None) -> None:
    dataset = load_planetoid("Cora", root=tmp_path)
    assert isinstance(dataset, Planetoid)
    assert dataset.num_classes == 7
    data = dataset[0]
    assert data.num_nodes == 2708
    assert data.num_features == 1433
    assert data.edge_index.size(1) == 10556
    assert int(data.train_mask.sum()) == 140
    assert int(data.val_mask.sum()) == 500
    assert int(data.test_mask.sum()) == 1000
    assert (tmp_path / "Cora" / "processed" / "data.pt").is_file()


def test_citeseer_shapes(tmp_path: pathlib.Path, no_network: None) -> None:
    data = load_citeseer(root=tmp_path)
    assert data.num_nodes == 3327
    assert data.num_features == 3703
    assert int(data.y.max()) + 1 == 6


def test_name_is_case_insensitive(tmp_path: pathlib.Path, no_network: None) -> None:
    assert load_planetoid("citeseer", root=tmp_path).name == "CiteSeer"
    assert load_planetoid("CORA", root=tmp_path).name == "Cora"


def test_second_load_reuses_processed_files(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    first = load_cora(root=tmp_path)
    processed = tmp_path / "Cora" / "processed" / "data.pt"
    raw = tmp_path / "Cora" / "raw" / "ind.cora.x"
    stamps = (processed.stat().st_mtime_ns, raw.stat().st_mtime_ns)

    def refuse(self: Planetoid) -> None:
        raise AssertionError("processed again")

    monkeypatch.setattr(Planetoid, "process", refuse)
    second = load_cora(root=tmp_path)
    assert (processed.stat().st_mtime_ns, raw.stat().st_mtime_ns) == stamps
    assert torch.equal(first.edge_index, second.edge_index)
    assert torch.equal(first.x, second.x)


def test_default_root_from_env(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    monkeypatch.setenv("GNNORCH_DATA_DIR", str(tmp_path / "cache"))
    assert datasets.default_data_root() == tmp_path / "cache"
    data = load_cora()
    assert data.num_nodes == 2708
    assert (tmp_path / "cache" / "Cora" / "processed" / "data.pt").is_file()


def test_never_writes_into_package(tmp_path: pathlib.Path, no_network: None) -> None:
    load_cora(root=tmp_path)
    assert not (bundled_data_dir() / "Cora" / "processed").exists()


def test_kwargs_pass_through(tmp_path: pathlib.Path, no_network: None) -> None:
    data = load_cora(root=tmp_path, split="full")
    assert int(data.train_mask.sum()) == 2708 - 500 - 1000


def test_bad_name_lists_valid_names(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="Cora, CiteSeer"):
        load_planetoid("PubMed", root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_geom_gcn_split_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="geom-gcn"):
        load_planetoid("Cora", root=tmp_path, split="geom-gcn")


def test_concurrent_loads(tmp_path: pathlib.Path, no_network: None) -> None:
    results: list[Data] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            results.append(load_cora(root=tmp_path))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert [d.num_nodes for d in results] == [2708] * 3
    leftovers = [p for p in (tmp_path / "Cora" / "raw").iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


def test_copy_atomic_replaces_and_cleans(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc" * 1000)
    dst = tmp_path / "out" / "dst.bin"
    dst.parent.mkdir()
    datasets.planetoid._copy_atomic(src, dst)
    assert dst.read_bytes() == src.read_bytes()
    assert os.listdir(dst.parent) == ["dst.bin"]


# --------------------------------------------------------------------------- synthetic

SMALL = dict(num_nodes=5_000, avg_degree=20.0, num_features=32, num_classes=5,
             homophily=0.7, train_ratio=0.3, val_ratio=0.1, test_ratio=0.3)


@pytest.fixture(scope="module")
def graph() -> Data:
    return power_law_graph(**SMALL, seed=1)


def _degree(data: Data) -> torch.Tensor:
    return torch.bincount(data.edge_index[0], minlength=data.num_nodes)


def _edge_homophily(data: Data) -> float:
    src, dst = data.edge_index
    return float((data.y[src] == data.y[dst]).float().mean())


def test_shapes_and_dtypes(graph: Data) -> None:
    n = SMALL["num_nodes"]
    assert graph.x.shape == (n, SMALL["num_features"]) and graph.x.dtype == torch.float32
    assert graph.y.shape == (n,) and graph.y.dtype == torch.int64
    assert graph.edge_index.dtype == torch.int64 and graph.edge_index.size(0) == 2
    assert int(graph.y.min()) == 0 and int(graph.y.max()) == SMALL["num_classes"] - 1
    assert int(graph.edge_index.min()) >= 0 and int(graph.edge_index.max()) < n
    for mask in (graph.train_mask, graph.val_mask, graph.test_mask):
        assert mask.dtype == torch.bool and mask.shape == (n,)


def test_undirected_simple_coalesced(graph: Data) -> None:
    n = graph.num_nodes
    src, dst = graph.edge_index
    assert not bool((src == dst).any()), "self-loop"
    keys = src * n + dst
    assert bool((keys[1:] > keys[:-1]).all()), "not sorted/coalesced or duplicate edge"
    reverse = torch.sort(dst * n + src).values
    assert torch.equal(reverse, keys), "some edge lacks its reverse"


def test_mean_degree_and_heavy_tail(graph: Data) -> None:
    deg = _degree(graph).float()
    mean = float(deg.mean())
    assert abs(mean - SMALL["avg_degree"]) <= 0.1 * SMALL["avg_degree"]
    assert float(deg.max()) > 10 * mean
    assert float(deg.median()) < mean  # skewed: most nodes below the mean


@pytest.mark.parametrize("homophily", [0.0, 0.3, 0.9])
def test_edge_homophily_matches(homophily: float) -> None:
    data = power_law_graph(num_nodes=2_000, avg_degree=10.0, num_features=4, num_classes=5,
                           homophily=homophily, seed=3)
    assert abs(_edge_homophily(data) - homophily) <= 0.05


def test_default_homophily(graph: Data) -> None:
    assert abs(_edge_homophily(graph) - SMALL["homophily"]) <= 0.05


def test_masks_disjoint_with_expected_sizes(graph: Data) -> None:
    n = graph.num_nodes
    masks = (graph.train_mask, graph.val_mask, graph.test_mask)
    ratios = (SMALL["train_ratio"], SMALL["val_ratio"], SMALL["test_ratio"])
    for mask, ratio in zip(masks, ratios):
        assert int(mask.sum()) == round(ratio * n)
    assert int(torch.stack(masks).sum(0).max()) == 1


def test_seed_determinism_and_global_rng_untouched(graph: Data) -> None:
    state = torch.get_rng_state()
    again = power_law_graph(**SMALL, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(graph[key], again[key]), key
    other = power_law_graph(**SMALL, seed=2)
    assert not torch.equal(graph.y, other.y)
    assert graph.edge_index.shape != other.edge_index.shape or not torch.equal(
        graph.edge_index, other.edge_index)


def _neighbour_mean(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    src, dst = edge_index
    total = torch.zeros_like(x).index_add_(0, dst, x[src])
    count = torch.bincount(dst, minlength=x.size(0)).clamp_(min=1).to(x.dtype)
    return total / count.unsqueeze(1)


def _logreg_test_accuracy(features: torch.Tensor, data: Data, steps: int = 150) -> float:
    gen = torch.Generator().manual_seed(0)
    train = data.train_mask
    features = (features - features[train].mean(0)) / features[train].std(0).clamp(min=1e-6)
    num_classes = int(data.y.max()) + 1
    weight = (torch.randn(features.size(1), num_classes, generator=gen) * 0.01).requires_grad_()
    bias = torch.zeros(num_classes, requires_grad=True)
    opt = torch.optim.Adam([weight, bias], lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(features[train] @ weight + bias, data.y[train]).backward()
        opt.step()
    with torch.no_grad():
        pred = (features[data.test_mask] @ weight + bias).argmax(1)
    return float((pred == data.y[data.test_mask]).float().mean())


def test_neighbours_make_labels_learnable(graph: Data) -> None:
    chance = 1.0 / SMALL["num_classes"]
    alone = _logreg_test_accuracy(graph.x, graph)
    with_neighbours = _logreg_test_accuracy(
        torch.cat([graph.x, _neighbour_mean(graph.x, graph.edge_index)], dim=1), graph)
    assert alone > chance + 0.1  # features carry signal ...
    assert with_neighbours > alone + 0.15  # ... but aggregation clearly helps
    assert with_neighbours > 3 * chance


def test_products_like_shape() -> None:
    data = products_like(num_nodes=3_000, seed=0)
    assert data.x.shape == (3_000, 100)
    assert int(data.y.max()) + 1 == 47
    assert abs(data.edge_index.size(1) / 3_000 - 25.0) <= 2.5
    small = products_like(num_nodes=3_000, seed=0, num_features=8, avg_degree=10.0)
    assert small.x.shape == (3_000, 8)
    assert small.edge_index.size(1) == 3_000 * 10


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        (dict(num_nodes=1), "num_nodes"),
        (dict(num_nodes=10.5), "num_nodes"),
        (dict(avg_degree=0), "avg_degree"),
        (dict(avg_degree=-1.0), "avg_degree"),
        (dict(avg_degree=5_000.0), "avg_degree"),
        (dict(num_features=0), "num_features"),
        (dict(num_classes=1), "num_classes"),
        (dict(num_classes=10_000), "num_classes"),
        (dict(homophily=1.5), "homophily"),
        (dict(homophily=-0.1), "homophily"),
        (dict(exponent=2.0), "exponent"),
        (dict(exponent=float("inf")), "exponent"),
        (dict(feature_noise=-1.0), "feature_noise"),
        (dict(train_ratio=-0.1), "train_ratio"),
        (dict(val_ratio=1.5), "val_ratio"),
        (dict(train_ratio=0.6, val_ratio=0.3, test_ratio=0.3),
         r"train_ratio \+ val_ratio \+ test_ratio"),
        (dict(seed=1.5), "seed"),
    ],
)
def test_bad_arguments(kwargs: dict, argument: str) -> None:
    params = dict(num_nodes=1_000, avg_degree=5.0, num_features=4, num_classes=4)
    params.update(kwargs)
    with pytest.raises(ValueError, match=f"^{argument} must be"):
        power_law_graph(**params)
