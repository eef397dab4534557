"""`scripts/pyg_examples_verbatim.py`: PyG's example files run unchanged, plainly and under the
runtime, compared by what they print. Its verdicts (identical / numbers differ / text
differs), its time-line filter, its dataset stand-ins and the refusal of an edit that no longer
matches are checked here; the end-to-end test runs a PyG-style script from a throwaway git
repository through the same parent and child processes the real study uses."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import pyg_examples_verbatim as verbatim  # noqa: E402


def test_time_lines_are_dropped_and_the_rest_kept() -> None:
    out = ("Epoch: 001, Loss: 1.9459, Train: 0.5000\n\nMedian time per epoch: 0.0810s\n"
           "Total Time: 0.2566s\nepoch took 3.1 s\nTest: 0.8120\n")
    assert verbatim.kept_lines(out) == ["Epoch: 001, Loss: 1.9459, Train: 0.5000",
                                        "Test: 0.8120"]


def test_a_duration_beside_metrics_is_blanked_not_the_line() -> None:
    out = ("Val Loss: 0.6277, Test Accuracy: 0.665 \u00b1 0.024, Duration: 0.065\n"
           "Epoch: 001, Test: 0.1250, Duration: 12.31\n")
    assert verbatim.kept_lines(out) == [
        "Val Loss: 0.6277, Test Accuracy: 0.665 \u00b1 0.024, Duration: #",
        "Epoch: 001, Test: 0.1250, Duration: #"]


def test_interpreter_and_source_paths_are_checked_and_made_absolute(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        verbatim.parse_args(["--python", "no-such-python"])
    with pytest.raises(SystemExit):
        verbatim.parse_args(["--gnnorch-src", str(tmp_path / "missing")])
    args = verbatim.parse_args(["--python", sys.executable, "--gnnorch-src", str(tmp_path)])
    assert Path(args.python).is_absolute() and args.gnnorch_src == tmp_path


def test_verdicts() -> None:
    ref = ["Epoch: 001, Loss: 1.9459", "Test: 0.8120"]
    assert verbatim.compare(ref, list(ref)) == {"verdict": "identical", "lines": 2}
    numbers = verbatim.compare(ref, ["Epoch: 001, Loss: 1.9460", "Test: 0.8020"])
    assert numbers["verdict"] == "numbers differ"
    assert numbers["max_abs_diff"] == pytest.approx(0.01)
    assert numbers["first"] == {"reference": "Test: 0.8120", "other": "Test: 0.8020"}
    text = verbatim.compare(ref, ["Epoch: 001, Loss: 1.9459", "Test acc: 0.8120"])
    assert text["verdict"] == "text differs"
    assert text["first"] == {"reference": "Test: 0.8120", "other": "Test acc: 0.8120"}
    shorter = verbatim.compare(ref, ref[:1])
    assert shorter["verdict"] == "text differs" and shorter["first"]["other"] is None


def test_failure_reasons_and_the_runtime_summary_are_read_from_stderr() -> None:
    tail = ("Traceback (most recent call last):\n  File \"x.py\", line 3\nRuntimeError: \n"
            "Could not cast value of type Optional[Tensor] to bool:\n  (more context)\n"
            "Explain:  50%|#####     | 1/2\n")
    assert verbatim.error_line(tail) == ("RuntimeError: Could not cast value of type "
                                        "Optional[Tensor] to bool:")
    assert verbatim.error_line("no error here\nlast words\n") == "last words"
    summary = ("gnnorch: 1 rank on cpu\n  trim: no MessagePassing model ran\n"
               "  rewrite: conv1 aggregate-first (270/270 calls)\n  cache: off\n")
    result = {"runs": {"vanilla": {"stderr_tail": ""}, "runtime": {"stderr_tail": summary}}}
    assert verbatim.rewrite_lines(result) == ["rewrite: conv1 aggregate-first (270/270 calls)"]


STAND_INS = ("Planetoid", "TUDataset", "PPI", "ZINC", "Reddit", "Flickr", "DBLP", "IMDB",
             "MovieLens", "OGB_MAG", "Entities")


def test_stand_ins_read_the_bundled_cora_and_build_proteins_like_graphs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    import torch_geometric.transforms as T

    for name in STAND_INS:   # restored afterwards
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    verbatim.install_stand_ins(tmp_path)
    cora = datasets.Planetoid("/nonexistent/data/Cora", "cora",
                              transform=T.NormalizeFeatures())
    assert cora[0].num_nodes == 2708 and cora.num_classes == 7
    assert cora[0].x.sum(dim=-1).max() <= 1.0 + 1e-6   # the caller's transform applied
    kept = datasets.TUDataset("/nonexistent", name="PROTEINS",
                              pre_filter=lambda g: g.num_nodes <= 20)
    assert 0 < len(kept) < 600 and max(g.num_nodes for g in kept) <= 20
    assert kept.num_features == 3 and kept.num_classes == 2
    with pytest.raises(ValueError, match="only 'MUTAG', 'PROTEINS'"):
        datasets.TUDataset("/nonexistent", name="NCI1")
    mutag = datasets.TUDataset("/nonexistent", name="MUTAG")
    assert len(mutag) == 188 and mutag.num_features == 7 and mutag.num_classes == 2
    assert mutag.num_edge_features == 4
    molecule = mutag[0]
    assert molecule.is_undirected() and molecule.x.sum(dim=-1).eq(1).all()
    bond = {(int(s), int(d)): a for (s, d), a in zip(molecule.edge_index.t(),
                                                      molecule.edge_attr.argmax(dim=-1))}
    assert all(bond[(d, s)] == a for (s, d), a in bond.items())   # one label a bond
    full = datasets.TUDataset("/nonexistent", name="PROTEINS_full", use_node_attr=True)
    assert full.num_features == 29 + 3   # attributes first, then the one-hot labels
    assert full[0].x[:, -3:].sum(dim=-1).eq(1).all()
    # PPI's shapes: 20 / 2 / 2 graphs, 50 features, 121 labels, about 30 % of them on
    splits = {s: datasets.PPI("/nonexistent", split=s) for s in ("train", "val", "test")}
    assert {s: len(d) for s, d in splits.items()} == {"train": 20, "val": 2, "test": 2}
    train = splits["train"]
    assert train.num_features == 50 and train.num_classes == 121
    assert 0.2 < float(train._data.y.mean()) < 0.4
    assert not torch.equal(splits["val"][0].x, train[0].x)
    with pytest.raises(ValueError, match="PPI split"):
        datasets.PPI("/nonexistent", split="all")
    zinc = datasets.ZINC("/nonexistent", subset=True, split="val")
    molecule = zinc[0]
    assert len(zinc) == 200 and molecule.x.shape == (molecule.num_nodes, 1)
    assert int(zinc._data.x.max()) <= 20 and set(zinc._data.edge_attr.tolist()) <= {1, 2, 3}
    assert zinc._data.y.dtype == torch.float and molecule.is_undirected()
    with pytest.raises(ValueError, match="only subset=True"):
        datasets.ZINC("/nonexistent", split="val")
    flickr = datasets.Flickr("/nonexistent")   # (Reddit: the same maker, larger)
    graph = flickr[0]
    assert flickr.num_features == 500 and flickr.num_classes == 7 and graph.num_nodes == 10_000
    assert (graph.train_mask.sum(), graph.val_mask.sum(), graph.test_mask.sum()) == (5000, 2500,
                                                                                   2500)
    assert graph.is_undirected() and not graph.has_self_loops()
    assert graph.edge_index.is_contiguous()


def _same_class_share(edges, src_labels, dst_labels) -> float:
    return float((src_labels[edges[0]] == dst_labels[edges[1]]).float().mean())


def test_typed_stand_ins_have_the_real_types_widths_and_planted_classes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    import torch_geometric.transforms as T

    for name in STAND_INS:
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    verbatim.install_stand_ins(tmp_path)
    dblp = datasets.DBLP("/nonexistent", transform=T.Constant(node_types="conference"))
    graph = dblp[0]
    assert graph.node_types == ["author", "paper", "term", "conference"]
    assert {t: graph[t].num_features for t in graph.node_types} == {
        "author": 334, "paper": 4231, "term": 50, "conference": 1}   # the caller's transform
    assert int(graph["author"].y.max()) == 3 and int(graph["author"].train_mask.sum()) == 120
    for (src, _, dst), store in graph.edge_items():   # both halves of a symmetric adjacency
        forward = store.edge_index
        assert forward.is_contiguous() and forward.size(1) == forward.unique(dim=1).size(1)
        assert torch.equal(graph[dst, "to", src].edge_index.flip(0).unique(dim=1),
                           forward.unique(dim=1))
    imdb = datasets.IMDB("/nonexistent")[0]
    assert {t: imdb[t].num_features for t in imdb.node_types} == {
        "movie": 3066, "director": 3066, "actor": 3066}
    assert set(imdb.edge_types) == {("movie", "to", "director"), ("director", "to", "movie"),
                                    ("movie", "to", "actor"), ("actor", "to", "movie")}
    mag = datasets.OGB_MAG("/nonexistent", preprocess="metapath2vec")
    papers = mag[0]["paper"]
    assert mag.num_classes == 349 and mag[0]["author"].x.size(1) == 128
    assert not (papers.train_mask & papers.val_mask).any()
    assert "x" not in datasets.OGB_MAG("/nonexistent")[0]["author"]   # no preprocess
    cites = mag[0]["paper", "cites", "paper"].edge_index
    assert _same_class_share(cites, papers.y, papers.y) > 0.5   # planted: 60 % + chance
    ratings = datasets.MovieLens("/nonexistent", model_name="all-MiniLM-L6-v2")[0]
    rates = ratings["user", "rates", "movie"]
    assert ratings["movie"].x.size(1) == 404 and ratings["user"].num_nodes == 610
    assert rates.edge_label.dtype == torch.long and 0 <= int(rates.edge_label.min())
    assert int(rates.edge_label.max()) <= 5 and rates.time.numel() == rates.edge_label.numel()
    aifb = datasets.Entities("/nonexistent", "AIFB")
    data = aifb[0]
    assert aifb.num_relations == 90 and aifb.num_classes == 4
    assert (data.train_idx.numel(), data.test_idx.numel()) == (140, 36)
    key = (data.num_nodes * 90 * data.edge_index[0] + 90 * data.edge_index[1] + data.edge_type)
    assert bool((key[1:] > key[:-1]).all())   # sorted as PyG's Entities sorts, no repeats
    with pytest.raises(ValueError, match="only 'AIFB'"):
        datasets.Entities("/nonexistent", "BGS")
    with pytest.raises(ValueError, match="OGB_MAG preprocess"):
        datasets.OGB_MAG("/nonexistent", preprocess="node2vec")


def test_more_stand_ins_have_the_real_layouts_and_planted_labels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    from verbatim_more_datasets import colors_like, imdb_binary_like, triangles_like

    for name in (*STAND_INS, "BitcoinOTC", "LINKXDataset", "RelLinkPredDataset"):
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    verbatim.install_stand_ins(tmp_path)
    # COLORS-3 (fewer graphs here): attention, then 4 colours; y = the green nodes, a float
    colors = colors_like(parts=((20, 4, 25), (5, 26, 40), (5, 26, 40)))
    for graph in colors:
        assert graph.x.shape == (graph.num_nodes, 5) and graph.y.dtype == torch.float
        assert graph.x[:, 0].sum() == graph.y == graph.x[:, 2].sum() and graph.is_undirected()
    assert colors[-1].x[:, 4].any()   # the fourth colour, in the last part only
    assert not any(g.x[:, 4].any() for g in colors[:25])
    assert colors_like(False, parts=((3, 4, 25), ))[0].x.size(1) == 0
    # TRIANGLES: the node attribute counts a node's triangles; y = triangles - 1, in 0-9
    for graph in triangles_like(parts=((30, 4, 25), (5, 26, 100))):
        dense = torch.zeros(graph.num_nodes, graph.num_nodes)
        dense[graph.edge_index[0], graph.edge_index[1]] = 1
        assert torch.equal(graph.x[:, 0], (dense @ dense * dense).sum(dim=1) / 2)
        assert int(graph.y) == int(graph.x.sum()) // 3 - 1 and 0 <= int(graph.y) <= 9
        assert int(dense.sum(dim=1).max()) <= 14   # for the script's OneHotDegree(14)
    ego = imdb_binary_like(num_graphs=40)
    assert all("x" not in g and g.is_undirected() and g.num_nodes <= 136 for g in ego)
    assert all(g.edge_index[1, g.edge_index[0] == 0].numel() == g.num_nodes - 1 for g in ego)
    with pytest.raises(ValueError, match="'COLORS-3', 'TRIANGLES', 'IMDB-BINARY'"):
        datasets.TUDataset("/nonexistent", name="COLORS-4")
    bitcoin = datasets.BitcoinOTC("/nonexistent", edge_window_size=1)
    ratings = torch.cat([g.edge_attr for g in bitcoin])
    assert len(bitcoin) == 138 and bitcoin.num_nodes == bitcoin[0].num_nodes == 1200
    assert ratings.numel() == 9000 and ratings.dtype == torch.long and not (ratings == 0).any()
    assert 0.7 < float((ratings > 0).float().mean()) < 0.9 and ratings.abs().max() <= 10
    assert len(datasets.BitcoinOTC("/nonexistent", edge_window_size=3)[2].edge_attr) > len(
        bitcoin[2].edge_attr)   # a window holds the ratings of the steps before it too
    penn = datasets.LINKXDataset("/nonexistent", name="Penn94")
    data = penn[0]
    assert penn.num_classes == 2 and int(data.y.min()) == -1 and data.is_undirected()
    assert data.train_mask.shape == (5000, 5) and data.x.size(1) > 500
    covered = data.train_mask | data.val_mask | data.test_mask
    assert torch.equal(covered.all(dim=1), data.y >= 0)   # every labelled student, once
    assert torch.equal(data.train_mask.int() + data.val_mask.int() + data.test_mask.int(),
                       covered.int())
    with pytest.raises(ValueError, match="only 'Penn94'"):
        datasets.LINKXDataset("/nonexistent", name="genius")
    fb = datasets.RelLinkPredDataset("/nonexistent", "FB15k-237")
    kg = fb[0]
    relations = int(kg.train_edge_type.max()) + 1
    assert fb.num_relations == 2 * relations and kg.num_nodes == 1000
    assert kg.edge_index.size(1) == 2 * kg.train_edge_index.size(1)
    assert torch.equal(kg.edge_index[:, kg.edge_type >= relations],
                       kg.train_edge_index.flip(0))   # the reverses, as PyG adds them
    assert (kg.valid_edge_index.size(1), kg.test_edge_index.size(1)) == (50, 50)
    with pytest.raises(ValueError, match="only 'FB15k-237'"):
        datasets.RelLinkPredDataset("/nonexistent", "WN18RR")


def test_molecule_and_directed_stand_ins_have_the_real_layouts_and_planted_labels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    import torch_geometric.transforms as T
    from verbatim_molecule_datasets import ATOMIC_NUMBER, ELECTRONEGATIVITY, qm9_like, upfd_like

    for name in (*STAND_INS, "WikipediaNetwork", "QM9", "UPFD"):
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    verbatim.install_stand_ins(tmp_path)
    # chameleon: the real sizes, directed and coalesced links, ten splits of 1,092 / 729 / 456
    wiki = datasets.WikipediaNetwork("/nonexistent", "chameleon", geom_gcn_preprocess=True,
                                     transform=T.NormalizeFeatures())
    page = wiki[0]
    assert (page.num_nodes, page.num_features, wiki.num_classes) == (2277, 2325, 5)
    edges = page.edge_index
    assert edges.size(1) == 36_101 and not page.is_undirected() and not page.has_self_loops()
    key = edges[0] * page.num_nodes + edges[1]
    assert bool((key[1:] > key[:-1]).all())   # coalesced: sorted, no repeats
    assert page.x.sum(dim=-1).max() <= 1.0 + 1e-6   # the caller's transform applied
    for mask, size in zip((page.train_mask, page.val_mask, page.test_mask), (1092, 729, 456)):
        assert mask.shape == (2277, 10) and mask.dtype == torch.bool
        assert mask.sum(dim=0).eq(size).all()
    assert (page.train_mask.int() + page.val_mask.int() + page.test_mask.int()).eq(1).all()
    assert _same_class_share(edges, (page.y + 1) % 5, page.y) > 0.5   # out-links: the class
    assert _same_class_share(edges, page.y, page.y) < 0.2       # heterophilous
    with pytest.raises(ValueError, match="only 'chameleon'"):
        datasets.WikipediaNetwork("/nonexistent", "squirrel")
    # QM9 (fewer molecules here; the installed class builds 22,000): layout and dtypes, and
    # the planted dipole of bond-polarity charges
    assert datasets.QM9.__name__ == "QM9Like"
    molecules = qm9_like(num_graphs=200)
    for i, mol in enumerate(molecules):
        n = mol.num_nodes
        assert mol.x.shape == (n, 11) and mol.edge_attr.shape == (mol.edge_index.size(1), 4)
        assert mol.y.shape == (1, 19) and mol.pos.shape == (n, 3) and mol.idx == i
        assert mol.z.dtype == torch.long and mol.x.dtype == mol.pos.dtype == torch.float
        assert torch.equal(mol.x[:, :5].sum(dim=1), torch.ones(n))
        assert torch.equal(mol.z, torch.tensor(ATOMIC_NUMBER)[mol.x[:, :5].argmax(dim=1)])
        assert torch.equal(mol.x[:, 5], mol.z.float())
        assert mol.edge_index.size(1) == 2 * (n - 1) and mol.is_undirected()   # a tree
        row, col = mol.edge_index
        assert bool((row * n + col).diff().gt(0).all())
        chi = torch.tensor(ELECTRONEGATIVITY)[mol.x[:, :5].argmax(dim=1)]
        charge = 0.25 * torch.zeros(n).index_add_(0, row, chi[col] - chi[row])
        dipole = 4.803 * (charge[:, None] * mol.pos).sum(dim=0).norm()
        assert float(mol.y[0, 0]) == pytest.approx(float(dipole), abs=1e-4)
    targets = torch.cat([mol.y for mol in molecules])
    assert targets.std(dim=0).gt(0).all()   # the script normalises every column
    # UPFD: politifact's splits, trees rooted at the news, fake cascades deeper
    splits = {s: datasets.UPFD("/nonexistent", "politifact", "spacy", s, T.ToUndirected())
              for s in ("train", "val", "test")}
    assert {s: len(d) for s, d in splits.items()} == {"train": 62, "val": 31, "test": 221}
    train = splits["train"]
    assert train.num_features == 300 and train.num_classes == 2 and train[0].is_undirected()
    trees = upfd_like("politifact", "profile", "test")
    roots = {0: [], 1: []}
    for tree in trees:
        parent, child = tree.edge_index
        assert tree.x.size(1) == 10 and bool((parent < child).all())
        assert torch.equal(child.sort().values, torch.arange(1, tree.num_nodes))   # a tree
        roots[int(tree.y)].append(float((parent == 0).float().mean()))
    assert sum(roots[0]) / len(roots[0]) > sum(roots[1]) / len(roots[1]) + 0.2
    content, profile = (upfd_like("politifact", f, "val")[0] for f in ("content", "profile"))
    assert torch.equal(content.x, torch.cat([splits["val"][0].x, profile.x], dim=1))
    with pytest.raises(ValueError, match="UPFD feature"):
        datasets.UPFD("/nonexistent", "politifact", "glove")


ALL_STAND_INS = (*STAND_INS, "BitcoinOTC", "LINKXDataset", "RelLinkPredDataset", "JODIEDataset",
                 "AmazonBook", "WikipediaNetwork", "QM9", "UPFD", "AMiner", "GDELT", "ICEWS18",
                 "GraphLandDataset", "FB15k_237", "ModelNet", "MNISTSuperpixels", "FAUST",
                 "Taobao")


def test_aminer_and_enzymes_stand_ins_have_the_real_layouts_and_planted_labels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    from verbatim_more_examples_datasets import enzymes_like

    for name in ALL_STAND_INS:
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    verbatim.install_stand_ins(tmp_path)
    # AMiner: PyG's node and edge types, in its order; labelled authors; areas planted
    graph = datasets.AMiner("/nonexistent")[0]
    assert graph.node_types == ["author", "venue", "paper"]
    assert graph.edge_types == [("paper", "written_by", "author"),
                                ("author", "writes", "paper"),
                                ("paper", "published_in", "venue"),
                                ("venue", "publishes", "paper")]
    authors, venues = graph["author"], graph["venue"]
    assert (authors.num_nodes, venues.num_nodes, graph["paper"].num_nodes) == (1024, 16, 2000)
    assert authors.y.dtype == authors.y_index.dtype == torch.long
    assert authors.y.shape == authors.y_index.shape and int(authors.y.max()) == 7
    assert venues.y.numel() == 8 and torch.equal(venues.y, venues.y_index % 8)
    written = graph["paper", "written_by", "author"].edge_index
    key = written[0] * 1024 + written[1]
    assert bool((key[1:] > key[:-1]).all())   # coalesced: sorted by paper, no repeats
    assert torch.equal(graph["author", "writes", "paper"].edge_index, written.flip(0))
    assert torch.bincount(written[1], minlength=1024).min() >= 1   # every author writes
    published = graph["paper", "published_in", "venue"].edge_index
    assert torch.equal(published[0], torch.arange(2000))   # one venue a paper
    area = torch.empty(1024, dtype=torch.long)
    area[authors.y_index] = authors.y
    assert float((published[1][written[0]] % 8 == area[written[1]]).float().mean()) > 0.85
    # ENZYMES: 600 graphs, 100 a class, 3 node labels one-hot (18 attributes before them)
    enzymes = datasets.TUDataset("/nonexistent", name="ENZYMES")
    assert len(enzymes) == 600 and enzymes.num_features == 3 and enzymes.num_classes == 6
    assert torch.equal(torch.bincount(enzymes._data.y), torch.full((6, ), 100))
    assert enzymes._data.x.sum(dim=-1).eq(1).all()
    assert 28 < enzymes._data.x.size(0) / 600 < 38   # real: 32.6 nodes a graph
    assert all(g.is_undirected() and not g.has_self_loops() for g in enzymes[:20])
    with_attributes = enzymes_like(num_graphs=12, attributes=18)
    assert with_attributes[0].x.size(1) == 21
    assert with_attributes[0].x[:, -3:].sum(dim=-1).eq(1).all()


def test_event_stand_ins_run_pygs_own_processing_and_pre_transform_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    from verbatim_more_examples_datasets import EVENT_SETS, events_like

    for name in ALL_STAND_INS:
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    # GDELT's events: in time order, entities numbered by first appearance, partners planted
    events = events_like("GDELT")
    assert events.shape == (sum(EVENT_SETS["GDELT"]["split"]), 4)
    assert bool((events[:, 3].diff() >= 0).all()) and int(events[:, 3].max()) < 150
    assert int(events[:, [0, 2]].max()) < 7691 and int(events[:, 1].max()) < 240
    first = torch.full((7691, ), events.numel())
    first.scatter_reduce_(0, events[:, [0, 2]].flatten(), torch.arange(2 * len(events)),
                          "amin")
    seen = first[first < events.numel()]
    assert bool((seen.diff() > 0).all())
    pairs = events[:, 0] * 240 + events[:, 1]   # a subject's usual partners repeat
    repeats = 1 - (pairs * 7691 + events[:, 2]).unique().numel() / len(events)
    shuffled = 1 - (pairs * 7691 + events[torch.randperm(len(events)), 2]).unique().numel() / (
        len(events))
    assert repeats > 0.15 and shuffled < 0.05
    # The class (fewer events here): PyG's processing, the pre-transform run once over the
    # whole stream, the test split read from what the train split's processing saved
    monkeypatch.setitem(EVENT_SETS, "GDELT", {**EVENT_SETS["GDELT"], "split": (150, 20, 30),
                                              "steps": 4})
    verbatim.install_stand_ins(tmp_path)
    from torch_geometric.nn.models.re_net import RENet

    history, calls = RENet.pre_transform(10), []

    def pre_transform(data):
        calls.append(data.t)
        return history(data)

    train = datasets.GDELT("/nonexistent", pre_transform=pre_transform)
    test = datasets.GDELT("/nonexistent", split="test", pre_transform=pre_transform)
    assert (len(train), len(test), len(calls)) == (150, 30, 200)
    assert (train.num_nodes, train.num_rels) == (7691, 240)   # the real class's
    assert set(test[0].keys()) == {"sub", "rel", "obj", "t", "h_sub", "h_sub_t", "h_obj",
                                   "h_obj_t"}
    assert int(train._data.sub.min()) == 0 == int(train._data.t.min())   # minima subtracted
    assert test._data.h_sub.numel() > 0   # histories reach back into the train split
    assert datasets.ICEWS18.__name__ == "ICEWS18Like" and datasets.ICEWS18.num_nodes.fget(
        None) == 23_033


def test_graphland_stand_in_runs_pygs_own_processing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    import verbatim_datasets
    from verbatim_more_examples_datasets import tolokers_like

    for name in ALL_STAND_INS:
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    # 'tolokers-2' (fewer workers here): PyG's processing (its first run imports sklearn)
    monkeypatch.setattr(verbatim_datasets, "tolokers_like",
                        lambda split: tolokers_like(split, nodes=2000, pairs=8000))
    verbatim.install_stand_ins(tmp_path)
    land = datasets.GraphLandDataset("/nonexistent", name="tolokers-2", split="RH")
    data = land[0]
    assert land.task == "binary_classification" and data.x.shape == (2000, 19)
    assert data.is_undirected() and not torch.isnan(data.x).any()
    assert int(data.x_numerical_mask.sum()) == 9 and int(data.x_fraction_mask.sum()) == 4
    assert set(data.y.tolist()) == {0.0, 1.0}
    sizes = [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)]
    assert sum(sizes) == 2000 and abs(sizes[0] - 1000) <= 2 and abs(sizes[1] - 500) <= 2
    banned = data.y.bool()   # stratified: each part about the same share banned
    assert abs(float(banned[data.train_mask].float().mean()) - float(banned.float().mean())) < .01
    inductive = datasets.GraphLandDataset("/nonexistent", name="tolokers-2", split="THI")
    assert len(inductive) == 3 and inductive[2].num_nodes == 2000
    assert inductive[0].num_nodes == int(inductive[0].mask.sum()) == 1000
    with pytest.raises(ValueError, match="only 'tolokers-2'"):
        datasets.GraphLandDataset("/nonexistent", name="hm-categories", split="RL")


def test_ogb_stand_in_molhiv_has_ogbs_layout_and_roc_auc(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    import torch
    import torch_geometric.transforms as T
    import verbatim_more_examples_datasets as more
    from sklearn.metrics import roc_auc_score

    for name, module in more.ogb_modules(tmp_path).items():   # for this test only
        monkeypatch.setitem(sys.modules, name, module)
    # molhiv (fewer molecules here): ogb's atom and bond columns, both directions of a bond
    raw, split = more.molhiv_like(graphs=200)
    atoms, bonds = torch.cat([g.x for g in raw]), torch.cat([g.edge_attr for g in raw])
    assert atoms.dtype == bonds.dtype == torch.long and atoms.size(1) == 9
    assert bool((atoms.max(dim=0).values < torch.tensor(more.ATOM_FEATURE_DIMS)).all())
    assert bool((bonds.max(dim=0).values < torch.tensor(more.BOND_FEATURE_DIMS)).all())
    assert all(torch.equal(g.edge_index[:, 0::2], g.edge_index[:, 1::2].flip(0)) for g in raw)
    assert 0.3 < float(atoms[:, 8].float().mean()) < 0.95   # mostly ring atoms
    monkeypatch.setattr(more, "molhiv_like", lambda: (raw, split))
    from ogb.graphproppred import Evaluator, PygGraphPropPredDataset
    from ogb.graphproppred.mol_encoder import AtomEncoder

    molhiv = PygGraphPropPredDataset("ogbg-molhiv", "/nonexistent",
                                     pre_transform=T.ToSparseTensor())
    assert (molhiv.num_tasks, molhiv.num_classes, molhiv.eval_metric) == (1, 2, "rocauc")
    assert [len(molhiv.get_idx_split()[p]) for p in ("train", "valid", "test")] == [160, 20, 20]
    assert molhiv[0].y.shape == (1, 1) and "adj_t" in molhiv[0]   # the pre-transform ran
    assert int(molhiv._data.y.sum()) == 20   # the top 10 % of the planted score
    assert AtomEncoder(16)(molhiv[0].x).shape == (molhiv[0].num_nodes, 16)
    y_true = np.array([[0], [1], [1], [0], [1]])
    y_pred = torch.tensor([[0.1], [0.8], [0.3], [0.4], [0.9]])
    assert Evaluator("ogbg-molhiv").eval({"y_true": torch.from_numpy(y_true),
                                          "y_pred": y_pred}) == {
        "rocauc": roc_auc_score(y_true[:, 0], y_pred.numpy()[:, 0])}
    with pytest.raises(RuntimeError, match="Shape of y_true and y_pred"):
        Evaluator("ogbg-molhiv").eval({"y_true": y_true, "y_pred": y_pred.view(-1)})
    with pytest.raises(ValueError, match="only .'ogbg-molhiv'."):
        Evaluator("ogbg-molpcba")


def test_ogb_stand_in_arxiv_has_ogbs_layout_and_accuracy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.transforms as T
    import verbatim_more_examples_datasets as more

    for name, module in more.ogb_modules(tmp_path).items():   # for this test only
        monkeypatch.setitem(sys.modules, name, module)
    real = more.arxiv_like
    monkeypatch.setattr(more, "arxiv_like", lambda: real(nodes=1500))   # fewer papers here
    from ogb.nodeproppred import Evaluator as NodeEvaluator
    from ogb.nodeproppred import PygNodePropPredDataset

    # arxiv: 128 float features, [N, 1] labels of 40 areas, citing older papers, split by year
    raw, _ = real(nodes=1500)
    assert bool((raw.node_year[raw.edge_index[0]] >= raw.node_year[raw.edge_index[1]]).all())
    arxiv = PygNodePropPredDataset("ogbn-arxiv", "/nonexistent", T.ToUndirected())
    paper = arxiv[0]
    assert arxiv.num_classes == 40 and arxiv.num_features == 128 and paper.is_undirected()
    assert paper.y.shape == paper.node_year.shape == (1500, 1) and paper.x.dtype == torch.float
    split = arxiv.get_idx_split()
    year = paper.node_year.view(-1)
    assert int(year[split["train"]].max()) == 2017 and bool((year[split["valid"]] == 2018).all())
    assert int(year[split["test"]].min()) == 2019 and sum(map(len, split.values())) == 1500
    truth = paper.y[split["test"]]
    guess = torch.where(torch.arange(len(truth))[:, None] % 4 == 0, truth, -1)
    assert NodeEvaluator(name="ogbn-arxiv").eval({"y_true": truth, "y_pred": guess}) == {
        "acc": float((guess == truth).sum()) / len(truth)}
    with pytest.raises(ValueError, match="only .'ogbn-arxiv', 'ogbn-products', 'ogbn-pro"):
        PygNodePropPredDataset("ogbn-papers100M", "/nonexistent")


def test_ogb_stand_ins_products_and_proteins_have_ogbs_layouts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.transforms as T
    import verbatim_more_examples_datasets as more
    import verbatim_ogbn_datasets as ogbn

    for name, module in more.ogb_modules(tmp_path).items():   # for this test only
        monkeypatch.setitem(sys.modules, name, module)
    products_like, proteins_like = ogbn.products_like, ogbn.proteins_like
    monkeypatch.setattr(ogbn, "products_like", lambda: products_like(nodes=2000))
    monkeypatch.setattr(ogbn, "proteins_like", lambda: proteins_like(nodes=600))
    from ogb.nodeproppred import Evaluator, PygNodePropPredDataset

    # products: undirected, 100 float features, [N, 1] labels of 47, the most popular train
    products = PygNodePropPredDataset("ogbn-products", "/nonexistent",
                                      transform=T.ToSparseTensor())
    item = products[0]
    assert (products.num_classes, products.num_features) == (47, 100)
    assert item.y.shape == (2000, 1) and "adj_t" in item   # the caller's transform ran
    raw, split = products_like(nodes=2000)
    assert raw.is_undirected() and not raw.has_self_loops()
    assert [len(split[p]) for p in ("train", "valid", "test")] == [160, 32, 1808]
    same = raw.y[raw.edge_index[0]] == raw.y[raw.edge_index[1]]
    assert 0.7 < float(same.float().mean()) < 0.9   # homophilous, as the real graph
    degree = torch.bincount(raw.edge_index[0], minlength=2000).float()
    assert degree[split["train"]].mean() > 1.5 * degree[split["test"]].mean()   # popular
    # proteins: no x, 8 evidence channels, 112 binary tasks, one species a part
    proteins = PygNodePropPredDataset("ogbn-proteins", "/nonexistent")
    protein = proteins[0]
    assert (proteins.num_tasks, proteins.eval_metric) == (112, "rocauc")
    assert protein.x is None and protein.edge_attr.shape[1] == 8 and protein.is_undirected()
    assert protein.y.shape == (600, 112) and protein.y.dtype == torch.long
    assert set(protein.y.unique().tolist()) == {0, 1}
    row, col = protein.edge_index
    assert bool((protein.node_species[row] == protein.node_species[col]).all())
    parts = proteins.get_idx_split()
    species = {p: set(protein.node_species[parts[p]].flatten().tolist()) for p in parts}
    assert not species["train"] & species["valid"] and not species["valid"] & species["test"]
    assert sum(map(len, parts.values())) == 600
    y_pred = protein.y[parts["test"]].float()   # a perfect score where a task has both labels
    assert Evaluator("ogbn-proteins").eval({"y_true": protein.y[parts["test"]],
                                            "y_pred": y_pred}) == {"rocauc": 1.0}


def test_geometric_stand_ins_have_the_real_layouts(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    import torch_geometric.transforms as T
    import verbatim_geometry_datasets as geometry
    from torch_geometric.utils import is_undirected

    for name in ALL_STAND_INS:
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    real = geometry.superpixels_like
    monkeypatch.setattr(geometry, "superpixels_like", lambda train: real(train)[:50])
    verbatim.install_stand_ins(tmp_path)
    # ModelNet: closed meshes, faces outward (a positive volume), upright, 10 / 40 classes
    ten = datasets.ModelNet("/nonexistent", "10", True, T.SamplePoints(1024),
                            T.NormalizeScale())
    assert len(ten) == 300 and ten.num_classes == 10
    mesh = ten._data
    assert mesh.face.dtype == torch.long and mesh.pos.dtype == torch.float
    assert ten[0].pos.shape == (1024, 3) and "face" not in ten[0]   # the transform ran
    for item in geometry.modelnet_like("10", False)[:20]:
        a, b, c = (item.pos[item.face[i]] for i in range(3))
        assert float((a * torch.cross(b, c, dim=1)).sum()) > 0
    forty = datasets.ModelNet("/nonexistent", "40", False)
    assert len(forty) == 160 and forty.num_classes == 40
    with pytest.raises(ValueError, match="only '10', '40'"):
        datasets.ModelNet("/nonexistent", "20")
    # MNISTSuperpixels: 75 regions in a 28 x 28 image, intensities in [0, 1], both directions
    digits = datasets.MNISTSuperpixels("/nonexistent", True, transform=T.Cartesian(cat=False))
    digit = digits[0]
    assert digit.x.shape == (75, 1) and digit.pos.shape == (75, 2)
    assert is_undirected(digit.edge_index)
    assert float(digit.pos.min()) >= 0 and float(digit.pos.max()) < 28
    assert 0 <= float(digit.x.min()) and float(digit.x.max()) <= 1
    assert digit.edge_attr.shape == (digit.num_edges, 2)   # the transform ran
    drawn = real(False)   # the ink follows the strokes: an 8 has seven, a 1 two
    ink = {label: torch.stack([d.x.sum() for d in drawn if int(d.y) == label]).mean()
           for label in (1, 8)}
    assert float(ink[8]) > 2 * float(ink[1])
    # FAUST: 80 / 20 meshes of one vertex order, y the pose (i % 10)
    train = datasets.FAUST("/nonexistent", True, T.Cartesian(),
                           T.Compose([T.FaceToEdge(), T.Constant(value=1)]))
    test = datasets.FAUST("/nonexistent", False)
    assert (len(train), len(test)) == (80, 20) and train[0].edge_attr.shape[1] == 3
    assert [int(test[i].y) for i in range(3)] == [0, 1, 2]
    assert torch.equal(test[0].face, test[5].face) and test[0].num_nodes == train[0].num_nodes


def test_an_examples_arguments_reach_its_command_line(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "args.py"
    script.write_text("import sys\nprint(' '.join(sys.argv[1:]))\n")
    monkeypatch.setattr(verbatim, "install_stand_ins", lambda root: None)
    monkeypatch.setattr(verbatim, "install_ogb", lambda root: None)
    monkeypatch.setattr(sys, "argv", list(sys.argv))   # restored afterwards
    verbatim.run_child(script, None, tmp_path, ["--name", "tolokers-2"])
    assert sys.argv == [str(script), "--name", "tolokers-2"]
    assert verbatim.EXAMPLES["graphland"].argv == ("--name", "tolokers-2", "--split", "RL")


SCRIPT = """
import os.path as osp
import torch
import torch.nn.functional as F
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv

path = osp.join(osp.dirname(osp.realpath(__file__)), '..', 'data', 'Planetoid')
dataset = Planetoid(path, 'Cora')
data = dataset[0]
conv1, conv2 = GCNConv(dataset.num_features, 8), GCNConv(8, dataset.num_classes)
params = list(conv1.parameters()) + list(conv2.parameters())
optimizer = torch.optim.Adam(params, lr=0.01)
for epoch in range(1, 201):
    optimizer.zero_grad()
    out = conv2(F.relu(conv1(data.x, data.edge_index)), data.edge_index)
    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.6f}')
print('Total time: 1.23s')
"""


def _repository(tmp_path: Path, text: str) -> Path:
    work = tmp_path / "pyg"
    (work / "examples").mkdir(parents=True)
    (work / "examples" / "tiny_gcn.py").write_text(textwrap.dedent(text))
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tiny"], check=True)
    return work / ".git"


def test_a_script_runs_verbatim_in_both_modes_and_prints_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = _repository(tmp_path, SCRIPT)
    monkeypatch.setattr(verbatim, "EXAMPLES", {"tiny_gcn": verbatim.Example(
        "examples/tiny_gcn.py", edits=(("range(1, 201)", "range(1, 4)"), ), why="200 -> 3")})
    out = tmp_path / "report.json"
    assert verbatim.main(["--mirror", str(mirror), "--ref", "HEAD", "--examples", "tiny_gcn",
                          "--python", sys.executable, "--out", str(out)]) == 0
    import json

    result = json.loads(out.read_text())["results"][0]
    assert result["runs"]["runtime"]["stdout"].count("Epoch:") == 3   # the edit applied
    assert result["verdicts"] == {"vanilla-again": {"verdict": "identical", "lines": 3},
                                  "runtime": {"verdict": "identical", "lines": 3}}
    assert "gnnorch: 1 rank" in result["runs"]["runtime"]["stderr_tail"]  # it ran under it
    table = tmp_path / "table.md"
    assert verbatim.main(["--report", str(out), str(out), "--md", str(table)]) == 0
    rows = [line for line in table.read_text().splitlines() if line.startswith("| `tiny_gcn`")]
    assert len(rows) == 1 and "| 200 -> 3 |" in rows[0]   # the later file replaces it
    assert "identical (3 lines" in rows[0] and rows[0].endswith(
        verbatim.rewrite_lines(result)[0].removeprefix("rewrite: ") + " |")


def test_results_are_written_after_every_example(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped midway (here: the second example raises) keeps the first's results."""
    import json

    mirror = _repository(tmp_path, SCRIPT)
    monkeypatch.setattr(verbatim, "EXAMPLES", {
        name: verbatim.Example("examples/tiny_gcn.py") for name in ("first", "second")})
    done = []

    def study(args, name, file, data_root, roots=()):
        if done:
            raise KeyboardInterrupt
        done.append(name)
        return {"example": name, "seconds": {"vanilla": 1.0},
                "runs": {"vanilla": {"status": "failed", "stderr_tail": "ImportError: x"}}}

    monkeypatch.setattr(verbatim, "study", study)
    out = tmp_path / "report.json"
    with pytest.raises(KeyboardInterrupt):
        verbatim.main(["--mirror", str(mirror), "--ref", "HEAD", "--examples", "first",
                       "second", "--python", sys.executable, "--out", str(out)])
    assert [r["example"] for r in json.loads(out.read_text())["results"]] == ["first"]


HANGS = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
with open({pidfile!r}, 'a') as f:
    f.write(f'{{child.pid}}\\n')
print('started', flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_run_past_its_time_limit_is_ended_with_its_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "pids"
    mirror = _repository(tmp_path, HANGS.format(pidfile=str(pidfile)))
    monkeypatch.setattr(verbatim, "EXAMPLES", {"hangs": verbatim.Example(
        "examples/tiny_gcn.py")})
    out = tmp_path / "report.json"
    assert verbatim.main(["--mirror", str(mirror), "--ref", "HEAD", "--examples", "hangs",
                          "--python", sys.executable, "--timeout", "8", "--out", str(out)]) == 0
    import json
    import time

    result = json.loads(out.read_text())["results"][0]
    assert {r["status"] for r in result["runs"].values()} == {"timeout"}
    assert "verdicts" not in result                        # vanilla did not finish: not compared
    # What a run printed before it was ended is kept (a run still importing prints nothing).
    assert {r["stdout"] for r in result["runs"].values()} <= {"started\n", ""}
    assert "started\n" in {r["stdout"] for r in result["runs"].values()}
    pids = [int(p) for p in pidfile.read_text().split()]
    assert pids
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, pids)), "a timed-out run left its child process running"


def test_a_benchmark_folder_is_extracted_whole_and_imported_as_its_readme_runs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """PyG's benchmark scripts import their siblings (``from datasets import ...``) or, in
    `points/`, the folder as a package of ``benchmark/`` (``from points.datasets import``)."""
    work = tmp_path / "pyg"
    (work / "benchmark" / "points").mkdir(parents=True)
    (work / "benchmark" / "points" / "__init__.py").write_text("")
    (work / "benchmark" / "points" / "helpers.py").write_text("NAME = 'sibling'\n")
    (work / "benchmark" / "points" / "main.py").write_text(
        "from helpers import NAME\nfrom points.helpers import NAME as AGAIN\n"
        "print(NAME, AGAIN, EPOCHS)\nEPOCHS = 1\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)
    example = verbatim.Example("benchmark/points/main.py", tree="benchmark/points",
                               import_roots=("benchmark", ),
                               edits=(("print(NAME, AGAIN, EPOCHS)\nEPOCHS = 1",
                                       "EPOCHS = 2\nprint(NAME, AGAIN, EPOCHS)"), ))
    file = verbatim.extract(work / ".git", "HEAD", example, tmp_path / "out")
    assert (file.parent / "helpers.py").exists() and "EPOCHS = 2" in file.read_text()
    monkeypatch.setattr(verbatim, "install_stand_ins", lambda root: None)
    monkeypatch.setattr(verbatim, "install_ogb", lambda root: None)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("helpers", "points", "points.helpers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    roots = [str(tmp_path / "out" / "benchmark")]
    verbatim.run_child(file, None, tmp_path, (), roots)
    assert capsys.readouterr().out == "sibling sibling 2\n"
    assert sys.path[:2] == [str(file.parent), roots[0]]


def test_an_edit_that_no_longer_matches_is_refused(tmp_path: Path) -> None:
    mirror = _repository(tmp_path, SCRIPT)
    example = verbatim.Example("examples/tiny_gcn.py", edits=(("range(1, 151)", "x"), ))
    with pytest.raises(SystemExit, match="matches 0 times, not once"):
        verbatim.extract(mirror, "HEAD", example, tmp_path / "out")


def test_unknown_examples_and_bad_options_are_refused(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        verbatim.parse_args(["--examples", "nope"])
    assert "unknown example(s) nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        verbatim.parse_args(["--options", "[1]"])
    assert "--options must be a JSON object" in capsys.readouterr().err


def test_taobao_stand_in_has_the_processed_layout(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch_geometric.datasets as datasets
    from torch_geometric.utils.convert import to_scipy_sparse_matrix

    for name in ALL_STAND_INS:
        monkeypatch.setattr(datasets, name, getattr(datasets, name))
    verbatim.install_stand_ins(tmp_path)
    data = datasets.Taobao("/nonexistent")[0]
    assert data.node_types == ["user", "item", "category"]
    log = data["user", "to", "item"]
    assert log.edge_index.shape == (2, 60_000) and log.time.dtype == torch.long
    assert bool(((log.time >= 1511539200) & (log.time <= 1512316799)).all())
    assert set(log.behavior.unique().tolist()) == {0, 1, 2, 3}
    assert float((log.behavior == 0).float().mean()) > 0.85   # mostly views, as the real log
    items = data["item", "to", "category"].edge_index
    assert torch.equal(items[0], torch.arange(data["item"].num_nodes))   # one category an item
    # the example's item-item graph (co-picked by at least 3 users) is not empty
    mat = to_scipy_sparse_matrix(log.edge_index).tocsr()[:3000, :2000]
    co = mat.T @ mat
    co.setdiag(0)
    assert (co >= 3).sum() > 1000
